// Package kept holds the records a store keeps decoded between its lists
// of them (reports, served records), by key, and the list they make in
// order, so that a list after a few changes costs a merge of the changed
// records into the last list rather than a sort of them all: at 100,000
// records the sort was the larger part of a list.
package kept

import (
	"slices"
)

// Entry is one key's record as decoded, or why it could not be.
type Entry[T any] struct {
	// Tag says which bytes V was decoded from (etcd: the key's
	// ModRevision; bbolt: a hash of the value), for the store to tell
	// whether the key changed since.
	Tag uint64
	// Mark is the store's, for marking the entries one scan found.
	Mark uint64
	V    T
	Err  error
}

// Set is a store's kept records. It is not safe for concurrent use.
type Set[T any] struct {
	cmp   func(a, b T) int
	byKey map[string]*Entry[T]
	bad   map[string]bool // the keys whose Err is set

	// sorted are the readable entries in cmp order as of the last List
	// (the entries themselves, so a value is kept once), and keys[i] is
	// sorted[i]'s key; changed are the keys put or deleted since (all: too
	// many to merge, or everything), whose entries in sorted may since
	// hold another value or none.
	sorted  []*Entry[T]
	keys    []string
	changed map[string]bool
	all     bool
}

// New returns an empty Set whose List is in cmp order.
func New[T any](cmp func(a, b T) int) *Set[T] {
	return &Set[T]{cmp: cmp, byKey: map[string]*Entry[T]{}, bad: map[string]bool{}, changed: map[string]bool{}}
}

// Len returns the number of keys kept.
func (s *Set[T]) Len() int { return len(s.byKey) }

// Get returns key's entry, nil if none; the caller may set its Mark, and
// changes anything else through Put.
func (s *Set[T]) Get(key string) *Entry[T] { return s.byKey[key] }

// Put keeps e as key's entry.
func (s *Set[T]) Put(key string, e Entry[T]) {
	if cur, ok := s.byKey[key]; ok {
		*cur = e
	} else {
		s.byKey[key] = &e
	}
	if e.Err != nil {
		s.bad[key] = true
	} else {
		delete(s.bad, key)
	}
	s.touch(key)
}

// Delete forgets key.
func (s *Set[T]) Delete(key string) {
	if _, ok := s.byKey[key]; !ok {
		return
	}
	delete(s.byKey, key)
	delete(s.bad, key)
	s.touch(key)
}

// DeleteUnmarked forgets every key whose entry's Mark is not mark.
func (s *Set[T]) DeleteUnmarked(mark uint64) {
	for k, e := range s.byKey {
		if e.Mark != mark {
			s.Delete(k)
		}
	}
}

// Reset forgets every key.
func (s *Set[T]) Reset() {
	clear(s.byKey)
	clear(s.bad)
	s.all = true
}

func (s *Set[T]) touch(key string) {
	if s.all {
		return
	}
	// Past a quarter of the keys, sorting them all costs less than
	// merging.
	if len(s.changed) >= max(len(s.byKey), len(s.keys))/4+64 {
		s.all = true
		clear(s.changed)
		return
	}
	s.changed[key] = true
}

// List returns the readable values in cmp order (a slice of the caller's
// own) and the keys whose entries are unreadable, in key order.
func (s *Set[T]) List() ([]T, []string) {
	if s.all || len(s.changed) > 0 {
		s.resort()
	}
	bad := make([]string, 0, len(s.bad))
	for k := range s.bad {
		bad = append(bad, k)
	}
	slices.Sort(bad)
	out := make([]T, len(s.sorted))
	for i, e := range s.sorted {
		out[i] = e.V
	}
	return out, bad
}

// resort brings sorted and keys up to the entries: every readable value
// again, sorted, or the last list without the changed keys merged with
// their readable values, sorted.
func (s *Set[T]) resort() {
	type kv struct {
		k string
		e *Entry[T]
	}
	var fresh []kv
	add := func(k string) {
		if e, ok := s.byKey[k]; ok && e.Err == nil {
			fresh = append(fresh, kv{k, e})
		}
	}
	var oldE []*Entry[T]
	var oldK []string
	if s.all {
		for k := range s.byKey {
			add(k)
		}
	} else {
		for k := range s.changed {
			add(k)
		}
		oldE, oldK = s.sorted, s.keys
	}
	slices.SortFunc(fresh, func(a, b kv) int { return s.cmp(a.e.V, b.e.V) })
	n := len(fresh)
	for _, k := range oldK {
		if !s.changed[k] {
			n++
		}
	}
	sorted, keys := make([]*Entry[T], 0, n), make([]string, 0, n)
	i := 0
	for j, k := range oldK {
		if s.changed[k] {
			continue
		}
		for ; i < len(fresh) && s.cmp(fresh[i].e.V, oldE[j].V) < 0; i++ {
			sorted, keys = append(sorted, fresh[i].e), append(keys, fresh[i].k)
		}
		sorted, keys = append(sorted, oldE[j]), append(keys, k)
	}
	for ; i < len(fresh); i++ {
		sorted, keys = append(sorted, fresh[i].e), append(keys, fresh[i].k)
	}
	s.sorted, s.keys, s.all = sorted, keys, false
	clear(s.changed)
}
