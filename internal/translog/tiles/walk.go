package tiles

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"nodehotfix/internal/release"
)

// Status is what Check found.
type Status string

// Statuses of a Check.
const (
	// StatusVerified: a release signed by the threshold of the key set in
	// force before it in the log; a key-set link that verifies from the set
	// before it (release.KeySet.Next: both thresholds, the next version).
	StatusVerified Status = "verified"
	// StatusBelowThreshold: a release with fewer valid signatures by the
	// key set in force than its threshold. Flagged: lpsd publishes none.
	StatusBelowThreshold Status = "below-threshold"
	// StatusBadLink: a key-set record that does not verify as the next
	// link (a signature short, a version skipped or repeated). Flagged:
	// nodes walking the chain stop there.
	StatusBadLink Status = "bad-link"
	// StatusRoot: the key-set record of the root's own version, with the
	// root's keys and threshold.
	StatusRoot Status = "root"
	// StatusRootMismatch: the key-set record of the root's version, with
	// other keys or another threshold than the root. Flagged.
	StatusRootMismatch Status = "root-mismatch"
	// StatusBeforeRoot: a record older than the root's version, which the
	// root cannot vouch for: not checked.
	StatusBeforeRoot Status = "before-root"
)

// Flagged reports whether s is a failure a monitor alerts on.
func (s Status) Flagged() bool {
	return s == StatusBelowThreshold || s == StatusBadLink || s == StatusRootMismatch
}

// Check is who really signed a release or key set, checked against the
// key-set chain the log itself holds, walked from a root.
type Check struct {
	Status Status
	// KeySetVersion is the version of the key set checked against: the
	// newest verified before the record in the log (for a link, the one it
	// must follow). Threshold is that set's.
	KeySetVersion int64
	Threshold     int
	// Signers are the IDs of that set's keys whose signature verifies.
	Signers []string
	// OwnSigners are, for a key-set link, the IDs of its own keys whose
	// signature verifies; it needs its own Entry.Threshold of them too.
	OwnSigners []string
	// Problem says why a key-set link failed, or differs from the root;
	// a release under its threshold needs none beyond Signers.
	Problem string
}

// walker checks records in log order against the key-set chain: cur is
// the newest set verified so far, starting at the root.
type walker struct {
	root, cur release.KeySet
	// advanced is set once a link past the root verified.
	advanced bool
}

func newWalker(root release.KeySet) *walker { return &walker{root: root, cur: root} }

// check fills e.Check for the record rec and moves the chain on past a
// link that verifies. before are the entries reported so far: a record of
// the root's version (or older) found after them means they predate the
// root, whose keys cannot judge them.
func (w *walker) check(e *Entry, rec []byte, before []Entry) {
	switch e.Kind {
	case KindRelease:
		signers, err := w.cur.Signers(rec)
		c := &Check{KeySetVersion: w.cur.Version(), Threshold: w.cur.Threshold(), Signers: signers, Status: StatusVerified}
		switch {
		case err != nil:
			c.Status, c.Problem = StatusBelowThreshold, err.Error()
		case len(signers) < c.Threshold:
			c.Status = StatusBelowThreshold
		}
		e.Check = c
	case KindKeySet:
		e.Check = w.link(e, rec, before)
	}
}

func (w *walker) link(e *Entry, rec []byte, before []Entry) *Check {
	version, _ := strconv.ParseInt(e.Version, 10, 64)
	d, err := release.InspectKeySet(rec)
	if err != nil { // Describe decoded it; unreachable
		return &Check{Status: StatusBadLink, KeySetVersion: w.cur.Version(), Threshold: w.cur.Threshold(), Problem: err.Error()}
	}
	own, err := d.KeySet()
	var ownSigners []string
	if err == nil {
		ownSigners, _ = own.Signers(rec)
	}
	if !w.advanced && version <= w.root.Version() {
		// Only a version-1 record of a version-1 root is no news: any
		// other means what came before was signed under an older set.
		for i := range before {
			if version == 1 && w.root.Version() == 1 {
				break
			}
			if before[i].Check != nil {
				before[i].Check = &Check{Status: StatusBeforeRoot}
			}
		}
		if version < w.root.Version() {
			return &Check{Status: StatusBeforeRoot, OwnSigners: ownSigners}
		}
		c := &Check{Status: StatusRoot, KeySetVersion: w.root.Version(), Threshold: w.root.Threshold(), OwnSigners: ownSigners}
		if !slices.Equal(sorted(w.root.KeyIDs()), sorted(e.Keys)) || w.root.Threshold() != e.Threshold {
			c.Status = StatusRootMismatch
			c.Problem = fmt.Sprintf("key set version %d in the log is %d of %v, the root is %d of %v",
				version, e.Threshold, e.Keys, w.root.Threshold(), w.root.KeyIDs())
		}
		return c
	}
	signers, _ := w.cur.Signers(rec)
	c := &Check{KeySetVersion: w.cur.Version(), Threshold: w.cur.Threshold(), Signers: signers, OwnSigners: ownSigners}
	// Next checks expiry at the time it is given. A link of the log's
	// history may have expired since, which is no fault of the link, so
	// it is checked just before its own expiry: its signatures and version
	// are what the history can vouch for. The newest set's expiry is
	// Report.KeySetExpired.
	next, err := w.cur.Next(rec, d.Expires.Add(-time.Second))
	if err != nil {
		c.Status, c.Problem = StatusBadLink, err.Error()
		return c
	}
	c.Status = StatusVerified
	w.cur, w.advanced = next, true
	return c
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }
