// Package trust decides, on a node, which release keys and which
// transparency-log checkpoint the node believes: the image's baked key set,
// extended by the signed key-set links it verified (internal/release), and
// the log checkpoint it last verified (internal/translog), weighed against
// the evidence the staged pointer carries (hotfix.Pointer KeySets and Log).
//
// What the node believes only ever moves forward. The links it verified and
// the last checkpoint it saw are kept on disk (State), and every later
// evaluation starts from them: a served chain shorter than the kept one, a
// checkpoint smaller than the kept one or inconsistent with it (a fork) and
// a revocation the node was once shown cannot be undone by whoever serves
// the next document.
//
// Evaluate never fails: a problem is a fact in the View, and facts.Gather
// turns a broken chain, or a log the key set requires but the evidence does
// not satisfy, into "no hotfix may run" (the node provisions with its baked
// agent: fail-open).
package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

// MaxStateSize caps the kept state: a full chain of release.MaxChain links
// and a checkpoint are well under it.
const MaxStateSize = 512 << 10

// maxKeptRevoked bounds the revocations kept; once it is reached, newly
// served ones are not kept (they still apply while served), so no single
// document can make the node forget one it kept.
const maxKeptRevoked = 1024

// State is what a node keeps of its trust across boots.
type State struct {
	// KeySets are the key-set links the node verified, in order from the
	// baked root's version + 1; the newest is what releases verify against.
	KeySets []json.RawMessage `json:"keysets,omitempty"`
	// Checkpoint is the last transparency-log checkpoint the node verified
	// (a signed note), against which the next one must be consistent.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Revoked lists the versions the node was shown revoked; none of them
	// runs again, whatever a later document says.
	Revoked []string `json:"revoked,omitempty"`
}

// Load reads the kept state at path. A missing file is the zero State (a
// node that never verified anything: the baked root, no checkpoint).
func Load(path string) (State, error) {
	data, err := capfile.ReadNoFollow(path, MaxStateSize)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("read trust state: %w", err)
	}
	var s State
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return State{}, fmt.Errorf("trust state %s: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return State{}, fmt.Errorf("trust state %s: data after the object", path)
	}
	return s, nil
}

// Save replaces the kept state at path atomically and durably: it is
// written only when it moves forward, and a state lost to a crash would
// lose the node's anti-rollback floor with it.
func Save(path string, s State) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode trust state: %w", err)
	}
	if len(data) > MaxStateSize {
		return fmt.Errorf("trust state: %d bytes exceeds the %d-byte limit", len(data), MaxStateSize)
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write trust state: %w", err)
	}
	return nil
}

// View is what a node believes after one evaluation.
type View struct {
	// Keys is the newest key set the node verified: releases verify
	// against it, with its threshold.
	Keys release.KeySet
	// Err is why nothing may run: the key-set chain does not verify, or
	// the key set requires the log and the log evidence does not hold.
	Err error
	// LogErr is what is wrong with the log evidence when Keys does not
	// require it (shown by explain, never decisive).
	LogErr error
	// Revoked is every version revoked by the pointer or kept as revoked.
	Revoked []string
	// KeptErr is why the kept key-set chain was dropped: it no longer
	// verifies from the baked root (a damaged or foreign state file). The
	// evaluation went on from the root alone, and Next forgets the chain.
	KeptErr error

	links       []json.RawMessage
	keptDropped bool
	policy      release.LogPolicy
	checkpoint  []byte // the verified checkpoint's note; nil if none
	cp          translog.Checkpoint
	keptCP      bool // cp was the kept checkpoint, of this log, before checkpoint was verified
	keptSize    int64
	bundle      *translog.Bundle
}

// LogRequired reports whether every release must be proven in the log.
func (v View) LogRequired() bool { return v.policy.Key != "" && v.policy.Required }

// CheckLogged checks that envelope is a record of the log under the
// verified checkpoint. It fails when the node has no verified checkpoint
// or the evidence holds no proof for it.
func (v View) CheckLogged(envelope []byte) error {
	if v.bundle == nil {
		if v.LogErr != nil {
			return v.LogErr
		}
		return errors.New("no verified log checkpoint")
	}
	_, err := v.bundle.Include(v.cp, envelope)
	return err
}

// KeySetVersion is the version of Keys, which the node declares to the
// service so it is served only the links after it.
func (v View) KeySetVersion() int64 { return v.Keys.Version() }

// LogSize is the size of the newest checkpoint the node holds (kept or
// verified now), which it declares so the service proves consistency
// from it. 0 when it holds none.
func (v View) LogSize() int64 { return v.cp.Size }

// Evaluate weighs the pointer's evidence p against the baked root and the
// kept state at now.
func Evaluate(root release.KeySet, kept State, p hotfix.Pointer, now time.Time) View {
	v := View{Keys: root, Revoked: mergeVersions(kept.Revoked, p.Revoked)}
	v.links, v.Keys, v.KeptErr, v.Err = walk(root, kept.KeySets, p.KeySets, now)
	v.keptDropped = v.KeptErr != nil
	if v.Err != nil {
		return v
	}
	v.policy = v.Keys.Log()
	if v.policy.Key == "" {
		return v
	}
	err := v.checkLog(kept, p, now)
	if err != nil {
		v.LogErr = fmt.Errorf("transparency log: %w", err)
		if v.policy.Required {
			v.Err = v.LogErr
		}
	}
	return v
}

// walk applies the kept links, then the served links past them, to root.
// A served link at or below the kept version is skipped: the kept chain
// is what the node already verified, and a served one cannot replace it.
// A kept chain that does not verify from root on its own is dropped
// (keptErr): only the disk can break it, and whoever writes the disk can
// delete it too. The kept chain may outgrow release.MaxChain over many
// rotations; the served links past it may not.
func walk(root release.KeySet, kept, served []json.RawMessage, now time.Time) (links []json.RawMessage, ks release.KeySet, keptErr, err error) {
	cur := root
	if len(kept) > 0 {
		if cur, err = walkLinks(root, kept, false, now); err != nil {
			keptErr = fmt.Errorf("kept key-set chain dropped: %w", err)
			cur, kept = root, nil
		}
	}
	links = slices.Clone(kept)
	// The service is asked only for the links past the declared version,
	// so the served chain is first walked as it came, decoded once. When
	// that fails, or it is too long, a chain that does start at the next
	// version is refused for it, as served; only one that starts at or
	// below what the node holds (it declared less than it kept) has those
	// links dropped, and the rest walked.
	fresh, next := served, cur
	var asServed error
	if len(served) > 0 && len(served) <= release.MaxChain {
		next, asServed = walkLinks(cur, served, true, now)
	}
	if len(served) > release.MaxChain || asServed != nil {
		if d, err := release.InspectKeySet(served[0]); err == nil && d.Version == cur.Version()+1 {
			if asServed == nil {
				asServed = fmt.Errorf("%d links past version %d, at most %d", len(served), cur.Version(), release.MaxChain)
			}
			return nil, root, keptErr, fmt.Errorf("release key-set chain: %w", asServed)
		}
		if fresh, err = pastKept(cur, served); err != nil {
			return nil, root, keptErr, err
		}
		if len(fresh) > release.MaxChain {
			return nil, root, keptErr, fmt.Errorf("served key-set chain: %d links past version %d, at most %d", len(fresh), cur.Version(), release.MaxChain)
		}
		if len(fresh) > 0 {
			if next, err = walkLinks(cur, fresh, true, now); err != nil {
				return nil, root, keptErr, fmt.Errorf("release key-set chain: %w", err)
			}
		}
	}
	if len(fresh) > 0 {
		cur = next
		links = append(links, fresh...)
	} else if exp := cur.Expires(); len(links) > 0 && !now.Before(exp) {
		return nil, root, keptErr, fmt.Errorf("release key-set chain: kept version %d expired at %s", cur.Version(), exp.UTC().Format(time.RFC3339))
	}
	if len(links) == 0 {
		return nil, root, keptErr, nil
	}
	return links, cur, keptErr, nil
}

// pastKept returns the served links past cur's version, in order.
func pastKept(cur release.KeySet, served []json.RawMessage) ([]json.RawMessage, error) {
	top := cur.Version()
	var fresh []json.RawMessage
	for _, l := range served {
		d, err := release.InspectKeySet(l)
		if err != nil {
			return nil, fmt.Errorf("served key-set link: %w", err)
		}
		if d.Version <= top {
			continue
		}
		fresh = append(fresh, l)
		top = d.Version
	}
	return fresh, nil
}

// walkLinks applies links to ks with release.Walk, release.MaxChain at a
// time. Walk checks only the expiry of its last link: an intermediate one
// may have expired since it was superseded (TUF). So a chunk whose last
// link is not the newest, or every chunk when !checkExpiry, is walked at a
// time just before that link's own expiry, which its signature check does
// not depend on.
func walkLinks(ks release.KeySet, links []json.RawMessage, checkExpiry bool, now time.Time) (release.KeySet, error) {
	for start := 0; start < len(links); start += release.MaxChain {
		chunk := links[start:min(start+release.MaxChain, len(links))]
		at := now
		if !checkExpiry || start+len(chunk) < len(links) {
			d, err := release.InspectKeySet(chunk[len(chunk)-1])
			if err != nil {
				return release.KeySet{}, fmt.Errorf("key-set link %d: %w", start+len(chunk)-1, err)
			}
			at = d.Expires.Add(-time.Second)
		}
		raw := make([][]byte, len(chunk))
		for i, l := range chunk {
			raw[i] = l
		}
		next, err := ks.Walk(raw, at)
		if err != nil {
			if ce := (*release.ChainError)(nil); errors.As(err, &ce) {
				ce.Link += start
			}
			return release.KeySet{}, err
		}
		ks = next
	}
	return ks, nil
}

// checkLog verifies the pointer's log bundle under the key set's policy
// and against the kept checkpoint.
func (v *View) checkLog(kept State, p hotfix.Pointer, now time.Time) error {
	pol, err := translog.NewPolicy(v.policy.Key, v.policy.Witnesses, v.policy.Quorum, v.policy.MaxCheckpointAge)
	if err != nil {
		return fmt.Errorf("the key set's log policy: %w", err)
	}
	var keptCP translog.Checkpoint
	haveKept := false
	if kept.Checkpoint != "" {
		// Verified when it was kept; only its log signature is checked
		// again (not its age: it is the floor, not the evidence). One the
		// policy's log key did not sign is another log's, kept before a
		// rotation moved the fleet to a new log (only a key set signed by
		// its threshold can): the new log starts from nothing.
		if keptCP, _, err = translog.Open([]byte(kept.Checkpoint), translog.Policy{Log: pol.Log}, now); err == nil {
			v.cp, haveKept = keptCP, true
			v.keptCP, v.keptSize = true, keptCP.Size
		}
	}
	if p.Log == nil {
		return errors.New("the pointer carries no log evidence")
	}
	b, err := translog.ParseBundle(p.Log)
	if err != nil {
		return err
	}
	cp, _, err := translog.Open(b.Checkpoint, pol, now)
	if err != nil {
		return err
	}
	if haveKept {
		if err := b.Consistent(keptCP, cp); err != nil {
			return err
		}
	}
	v.cp, v.checkpoint, v.bundle = cp, b.Checkpoint, &b
	return nil
}

// Next returns the state to keep after v: the verified chain, the newest
// verified checkpoint and every revocation seen, and whether it differs
// from kept. A view whose chain failed keeps kept's chain, so a broken
// document never shortens it.
//
// Only revocations that can matter to this node are kept: versions of
// baked's base newer than baked (nothing else is ever an upgrade for it),
// so a document listing other bases' versions cannot fill the list.
func (v View) Next(kept State, baked hotfix.Version) (State, bool) {
	next := kept
	switch {
	case v.keptDropped:
		next.KeySets = v.links
	case len(v.links) > len(kept.KeySets):
		next.KeySets = v.links
	}
	// A checkpoint of the kept log replaces the kept one only when it is
	// larger: the same tree cosigned again (perhaps earlier) is no news.
	if v.checkpoint != nil && (!v.keptCP || v.cp.Size > v.keptSize) {
		next.Checkpoint = string(v.checkpoint)
	}
	next.Revoked = slices.DeleteFunc(slices.Clone(v.Revoked), func(r string) bool {
		rv, err := hotfix.ParseVersion(r)
		return err != nil || baked.IsZero() || rv.Base() != baked.Base() || rv.Patch() <= baked.Patch()
	})
	if len(next.Revoked) > maxKeptRevoked {
		// Keep the lowest patches: real ones are small numbers, so a
		// document listing invented high versions cannot fill the list,
		// and a kept revocation is pushed out only by lower versions,
		// every one of them revoked too.
		slices.SortStableFunc(next.Revoked, func(a, b string) int {
			return hotfix.MustParseVersion(a).Patch() - hotfix.MustParseVersion(b).Patch()
		})
		next.Revoked = next.Revoked[:maxKeptRevoked]
	}
	changed := !slices.EqualFunc(next.KeySets, kept.KeySets, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) || next.Checkpoint != kept.Checkpoint || !slices.Equal(next.Revoked, kept.Revoked)
	return next, changed
}

// mergeVersions returns a's entries then b's, each once (by trimmed text).
func mergeVersions(a, b []string) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, s := range slices.Concat(a, b) {
		k := strings.TrimSpace(s)
		if _, err := hotfix.ParseVersion(k); err != nil || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	return out
}

// Declared returns what a node declares to the service before it asks:
// the version of the newest key set it holds (the baked root's plus the
// links it kept) and the size of its kept checkpoint; 0 for what it does
// not know. Nothing is verified here: the answer is checked whatever it
// was asked for, and a wrong declaration only costs the node evidence.
func Declared(keysPath, statePath string) (keySet, logSize int64) {
	data, err := capfile.Read(keysPath, release.MaxKeySetSize)
	if err != nil {
		return 0, 0
	}
	root, err := release.ParseKeySet(data)
	if err != nil {
		return 0, 0
	}
	kept, err := Load(statePath)
	if err != nil {
		return root.Version(), 0
	}
	keySet = root.Version() + int64(len(kept.KeySets))
	if body, _, ok := strings.Cut(kept.Checkpoint, "\n\n"); ok {
		if c, err := translog.ParseCheckpoint([]byte(body + "\n")); err == nil {
			logSize = c.Size
		}
	}
	return keySet, logSize
}
