package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
	"nodehotfix/internal/store"
	"nodehotfix/internal/translog"
	"nodehotfix/internal/translog/tiles"
)

// LogKeeper is what the admin API needs of the replica's keeper of the
// transparency log's checkpoints (lps.Checkpointer).
type LogKeeper interface {
	// Verifier is the log key's public half: a restore must end at a
	// checkpoint it signed.
	Verifier() note.Verifier
	// Floor is what the witnesses told this process of the log nodes
	// may have been shown.
	Floor() lps.LogFloor
}

// appendWait bounds how long an append waits, just after lpsd started,
// for its witnesses' first answers (the checkpointer asks them at once;
// on loopback they answer in milliseconds).
const appendWait = 5 * time.Second

// ActionRestoreLog is the audit action of each record RestoreLog
// re-appends.
const ActionRestoreLog = "restore-log"

// MaxRestoreRecords bounds the records of one RestoreLog call: 32 records
// of at most store.MaxRecordBytes stay under gRPC's 4 MiB message limit.
const MaxRestoreRecords = 32

// ErrorInfo reasons of a refused append. ReasonLogBehind: the witnesses
// cosigned a larger tree than the store holds; metadata "size",
// "witnessed_size" (decimal) and "witness" (its URL). ReasonLogUnverified:
// too few witnesses answered since lpsd started to tell; metadata
// "answered", "witnesses", "quorum".
const (
	ReasonLogBehind     = "LOG_BEHIND"
	ReasonLogUnverified = "LOG_UNVERIFIED"
)

// checkAppend refuses a change that appends to the log (what: "publish",
// "revoke", …) while the store holds fewer records than the log nodes may
// have been shown: restored from an older backup or having lost writes, a
// record appended now would give the log, at a size witnesses and nodes
// already know, another root: a fork, which nobody can undo. That log is
// bounded by what the witnesses told this process (lps.Checkpointer.Floor)
// and by the checkpoints RestoreLog verified; until enough witnesses
// answered since lpsd started (it waits appendWait for them), it cannot be
// told, and the append is refused too. Without a log key nothing is
// refused: there are no witnesses to ask.
func (s *Server) checkAppend(ctx context.Context, what, hint string) error {
	if s.logs == nil {
		return nil
	}
	f := s.logs.Floor()
	if !f.Verified {
		wait := time.NewTimer(appendWait)
		defer wait.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !f.Verified {
			select {
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			case <-wait.C:
				return withInfo(status.Newf(codes.FailedPrecondition, "%s refused: %d of the %d witnesses answered this lpsd since it started, and with a quorum of %d it needs %d to tell whether its store is behind the log nodes were shown (a store restored from a backup is, and an append to it would fork the log for good); check the witnesses (lpsctl log status)%s",
					what, f.Answered, f.Witnesses, f.Quorum, f.Witnesses-f.Quorum+1, hint), ReasonLogUnverified, map[string]string{
					"answered": strconv.Itoa(f.Answered), "witnesses": strconv.Itoa(f.Witnesses), "quorum": strconv.Itoa(f.Quorum),
				})
			case <-tick.C:
				f = s.logs.Floor()
			}
		}
	}
	floor, who := f.Size, "witness "+f.Witness
	if r := s.restored.Load(); r > floor {
		floor, who = r, "the checkpoint a restore verified"
	}
	if floor == 0 {
		return nil
	}
	size, err := s.store.LogSize(ctx)
	if err != nil {
		return s.storeError("read the log size", err)
	}
	if size >= floor {
		return nil
	}
	return withInfo(status.Newf(codes.FailedPrecondition, "%s refused: the transparency log holds %d records but %s covers %d, so the store was restored from an older backup or lost writes, and a record appended now would fork the log for good; re-append the missing records from a monitor's export first (lpsctl log restore --dir DIR), then retry%s",
		what, size, who, floor, hint), ReasonLogBehind, map[string]string{
		"size": strconv.FormatInt(size, 10), "witnessed_size": strconv.FormatInt(floor, 10), "witness": f.Witness,
	})
}

// withInfo returns st with an ErrorInfo of reason and metadata.
func withInfo(st *status.Status, reason string, metadata map[string]string) error {
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: metadata}); err == nil {
		st = d
	}
	return st.Err()
}

// GetLog returns the log's state as this replica sees it.
func (s *Server) GetLog(ctx context.Context, _ *adminv1.GetLogRequest) (*adminv1.GetLogResponse, error) {
	if _, err := requireActor(ctx); err != nil {
		return nil, err
	}
	size, err := s.store.LogSize(ctx)
	if err != nil {
		return nil, s.storeError("read the log size", err)
	}
	resp := &adminv1.GetLogResponse{Size: size}
	switch cp, _, err := s.store.Checkpoint(ctx); {
	case err == nil:
		resp.CheckpointSize = cp
	case !errors.Is(err, store.ErrNotFound):
		return nil, s.storeError("read the checkpoint", err)
	}
	if s.logs != nil {
		f := s.logs.Floor()
		resp.Origin = s.logs.Verifier().Name()
		resp.WitnessedSize, resp.Witness = max(f.Size, s.restored.Load()), f.Witness
		resp.Witnesses, resp.WitnessQuorum, resp.WitnessesAnswered, resp.Verified = int32(f.Witnesses), int32(f.Quorum), int32(f.Answered), f.Verified
		resp.AppendsRefused = !f.Verified || resp.WitnessedSize > size
	}
	return resp, nil
}

// RestoreLog re-appends records a restored store lost. It checks, before
// it writes anything, that the records extend the store's log to a
// checkpoint lpsd's log key signed (the export's): appended, the log is a
// prefix of the one lpsd served, never a fork. Each record is then
// appended with the change it records, one store transaction each: a
// restore cut short is resumed by calling again from the new size.
func (s *Server) RestoreLog(ctx context.Context, req *adminv1.RestoreLogRequest) (*adminv1.RestoreLogResponse, error) {
	actor, err := requireActor(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	if s.logs == nil {
		return nil, status.Error(codes.FailedPrecondition, "lpsd has no --log-key: it cannot check that the records extend its log; start it with its log key")
	}
	recs := req.GetRecords()
	if len(recs) == 0 || len(recs) > MaxRestoreRecords {
		return nil, status.Errorf(codes.InvalidArgument, "%d records: want 1 to %d a call", len(recs), MaxRestoreRecords)
	}
	for i, r := range recs {
		if err := store.ValidateRecord(r); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "record %d: %v", req.GetFrom()+int64(i), err)
		}
	}
	cp, err := s.restoreCheckpoint(req)
	if err != nil {
		return nil, err
	}
	// The log nodes may have been shown is at least this checkpoint's
	// tree: no append but the restore's may land below it.
	for {
		r := s.restored.Load()
		if cp.Size <= r || s.restored.CompareAndSwap(r, cp.Size) {
			break
		}
	}
	size, err := s.store.LogSize(ctx)
	if err != nil {
		return nil, s.storeError("read the log size", err)
	}
	if req.GetFrom() != size {
		return nil, status.Errorf(codes.FailedPrecondition, "the records start at %d but the log holds %d: read its size again (lpsctl log restore does) and send the records from there", req.GetFrom(), size)
	}
	end := size + int64(len(recs))
	if end > cp.Size {
		return nil, status.Errorf(codes.InvalidArgument, "the records end at %d, past the checkpoint's tree of %d", end, cp.Size)
	}
	hr := &appendedHashes{base: store.HashReader(ctx, s.store), first: tlog.StoredHashCount(size)}
	for i, r := range recs {
		hs, err := tlog.StoredHashes(size+int64(i), r, hr)
		if err != nil {
			return nil, s.storeError("hash the log", err)
		}
		hr.added = append(hr.added, hs...)
	}
	want, err := tlog.TreeHash(end, hr)
	if err != nil {
		return nil, s.storeError("hash the log", err)
	}
	var proof tlog.TreeProof
	for _, p := range req.GetProof() {
		if len(p) != len(tlog.Hash{}) {
			return nil, status.Errorf(codes.InvalidArgument, "proof hash of %d bytes, want %d", len(p), len(tlog.Hash{}))
		}
		proof = append(proof, tlog.Hash(p))
	}
	if err := tlog.CheckTree(proof, cp.Size, cp.Hash, end, want); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "the log with these records appended at %d is not a prefix of the checkpoint's tree of %d (%v): the export is not of this log, or the store is not a backup of it; nothing was appended", size, cp.Size, err)
	}
	entries, err := s.checkRestorable(ctx, size, recs)
	if err != nil {
		return nil, err
	}
	resp := &adminv1.RestoreLogResponse{Size: size}
	for i, r := range recs {
		index := size + int64(i)
		done, err := s.reappend(ctx, actor, req.GetReason(), entries[i], r)
		if err != nil {
			return nil, err
		}
		resp.Restored = append(resp.Restored, done)
		resp.Size = index + 1
	}
	// Whether another writer appended meanwhile: the guard keeps this
	// replica's admin API out, not a replica that never heard a witness.
	got, err := s.store.LogSize(ctx)
	if err == nil && got >= end {
		// Another append right after the last record is no harm: only
		// the tree at end says whether the records landed where they
		// belong.
		var th tlog.Hash
		if th, err = tlog.TreeHash(end, store.HashReader(ctx, s.store)); err == nil && th != want {
			err = fmt.Errorf("tree hash %s at %d, want %s", th, end, want)
		}
	} else if err == nil {
		err = fmt.Errorf("the log holds %d records, want at least %d", got, end)
	}
	if err != nil {
		s.log.Error("transparency log: appended to during a restore; it may have forked", "from", size, "end", end, "err", err)
		return nil, status.Errorf(codes.DataLoss, "the records were appended, but the log is not the tree they make (%v): something else appended meanwhile; stop every lpsd and compare the log with the export (lpsctl log --url)", err)
	}
	s.log.Info("transparency log restored", "actor", actor, "from", size, "size", end, "checkpoint_size", cp.Size)
	return resp, nil
}

// checkRestorable checks, before anything is appended, that every record
// from index from is one lpsd appends and that the store can take the
// change it records in order: a release not stored yet, a revocation of
// a release stored (or restored before it) and not revoked, the next
// key-set version. A batch is applied whole or, cut short by a fault, up
// to a record; never stopped midway by its own content. It returns each
// record's description, which reappend applies.
func (s *Server) checkRestorable(ctx context.Context, from int64, recs [][]byte) ([]tiles.Entry, error) {
	links, err := s.store.KeySets(ctx)
	if err != nil {
		return nil, s.storeError("list key sets", err)
	}
	next := int64(0) // the key-set version the next link must have; 0: any
	if len(links) > 0 {
		next = links[len(links)-1].Version + 1
	}
	released, revoked := map[string]bool{}, map[string]bool{}
	known := func(v string) (exists, isRevoked bool, err error) {
		if released[v] {
			return true, revoked[v], nil
		}
		r, _, err := s.store.Release(ctx, v)
		if errors.Is(err, store.ErrNotFound) {
			return false, false, nil
		}
		if err != nil {
			return false, false, s.storeError("read release "+v, err)
		}
		return true, r.Revoked || revoked[v], nil
	}
	entries := make([]tiles.Entry, len(recs))
	for i, rec := range recs {
		en := tiles.Describe(from+int64(i), rec)
		entries[i] = en
		bad := func(format string, a ...any) error {
			return status.Errorf(codes.FailedPrecondition, "record %d (%s %s): %s; nothing was appended", en.Index, en.Kind, en.Version, fmt.Sprintf(format, a...))
		}
		switch en.Kind {
		case tiles.KindRelease:
			exists, _, err := known(en.Version)
			if err != nil {
				return nil, err
			}
			if exists {
				return nil, bad("the store holds that release already")
			}
			released[en.Version] = true
		case tiles.KindRevocation:
			exists, isRevoked, err := known(en.Version)
			switch {
			case err != nil:
				return nil, err
			case !exists:
				return nil, bad("the store holds no release it revokes")
			case isRevoked:
				return nil, bad("the store holds it revoked already")
			}
			released[en.Version], revoked[en.Version] = true, true
		case tiles.KindKeySet:
			v, err := strconv.ParseInt(en.Version, 10, 64)
			if err != nil || next != 0 && v != next {
				return nil, bad("the next key-set version is %d", next)
			}
			next = v + 1
		default:
			return nil, status.Errorf(codes.FailedPrecondition, "record %d: %s; lpsd appends none such (an export of a newer lpsd? restore with it); nothing was appended", en.Index, en.Problem)
		}
	}
	return entries, nil
}

// restoreCheckpoint opens the request's checkpoint with the log key. Its
// age does not matter: it is the tree lpsd once signed, not news.
func (s *Server) restoreCheckpoint(req *adminv1.RestoreLogRequest) (translog.Checkpoint, error) {
	msg := []byte(req.GetCheckpoint())
	if len(msg) == 0 {
		return translog.Checkpoint{}, status.Error(codes.InvalidArgument, "no checkpoint: send the export's")
	}
	cp, _, err := translog.Open(msg, translog.Policy{Log: s.logs.Verifier()}, s.now())
	if err != nil {
		return translog.Checkpoint{}, status.Errorf(codes.InvalidArgument, "checkpoint: %v (it must be one lpsd's log key %s signed)", err, s.logs.Verifier().Name())
	}
	return cp, nil
}

// reappend appends rec, described by en (checkRestorable), with the
// change it records.
func (s *Server) reappend(ctx context.Context, actor, reason string, en tiles.Entry, rec []byte) (*adminv1.RestoredRecord, error) {
	index := en.Index
	done := &adminv1.RestoredRecord{Index: index, Kind: string(en.Kind)}
	e := store.AuditEntry{Time: s.now(), Actor: actor, Action: ActionRestoreLog, Reason: reason}
	var err error
	switch en.Kind {
	case tiles.KindRelease:
		done.Target, e.Target = en.Version, en.Version
		r := rollout.Release{Version: en.Version, Base: en.Base, Envelope: rec, Rollout: rollout.Rollout{State: rollout.Draft}, NotAfter: en.NotAfter, PublishedAt: e.Time, UpdatedAt: e.Time}
		if e.After, err = json.Marshal(r); err != nil {
			return nil, s.internal("encode release", err)
		}
		_, err = s.store.PutRelease(ctx, r, 0, e, rec)
	case tiles.KindRevocation:
		done.Target, e.Target = en.Version, en.Version
		cur, rev, rerr := s.store.Release(ctx, en.Version)
		if rerr != nil {
			return nil, s.restoreError(index, en, s.storeError("read release "+en.Version, rerr))
		}
		if cur.Revoked {
			return nil, s.restoreError(index, en, status.Error(codes.FailedPrecondition, "it is revoked already"))
		}
		next := cur
		next.Revoked, next.UpdatedAt = true, e.Time
		_, err = s.write(ctx, "release", cur, next, rev, e, func(ctx context.Context, e store.AuditEntry) (int64, error) {
			return s.store.PutRelease(ctx, next, rev, e, rec)
		})
	case tiles.KindKeySet:
		d, derr := release.InspectKeySet(rec)
		ks, kerr := d.KeySet()
		if derr != nil || kerr != nil {
			return nil, s.internal("decode key set", errors.Join(derr, kerr))
		}
		done.Target = "keyset@" + en.Version
		e.Target = done.Target
		if e.After, err = json.Marshal(keySetSummary(ks)); err != nil {
			return nil, s.internal("encode key set", err)
		}
		err = s.store.PutKeySet(ctx, store.KeySetRecord{Version: d.Version, Envelope: rec}, e)
	}
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			err = status.Errorf(codes.FailedPrecondition, "the store already holds what it records")
		} else if _, ok := status.FromError(err); !ok {
			err = s.storeError("re-append", err)
		}
		return nil, s.restoreError(index, en, err)
	}
	return done, nil
}

// restoreError names the record a re-append failed on and says the ones
// before it are in.
func (s *Server) restoreError(index int64, en tiles.Entry, err error) error {
	st, _ := status.FromError(err)
	return status.Errorf(st.Code(), "record %d (%s %s): %s; the records before it were re-appended, call again to go on", index, en.Kind, en.Version, st.Message())
}

// appendedHashes reads the store's stored hashes below first and, from
// first on, those of records not appended yet: the tree the log would be.
type appendedHashes struct {
	base  tlog.HashReader
	first int64
	added []tlog.Hash
}

func (h *appendedHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var stored []int64
	var at []int
	for i, x := range indexes {
		switch {
		case x < h.first:
			stored, at = append(stored, x), append(at, i)
		case x-h.first < int64(len(h.added)):
			out[i] = h.added[x-h.first]
		default:
			return nil, fmt.Errorf("hash %d: not stored yet", x)
		}
	}
	if len(stored) > 0 {
		hs, err := h.base.ReadHashes(stored)
		if err != nil {
			return nil, err
		}
		for j, i := range at {
			out[i] = hs[j]
		}
	}
	return out, nil
}
