package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/lpsclient/lpstest"
	"nodehotfix/internal/node/trust"
	"nodehotfix/internal/translog"
	"nodehotfix/internal/translog/tiles"
	"nodehotfix/test/harness"
)

// trustStack is a stack whose lpsd verifies releases against a 2-of-3
// baked key set that requires the transparency log, signs checkpoints
// with a log key and has them cosigned by a witness running as its own
// process (harness.Trust). Nodes are baked with the same key set.
type trustStack struct {
	*stack
	*harness.Trust
	dir string
}

// offline runs lpsctl with no service, as a key holder does, and returns
// its stdout, stderr and exit code.
func offline(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.bins.LPSCtl, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("lpsctl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

func mustOffline(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := offline(t, args...)
	if code != 0 {
		t.Fatalf("lpsctl %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func newTrustStack(t *testing.T) *trustStack {
	t.Helper()
	ts := &trustStack{dir: t.TempDir()}
	var err error
	if ts.Trust, err = harness.StartTrust(t.Context(), env.bins, ts.dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Trust.Stop)
	ts.stack = newStack(t, stackOpts{lpsdFlags: ts.LPSDFlags()})
	root, err := os.ReadFile(ts.Root)
	if err != nil {
		t.Fatal(err)
	}
	ts.pubKeys = root // what nodes are baked with
	return ts
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sign signs version by the keys named, in order (the first signs, the
// others co-sign), and returns the envelope's path.
func (ts *trustStack) sign(t *testing.T, version string, by ...string) string {
	t.Helper()
	bin := filepath.Join(env.artifact, "aks-node-controller-"+version)
	path, err := ts.lpsd.SignRelease(t.Context(), t.TempDir(), harness.Release{Version: version, Binary: bin, URL: ts.art.URL + "/" + filepath.Base(bin), KeyFile: ts.Keys[by[0]]})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.CoSign(t.Context(), path, by[1:]...); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitLogged waits until lpsd serves nodes a checkpoint of at least size
// records: a release is proven from then on.
func (ts *trustStack) waitLogged(t *testing.T, size int) {
	t.Helper()
	if err := ts.lpsd.WaitLogged(t.Context(), size); err != nil {
		t.Fatalf("%v\nwitness log:\n%s", err, ts.Witness.Log())
	}
}

// pointer returns n's staged pointer document.
func pointer(t *testing.T, n *harness.Node) hotfix.Pointer {
	t.Helper()
	b, err := os.ReadFile(n.Path("opt/azure/containers/aks-node-controller-hotfix.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := hotfix.ParsePointer(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func keptState(t *testing.T, n *harness.Node) trust.State {
	t.Helper()
	s, err := trust.Load(n.Path("opt/azure/containers/aks-node-controller-trust.json"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve starts a live-patching service that answers every node with p:
// a hostile or broken one, holding lpsd's TLS key.
func (ts *trustStack) serve(t *testing.T, p hotfix.Pointer) string {
	t.Helper()
	body, err := p.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(ts.lpsd.TLS.CertFile, ts.lpsd.TLS.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return lpstest.Start(t, cert, lpstest.Config(string(body)), lpstest.Options{}).Addr
}

// TestIntegrationReleaseTrust runs the trust chain on real processes: a
// 2-of-3 release signed once is refused by publish and by nodes, signed
// twice it runs; a key set rotated twice is walked by a node baked with
// version 1; the node keeps what it verified, so a rolled-back chain, a
// release missing from the log or proven under another checkpoint, a
// forked log, a stale or unwitnessed checkpoint and a revoked release
// served again are refused, and the node provisions with its baked agent.
// The witness refuses the fork too, and lpsctl log detects it.
func TestIntegrationReleaseTrust(t *testing.T) {
	integration(t)
	t.Parallel()
	ts := newTrustStack(t)
	ctx := t.Context()

	// Signed once: publish says who signed and how to co-sign (exit 3).
	once := ts.sign(t, hotfix1, "a")
	if _, err := ts.lpsd.Ctl(ctx, "release", "publish", "--envelope", once, "--reason", "e2e"); err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "release sign --envelope") {
		t.Fatalf("publish of a release signed once = %v, want exit 3 and the co-sign command", err)
	}
	twice := ts.sign(t, hotfix1, "a", "b")
	ts.ctl("release", "publish", "--envelope", twice, "--reason", "e2e")
	ts.ctl("rollout", "set", hotfix1, "--percent", "100", "--reason", "e2e")
	ts.waitSynced(ts.lpsd)
	ts.waitLogged(t, 1)

	n1 := ts.node(nodeOpts{})
	expect(t, n1, ts.launch(n1, "", ""), hotfix1, "lpsRead", "staged")
	kept := keptState(t, n1)
	if kept.Checkpoint == "" || len(kept.KeySets) != 0 {
		t.Fatalf("n1 kept %+v, want a checkpoint and no links", kept)
	}
	firstPointer := pointer(t, n1)

	// A node served the once-signed release by a service holding lpsd's
	// TLS key, with the real log evidence: refused on the threshold.
	bad := firstPointer
	bad.Releases = []json.RawMessage{json.RawMessage(readTrim(t, once))}
	nOnce := ts.node(nodeOpts{})
	expect(t, nOnce, ts.launch(nOnce, "", ts.serve(t, bad)), bakedVersion, "lpsRead", "untrusted")

	// Rotate twice: v2 = a, b, d; v3 = b, d, e; 2 of each, each link
	// signed by 2 of the set before it and 2 of its own.
	v2 := filepath.Join(ts.dir, "keyset-2.json")
	mustOffline(t, "keys", "rotate", "--current", ts.Root, "--add-key", ts.Pubs["d"], "--remove-key", keyID(t, ts.Pubs["c"]), "--valid-for", "30d", "--key", ts.Keys["a"], "--out", v2)
	mustOffline(t, "keys", "rotate", "--envelope", v2, "--current", ts.Root, "--key", ts.Keys["b"], "--out", v2)
	v3 := filepath.Join(ts.dir, "keyset-3.json")
	mustOffline(t, "keys", "rotate", "--current", v2, "--add-key", ts.Pubs["e"], "--remove-key", keyID(t, ts.Pubs["a"]), "--valid-for", "30d", "--key", ts.Keys["b"], "--out", v3)
	mustOffline(t, "keys", "rotate", "--envelope", v3, "--current", v2, "--key", ts.Keys["d"], "--out", v3)
	ts.ctl("keys", "publish", "--envelope", v2, "--reason", "e2e: add d, retire c")
	ts.ctl("keys", "publish", "--envelope", v3, "--reason", "e2e: add e, retire a")

	// hotfix2 by d and e verifies only under v3.
	ts.ctl("release", "publish", "--envelope", ts.sign(t, hotfix2, "d", "e"), "--reason", "e2e")
	ts.ctl("rollout", "set", hotfix2, "--percent", "100", "--reason", "e2e")
	ts.waitSynced(ts.lpsd)
	ts.waitLogged(t, 4) // hotfix1, v2, v3, hotfix2

	n2 := ts.node(nodeOpts{})
	expect(t, n2, ts.launch(n2, "", ""), hotfix2, "lpsRead", "staged")
	if k := keptState(t, n2); len(k.KeySets) != 2 {
		t.Errorf("n2 kept %d links, want the 2 it walked", len(k.KeySets))
	}
	// n1 kept the 1-record checkpoint: it is proven consistent with it.
	expect(t, n1, ts.launch(n1, "", ""), hotfix2, "lpsRead", "staged")
	if !strings.Contains(keptState(t, n1).Checkpoint, "\n4\n") {
		t.Errorf("n1 did not move its checkpoint forward to size 4:\n%s", keptState(t, n1).Checkpoint)
	}
	second := pointer(t, n2)

	cases := []struct {
		name  string
		doc   func() hotfix.Pointer
		fresh bool   // a fresh node, else one that kept n2's state
		why   string // in the node's download-hotfix event
	}{
		{"rolled-back key set", func() hotfix.Pointer {
			// Only v2, and a release a and b signed (valid under v1 and
			// v2, but a is retired in v3, which the node kept).
			p := second
			p.KeySets = second.KeySets[:1]
			p.Hotfixes = map[string]string{"202604.01": hotfix1}
			p.Releases = firstPointer.Releases
			return p
		}, false, "below-threshold"},
		{"missing from the log", func() hotfix.Pointer {
			p := second
			p.Log = nil
			return p
		}, true, "no log evidence"},
		{"proven under another checkpoint", func() hotfix.Pointer {
			p := second
			p.Log = firstPointer.Log
			return p
		}, true, "not-included"},
		{"a forked log", func() hotfix.Pointer { return ts.forked(t, second, keptState(t, n2)) }, false, "inconsistent"},
		{"a stale checkpoint", func() hotfix.Pointer { return ts.recosigned(t, second, time.Now().Add(-25*time.Hour)) }, true, "stale"},
		{"a checkpoint without its witness", func() hotfix.Pointer { return ts.recosigned(t, second, time.Time{}) }, true, "no-quorum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := ts.node(nodeOpts{})
			if !tc.fresh {
				copyState(t, n2, n)
			}
			expect(t, n, ts.launch(n, "", ts.serve(t, tc.doc())), bakedVersion, "lpsRead", "untrusted")
			if e, _ := n.EventWith("DownloadHotfix", ""); !strings.Contains(e.Message, tc.why) {
				t.Errorf("download-hotfix said %q, want it to say %q", e.Message, tc.why)
			}
			if _, err := os.Stat(n.Path("opt/azure/containers/aks-node-controller-hotfix")); err == nil {
				t.Error("a hotfix was staged")
			}
		})
	}

	// The witness refuses the fork as well: it cosigned the real tree of
	// that size.
	forked := ts.forked(t, second, keptState(t, n2))
	b, err := translog.ParseBundle(forked.Log)
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte("old 0\n\n"), logSigned(b.Checkpoint)...)
	resp, err := http.Post(ts.WitnessURL+"/add-checkpoint", "text/plain", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("the witness cosigned a fork of the tree it cosigned")
	}

	// lpsctl log follows the real log, then sees the fork.
	state := filepath.Join(ts.dir, "monitor.state")
	logURL := "http://" + ts.lpsd.HTTPAddr + "/log/"
	out := mustOffline(t, "log", "--url", logURL, "--log-key", ts.LogVKey, "--state", state)
	for _, want := range []string{hotfix1, hotfix2, "keyset"} {
		if !strings.Contains(out, want) {
			t.Errorf("lpsctl log does not list %q:\n%s", want, out)
		}
	}
	// A log of the same size with other records, signed by the log key
	// (whoever holds lpsd can sign one): the monitor that kept the real
	// checkpoint says fork (exit 7) and keeps its state.
	recs := make([][]byte, 4)
	for i := range recs {
		recs[i] = []byte(fmt.Sprintf(`{"forged":%d}`, i))
	}
	fork, err := tiles.NewMemSource(recs...)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := translog.NewLogSigner(readTrim(t, ts.LogKey))
	if err != nil || fork.Sign(signer) != nil {
		t.Fatal(err)
	}
	forkSrv := httptest.NewServer(tiles.Handler(fork))
	defer forkSrv.Close()
	if _, errOut, code := offline(t, "log", "--url", forkSrv.URL+"/", "--log-key", ts.LogVKey, "--state", state); code != 7 {
		t.Errorf("lpsctl log of a forked log = exit %d, want 7 (fork):\n%s", code, errOut)
	}
	if out := mustOffline(t, "log", "--url", logURL, "--log-key", ts.LogVKey, "--state", state); !strings.Contains(out, hotfix2) {
		t.Errorf("after the fork, the monitor no longer follows the real log:\n%s", out)
	}

	// Revoked: n1 drops it, and a service serving it again later (the
	// same signed, logged, fresh document, without the revocation) is
	// refused by n1, which saw the revocation.
	ts.ctl("revoke", hotfix2, "--reason", "e2e")
	ts.waitSynced(ts.lpsd)
	// lpsd serves hotfix1 again, but a signed it, and v3 retired a: one
	// signature of v3's keys is under its threshold. A rotation that
	// retires a key retires what only it co-signed.
	expect(t, n1, ts.launch(n1, "", ""), bakedVersion, "lpsRead", "untrusted")
	again := second
	again.Revoked = nil
	expect(t, n1, ts.launch(n1, "", ts.serve(t, again)), bakedVersion, "lpsRead", "revoked")
	if p := pointer(t, n1); !p.IsRevoked(hotfix.MustParseVersion(hotfix2)) {
		t.Errorf("n1's pointer no longer revokes %s", hotfix2)
	}
}

// keyID returns the ID of the public key in the key file at path.
func keyID(t *testing.T, path string) string {
	t.Helper()
	out := mustOffline(t, "keys", "verify", "--root", path, "-o", "json")
	var v struct{ Keys []string }
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Keys) != 1 {
		t.Fatalf("keys verify --root %s = %s, %v", path, out, err)
	}
	return v.Keys[0]
}

func copyState(t *testing.T, from, to *harness.Node) {
	t.Helper()
	b, err := os.ReadFile(from.Path("opt/azure/containers/aks-node-controller-trust.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to.Path("opt/azure/containers/aks-node-controller-trust.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// logSigned returns a cosigned checkpoint note without its cosignatures:
// what the log signed.
func logSigned(note []byte) []byte {
	body, sigs, _ := bytes.Cut(note, []byte("\n\n"))
	var keep []string
	for _, l := range strings.Split(string(sigs), "\n") {
		if strings.HasPrefix(l, "— "+harness.LogName+" ") {
			keep = append(keep, l)
		}
	}
	return []byte(string(body) + "\n\n" + strings.Join(keep, "\n") + "\n")
}

// forked returns p proven in another log of the same size as the node's
// kept checkpoint, signed with the real log key (whoever holds lpsd can
// sign any tree) and cosigned by the witness key as a compromised or
// split-view witness would: consistent with nothing the node saw.
func (ts *trustStack) forked(t *testing.T, p hotfix.Pointer, kept trust.State) hotfix.Pointer {
	t.Helper()
	body, _, _ := strings.Cut(kept.Checkpoint, "\n\n")
	c, err := translog.ParseCheckpoint([]byte(body + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	recs := make([][]byte, c.Size)
	for i := range recs {
		recs[i] = []byte(fmt.Sprintf(`{"forged":%d}`, i))
	}
	recs[c.Size-1] = p.Releases[0]
	return ts.proven(t, p, recs, []int64{c.Size - 1}, time.Now())
}

// recosigned returns p with its log evidence re-made over the same
// records, cosigned at when (zero: not cosigned at all).
func (ts *trustStack) recosigned(t *testing.T, p hotfix.Pointer, when time.Time) hotfix.Pointer {
	t.Helper()
	return ts.proven(t, p, [][]byte{p.Releases[0]}, []int64{0}, when)
}

// proven returns p with a bundle over a tree of recs, proving the records
// at indexes, signed by the log key and cosigned at when.
func (ts *trustStack) proven(t *testing.T, p hotfix.Pointer, recs [][]byte, indexes []int64, when time.Time) hotfix.Pointer {
	t.Helper()
	hashes := map[int64]tlog.Hash{}
	hr := tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(ix))
		for i, x := range ix {
			out[i] = hashes[x]
		}
		return out, nil
	})
	for i, r := range recs {
		hs, err := tlog.StoredHashes(int64(i), r, hr)
		if err != nil {
			t.Fatal(err)
		}
		base := tlog.StoredHashCount(int64(i))
		for j, h := range hs {
			hashes[base+int64(j)] = h
		}
	}
	root, err := tlog.TreeHash(int64(len(recs)), hr)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := translog.NewLogSigner(readTrim(t, ts.LogKey))
	if err != nil {
		t.Fatal(err)
	}
	text, err := translog.Checkpoint{Origin: signer.Name(), Size: int64(len(recs)), Hash: root}.Format()
	if err != nil {
		t.Fatal(err)
	}
	signers := []note.Signer{signer}
	if !when.IsZero() {
		cosigner, err := translog.NewCosigner(readTrim(t, ts.WitnessKey), func() time.Time { return when })
		if err != nil {
			t.Fatal(err)
		}
		signers = append(signers, cosigner)
	}
	signed, err := note.Sign(&note.Note{Text: string(text)}, signers...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := translog.Prove(hr, signed, indexes, 0)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out := p
	out.Log = raw
	return out
}
