package kept

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

type rec struct {
	name string // sorts as the key does not: the order is the values'
	n    int
}

func cmpRec(a, b rec) int { return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.n, b.n)) }

// TestListIsTheSortedEntries: after any sequence of puts (readable or
// not), deletes, marks and resets, List is exactly the readable values
// sorted and the unreadable keys in key order, whether it merged or
// sorted them all.
func TestListIsTheSortedEntries(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 1))
		s := New(cmpRec)
		want := map[string]Entry[rec]{}
		keys := 20 + r.IntN(300)
		for step := range 400 {
			switch op := r.IntN(100); {
			case op < 60:
				k := fmt.Sprintf("k%04d", r.IntN(keys))
				e := Entry[rec]{Tag: uint64(step), V: rec{fmt.Sprintf("v%04d", keys-r.IntN(keys)), step}}
				if r.IntN(20) == 0 {
					e.Err = errors.New("unreadable")
				}
				s.Put(k, e)
				want[k] = e
			case op < 85:
				k := fmt.Sprintf("k%04d", r.IntN(keys))
				s.Delete(k)
				delete(want, k)
			case op < 88:
				mark := uint64(step)
				for k := range want {
					if r.IntN(3) > 0 {
						e := s.Get(k)
						e.Mark = mark
						w := want[k]
						w.Mark = mark
						want[k] = w
					} else {
						delete(want, k)
					}
				}
				s.DeleteUnmarked(mark)
			case op < 89:
				s.Reset()
				clear(want)
			default:
				check(t, seed, step, s, want)
			}
		}
		check(t, seed, -1, s, want)
	}
}

func check(t *testing.T, seed uint64, step int, s *Set[rec], want map[string]Entry[rec]) {
	t.Helper()
	var vals []rec
	var bad []string
	for k, e := range want {
		if e.Err != nil {
			bad = append(bad, k)
		} else {
			vals = append(vals, e.V)
		}
	}
	slices.SortFunc(vals, cmpRec)
	slices.Sort(bad)
	got, gotBad := s.List()
	if !slices.Equal(got, vals) || !slices.Equal(gotBad, bad) || s.Len() != len(want) {
		t.Fatalf("seed %d step %d: List = %d values, %d unreadable, Len %d; want %d, %d", seed, step, len(got), len(gotBad), s.Len(), len(vals), len(bad))
	}
	if len(got) > 0 {
		got[0].n = -1 // the caller's own
		if again, _ := s.List(); again[0].n == -1 {
			t.Fatalf("seed %d: List shares its slice with the Set", seed)
		}
	}
}
