package tiles

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"nodehotfix/internal/translog"
)

func readDir(t *testing.T, dir string) *DirFetcher {
	t.Helper()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestExport(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	src := newLog(t, 600, s)
	c := serve(t, Handler(src), v)
	dir := t.TempDir()
	ctx := t.Context()
	res, err := Export(ctx, c, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Level 0: 000, 001, 002.p/88; level 1: 000.p/2; three bundles.
	if res.Previous != nil || res.Checkpoint.Size != 600 || res.Tiles != 4 || res.Bundles != 3 {
		t.Errorf("Export = %+v, want 600 records in 4 tiles and 3 bundles, no previous", res)
	}
	fromDir := NewClient(readDir(t, dir), translog.Policy{Log: v})
	cp, err := checkpoint(fromDir, ctx)
	if err != nil || cp.Hash != res.Checkpoint.Hash {
		t.Fatalf("exported checkpoint = %+v, %v", cp, err)
	}
	got, err := records(t, fromDir, cp, 0)
	checkRecords(t, got, err, 0, 600)

	// The next export extends the last and writes only what is new.
	grow(t, src, 900, s)
	res, err = Export(ctx, c, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.Previous == nil || res.Previous.Size != 600 || res.Checkpoint.Size != 900 || res.Tiles != 3 || res.Bundles != 2 {
		t.Errorf("second Export = %+v, want from 600 to 900 in 3 tiles (0/002, 0/003.p/132, 1/000.p/3) and 2 bundles", res)
	}
	cp, err = checkpoint(NewClient(readDir(t, dir), translog.Policy{Log: v}), ctx)
	if err != nil {
		t.Fatal(err)
	}
	fromDir = NewClient(readDir(t, dir), translog.Policy{Log: v})
	got, err = records(t, fromDir, cp, 0)
	checkRecords(t, got, err, 0, 900)
	// An exported directory exports again, as any tiles root does.
	again := t.TempDir()
	if _, err := Export(ctx, fromDir, again, time.Now()); err != nil {
		t.Fatalf("Export from an exported directory: %v", err)
	}
}

func TestExportRefusesFork(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	dir := t.TempDir()
	ctx := t.Context()
	if _, err := Export(ctx, serve(t, Handler(newLog(t, 300, s)), v), dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, CheckpointPath))
	if err != nil {
		t.Fatal(err)
	}
	forked := newLog(t, 10, nil)
	if err := forked.Append([]byte("another history")); err != nil {
		t.Fatal(err)
	}
	grow(t, forked, 400, s)
	var fe *ForkError
	if _, err := Export(ctx, serve(t, Handler(forked), v), dir, time.Now()); !errors.As(err, &fe) {
		t.Errorf("Export of a fork over an export: %v, want a *ForkError", err)
	}
	after, err := os.ReadFile(filepath.Join(dir, CheckpointPath))
	if err != nil || string(after) != string(before) {
		t.Errorf("a refused export replaced the checkpoint")
	}
	if _, err := os.Stat(filepath.Join(dir, "tile/entries/001.p/144")); err == nil {
		t.Errorf("a refused export wrote tiles")
	}
}

func TestState(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	path := filepath.Join(t.TempDir(), "log.state")
	if _, ok, err := ReadState(path, v); ok || err != nil {
		t.Fatalf("ReadState of no file = %v, %v; want first use", ok, err)
	}
	src := newLog(t, 3, s)
	cp, err := NewClient(nil, translog.Policy{Log: v}).openNote(t, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteState(path, cp); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadState(path, v)
	if !ok || err != nil || got.Size != 3 || got.Hash != cp.Hash {
		t.Errorf("ReadState = %+v, %v, %v; want %+v", got, ok, err, cp)
	}
	_, other := newLogKey(t)
	if _, _, err := ReadState(path, other); err == nil {
		t.Error("ReadState with another log's key succeeded")
	}
}

func TestMonitor(t *testing.T) {
	t.Parallel()
	s, v := newLogKey(t)
	src := newLog(t, 10, s)
	c := serve(t, Handler(src), v)
	state := filepath.Join(t.TempDir(), "state")
	ctx := t.Context()
	rep, err := Monitor(ctx, c, MonitorConfig{State: state})
	if err != nil || rep.Kept != nil || len(rep.Entries) != 10 || rep.Entries[9].Kind != KindRevocation {
		t.Fatalf("first Monitor = %+v, %v; want first use, 10 revocations", rep, err)
	}
	grow(t, src, 20, s)
	rep, err = Monitor(ctx, c, MonitorConfig{State: state, Since: 15})
	if err != nil || rep.Kept == nil || rep.Kept.Size != 10 || len(rep.Entries) != 5 || rep.Entries[0].Index != 15 {
		t.Fatalf("second Monitor = %+v, %v; want from 10, entries 15 to 19", rep, err)
	}
	// A fork leaves the state where it was.
	forked := newLog(t, 3, nil)
	if err := forked.Append([]byte("x")); err != nil {
		t.Fatal(err)
	}
	grow(t, forked, 30, s)
	var fe *ForkError
	if _, err := Monitor(ctx, serve(t, Handler(forked), v), MonitorConfig{State: state}); !errors.As(err, &fe) {
		t.Fatalf("Monitor of a fork: %v, want a *ForkError", err)
	}
	if kept, _, err := ReadState(state, v); err != nil || kept.Size != 20 {
		t.Errorf("state after a fork = %d, %v; want 20", kept.Size, err)
	}
}
