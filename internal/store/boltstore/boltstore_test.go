package boltstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"nodehotfix/internal/store"
	"nodehotfix/internal/store/boltstore"
	"nodehotfix/internal/store/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return mustOpen(t, filepath.Join(t.TempDir(), "lpsd.db")) })
}

func mustOpen(t *testing.T, path string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state", "lpsd")
	path := filepath.Join(dir, "lpsd.db")
	mustOpen(t, path)
	for _, c := range []struct {
		path string
		want os.FileMode
	}{{dir, 0o700 | os.ModeDir}, {path, 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.want {
			t.Errorf("mode of %s = %v, want %v", c.path, fi.Mode(), c.want)
		}
	}
}

func TestOpenLockedFileFailsFast(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lpsd.db")
	mustOpen(t, path)
	// bbolt's flock is per open file, so a second Open in this process
	// stands in for a second lpsd.
	s, err := boltstore.Open(path)
	if err == nil {
		s.Close()
		t.Fatal("second Open of a locked file succeeded, want an error")
	}
	if !errors.Is(err, berrors.ErrTimeout) {
		t.Errorf("second Open = %v, want a lock timeout", err)
	}
}

func TestReopenKeepsState(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lpsd.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	rev := storetest.MustPut(t, s, storetest.Release("202604.01.1"), 0)
	reports := []store.Report{storetest.Report("vm-a", "boot-1"), storetest.Report("vm-b", "boot-1")}
	storetest.MustPutReports(t, s, reports...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path)
	if diff := cmp.Diff(reports, storetest.MustReports(t, s)); diff != "" {
		t.Errorf("Reports after reopen (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{false, true}, storetest.MustPutReports(t, s, reports[0], storetest.Report("vm-c", "boot-1"))); diff != "" {
		t.Errorf("PutReports after reopen: first flags (-want +got):\n%s", diff)
	}
	r, gotRev, err := s.Release(t.Context(), "202604.01.1")
	if err != nil || gotRev != rev || string(r.Envelope) != string(storetest.Release("202604.01.1").Envelope) {
		t.Errorf("Release after reopen = %q at %d, %v; want the stored record at %d", r.Envelope, gotRev, err, rev)
	}
	next := storetest.MustPut(t, s, storetest.Release("202604.01.2"), 0)
	if next <= rev {
		t.Errorf("revision after reopen = %d, want > %d", next, rev)
	}
	audit, err := s.Audit(t.Context(), 0, 10)
	if err != nil || len(audit) != 2 || audit[1].Seq <= audit[0].Seq {
		t.Errorf("Audit after reopen = %+v, %v; want two entries in Seq order", audit, err)
	}
}

// TestUnknownEncodingVersionRefused: a record in an encoding this lpsd
// does not know (a newer one mid-upgrade, another writer) is never
// misread: one record read by key is an error; a list skips it and says
// which, beside the records it could read.
func TestUnknownEncodingVersionRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lpsd.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	storetest.MustPut(t, s, storetest.Release("202604.01.1"), 0)
	storetest.MustPut(t, s, storetest.Release("202604.01.2"), 0)
	storetest.MustPutReports(t, s, storetest.Report("vm-b", "boot-1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("releases")).Put([]byte("202604.01.1"), []byte(`{"v":2,"rev":1,"release":{"version":"202604.01.1"}}`)); err != nil {
			return err
		}
		return tx.Bucket([]byte("reports")).Put([]byte("vm-a/boot-1"), []byte(`{"v":2,"report":{"vm_id":"vm-a","boot":"boot-1"}}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path)
	if _, _, err := s.Release(t.Context(), "202604.01.1"); err == nil {
		t.Error("Release of a version-2 record = nil error, want a refusal")
	}
	var ue *store.UnreadableError
	rels, _, err := s.Releases(t.Context())
	if !errors.As(err, &ue) || ue.Kind != "release" || ue.Count != 1 || !slices.Equal(ue.Keys, []string{"202604.01.1"}) || len(rels) != 1 || rels[0].Version != "202604.01.2" {
		t.Errorf("Releases with a version-2 record = %d releases, %v; want the other one and an UnreadableError naming 202604.01.1", len(rels), err)
	}
	reports, err := s.Reports(t.Context())
	if !errors.As(err, &ue) || ue.Kind != "report" || ue.Count != 1 || len(reports) != 1 || reports[0].VMID != "vm-b" {
		t.Errorf("Reports with a version-2 record = %v, %v; want vm-b's and an UnreadableError", reports, err)
	}
}

// TestOpenAddsReportsBucket opens a file written before reports were
// stored: it keeps its releases and gains the reports bucket.
func TestOpenAddsReportsBucket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lpsd.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	rev := storetest.MustPut(t, s, storetest.Release("202604.01.1"), 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("reports")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path)
	if _, got, err := s.Release(t.Context(), "202604.01.1"); err != nil || got != rev {
		t.Errorf("Release after reopen = revision %d, %v; want %d", got, err, rev)
	}
	if got := storetest.MustReports(t, s); len(got) != 0 {
		t.Errorf("Reports of an old file = %+v, want none", got)
	}
	storetest.MustPutReports(t, s, storetest.Report("vm-a", "boot-1"))
	if got := storetest.MustReports(t, s); len(got) != 1 {
		t.Errorf("Reports = %d reports, want 1", len(got))
	}
}

// filledStore writes a store file with releases and reports, closed, and
// returns its path and size.
func filledStore(t *testing.T) (string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lpsd.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		storetest.MustPut(t, s, storetest.Release(fmt.Sprintf("202604.01.%d", i+1)), 0)
	}
	var rs []store.Report
	for i := range 2000 {
		rs = append(rs, storetest.Report(fmt.Sprintf("vm-%04d", i), "boot-1"))
	}
	storetest.MustPutReports(t, s, rs...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, fi.Size()
}

// TestOpenRefusesDamage: an empty, truncated or scribbled-over file (data
// pages, both meta pages, the freelist page's header or its ids) is a
// clear error at open (boltstore.ErrDamaged, never a panic and never an empty
// store), and the file is left as it was for recovery.
func TestOpenRefusesDamage(t *testing.T) {
	t.Parallel()
	damage := map[string]func(t *testing.T, path string, size int64){
		"empty": func(t *testing.T, path string, _ int64) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		},
		"truncated": func(t *testing.T, path string, size int64) {
			if err := os.Truncate(path, size/2); err != nil {
				t.Fatal(err)
			}
		},
		"bad-pages": func(t *testing.T, path string, size int64) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// Past the two meta pages and the freelist: data pages.
			junk := bytes.Repeat([]byte{0xA5}, 3*4096)
			if _, err := f.WriteAt(junk, size/2); err != nil {
				t.Fatal(err)
			}
		},
		// bbolt reads the freelist only when it opens a file for writing,
		// and panics on a freelist page that is not one.
		"freelist-header": func(t *testing.T, path string, _ int64) {
			hurtFreelist(t, path, func(page []byte, _ uint64) {
				copy(page[:16], bytes.Repeat([]byte{0xA5}, 16))
			})
		},
		"freelist-type": func(t *testing.T, path string, _ int64) {
			// A leaf page's flags where the freelist's are.
			hurtFreelist(t, path, func(page []byte, _ uint64) { binary.LittleEndian.PutUint16(page[8:], 0x02) })
		},
		"freelist-count": func(t *testing.T, path string, _ int64) {
			// The overflow count (0xFFFF): the first id is read as the count,
			// and the ids after it as free pages.
			hurtFreelist(t, path, func(page []byte, _ uint64) { binary.LittleEndian.PutUint16(page[10:], 0xFFFF) })
		},
		"freelist-names-live-page": func(t *testing.T, path string, _ int64) {
			// A whole freelist page, one of whose ids is the root page of
			// the tree: the next write would overwrite it.
			hurtFreelist(t, path, func(page []byte, root uint64) {
				if binary.LittleEndian.Uint16(page[10:]) == 0 {
					t.Fatal("the freelist is empty: nothing to change")
				}
				binary.LittleEndian.PutUint64(page[16:], root)
			})
		},
		"meta-pages": func(t *testing.T, path string, _ int64) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(bytes.Repeat([]byte{0x5A}, 8192), 0); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, hurt := range damage {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path, size := filledStore(t)
			hurt(t, path, size)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := boltstore.Open(path)
			if err == nil {
				s.Close()
				t.Fatal("Open of a damaged file succeeded")
			}
			if !errors.Is(err, boltstore.ErrDamaged) || !strings.Contains(err.Error(), "restore it from a backup") {
				t.Errorf("Open = %v; want boltstore.ErrDamaged saying what to do", err)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Error("Open changed the damaged file")
			}
			// The file lock is released: a second try fails the same way,
			// not with a lock timeout.
			if _, err := boltstore.Open(path); !errors.Is(err, boltstore.ErrDamaged) {
				t.Errorf("second Open = %v, want boltstore.ErrDamaged again", err)
			}
		})
	}
}

// hurtFreelist changes the freelist page that the file's current meta page
// names (the one of the two with the higher txid) with hurt, in place; hurt
// also gets the page id of the tree's root.
func hurtFreelist(t *testing.T, path string, hurt func(page []byte, root uint64)) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A meta page: the page header (id u64, flags u16, count u16, overflow
	// u32), then magic, version, page size, flags (u32 each), the root
	// bucket (u64 root, u64 sequence), freelist, pgid, txid (u64 each).
	const hdrSize, metaSize = 16, 64
	var freelist, root, txid uint64
	var pageSize int64
	for i := range int64(2) {
		meta := make([]byte, hdrSize+metaSize)
		// Page 0 is at 0; page 1 at the page size, read from page 0.
		off := i * pageSize
		if _, err := f.ReadAt(meta, off); err != nil {
			t.Fatal(err)
		}
		m := meta[hdrSize:]
		if binary.LittleEndian.Uint32(m[0:]) != 0xED0CDAED {
			t.Fatalf("meta page %d: no bbolt magic", i)
		}
		if i == 0 {
			pageSize = int64(binary.LittleEndian.Uint32(m[8:]))
		}
		if tx := binary.LittleEndian.Uint64(m[48:]); tx >= txid {
			freelist, root, txid = binary.LittleEndian.Uint64(m[32:]), binary.LittleEndian.Uint64(m[16:]), tx
		}
	}
	if freelist < 2 || freelist == math.MaxUint64 {
		t.Fatalf("the current meta page names no freelist page (%#x)", freelist)
	}
	page := make([]byte, pageSize)
	off := int64(freelist) * pageSize
	if _, err := f.ReadAt(page, off); err != nil {
		t.Fatal(err)
	}
	if flags := binary.LittleEndian.Uint16(page[8:]); flags != 0x10 {
		t.Fatalf("page %d is not a freelist page (flags %#x)", freelist, flags)
	}
	hurt(page, root)
	if _, err := f.WriteAt(page, off); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkOpen measures Open, which runs bbolt's consistency check, on a
// store of 200 releases and 100k reports, against
// opening the same file with bbolt alone (the baseline, same run).
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "lpsd.db")
	s, err := boltstore.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 200 {
		storetest.MustPut(b, s, storetest.Release(fmt.Sprintf("202604.01.%d", i+1)), 0)
	}
	for chunk := range 100 {
		rs := make([]store.Report, 1000)
		for i := range rs {
			rs[i] = storetest.Report(fmt.Sprintf("vm-%03d-%04d", chunk, i), "boot-1")
		}
		storetest.MustPutReports(b, s, rs...)
	}
	s.Close()
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("store file: %d bytes", fi.Size())
	b.Run("bbolt-open", func(b *testing.B) {
		for b.Loop() {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				b.Fatal(err)
			}
			db.Close()
		}
	})
	b.Run("open-checked", func(b *testing.B) {
		for b.Loop() {
			s, err := boltstore.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
}

// TestOpenAcceptsLeakedPage: a page neither the tree nor the freelist holds
// (a freelist one entry short) is lost space, not damage: bbolt writes such
// a file, a backup carries the same leak, so lpsd must start on it.
func TestOpenAcceptsLeakedPage(t *testing.T) {
	t.Parallel()
	path, _ := filledStore(t)
	hurtFreelist(t, path, func(page []byte, _ uint64) {
		n := binary.LittleEndian.Uint16(page[10:])
		if n == 0 || n == 0xFFFF {
			t.Fatalf("freelist count %d: nothing to leak", n)
		}
		binary.LittleEndian.PutUint16(page[10:], n-1)
	})
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatalf("Open of a store with a leaked page: %v", err)
	}
	s.Close()
}

// TestRestore: the backup docs/transparency-log.md gives for bbolt (copy
// the file while lpsd is stopped) restores a log nodes and witnesses
// never take for the one served since.
func TestRestore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lpsd.db")
	backupPath := path + ".backup"
	storetest.RunRestore(t, func(t *testing.T) store.Store { return mustOpen(t, path) },
		func(t *testing.T, s store.Store) (store.Store, func(*testing.T, store.Store) store.Store) {
			if err := s.Close(); err != nil { // lpsd stopped
				t.Fatal(err)
			}
			copyFile(t, path, backupPath)
			restore := func(t *testing.T, current store.Store) store.Store {
				if err := current.Close(); err != nil {
					t.Fatal(err)
				}
				copyFile(t, backupPath, path)
				return mustOpen(t, path)
			}
			return mustOpen(t, path), restore
		})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
