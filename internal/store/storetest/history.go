package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nodehotfix/internal/store"
)

// testHistory: a store's points are kept per release and minute (a later
// point of a minute replaces it), listed newest-limited and oldest first,
// refused whole when one is invalid, and deleted per release; they move
// no revision.
func testHistory(t *testing.T, s store.Store) {
	h, ok := s.(store.History)
	if !ok {
		t.Fatalf("%T has no store.History: every backend keeps releases' history", s)
	}
	ctx := t.Context()
	_, rev, err := s.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	pt := func(v string, at time.Duration, data string) store.Point {
		return store.Point{Version: v, Time: t0.Add(at), Data: []byte(data)}
	}
	if err := h.PutPoints(ctx, []store.Point{
		pt("202604.01.1", 10*time.Second, `{"n":1}`),
		pt("202604.01.1", 50*time.Second, `{"n":2}`), // the same minute: replaces
		pt("202604.01.1", 3*time.Minute, `{"n":3}`),
		pt("202604.01.10", time.Minute, `{"other":true}`), // a version the first is a prefix of
		pt("202604.01.2", 2*time.Minute, `{"n":4}`),
	}); err != nil {
		t.Fatal(err)
	}
	list := func(v string, limit int) []store.Point {
		t.Helper()
		got, err := h.Points(ctx, v, limit)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := []store.Point{pt("202604.01.1", 0, `{"n":2}`), pt("202604.01.1", 3*time.Minute, `{"n":3}`)}
	if diff := cmp.Diff(want, list("202604.01.1", 0)); diff != "" {
		t.Errorf("Points (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[1:], list("202604.01.1", 1)); diff != "" {
		t.Errorf("Points, limit 1: want the newest (-want +got):\n%s", diff)
	}
	if got := list("202604.01.9", 0); len(got) != 0 {
		t.Errorf("Points of a version with none: %v", got)
	}
	if _, rev2, err := s.Releases(ctx); err != nil || rev2 != rev {
		t.Errorf("revision after PutPoints: %d (%v), want %d unchanged", rev2, err, rev)
	}

	for _, bad := range []store.Point{
		pt("", 0, `{}`),
		pt("a/b", 0, `{}`),
		pt("202604.01.1", 0, ""),
		pt("202604.01.1", 0, fmt.Sprintf(`{"pad":"%0*d"}`, store.MaxPointSize, 0)),
	} {
		err := h.PutPoints(ctx, []store.Point{pt("202604.01.3", 0, `{"ok":true}`), bad})
		if !errors.Is(err, store.ErrInvalidPoint) {
			t.Errorf("PutPoints(%q, %d bytes): %v, want ErrInvalidPoint", bad.Version, len(bad.Data), err)
		}
	}
	if got := list("202604.01.3", 0); len(got) != 0 {
		t.Errorf("a refused call stored %v", got)
	}

	n, err := h.DeletePoints(ctx, "202604.01.1")
	if err != nil || n != 2 {
		t.Errorf("DeletePoints: %d, %v; want 2", n, err)
	}
	if got := list("202604.01.1", 0); len(got) != 0 {
		t.Errorf("Points after DeletePoints: %v", got)
	}
	if got := list("202604.01.10", 0); len(got) != 1 || list("202604.01.2", 0) == nil {
		t.Errorf("DeletePoints of one release touched another: %v", got)
	}
}
