package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"nodehotfix/internal/quote"
	"nodehotfix/internal/translog/tiles"
)

type logOpts struct {
	url, dir, logKey, state string
	since                   int64
	out                     outputFlags
}

func newLogCmd(e *env) *cobra.Command {
	var o logOpts
	cmd := &cobra.Command{
		Use:   "log (--url URL | --dir DIR) --log-key VKEY [--state FILE] [--since INDEX]",
		Short: "list and verify the transparency log: every release, revocation and key set",
		Long: `log reads the release transparency log as C2SP tlog-tiles, from lpsd's tiles
URL or a directory 'log export' wrote, verifies the checkpoint with the log
key, proves it extends the one kept in --state, checks every record against
the tree, and lists them: releases (version, base, the key IDs their
signatures name), revocations (version, time) and key sets (version,
threshold, key IDs). The first run with a new --state trusts the log as it
is and says so. A fork (a checkpoint the kept one is not a prefix of) prints
both checkpoints and exits 7.`,
		Example: "  lpsctl log --url https://lpsd.example/log/ --log-key \"$(cat log.vkey)\" --state log.state\n" +
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
	fs.StringVar(&o.state, "state", "", "`file` keeping the last verified checkpoint (created on first use)")
	newInt(fs, &o.since, "since", 0, 0, 1<<62, "list records from this `index` on (all are still verified)")
	o.out.register(fs)
	cmd.AddCommand(newLogExportCmd(e))
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

// openLog returns a client of the tiles root at url or dir, and a func to
// close it.
func openLog(url, dir, logKey string) (*tiles.Client, func(), error) {
	v, err := note.NewVerifier(strings.TrimSpace(logKey))
	if err != nil {
		return nil, nil, usagef("--log-key: %v", err)
	}
	switch {
	case (url == "") == (dir == ""):
		return nil, nil, usagef("give one of --url and --dir")
	case url != "":
		f, err := tiles.NewHTTPFetcher(url, nil)
		if err != nil {
			return nil, nil, usagef("--url: %v", err)
		}
		return tiles.NewClient(f, v), func() {}, nil
	}
	f, err := tiles.OpenDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("--dir: %w", err)
	}
	return tiles.NewClient(f, v), func() { f.Close() }, nil
}

func logList(cmd *cobra.Command, o logOpts, e *env) error {
	c, done, err := openLog(o.url, o.dir, o.logKey)
	if err != nil {
		return err
	}
	defer done()
	rep, err := tiles.Monitor(cmd.Context(), c, o.state, o.since)
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
	doc := logJSON{checkpointJSON: newCheckpointJSON(rep.Checkpoint), FirstUse: rep.Kept == nil, Records: []recordJSON{}}
	if rep.Kept != nil {
		k := newCheckpointJSON(*rep.Kept)
		doc.Kept = &k
	}
	for _, en := range rep.Entries {
		doc.Records = append(doc.Records, newRecordJSON(en))
	}
	if o.out.structured() {
		return o.out.write(e.stdout, doc)
	}
	fmt.Fprintf(e.stdout, "log %s: %d records, root %s\n", quote.Text(doc.Origin), doc.Size, doc.RootHash)
	if doc.Kept != nil {
		fmt.Fprintf(e.stdout, "extends the kept checkpoint of %d records\n", doc.Kept.Size)
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "INDEX\tKIND\tVERSION\tDETAIL")
	for _, r := range doc.Records {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.Index, r.Kind, quote.Text(orDash(r.Version)), recordDetail(r))
	}
	return tw.Flush()
}

// recordDetail is the DETAIL column of a record.
func recordDetail(r recordJSON) string {
	ids := func(s []string) string {
		if len(s) == 0 {
			return "nobody"
		}
		return quote.Text(strings.Join(s, ","))
	}
	switch tiles.Kind(r.Kind) {
	case tiles.KindRelease:
		return fmt.Sprintf("base %s, signed by %s", quote.Text(r.Base), ids(r.Signers))
	case tiles.KindRevocation:
		return "revoked at " + r.Time.Format(time.RFC3339)
	case tiles.KindKeySet:
		return fmt.Sprintf("threshold %d of %s, signed by %s", r.Threshold, ids(r.Keys), ids(r.Signers))
	}
	return quote.Text(r.Problem)
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
	c, done, err := openLog(o.url, "", o.logKey)
	if err != nil {
		return err
	}
	defer done()
	res, err := tiles.Export(cmd.Context(), c, dir)
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

func newCheckpointJSON(cp tiles.Checkpoint) checkpointJSON {
	return checkpointJSON{Origin: cp.Origin, Size: cp.Size, RootHash: cp.Hash.String()}
}

// logJSON is log's -o json output.
type logJSON struct {
	checkpointJSON
	Kept     *checkpointJSON `json:"kept"`
	FirstUse bool            `json:"first_use"`
	Records  []recordJSON    `json:"records"`
}

// recordJSON is one record of log's output; fields not of its kind are
// left out.
type recordJSON struct {
	Index     int64      `json:"index"`
	Kind      string     `json:"kind"`
	Hash      string     `json:"hash"`
	Version   string     `json:"version,omitempty"`
	Base      string     `json:"base,omitempty"`
	NotAfter  *time.Time `json:"not_after,omitempty"`
	Time      *time.Time `json:"time,omitempty"`
	Expires   *time.Time `json:"expires,omitempty"`
	Threshold int        `json:"threshold,omitempty"`
	Keys      []string   `json:"keys,omitempty"`
	Signers   []string   `json:"signers,omitempty"`
	Problem   string     `json:"problem,omitempty"`
}

func newRecordJSON(en tiles.Entry) recordJSON {
	r := recordJSON{Index: en.Index, Kind: string(en.Kind), Hash: en.Hash.String(), Version: en.Version,
		Base: en.Base, Threshold: en.Threshold, Keys: en.Keys, Signers: en.Signers, Problem: en.Problem}
	when := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	r.NotAfter, r.Time, r.Expires = when(en.NotAfter), when(en.Time), when(en.Expires)
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
