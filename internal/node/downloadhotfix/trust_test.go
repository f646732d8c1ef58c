package downloadhotfix

import (
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/explain"
	"nodehotfix/internal/node/trust"
)

// inode returns the inode of the file at path, 0 if there is none: an
// atomic replace gives the path a new one.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestRunKeepsTrustState: download-hotfix writes the trust state when it
// moves forward (here: a revocation it had not kept), completely, and
// leaves it alone when nothing is new.
func TestRunKeepsTrustState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pubLine, sign := f.keys()
	f.installKeys(pubLine)
	env := sign(f.release(f.body, nil))
	path := f.root.TrustState()

	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}})
	if res := f.run(); res.Outcome != Staged {
		t.Fatalf("Run = %+v, want staged", res)
	}
	if inode(t, path) != 0 {
		t.Fatal("trust state written though nothing moved forward")
	}

	revoked := []string{"202604.01.7"}
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}, Revoked: revoked})
	if res := f.run(); res.Outcome != AlreadyStaged {
		t.Fatalf("Run with a revocation of another version = %+v, want alreadyStaged", res)
	}
	s, err := trust.Load(path)
	if err != nil || !slices.Equal(s.Revoked, revoked) {
		t.Fatalf("kept state = %+v, %v; want revoked %q", s, err, revoked)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("trust state mode = %v, %v; want 0644", fi.Mode(), err)
	}
	f.noTemps()
	ino := inode(t, path)

	if res := f.run(); res.Outcome != AlreadyStaged {
		t.Fatalf("third Run = %+v", res)
	}
	if inode(t, path) != ino {
		t.Error("trust state rewritten though nothing moved forward")
	}

	// The revocation leaves the pointer; the kept one stays, and the file
	// is not touched.
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}})
	f.run()
	if s, _ := trust.Load(path); !slices.Equal(s.Revoked, revoked) || inode(t, path) != ino {
		t.Errorf("kept state after the revocation left the pointer = %+v (rewritten %v), want it unchanged", s, inode(t, path) != ino)
	}

	// The pointer revokes the staged target: the kept revocation keeps it
	// revoked even once the pointer forgets it.
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}, Revoked: []string{target}})
	if res := f.run(); res.Outcome != Revoked || !res.Removed {
		t.Fatalf("Run revoking the target = %+v, want revoked and removed", res)
	}
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}})
	if res := f.run(); res.Outcome != Revoked || f.hits.Load() != 1 {
		t.Errorf("Run after the pointer forgot the revocation = %+v after %d downloads, want revoked after 1", res, f.hits.Load())
	}
}

// TestRunTrustStateUnwritable: a state that cannot be written is logged,
// and the run's decision stands.
func TestRunTrustStateUnwritable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pubLine, sign := f.keys()
	f.installKeys(pubLine)
	env := sign(f.release(f.body, nil))
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}})
	if res := f.run(); res.Outcome != Staged {
		t.Fatalf("Run = %+v, want staged", res)
	}
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{env}, Revoked: []string{"202604.01.7"}})
	// A read-only staging directory fails the run at its lock, before any
	// decision; what fails only the state's write is something in its way
	// (a non-empty directory cannot be renamed over).
	if err := os.MkdirAll(filepath.Join(f.root.TrustState(), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	cfg := Config{Root: f.root, Version: f.version, ArtifactCAPEM: f.caPEM, Log: slog.New(slog.NewJSONHandler(&logged, nil))}
	if res := Run(within(t, time.Minute), cfg); res.Outcome != AlreadyStaged || res.Err != nil {
		t.Errorf("Run with an unwritable trust state = %+v, want alreadyStaged", res)
	}
	if !strings.Contains(logged.String(), `"level":"WARN"`) {
		t.Error("the failed write of the trust state was not logged as a warning")
	}
	f.noTemps()
	if fi, err := os.Lstat(f.root.TrustState()); err != nil || !fi.IsDir() {
		t.Errorf("what was in the state's way changed: %v, %v", fi, err)
	}
}

// TestOnlyDownloadHotfixKeepsTrust: explain gathers the same facts and
// never writes the state; no other package calls trust.Save.
func TestOnlyDownloadHotfixKeepsTrust(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pubLine, sign := f.keys()
	f.installKeys(pubLine)
	f.writePointer(hotfix.Pointer{Hotfixes: map[string]string{"202604.01": target}, Releases: []json.RawMessage{sign(f.release(f.body, nil))}, Revoked: []string{"202604.01.7"}})
	explain.Run(t.Context(), explain.Config{Root: f.root, Version: baked})
	if inode(t, f.root.TrustState()) != 0 {
		t.Error("explain wrote the trust state")
	}

	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	var writers []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(data), "trust.Save(") {
			rel, _ := filepath.Rel(root, path)
			writers = append(writers, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"internal/node/downloadhotfix/downloadhotfix.go"}; !slices.Equal(writers, want) {
		t.Errorf("files calling trust.Save: %q, want only %q", writers, want)
	}
}
