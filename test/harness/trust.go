package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Trust is release trust as a fleet sets it up, made with the real
// lpsctl: release key holders, a 2-of-3 key set nodes are baked with that
// requires the transparency log, the log's key, and a witness running as
// its own process (lpsctl witness serve), as someone other than lpsd's
// operator would run it.
type Trust struct {
	// Keys and Pubs name each holder's private and public key files
	// ("a" to "e"; the baked set is a, b and c).
	Keys, Pubs map[string]string
	// Root is the key file nodes are baked with (and lpsd's
	// --release-keys).
	Root string
	// LogKey is the log's private key file, LogVKey its verifier key.
	LogKey, LogVKey string
	// WitnessKey is the witness's private key file, WitnessVKey its
	// verifier key, WitnessURL where it takes add-checkpoint.
	WitnessKey, WitnessVKey, WitnessURL string
	Witness                             *Proc
	ctl                                 string
}

// LogName is the demo and test log's origin.
const LogName = "nodehotfix.test/log"

// StartTrust makes the keys in dir and starts the witness.
func StartTrust(ctx context.Context, b Binaries, dir string) (*Trust, error) {
	t := &Trust{Keys: map[string]string{}, Pubs: map[string]string{}, ctl: b.LPSCtl}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		t.Keys[k], t.Pubs[k] = filepath.Join(dir, "release-"+k+".key"), filepath.Join(dir, "release-"+k+".pub")
		if _, err := t.Offline(ctx, "keys", "generate", "--out-private", t.Keys[k], "--out-public", t.Pubs[k], "--comment", "holder "+k); err != nil {
			return nil, err
		}
	}
	t.LogKey, t.WitnessKey = filepath.Join(dir, "log.key"), filepath.Join(dir, "witness.key")
	if _, err := t.Offline(ctx, "witness", "keygen", "--kind", "log", "--name", LogName, "--out-private", t.LogKey, "--out-public", t.LogKey+".pub"); err != nil {
		return nil, err
	}
	if _, err := t.Offline(ctx, "witness", "keygen", "--kind", "witness", "--name", "witness.test", "--out-private", t.WitnessKey, "--out-public", t.WitnessKey+".pub"); err != nil {
		return nil, err
	}
	var err error
	if t.LogVKey, err = readTrimmed(t.LogKey + ".pub"); err != nil {
		return nil, err
	}
	if t.WitnessVKey, err = readTrimmed(t.WitnessKey + ".pub"); err != nil {
		return nil, err
	}
	// Any 2 of a, b and c; the log required, one witness's cosignature at
	// most a day old.
	t.Root = filepath.Join(dir, "release-keys.pub")
	if _, err := t.Offline(ctx, "keys", "init", "--public-key", t.Pubs["a"], "--public-key", t.Pubs["b"], "--public-key", t.Pubs["c"],
		"--threshold", "2", "--log-key", t.LogVKey, "--witness", t.WitnessVKey, "--witness-quorum", "1", "--require-log", "--out", t.Root); err != nil {
		return nil, err
	}
	addr, err := FreePort()
	if err != nil {
		return nil, err
	}
	t.WitnessURL = "http://" + addr
	t.Witness, err = Start("witness", filepath.Join(dir, "witness.log"),
		[]string{b.LPSCtl, "witness", "serve", "--key", t.WitnessKey, "--log-key", t.LogVKey, "--state", filepath.Join(dir, "witness.state"), "--listen", addr}, nil)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// LPSDFlags are the flags of an lpsd that verifies releases against Root,
// signs checkpoints with LogKey and has the witness cosign them.
func (t *Trust) LPSDFlags() []string {
	return []string{"--release-keys", t.Root, "--log-key", t.LogKey, "--witness", t.WitnessURL + " " + t.WitnessVKey}
}

// Stop stops the witness.
func (t *Trust) Stop() { t.Witness.Stop(5 * time.Second) }

// CoSign adds the signatures of the holders named to the envelope at path,
// in place, as each holder would offline.
func (t *Trust) CoSign(ctx context.Context, path string, holders ...string) error {
	for _, h := range holders {
		if _, err := t.Offline(ctx, "release", "sign", "--envelope", path, "--key", t.Keys[h], "--out", path); err != nil {
			return err
		}
	}
	return nil
}

// Offline runs lpsctl with no service, as a key holder does.
func (t *Trust) Offline(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.ctl, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("lpsctl %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// WaitLogged waits until l serves nodes a log checkpoint of at least size
// records (lpsd_snapshot_log_size): a release published before then is
// proven to nodes from then on.
func (l *LPSD) WaitLogged(ctx context.Context, size int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if n, err := l.metric(ctx, "lpsd_snapshot_log_size"); err == nil && int(n) >= size {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lpsd never served a checkpoint of %d records", size)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// metric reads one unlabelled metric from l's /metrics.
func (l *LPSD) metric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.HTTPAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}
