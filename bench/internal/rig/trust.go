package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"nodehotfix/test/harness"
)

// Trust is release trust as the demo and the end-to-end tests set it up
// (harness.Trust: a 2-of-3 baked key set requiring the log, a log key, one
// witness as its own process), rotated twice, with the served release and
// extra records in the log.
type Trust struct {
	*harness.Trust
	dir string
	// Links are the key-set envelopes v2 and v3.
	Links []string
	// Served is the served release's envelope file: signed by b, a and
	// d, so 2 of the root (which an lpsd without the links verifies it
	// under) and 2 of v3 (the newest).
	Served string
	// Version is the served release's.
	Version string
	extra   []string // further releases of other bases, only to grow the log
	// KeptLog is the log size after the served release (1): what a node
	// that kept a checkpoint then declares.
	KeptLog int64
}

// NewTrust makes the keys in dir, starts the witness and signs, offline
// as the key holders would, the two links, version (whose artifact
// nobody downloads) and extra releases of other bases. The caller stops
// the witness (Trust.Stop).
func NewTrust(ctx context.Context, bins harness.Binaries, dir, version string, extra int) (*Trust, error) {
	w := &Trust{dir: dir, Version: version}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if w.Trust, err = harness.StartTrust(ctx, bins, w.dir); err != nil {
		return nil, err
	}
	fail := func(err error) (*Trust, error) {
		w.Stop()
		return nil, err
	}
	// v2 = a, b, d; v3 = b, d, e (2 of each), as test/e2e's rotation.
	v2, v3 := filepath.Join(w.dir, "keyset-2.json"), filepath.Join(w.dir, "keyset-3.json")
	c, err := w.KeyID(ctx, "c")
	if err != nil {
		return fail(err)
	}
	a, err := w.KeyID(ctx, "a")
	if err != nil {
		return fail(err)
	}
	for _, args := range [][]string{
		{"keys", "rotate", "--current", w.Root, "--add-key", w.Pubs["d"], "--remove-key", c, "--valid-for", "30d", "--key", w.Keys["a"], "--out", v2},
		{"keys", "rotate", "--envelope", v2, "--current", w.Root, "--key", w.Keys["b"], "--out", v2},
		{"keys", "rotate", "--current", v2, "--add-key", w.Pubs["e"], "--remove-key", a, "--valid-for", "30d", "--key", w.Keys["b"], "--out", v3},
		{"keys", "rotate", "--envelope", v3, "--current", v2, "--key", w.Keys["d"], "--out", v3},
	} {
		if _, err := w.Offline(ctx, args...); err != nil {
			return fail(err)
		}
	}
	w.Links = []string{v2, v3}
	bin := filepath.Join(w.dir, "artifact")
	if err := os.WriteFile(bin, []byte("stand-in artifact\n"), 0o644); err != nil {
		return fail(err)
	}
	sign := func(v string) (string, error) {
		out := filepath.Join(w.dir, "release-"+v+".json")
		if _, err := w.Offline(ctx, "release", "sign", "--key", w.Keys["b"], "--base", v[:9], "--version", v,
			"--artifact", runtime.GOOS+"/"+runtime.GOARCH+"="+bin+",https://artifacts.invalid/aks-node-controller", "--valid-for", "24h",
			"--skip-version-check", "--out", out); err != nil {
			return "", err
		}
		return out, w.CoSign(ctx, out, "a", "d")
	}
	if w.Served, err = sign(version); err != nil {
		return fail(err)
	}
	w.KeptLog = 1
	for i := range extra {
		f, err := sign(fmt.Sprintf("2027%02d.%02d.1", i%12+1, i/12+1))
		if err != nil {
			return fail(err)
		}
		w.extra = append(w.extra, f)
	}
	return w, nil
}

// KeyID returns the key ID of holder's release key.
func (w *Trust) KeyID(ctx context.Context, holder string) (string, error) {
	out, err := w.Offline(ctx, "keys", "verify", "--root", w.Pubs[holder], "-o", "json")
	if err != nil {
		return "", err
	}
	var v struct{ Keys []string }
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Keys) != 1 {
		return "", fmt.Errorf("keys verify --root %s = %s, %v", w.Pubs[holder], out, err)
	}
	return v.Keys[0], nil
}

// LogSize is the log's size once everything is published: the links,
// the served release and the extra releases.
func (w *Trust) LogSize() int { return len(w.Links) + 1 + len(w.extra) }

// Newest is the newest key-set version: the root's (1) and the links.
func (w *Trust) Newest() int64 { return int64(len(w.Links) + 1) }

// Publish publishes, as an operator would through lpsctl, the served
// release and rolls it out to 100%, then (with links, to an lpsd with a
// log key, once it keeps its first checkpoint: lpsd refuses a key set
// requiring the log before) the two links, then the extra releases.
func (w *Trust) Publish(ctx context.Context, l *harness.LPSD, links bool) error {
	cmds := [][]string{{"release", "publish", "--envelope", w.Served, "--reason", "bench"}, {"rollout", "set", w.Version, "--percent", "100", "--reason", "bench"}}
	if links {
		if err := ctl(ctx, l, cmds); err != nil {
			return err
		}
		if err := l.WaitLogged(ctx, 1); err != nil {
			return fmt.Errorf("%w\nwitness log:\n%s", err, w.Witness.Log())
		}
		cmds = nil
		for _, f := range w.Links {
			cmds = append(cmds, []string{"keys", "publish", "--envelope", f, "--reason", "bench: rotation"})
		}
	}
	for _, f := range w.extra {
		cmds = append(cmds, []string{"release", "publish", "--envelope", f, "--reason", "bench: grow the log"})
	}
	return ctl(ctx, l, cmds)
}

func ctl(ctx context.Context, l *harness.LPSD, cmds [][]string) error {
	for _, args := range cmds {
		if _, err := l.Ctl(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// NewTrust is NewTrust in the rig's work directory, for the rig's
// hotfix version, the witness stopped with the rig.
func (r *Rig) NewTrust(extra int) (*Trust, error) {
	t, err := NewTrust(r.ctx, r.bins, filepath.Join(r.Dir, "trust"), HotfixVersion, extra)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(r.ctx, t.Stop)
	return t, nil
}

// StartTrustLPS starts lpsd as StartLPS does, verifying releases against
// t's root, signing checkpoints with its log key and having its witness
// cosign them; publishes t's release, links and extra releases; waits
// until the log holds them all under a kept checkpoint and lpsd serves
// them; and returns its node-facing address.
func (r *Rig) StartTrustLPS(t *Trust) (string, error) {
	dir, err := os.MkdirTemp(r.Dir, "lpsd-trust-")
	if err != nil {
		return "", err
	}
	l, err := harness.StartLPSD(r.ctx, r.bins, dir, harness.LPSDOptions{Store: "mem:", IMDSRoots: r.roots, TLS: r.TLS, Extra: append(t.LPSDFlags(), LPSDFlags()...)})
	if err != nil {
		return "", err
	}
	stop := context.AfterFunc(r.ctx, func() { l.Stop(5 * time.Second) })
	err = t.Publish(r.ctx, l, true)
	if err == nil {
		err = l.WaitLogged(r.ctx, t.LogSize())
	}
	if err == nil {
		err = waitServing(r.ctx, l)
	}
	if err != nil {
		if stop() {
			l.Stop(5 * time.Second)
		}
		return "", err
	}
	return l.GRPCAddr, nil
}
