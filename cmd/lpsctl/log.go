package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/duration"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/translog"
	"nodehotfix/internal/translog/tiles"
)

type logOpts struct {
	url, dir, logKey, state, root string
	witnesses                     []string
	quorum                        int64
	maxAge                        time.Duration
	since                         int64
	out                           outputFlags
}

func newLogCmd(e *env) *cobra.Command {
	var o logOpts
	cmd := &cobra.Command{
		Use:   "log (--url URL | --dir DIR) --log-key VKEY [--witness VKEY ...] [--root FILE] [--state FILE] [--since INDEX]",
		Short: "list and verify the transparency log: every release, revocation and key set",
		Long: `log reads the release transparency log as C2SP tlog-tiles, from lpsd's tiles
URL or a directory 'log export' wrote, verifies the checkpoint with the log
key (and, with --witness, a quorum of fresh witness cosignatures), proves it
extends the one kept in --state, checks every record against the tree, and
lists them: releases (version, base), revocations (version, time) and key
sets (version, threshold, key IDs).

With --root (the baked key file nodes trust), it walks the key-set records
the log holds from that set, verifying each link as a node does, and
reports for each release which keys of the key set then in force really
signed it and whether they met its threshold. A release under its
threshold, a key-set link that does not verify, a key-set record of the
root's version with other keys, or a record of unknown kind is flagged and
the command exits 8. Without --root signers are not verified.

The first run with a new --state trusts the log as it is and says so. A
fork (a checkpoint the kept one is not a prefix of) prints both
checkpoints and exits 7.`,
		Example: "  lpsctl log --url https://lpsd.example/log/ --log-key \"$(cat log.vkey)\" --root release-keys.pub --state log.state\n" +
			"  lpsctl log --url https://lpsd.example/log/ --log-key \"$(cat log.vkey)\" --witness \"$(cat w1.vkey)\" --witness \"$(cat w2.vkey)\" --max-age 12h\n" +
			"  lpsctl log --dir ./log-mirror --log-key \"$(cat log.vkey)\" --since 120 -o json",
		GroupID: groupInspect,
		Args:    positional(),
		PreRunE: o.out.preRun(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "log-key"); err != nil {
				return err
			}
			return logList(cmd, o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.url, "url", "", "tiles root `URL` (http or https)")
	fs.StringVar(&o.dir, "dir", "", "tiles root `directory`, as log export writes it")
	fs.StringVar(&o.logKey, "log-key", "", "the log's note verifier key (`vkey`: name+hash+base64)")
	fs.StringArrayVar(&o.witnesses, "witness", nil, "a witness's cosignature key (`vkey`) the checkpoint must be cosigned by (repeatable)")
	newInt(fs, &o.quorum, "witness-quorum", -1, -1, 16, "how many distinct --witness keys must have cosigned within --max-age (`Q`; -1: all of them)")
	fs.DurationVar(&o.maxAge, "max-age", translog.DefaultMaxAge, "how old the quorum's cosignatures may be (`duration`)")
	fs.StringVar(&o.root, "root", "", "baked key set `file` to walk the log's key sets from and verify every signer against")
	fs.StringVar(&o.state, "state", "", "`file` keeping the last verified checkpoint (created on first use)")
	newInt(fs, &o.since, "since", 0, 0, 1<<62, "list records from this `index` on (all are still verified)")
	o.out.register(fs)
	cmd.AddCommand(newLogExportCmd(e), newLogStatusCmd(e), newLogRestoreCmd(e))
	return cmd
}

type logExportOpts struct {
	url, logKey string
	out         outputFlags
}

func newLogExportCmd(e *env) *cobra.Command {
	var o logExportOpts
	cmd := &cobra.Command{
		Use:   "export --url URL --log-key VKEY DIR",
		Short: "write the log as static tiles any web server can serve",
		Long: `export copies the log at --url into DIR as C2SP tlog-tiles files
(checkpoint, tile/<L>/<N>, tile/entries/<N>), verifying every tile and
entry against the checkpoint first and writing the checkpoint last. When DIR
holds an earlier export, the log must extend it (a fork exits 7 and writes
nothing) and only what is new is written. 'lpsctl log --dir DIR' reads it.`,
		Example: "  lpsctl log export --url https://lpsd.example/log/ --log-key \"$(cat log.vkey)\" /srv/www/log",
		Args:    positional("DIR"),
		PreRunE: o.out.preRun(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := required(cmd, "url", "log-key"); err != nil {
				return err
			}
			return logExport(cmd, o, args[0], e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.url, "url", "", "tiles root `URL` to copy (http or https)")
	fs.StringVar(&o.logKey, "log-key", "", "the log's note verifier key (`vkey`: name+hash+base64)")
	o.out.register(fs)
	return cmd
}

// openLog returns a client of the tiles root at url or dir, verifying
// checkpoints with p, and a func to close it.
func openLog(url, dir string, p translog.Policy) (*tiles.Client, func(), error) {
	switch {
	case (url == "") == (dir == ""):
		return nil, nil, usagef("give one of --url and --dir")
	case url != "":
		f, err := tiles.NewHTTPFetcher(url, nil)
		if err != nil {
			return nil, nil, usagef("--url: %v", err)
		}
		return tiles.NewClient(f, p), func() {}, nil
	}
	f, err := tiles.OpenDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("--dir: %w", err)
	}
	return tiles.NewClient(f, p), func() { f.Close() }, nil
}

// logPolicy is what log trusts a checkpoint on: --log-key and the
// --witness quorum.
func logPolicy(logKey string, witnesses []string, quorum int64, maxAge time.Duration) (translog.Policy, error) {
	if _, err := translog.ParseLogKey(strings.TrimSpace(logKey)); err != nil {
		return translog.Policy{}, usagef("--log-key: %v", err)
	}
	for _, w := range witnesses {
		if _, err := translog.ParseWitnessKey(strings.TrimSpace(w)); err != nil {
			return translog.Policy{}, usagef("--witness %q: %v", w, err)
		}
	}
	if quorum < 0 {
		quorum = int64(len(witnesses))
	}
	if maxAge <= 0 {
		return translog.Policy{}, usagef("--max-age %v: want a positive duration", maxAge)
	}
	trimmed := make([]string, len(witnesses))
	for i, w := range witnesses {
		trimmed[i] = strings.TrimSpace(w)
	}
	p, err := translog.NewPolicy(strings.TrimSpace(logKey), trimmed, int(quorum), maxAge)
	if err != nil {
		return translog.Policy{}, usagef("--witness-quorum %d: %v", quorum, err)
	}
	return p, nil
}

// flaggedError is log's result when records are flagged: exit 8.
type flaggedError struct{ n int }

func (e *flaggedError) Error() string {
	return fmt.Sprintf("%d flagged records: a release under its threshold, a key-set link that does not verify, or a record of unknown kind", e.n)
}

func logList(cmd *cobra.Command, o logOpts, e *env) error {
	p, err := logPolicy(o.logKey, o.witnesses, o.quorum, o.maxAge)
	if err != nil {
		return err
	}
	cfg := tiles.MonitorConfig{State: o.state, Since: o.since}
	if o.root != "" {
		root, err := readKeySetFile("--root", o.root)
		if err != nil {
			return err
		}
		cfg.Root = &root
	}
	c, done, err := openLog(o.url, o.dir, p)
	if err != nil {
		return err
	}
	defer done()
	rep, err := tiles.Monitor(cmd.Context(), c, cfg)
	var fe *tiles.ForkError
	if errors.As(err, &fe) {
		if perr := printFork(e.stdout, &o.out, fe); perr != nil {
			return perr
		}
		return err
	}
	if err != nil {
		return err
	}
	switch {
	case o.state == "":
		fmt.Fprintf(e.stderr, "lpsctl log: no --state: checkpoint %d trusted as served, not checked against an earlier one\n", rep.Checkpoint.Size)
	case rep.Kept == nil:
		fmt.Fprintf(e.stderr, "lpsctl log: first use of %s: checkpoint %d trusted as served and kept\n", o.state, rep.Checkpoint.Size)
	}
	doc := newLogJSON(rep, p.Quorum)
	if cfg.Root != nil {
		doc.RootVersion = cfg.Root.Version()
	}
	if o.out.structured() {
		if err := o.out.write(e.stdout, doc); err != nil {
			return err
		}
	} else if err := printLog(e.stdout, doc); err != nil {
		return err
	}
	if doc.Flagged > 0 {
		return &flaggedError{doc.Flagged}
	}
	return nil
}

func printLog(w io.Writer, doc logJSON) error {
	fmt.Fprintf(w, "log %s: %d records, root %s\n", quote.Text(doc.Origin), doc.Size, doc.RootHash)
	if doc.Kept != nil {
		fmt.Fprintf(w, "extends the kept checkpoint of %d records\n", doc.Kept.Size)
	}
	if doc.WitnessQuorum > 0 {
		var ws []string
		for _, c := range doc.Cosignatures {
			ws = append(ws, fmt.Sprintf("%s at %s", quote.Text(c.Witness), c.Time.Format(time.RFC3339)))
		}
		fmt.Fprintf(w, "cosigned by %d witnesses (quorum %d): %s\n", len(doc.Cosignatures), doc.WitnessQuorum, strings.Join(ws, ", "))
	}
	switch ks := doc.KeySet; {
	case ks == nil:
		fmt.Fprintln(w, "signers unverified: no --root")
	default:
		fmt.Fprintf(w, "key sets walked from --root version %d to version %d (threshold %d of %d keys)", doc.RootVersion, ks.Version, ks.Threshold, len(ks.Keys))
		if doc.KeySetExpired {
			fmt.Fprintf(w, "; EXPIRED at %s: nodes refuse it", ks.Expires)
		}
		fmt.Fprintln(w)
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "INDEX\tKIND\tVERSION\tCHECK\tDETAIL")
	for _, r := range doc.Records {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Index, r.Kind, quote.Text(orDash(r.Version)), recordCheck(r), recordDetail(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if doc.Flagged > 0 {
		_, err := fmt.Fprintf(w, "%d records FLAGGED\n", doc.Flagged)
		return err
	}
	return nil
}

// recordCheck is the CHECK column of a record.
func recordCheck(r recordJSON) string {
	s := "-"
	if r.Check != nil {
		s = string(r.Check.Status)
	} else if r.Kind == string(tiles.KindRelease) || r.Kind == string(tiles.KindKeySet) {
		s = "unverified"
	}
	if r.Flagged {
		s = "FLAGGED " + s
	}
	return s
}

// recordDetail is the DETAIL column of a record.
func recordDetail(r recordJSON) string {
	ids := func(s []string) string {
		if len(s) == 0 {
			return "nobody"
		}
		return quote.Text(strings.Join(s, ","))
	}
	var d string
	switch tiles.Kind(r.Kind) {
	case tiles.KindRelease:
		d = "base " + quote.Text(r.Base)
	case tiles.KindRevocation:
		return "revoked at " + r.Time.Format(time.RFC3339)
	case tiles.KindKeySet:
		d = fmt.Sprintf("threshold %d of %s", r.Threshold, ids(r.Keys))
	default:
		return quote.Text(r.Problem)
	}
	c := r.Check
	switch {
	case c == nil:
		return d
	case c.Status == tiles.StatusBeforeRoot:
		return d + ", older than --root: not checked"
	case c.Status == tiles.StatusRoot || c.Status == tiles.StatusRootMismatch:
		d += fmt.Sprintf(", --root's version, self-signed by %s", ids(c.OwnSigners))
	case r.Kind == string(tiles.KindKeySet):
		d += fmt.Sprintf(", signed by %s of version %d (threshold %d) and by %s of its own", ids(c.Signers), c.KeySetVersion, c.Threshold, ids(c.OwnSigners))
	default:
		d += fmt.Sprintf(", signed by %s: %d of threshold %d of key set version %d", ids(c.Signers), len(c.Signers), c.Threshold, c.KeySetVersion)
	}
	if c.Problem != "" {
		d += ": " + quote.Text(c.Problem)
	}
	return d
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printFork(w io.Writer, out *outputFlags, fe *tiles.ForkError) error {
	doc := forkJSON{Reason: fe.Reason, Kept: newCheckpointJSON(fe.Kept), Served: newCheckpointJSON(fe.Got)}
	doc.Kept.Note, doc.Served.Note = string(fe.Kept.Note), string(fe.Got.Note)
	if out.structured() {
		return out.write(w, struct {
			Fork forkJSON `json:"fork"`
		}{doc})
	}
	_, err := fmt.Fprintf(w, "FORK of log %s: %s\nkept:   %d records, root %s\nserved: %d records, root %s\n\nkept checkpoint:\n%s\nserved checkpoint:\n%s",
		quote.Text(doc.Kept.Origin), doc.Reason, doc.Kept.Size, doc.Kept.RootHash, doc.Served.Size, doc.Served.RootHash,
		quote.Text(doc.Kept.Note), quote.Text(doc.Served.Note))
	return err
}

func logExport(cmd *cobra.Command, o logExportOpts, dir string, e *env) error {
	p, err := logPolicy(o.logKey, nil, 0, translog.DefaultMaxAge)
	if err != nil {
		return err
	}
	c, done, err := openLog(o.url, "", p)
	if err != nil {
		return err
	}
	defer done()
	res, err := tiles.Export(cmd.Context(), c, dir, time.Now())
	var fe *tiles.ForkError
	if errors.As(err, &fe) {
		if perr := printFork(e.stdout, &o.out, fe); perr != nil {
			return perr
		}
		return err
	}
	if err != nil {
		return err
	}
	doc := exportJSON{Dir: dir, checkpointJSON: newCheckpointJSON(res.Checkpoint), Tiles: res.Tiles, Bundles: res.Bundles}
	if res.Previous != nil {
		doc.PreviousSize = &res.Previous.Size
	}
	if o.out.structured() {
		return o.out.write(e.stdout, doc)
	}
	from := "a new export"
	if doc.PreviousSize != nil {
		from = fmt.Sprintf("extending the export of %d records", *doc.PreviousSize)
	}
	_, err = fmt.Fprintf(e.stdout, "exported log %s: %d records, root %s, to %s (%s: %d tiles, %d entry bundles written)\n",
		quote.Text(doc.Origin), doc.Size, doc.RootHash, dir, from, doc.Tiles, doc.Bundles)
	return err
}

// checkpointJSON is a checkpoint in -o json output (schema in doc.go).
type checkpointJSON struct {
	Origin   string `json:"origin"`
	Size     int64  `json:"size"`
	RootHash string `json:"root_hash"`
	// Note is the signed note, in a fork's report only.
	Note string `json:"note,omitempty"`
}

func newCheckpointJSON(cp translog.Checkpoint) checkpointJSON {
	return checkpointJSON{Origin: cp.Origin, Size: cp.Size, RootHash: cp.Hash.String()}
}

// logJSON is log's -o json output.
type logJSON struct {
	checkpointJSON
	Kept          *checkpointJSON   `json:"kept"`
	FirstUse      bool              `json:"first_use"`
	WitnessQuorum int               `json:"witness_quorum"`
	Cosignatures  []cosignatureJSON `json:"cosignatures"`
	// RootVersion, KeySet and KeySetExpired are set with --root only.
	RootVersion   int64        `json:"root_version,omitempty"`
	KeySet        *keySetJSON  `json:"key_set"`
	KeySetExpired bool         `json:"key_set_expired,omitempty"`
	Flagged       int          `json:"flagged"`
	Records       []recordJSON `json:"records"`
}

// cosignatureJSON is a verified witness cosignature.
type cosignatureJSON struct {
	Witness string    `json:"witness"`
	KeyHash string    `json:"key_hash"`
	Time    time.Time `json:"time"`
}

// recordJSON is one record of log's output; fields not of its kind are
// left out.
type recordJSON struct {
	Index     int64          `json:"index"`
	Kind      string         `json:"kind"`
	Hash      string         `json:"hash"`
	Version   string         `json:"version,omitempty"`
	Base      string         `json:"base,omitempty"`
	NotAfter  *time.Time     `json:"not_after,omitempty"`
	Time      *time.Time     `json:"time,omitempty"`
	Expires   *time.Time     `json:"expires,omitempty"`
	Threshold int            `json:"threshold,omitempty"`
	Keys      []string       `json:"keys,omitempty"`
	Log       *logPolicyJSON `json:"log,omitempty"`
	Check     *checkJSON     `json:"check,omitempty"`
	Flagged   bool           `json:"flagged"`
	Problem   string         `json:"problem,omitempty"`
}

// checkJSON is a record's signer check (tiles.Check).
type checkJSON struct {
	Status        tiles.Status `json:"status"`
	KeySetVersion int64        `json:"key_set_version,omitempty"`
	Threshold     int          `json:"threshold,omitempty"`
	Signers       []string     `json:"signers"`
	OwnSigners    []string     `json:"own_signers,omitempty"`
	Problem       string       `json:"problem,omitempty"`
}

func when(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func newLogJSON(rep tiles.Report, quorum int) logJSON {
	doc := logJSON{checkpointJSON: newCheckpointJSON(rep.Checkpoint), FirstUse: rep.Kept == nil, WitnessQuorum: quorum,
		Cosignatures: []cosignatureJSON{}, Flagged: rep.Flagged(), Records: []recordJSON{}}
	if rep.Kept != nil {
		k := newCheckpointJSON(*rep.Kept)
		doc.Kept = &k
	}
	for _, c := range rep.Cosignatures {
		doc.Cosignatures = append(doc.Cosignatures, cosignatureJSON{Witness: c.Name, KeyHash: fmt.Sprintf("%08x", c.KeyHash), Time: c.Time.UTC()})
	}
	if ks := rep.KeySet; ks != nil {
		j := toKeySetJSON(*ks, "")
		doc.KeySet, doc.KeySetExpired = &j, rep.KeySetExpired
	}
	for _, en := range rep.Entries {
		doc.Records = append(doc.Records, newRecordJSON(en))
	}
	return doc
}

func newRecordJSON(en tiles.Entry) recordJSON {
	r := recordJSON{Index: en.Index, Kind: string(en.Kind), Hash: en.Hash.String(), Version: en.Version,
		Base: en.Base, Threshold: en.Threshold, Keys: en.Keys, Flagged: en.Flagged(), Problem: en.Problem}
	r.NotAfter, r.Time, r.Expires = when(en.NotAfter), when(en.Time), when(en.Expires)
	if l := en.Log; l.Key != "" {
		r.Log = &logPolicyJSON{Key: l.Key, Witnesses: append([]string{}, l.Witnesses...), Quorum: l.Quorum,
			MaxCheckpointAge: duration.Format(l.MaxCheckpointAge), Required: l.Required}
	}
	if c := en.Check; c != nil {
		r.Check = &checkJSON{Status: c.Status, KeySetVersion: c.KeySetVersion, Threshold: c.Threshold,
			Signers: append([]string{}, c.Signers...), OwnSigners: c.OwnSigners, Problem: c.Problem}
	}
	return r
}

// forkJSON is a fork's report, under "fork".
type forkJSON struct {
	Reason string         `json:"reason"`
	Kept   checkpointJSON `json:"kept"`
	Served checkpointJSON `json:"served"`
}

// exportJSON is log export's -o json output.
type exportJSON struct {
	Dir string `json:"dir"`
	checkpointJSON
	PreviousSize *int64 `json:"previous_size"`
	Tiles        int    `json:"tiles"`
	Bundles      int    `json:"bundles"`
}
