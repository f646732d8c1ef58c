package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/duration"
	"nodehotfix/internal/release"
	"nodehotfix/internal/translog"
)

type keysInitOpts struct {
	publicKeys []string
	threshold  int
	version    int64
	log        logFlags
	out        string
	output     outputFlags
}

// logFlags are the log-policy flags of keys init and keys rotate.
type logFlags struct {
	key       string
	witnesses []string
	quorum    int
	maxAge    time.Duration
	required  bool
}

func (l *logFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&l.key, "log-key", "", "transparency log verifier `key` (name+hash+base64), as text")
	fs.StringArrayVar(&l.witnesses, "witness", nil, "witness verifier `key` (name+hash+base64); repeatable")
	fs.IntVar(&l.quorum, "witness-quorum", 0, "how many distinct witnesses must cosign a checkpoint (default 0: none)")
	newDuration(fs, &l.maxAge, "max-checkpoint-age", 0, "how old a checkpoint's cosignatures may be (default 24h with --log-key)")
	fs.BoolVar(&l.required, "require-log", false, "nodes refuse a release that is not in the log")
}

// changed reports whether any log-policy flag was given.
func (l *logFlags) changed(fs *pflag.FlagSet) bool {
	for _, f := range []string{"log-key", "witness", "witness-quorum", "max-checkpoint-age", "require-log"} {
		if fs.Changed(f) {
			return true
		}
	}
	return false
}

func (l *logFlags) policy() release.LogPolicy {
	return release.LogPolicy{Key: l.key, Witnesses: l.witnesses, Quorum: l.quorum, MaxCheckpointAge: l.maxAge, Required: l.required}
}

// checkLogPolicy refuses a log policy whose keys a node could not use (a
// typo, a witness key given as the log's or the reverse): every node of
// the set would refuse every release for as long as it holds it. A
// required log with no witness quorum is allowed but warned about: nodes
// then check no freshness, so an old checkpoint stays valid.
func checkLogPolicy(stderr io.Writer, p release.LogPolicy) error {
	if p.Key == "" {
		return nil
	}
	if _, err := translog.NewPolicy(p.Key, p.Witnesses, p.Quorum, p.MaxCheckpointAge); err != nil {
		return usagef("the log policy: %v (--log-key is the log's key, lpsctl witness keygen --kind log; --witness a witness's, --kind witness)", err)
	}
	if p.Required && p.Quorum == 0 {
		fmt.Fprintln(stderr, "lpsctl: warning: the log is required with --witness-quorum 0: nodes check no witness and no freshness, so whoever holds lpsd's log key can serve an old checkpoint (one from before a revocation) for good")
	}
	return nil
}

func newKeysInitCmd(e *env) *cobra.Command {
	var o keysInitOpts
	cmd := &cobra.Command{
		Use:   "init --public-key FILE... [--threshold K] [--version N] [--log-key VKEY [--witness VKEY]... [--witness-quorum Q] [--max-checkpoint-age D] [--require-log]] --out FILE|-",
		Short: "write the key set file nodes are baked with",
		Long: `init writes a release key set file, the file baked into node images
(opt/azure/containers/aks-node-controller-release-keys.pub): the keys of
every --public-key file (from keys generate, or any key set file), of which
--threshold distinct ones must sign a release, as key-set version
--version (1 unless the image is baked with a later rotation's set). The
log flags declare the transparency log policy; its keys must be a log key
(--log-key) and witness keys (--witness) as lpsctl witness keygen makes
them. A file with threshold 1, version 1 and no log policy is the
format every agent reads. It is written atomically to --out (mode 0644),
or printed with --out -.`,
		Example: `  lpsctl keys init --public-key a.pub --public-key b.pub --public-key c.pub --threshold 2 --out release-keys.pub`,
		Args:    positional(),
		PreRunE: o.output.preRun(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "public-key", "out"); err != nil {
				return err
			}
			return keysInit(cmd.Context(), o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&o.publicKeys, "public-key", nil, "public key `file` (one key line, or a key set file); repeatable")
	fs.IntVar(&o.threshold, "threshold", 1, "how many distinct keys must sign a release")
	fs.Int64Var(&o.version, "version", 1, "key-set version the file declares")
	o.log.register(fs)
	fs.StringVar(&o.out, "out", "", "`file` to write the key set to (- for stdout)")
	o.output.register(fs)
	return cmd
}

func keysInit(ctx context.Context, o keysInitOpts, e *env) error {
	if o.out == "-" && o.output.structured() {
		return usagef("--out - prints the key set itself; -o %s has nowhere to go", o.output.format)
	}
	var keys []ed25519.PublicKey
	for _, path := range o.publicKeys {
		ks, err := readKeySetFile("--public-key", path)
		if err != nil {
			return err
		}
		for _, k := range ks.Document().Keys {
			if hasKey(keys, k) {
				return usagef("--public-key %s: key %s is given twice", path, release.KeyID(k))
			}
			keys = append(keys, k)
		}
	}
	d := release.KeySetDocument{Version: o.version, Threshold: o.threshold, Keys: keys, Log: o.log.policy()}
	ks, err := d.KeySet()
	if err != nil {
		return usagef("%v", err)
	}
	if err := checkLogPolicy(e.stderr, d.Log); err != nil {
		return err
	}
	data, err := release.MarshalKeySetFile(d)
	if err != nil {
		return err
	}
	if err := writeOut(ctx, e.stdout, o.out, data); err != nil || o.out == "-" {
		return err
	}
	return printKeySet(e.stdout, &o.output, toKeySetJSON(ks, o.out), nil)
}

func hasKey(keys []ed25519.PublicKey, k ed25519.PublicKey) bool {
	for _, x := range keys {
		if x.Equal(k) {
			return true
		}
	}
	return false
}

// readKeySetFile reads and parses the key set file path, which flag names.
func readKeySetFile(flag, path string) (release.KeySet, error) {
	data, err := capfile.Read(path, release.MaxKeySetSize)
	if err != nil {
		return release.KeySet{}, fmt.Errorf("%s: %w", flag, err)
	}
	ks, err := release.ParseKeySet(data)
	if err != nil {
		return release.KeySet{}, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return ks, nil
}

// writeOut writes data to --out atomically (mode 0644), or to stdout for
// "-".
func writeOut(ctx context.Context, stdout io.Writer, out string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if out == "-" {
		_, err := stdout.Write(data)
		return err
	}
	if err := atomicfile.WriteFile(out, data, 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// keySetJSON is a key set as -o json prints it.
type keySetJSON struct {
	Out       string         `json:"out,omitempty"`
	Version   int64          `json:"version"`
	Threshold int            `json:"threshold"`
	Expires   string         `json:"expires,omitempty"`
	Keys      []string       `json:"keys"`
	Log       *logPolicyJSON `json:"log,omitempty"`
	// Set by keys rotate: the keys of either set that have signed, and
	// how many more of the current set's (with --current) and of its own
	// must.
	Signers        []string `json:"signers,omitempty"`
	MissingCurrent *int     `json:"missing_current,omitempty"`
	MissingOwn     *int     `json:"missing_own,omitempty"`
}

type logPolicyJSON struct {
	Key              string   `json:"key"`
	Witnesses        []string `json:"witnesses"`
	Quorum           int      `json:"quorum"`
	MaxCheckpointAge string   `json:"max_checkpoint_age"`
	Required         bool     `json:"required"`
}

func toKeySetJSON(ks release.KeySet, out string) keySetJSON {
	j := keySetJSON{Out: out, Version: ks.Version(), Threshold: ks.Threshold(), Keys: ks.KeyIDs()}
	if t := ks.Expires(); !t.IsZero() {
		j.Expires = formatTime(t)
	}
	if p := ks.Log(); p.Key != "" {
		j.Log = &logPolicyJSON{Key: p.Key, Witnesses: append([]string{}, p.Witnesses...), Quorum: p.Quorum, MaxCheckpointAge: duration.Format(p.MaxCheckpointAge), Required: p.Required}
	}
	return j
}

// printKeySet prints a key set (written to j.Out, if not ""); text
// output adds the extra lines.
func printKeySet(w io.Writer, o *outputFlags, j keySetJSON, extra []string) error {
	if o.structured() {
		return o.write(w, j)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "key-set version %d: %d of %d keys sign", j.Version, j.Threshold, len(j.Keys))
	if j.Expires != "" {
		fmt.Fprintf(&b, ", expires %s", j.Expires)
	}
	fmt.Fprintf(&b, "\n  keys %s\n", strings.Join(j.Keys, ", "))
	if l := j.Log; l != nil {
		fmt.Fprintf(&b, "  log key %s, %d of %d witnesses, checkpoints at most %s old", l.Key, l.Quorum, len(l.Witnesses), l.MaxCheckpointAge)
		if l.Required {
			b.WriteString(", required")
		}
		b.WriteString("\n")
		for _, wk := range l.Witnesses {
			fmt.Fprintf(&b, "  witness %s\n", wk)
		}
	}
	for _, line := range extra {
		fmt.Fprintf(&b, "%s\n", line)
	}
	if j.Out != "" {
		fmt.Fprintf(&b, "wrote %s\n", j.Out)
	}
	_, err := w.Write(b.Bytes())
	return err
}
