package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/lpswire"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
)

const (
	// MaxKeep is how long a report the service did not acknowledge is
	// kept and resent, from when it was first sent: as long as it can
	// still count (lpswire.ReportDeadline). The node does not know its
	// release's plan or lpsd's outages, so it keeps it for the longest.
	MaxKeep = lpswire.ReportDeadline
	// firstBackoff and maxBackoff space the resends of a kept report:
	// the first one at the timer's next run (a replica restart costs a
	// minute), then twice as long after each failed one, up to half an
	// hour, so a node does not knock every minute through a long outage
	// (about a hundred attempts in MaxKeep, not 2880).
	firstBackoff = time.Minute
	maxBackoff   = 30 * time.Minute
	// maxKept bounds the reports kept: a node sends two per boot (started,
	// outcome) and boots rarely; the oldest go first.
	maxKept = 8
	// maxOutboxBytes caps the outbox file, read and written: 8 reports of
	// at most a few hundred bytes of text each fit many times over.
	maxOutboxBytes = 32 << 10
	// outboxVersion is the outbox file's format; another is discarded.
	outboxVersion = 1
	// lockWait bounds the wait for another writer of the outbox (launch
	// keeping a report, report-resend resending).
	lockWait = time.Second
)

// Kept is a report the service did not acknowledge, kept on the node to be
// resent: an outcome or a started report of one boot.
type Kept struct {
	Boot string `json:"boot"`
	// Since is when it was first sent; it is dropped MaxKeep after.
	Since    time.Time `json:"since"`
	Outcome  *Outcome  `json:"outcome,omitempty"`
	Start    *Start    `json:"start,omitempty"`
	Attempts int       `json:"attempts"`
	// Next is when Resend tries it again; zero (and outboxes written
	// before it was kept): at once.
	Next time.Time `json:"next,omitzero"`
}

// dueSlack is how early a report counts as due: the timer's runs drift
// by up to its RandomizedDelaySec (20 s), and a minute's backoff must
// not become two.
const dueSlack = 30 * time.Second

// due reports whether k is to be sent at now. A Next further away than
// maxBackoff is not one this node wrote (a clock stepped back, a damaged
// file): it is due, not held.
func (k Kept) due(now time.Time) bool {
	return !k.Next.After(now.Add(dueSlack)) || k.Next.Sub(now) > maxBackoff
}

// failed is k after an attempt at now that may succeed later.
func (k Kept) failed(now time.Time) Kept {
	k.Attempts++
	k.Next = now.Add(backoff(k.Attempts))
	return k
}

// backoff is the wait after the nth failed attempt (the first send is 1).
func backoff(n int) time.Duration {
	d := firstBackoff
	for i := 2; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

type outbox struct {
	V       int    `json:"v"`
	Reports []Kept `json:"reports"`
}

// Keep adds a report that was sent at now and not acknowledged (a
// Retryable error) to the outbox under root, for Resend; exactly one of o
// and s is set. An outcome replaces whatever the outbox holds of its boot
// (it supersedes a started report); a started report is not kept beside
// one of its boot. Expired reports are dropped, and the oldest beyond
// maxKept. An unreadable outbox is replaced. Errors are the disk's; the
// caller fails open.
func Keep(ctx context.Context, root layout.Root, now time.Time, o *Outcome, s *Start) error {
	if (o == nil) == (s == nil) {
		return errors.New("keep a report: want an outcome or a started report")
	}
	boot, err := BootID(root)
	if err != nil {
		return err
	}
	unlock, err := lockOutbox(ctx, root)
	if err != nil {
		return err
	}
	defer unlock()
	kept, _ := readOutbox(root)
	kept = fresh(kept, now)
	k := Kept{Boot: boot, Since: now, Outcome: o, Start: s, Attempts: 1}
	switch {
	case o != nil:
		kept = slices.DeleteFunc(kept, func(e Kept) bool { return e.Boot == boot })
	case slices.ContainsFunc(kept, func(e Kept) bool { return e.Boot == boot }):
		return nil
	}
	kept = append(kept, k)
	if n := len(kept) - maxKept; n > 0 {
		kept = kept[n:]
	}
	return writeOutbox(root, kept)
}

// Resent is what a Resend did.
type Resent struct {
	// Delivered were acknowledged; Dropped were refused for good or
	// expired; Kept wait for the next Resend.
	Delivered, Dropped, Kept int
}

// Resend sends every report the outbox under cfg.Root keeps that is due,
// once each within ctx (each attempt within Timeout), and keeps those that
// failed with a Retryable error, to be tried again after a backoff, until
// MaxKeep after they were first sent. Reports not due yet are kept as
// they are. It returns what it did and the first error; an outbox that
// cannot be read is removed (its reports are lost: fail-open).
func Resend(ctx context.Context, cfg Config, now time.Time) (Resent, error) {
	var res Resent
	if _, err := os.Lstat(cfg.Root.ReportOutbox()); errors.Is(err, fs.ErrNotExist) {
		return res, nil // the usual case: nothing kept, nothing written
	}
	due, err := takeDue(ctx, cfg.Root, now, &res)
	if err != nil || len(due) == 0 {
		return res, err
	}
	// The lock is not held while the service is asked (up to Timeout a
	// report): a launch keeping a report meanwhile waits only lockWait.
	outcome := make([]Kept, len(due)) // what to keep of each; Boot "" drops it
	c, rerr := cfg.Open(ctx)
	var first error
	for i, k := range due {
		if rerr == nil {
			// One connection for them all while the service answers,
			// redialed if it broke meanwhile (Fresh).
			c, rerr = c.Fresh()
		}
		if rerr != nil {
			// The metadata service or the node's config is not there
			// yet: an attempt that failed, backed off like one.
			outcome[i] = k.failed(now)
			if first == nil {
				first = fmt.Errorf("resend reports: %w", rerr)
			}
			continue
		}
		err := resend(ctx, c, k)
		switch {
		case err == nil:
			res.Delivered++
		case Retryable(err):
			outcome[i] = k.failed(now)
			// The service could not take it (a replica restarting or
			// hung, a connection gone quiet, which stays READY): the
			// next report goes over a new connection, which behind a
			// load balancer may reach another replica, as each did when
			// it dialed its own.
			c.Close()
			c, rerr = c.Redial()
		default:
			res.Dropped++
		}
		if err != nil && first == nil {
			first = err
		}
	}
	if c != nil {
		c.Close()
	}
	n, err := settle(ctx, cfg.Root, due, outcome)
	res.Kept = n
	return res, errors.Join(first, err)
}

// takeDue drops the outbox's expired reports and returns those due at
// now, counting the dropped and the kept that are not due in res.
func takeDue(ctx context.Context, root layout.Root, now time.Time, res *Resent) ([]Kept, error) {
	unlock, err := lockOutbox(ctx, root)
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := readOutbox(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errors.Join(err, removeOutbox(root))
	}
	kept := fresh(all, now)
	res.Dropped = len(all) - len(kept)
	if len(kept) == 0 {
		return nil, removeOutbox(root)
	}
	due := slices.DeleteFunc(slices.Clone(kept), func(k Kept) bool { return !k.due(now) })
	if len(due) == 0 {
		res.Kept = len(kept)
	}
	if res.Dropped == 0 {
		return due, nil // nothing dropped: no write
	}
	return due, writeOutbox(root, kept)
}

// settle writes what came of the due reports into the outbox as it is
// now (Keep may have added or replaced reports meanwhile): each one that
// is still there is replaced by its outcome, or dropped when that is
// empty. It returns how many reports the outbox keeps.
func settle(ctx context.Context, root layout.Root, due, outcome []Kept) (int, error) {
	unlock, err := lockOutbox(ctx, root)
	if err != nil {
		return 0, err
	}
	defer unlock()
	cur, err := readOutbox(root)
	if errors.Is(err, fs.ErrNotExist) {
		cur, err = nil, nil
	}
	if err != nil {
		return 0, errors.Join(err, removeOutbox(root))
	}
	left := cur[:0]
	for _, k := range cur {
		i := slices.IndexFunc(due, func(d Kept) bool { return d.same(k) })
		switch {
		case i < 0:
			left = append(left, k) // kept since, or not due
		case outcome[i].Boot != "":
			left = append(left, outcome[i])
		}
	}
	if len(left) == 0 {
		return 0, removeOutbox(root)
	}
	return len(left), writeOutbox(root, left)
}

// same reports whether k and o are one kept report: the same boot, kind
// and first send.
func (k Kept) same(o Kept) bool {
	return k.Boot == o.Boot && (k.Outcome == nil) == (o.Outcome == nil) && k.Since.Equal(o.Since)
}

func resend(ctx context.Context, c *lpsclient.Conn, k Kept) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	var err error
	switch {
	case k.Outcome != nil:
		_, err = c.Report(ctx, request(k.Boot, *k.Outcome))
	case k.Start != nil:
		_, err = c.Started(ctx, startedRequest(k.Boot, *k.Start))
	}
	return err
}

// fresh returns the kept reports first sent less than MaxKeep before now,
// and those never resent (a clock that stepped forward by more than
// MaxKeep must not cost a report its one resend), with a boot ID and a
// report: the file is the node's, but a report in it goes out under the
// node's attested identity, so nothing odd is sent.
func fresh(kept []Kept, now time.Time) []Kept {
	return slices.DeleteFunc(kept, func(k Kept) bool {
		expired := !k.Since.Add(MaxKeep).After(now) && k.Attempts > 1
		return expired || k.Since.After(now.Add(MaxKeep)) ||
			len(k.Boot) != 36 || (k.Outcome == nil) == (k.Start == nil)
	})
}

func readOutbox(root layout.Root) ([]Kept, error) {
	data, err := capfile.ReadNoFollow(root.ReportOutbox(), maxOutboxBytes)
	if err != nil {
		return nil, fmt.Errorf("read report outbox: %w", err)
	}
	var ob outbox
	if err := json.Unmarshal(data, &ob); err != nil {
		return nil, fmt.Errorf("read report outbox %s: %w", root.ReportOutbox(), err)
	}
	if ob.V != outboxVersion {
		return nil, fmt.Errorf("read report outbox %s: format %d, want %d", root.ReportOutbox(), ob.V, outboxVersion)
	}
	return ob.Reports, nil
}

func writeOutbox(root layout.Root, kept []Kept) error {
	data, err := json.Marshal(outbox{V: outboxVersion, Reports: kept})
	if err != nil {
		return fmt.Errorf("write report outbox: %w", err)
	}
	if len(data) > maxOutboxBytes {
		return fmt.Errorf("write report outbox: %d bytes, over its %d-byte cap", len(data), maxOutboxBytes)
	}
	if err := atomicfile.WriteFile(root.ReportOutbox(), data, 0o600); err != nil {
		return fmt.Errorf("write report outbox: %w", err)
	}
	return nil
}

func removeOutbox(root layout.Root) error {
	if err := os.Remove(root.ReportOutbox()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove report outbox: %w", err)
	}
	return nil
}

// lockOutbox takes an exclusive flock beside the outbox, waiting up to
// lockWait (within ctx), so a resend and a launch keeping a report never
// lose each other's writes.
func lockOutbox(ctx context.Context, root layout.Root) (func(), error) {
	path := root.ReportOutboxLock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock report outbox: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock report outbox: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock report outbox %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock report outbox %s: held by another writer: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
