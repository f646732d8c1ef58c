package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/translog"
	"nodehotfix/internal/translog/tiles"
)

func newLogStatusCmd(e *env) *cobra.Command {
	var c service
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show lpsd's transparency log: its size, kept checkpoint, and whether appends are refused",
		Long: `status asks lpsd (the replica --server reaches) for its transparency log:
how many records the store holds, the tree size of the cosigned checkpoint
it keeps, and the largest tree a witness has told it it cosigned. When a
witness has cosigned more than the store holds, the store was restored
from an older backup (or lost writes): lpsd refuses every publish, revoke
and key-set publish, since any of them would fork the log, until the
missing records are re-appended with 'lpsctl log restore'. A reader may
run it.`,
		Example: "  lpsctl log status -o json",
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := getLog(cmd.Context(), &c.conn)
			if err != nil {
				return err
			}
			doc := toLogStatusJSON(resp)
			if c.out.structured() {
				return c.out.write(e.stdout, doc)
			}
			return printLogStatus(e.stdout, doc)
		},
	}
	c.register(cmd)
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return cmd
}

// getLog asks lpsd for its log's state.
func getLog(ctx context.Context, c *connFlags) (resp *adminv1.GetLogResponse, err error) {
	err = c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) error {
		resp, err = cl.GetLog(ctx, &adminv1.GetLogRequest{})
		return err
	})
	return resp, err
}

// logStatusJSON is log status's -o json document (schema in doc.go).
type logStatusJSON struct {
	Origin            string `json:"origin"`
	Size              int64  `json:"size"`
	CheckpointSize    int64  `json:"checkpoint_size"`
	Witnesses         int    `json:"witnesses"`
	WitnessQuorum     int    `json:"witness_quorum"`
	WitnessesAnswered int    `json:"witnesses_answered"`
	Verified          bool   `json:"verified"`
	WitnessedSize     int64  `json:"witnessed_size"`
	Witness           string `json:"witness,omitempty"`
	AppendsRefused    bool   `json:"appends_refused"`
}

func toLogStatusJSON(r *adminv1.GetLogResponse) logStatusJSON {
	return logStatusJSON{
		Origin: r.GetOrigin(), Size: r.GetSize(), CheckpointSize: r.GetCheckpointSize(),
		Witnesses: int(r.GetWitnesses()), WitnessQuorum: int(r.GetWitnessQuorum()), WitnessesAnswered: int(r.GetWitnessesAnswered()), Verified: r.GetVerified(),
		WitnessedSize: r.GetWitnessedSize(), Witness: r.GetWitness(), AppendsRefused: r.GetAppendsRefused(),
	}
}

func printLogStatus(w io.Writer, d logStatusJSON) error {
	origin := "no --log-key: checkpoints are not signed"
	if d.Origin != "" {
		origin = "log " + quote.Text(d.Origin)
	}
	fmt.Fprintf(w, "%s: %d records, kept checkpoint of %d\n", origin, d.Size, d.CheckpointSize)
	if d.Origin == "" {
		return nil
	}
	fmt.Fprintf(w, "witnesses: %d of %d answered this replica since it started (quorum %d)\n", d.WitnessesAnswered, d.Witnesses, d.WitnessQuorum)
	switch {
	case d.Witnesses > 0 && !d.Verified:
		fmt.Fprintf(w, "UNVERIFIED: %d must have answered to tell whether the store is behind the log nodes were shown; publish, revoke and key-set publish are refused meanwhile (check the witnesses; halt appends nothing)\n", d.Witnesses-d.WitnessQuorum+1)
	case d.AppendsRefused:
		fmt.Fprintf(w, "BEHIND: %s covers %d records, %d more than the store holds; publish, revoke and key-set publish are refused until they are restored (lpsctl log restore --dir EXPORT; if it says the records do not extend the log, the log forked: docs/transparency-log.md)\n",
			witnessOr(d.Witness), d.WitnessedSize, d.WitnessedSize-d.Size)
	case d.WitnessedSize > 0:
		fmt.Fprintf(w, "not behind: the witnesses' answers cover %d records\n", d.WitnessedSize)
	}
	return nil
}

// witnessOr names whose answer a size is: a witness, or a restore's
// checkpoint.
func witnessOr(url string) string {
	if url == "" {
		return "the checkpoint a restore verified"
	}
	return "witness " + quote.Text(url)
}

type logRestoreOpts struct {
	service
	logKey string
	dryRun bool
}

func newLogRestoreCmd(e *env) *cobra.Command {
	var o logRestoreOpts
	cmd := &cobra.Command{
		Use:   "restore --dir EXPORT --log-key VKEY --reason TEXT [--dry-run]",
		Short: "re-append the records a restored store lost, from a monitor's export",
		Long: `restore brings a store restored from an older backup back to the log lpsd
served, from an export that 'lpsctl log export' keeps (see "Backup and
restore" in docs/transparency-log.md). It verifies the export's checkpoint
with --log-key and every record against the export's tree, asks lpsd for
its log's size, and sends the records from there to the export's end, at
most 32 a call, each call with the proof that they lead to the export's
checkpoint: lpsd appends nothing unless they extend its log to a tree its
log key signed, so a restore cannot fork the log.

Each record is appended with the change it records: a release envelope
publishes its release as a draft (its rollout is not in the log: set it
again), a revocation revokes its release, a key-set envelope publishes its
version. Each is an audit entry (action restore-log) with --reason. A
restore cut short is resumed by running it again. With --dry-run it lists
what it would re-append and changes nothing.

Refused (exit 3): records that do not extend lpsd's log to the export's
checkpoint (the store is not a backup of this log), or a change the store
already holds; also exit 3 when lpsd still refuses appends after the whole
export is in (the export is older than what the witnesses cosigned: find a
newer one). An export of another log exits 1.`,
		Example: "  lpsctl log restore --dir /srv/www/log --log-key \"$(cat log.vkey)\" --reason \"restore after disk loss, INC 88\" --dry-run\n" +
			"  lpsctl log restore --dir /srv/www/log --log-key \"$(cat log.vkey)\" --reason \"restore after disk loss, INC 88\"",
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "dir", "log-key"); err != nil {
				return err
			}
			dir, _ := cmd.Flags().GetString("dir")
			return logRestore(cmd, o, dir, e)
		},
	}
	fs := cmd.Flags()
	fs.String("dir", "", "export `directory` (lpsctl log export) to re-append the records from")
	fs.StringVar(&o.logKey, "log-key", "", "the log's note verifier key (`vkey`: name+hash+base64)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "list the records that would be re-appended; change nothing")
	o.registerChange(cmd)
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return cmd
}

// logRestoreJSON is log restore's -o json document (schema in doc.go).
type logRestoreJSON struct {
	Origin         string              `json:"origin"`
	From           int64               `json:"from"`
	Size           int64               `json:"size"`
	CheckpointSize int64               `json:"checkpoint_size"`
	DryRun         bool                `json:"dry_run"`
	Records        []restoreRecordJSON `json:"records"`
}

type restoreRecordJSON struct {
	Index  int64  `json:"index"`
	Kind   string `json:"kind"`
	Target string `json:"target"`
}

func logRestore(cmd *cobra.Command, o logRestoreOpts, dir string, e *env) error {
	p, err := logPolicy(o.logKey, nil, 0, translog.DefaultMaxAge)
	if err != nil {
		return err
	}
	c, done, err := openLog("", dir, p)
	if err != nil {
		return err
	}
	defer done()
	ctx := cmd.Context()
	cp, _, err := c.Checkpoint(ctx, time.Now())
	if err != nil {
		return fmt.Errorf("the export: %w", err)
	}
	state, err := getLog(ctx, &o.conn)
	if err != nil {
		return err
	}
	if state.GetOrigin() != "" && state.GetOrigin() != cp.Origin {
		return fmt.Errorf("the export is of log %s, lpsd signs log %s: give the export of lpsd's log", quote.Text(cp.Origin), quote.Text(state.GetOrigin()))
	}
	doc := logRestoreJSON{Origin: cp.Origin, From: state.GetSize(), Size: state.GetSize(), CheckpointSize: cp.Size, DryRun: o.dryRun, Records: []restoreRecordJSON{}}
	if doc.From < cp.Size {
		if doc.Records, err = restoreRecords(ctx, c, cp, o, doc.From); err != nil {
			return err
		}
		if !o.dryRun {
			doc.Size = cp.Size
		}
	}
	var after *adminv1.GetLogResponse
	if !o.dryRun {
		if after, err = getLog(ctx, &o.conn); err != nil {
			return err
		}
	}
	if o.out.structured() {
		if err := o.out.write(e.stdout, doc); err != nil {
			return err
		}
	} else if err := printLogRestore(e.stdout, doc); err != nil {
		return err
	}
	if after.GetAppendsRefused() && !after.GetVerified() {
		return &rpcError{code: codes.FailedPrecondition, msg: fmt.Sprintf("restored, but lpsd still refuses appends: %d of its %d witnesses answered since it started, too few to tell whether its store is behind (lpsctl log status)", after.GetWitnessesAnswered(), after.GetWitnesses())}
	}
	if after.GetAppendsRefused() {
		// Restored all the export holds, and lpsd still cannot append:
		// the export is older than the log nodes were shown.
		return &rpcError{code: codes.FailedPrecondition, msg: fmt.Sprintf("lpsd still refuses appends: the export ends at %d records but %s covers %d; restore from a newer export (another monitor's), or, if none holds them, those records are lost: see \"When records are lost\" in docs/transparency-log.md",
			cp.Size, witnessOr(after.GetWitness()), after.GetWitnessedSize())}
	}
	return nil
}

// restoreRecords sends the export's records from from to cp's end to lpsd
// in calls of admin.MaxRestoreRecords, or with o.dryRun only describes
// them, and returns what was (or would be) re-appended.
func restoreRecords(ctx context.Context, c *tiles.Client, cp translog.Checkpoint, o logRestoreOpts, from int64) ([]restoreRecordJSON, error) {
	var out []restoreRecordJSON
	var batch [][]byte
	start := from
	send := func() error {
		if o.dryRun {
			for i, r := range batch {
				en := tiles.Describe(start+int64(i), r)
				target := en.Version
				if en.Kind == tiles.KindKeySet {
					target = "keyset@" + en.Version
				}
				out = append(out, restoreRecordJSON{Index: en.Index, Kind: string(en.Kind), Target: target})
			}
			return nil
		}
		req := &adminv1.RestoreLogRequest{From: start, Records: batch, Checkpoint: string(cp.Note), Reason: o.reason}
		if end := start + int64(len(batch)); end < cp.Size {
			proof, err := c.TreeProof(ctx, cp, end)
			if err != nil {
				return fmt.Errorf("the export: %w", err)
			}
			for _, h := range proof {
				req.Proof = append(req.Proof, h[:])
			}
		}
		var resp *adminv1.RestoreLogResponse
		if err := o.conn.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
			resp, err = cl.RestoreLog(ctx, req)
			return err
		}); err != nil {
			if len(out) > 0 {
				return fmt.Errorf("after re-appending %d records (%d to %d): %w", len(out), from, start-1, err)
			}
			return err
		}
		for _, r := range resp.GetRestored() {
			out = append(out, restoreRecordJSON{Index: r.GetIndex(), Kind: r.GetKind(), Target: r.GetTarget()})
		}
		return nil
	}
	err := c.Records(ctx, cp, from, func(index int64, rec []byte) error {
		batch = append(batch, rec)
		if len(batch) < admin.MaxRestoreRecords {
			return nil
		}
		if err := send(); err != nil {
			return err
		}
		start, batch = index+1, nil
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = send()
	}
	return out, err
}

func printLogRestore(w io.Writer, d logRestoreJSON) error {
	switch {
	case d.From >= d.CheckpointSize:
		_, err := fmt.Fprintf(w, "nothing to restore: lpsd's log %s holds %d records, the export %d\n", quote.Text(d.Origin), d.From, d.CheckpointSize)
		return err
	case d.DryRun:
		fmt.Fprintf(w, "dry run: would re-append records %d to %d of log %s (lpsd holds %d, the export %d):\n", d.From, d.CheckpointSize-1, quote.Text(d.Origin), d.From, d.CheckpointSize)
	default:
		fmt.Fprintf(w, "re-appended records %d to %d of log %s: it holds %d records, the export's tree\n", d.From, d.Size-1, quote.Text(d.Origin), d.Size)
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "INDEX\tKIND\tTARGET")
	for _, r := range d.Records {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", r.Index, r.Kind, quote.Text(r.Target))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !d.DryRun {
		_, err := fmt.Fprintln(w, "re-appended releases are drafts: set their rollouts again (lpsctl rollout set|plan)")
		return err
	}
	return nil
}
