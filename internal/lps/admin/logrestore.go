package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
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
	// Witnessed is the largest tree a witness has said it cosigned, and
	// which witness said so.
	Witnessed() (size int64, witness string)
}

// ActionRestoreLog is the audit action of each record RestoreLog
// re-appends.
const ActionRestoreLog = "restore-log"

// MaxRestoreRecords bounds the records of one RestoreLog call: 32 records
// of at most store.MaxRecordBytes stay under gRPC's 4 MiB message limit.
const MaxRestoreRecords = 32

// ReasonLogBehind is the ErrorInfo reason of an append refused because a
// witness has cosigned a larger tree than the store holds. Metadata:
// "size", "witnessed_size" (decimal) and "witness" (its URL).
const ReasonLogBehind = "LOG_BEHIND"

// checkAppend refuses a change that appends to the log (what: "publish",
// "revoke", …) while a witness has cosigned a larger tree than the store
// holds: the store was restored from an older backup or lost writes, and a
// record appended now would give the log, at a size witnesses and nodes
// already know, another root: a fork, which nobody can undo. Without a
// log key, or before any witness answered, nothing is refused.
func (s *Server) checkAppend(ctx context.Context, what, hint string) error {
	if s.logs == nil {
		return nil
	}
	witnessed, who := s.logs.Witnessed()
	if witnessed == 0 {
		return nil
	}
	size, err := s.store.LogSize(ctx)
	if err != nil {
		return s.storeError("read the log size", err)
	}
	if size >= witnessed {
		return nil
	}
	st := status.Newf(codes.FailedPrecondition, "%s refused: the transparency log holds %d records but witness %s has cosigned a tree of %d, so the store was restored from an older backup or lost writes, and a record appended now would fork the log for good; re-append the missing records from a monitor's export first (lpsctl log restore --dir DIR), then retry%s",
		what, size, who, witnessed, hint)
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{
		Reason: ReasonLogBehind,
		Domain: ErrorDomain,
		Metadata: map[string]string{
			"size":           strconv.FormatInt(size, 10),
			"witnessed_size": strconv.FormatInt(witnessed, 10),
			"witness":        who,
		},
	}); derr == nil {
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
		resp.Origin = s.logs.Verifier().Name()
		resp.WitnessedSize, resp.Witness = s.logs.Witnessed()
		resp.AppendsRefused = resp.WitnessedSize > size
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
	resp := &adminv1.RestoreLogResponse{Size: size}
	for i, r := range recs {
		index := size + int64(i)
		done, err := s.reappend(ctx, actor, req.GetReason(), index, r)
		if err != nil {
			return nil, err
		}
		resp.Restored = append(resp.Restored, done)
		resp.Size = index + 1
	}
	// Whether another writer appended meanwhile: the guard keeps this
	// replica's admin API out, not a replica that never heard a witness.
	got, err := s.store.LogSize(ctx)
	if err == nil && got == end {
		var th tlog.Hash
		if th, err = tlog.TreeHash(end, store.HashReader(ctx, s.store)); err == nil && th != want {
			err = fmt.Errorf("tree hash %s at %d, want %s", th, end, want)
		}
	} else if err == nil {
		err = fmt.Errorf("the log holds %d records, want %d", got, end)
	}
	if err != nil {
		s.log.Error("transparency log: appended to during a restore; it may have forked", "from", size, "end", end, "err", err)
		return nil, status.Errorf(codes.DataLoss, "the records were appended, but the log is not the tree they make (%v): something else appended meanwhile; stop every lpsd and compare the log with the export (lpsctl log --url)", err)
	}
	s.log.Info("transparency log restored", "actor", actor, "from", size, "size", end, "checkpoint_size", cp.Size)
	return resp, nil
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

// reappend appends rec at index with the change it records.
func (s *Server) reappend(ctx context.Context, actor, reason string, index int64, rec []byte) (*adminv1.RestoredRecord, error) {
	en := tiles.Describe(index, rec)
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
		v, perr := strconv.ParseInt(en.Version, 10, 64)
		if perr != nil {
			return nil, s.internal("key-set version", perr)
		}
		done.Target = "keyset@" + en.Version
		e.Target = done.Target
		if e.After, err = json.Marshal(map[string]any{"version": v, "threshold": en.Threshold, "keys": en.Keys, "log_required": en.Log.Required}); err != nil {
			return nil, s.internal("encode key set", err)
		}
		err = s.store.PutKeySet(ctx, store.KeySetRecord{Version: v, Envelope: rec}, e)
	default:
		return nil, status.Errorf(codes.FailedPrecondition, "record %d: %s; lpsd appends none such, so it is not re-appended (records before it were)", index, en.Problem)
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
