package main

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/capfile"
	"nodehotfix/internal/duration"
	"nodehotfix/internal/release"
)

type keysRotateOpts struct {
	current, envelope   string
	addKeys, removeKeys []string
	threshold           int
	expires             string
	validFor            time.Duration
	log                 logFlags
	key, out            string
	output              outputFlags
	// logChanged: a log flag was given, so the log policy is replaced.
	logChanged bool
}

// Build flags of keys rotate: refused with --envelope, which co-signs.
var rotateBuildFlags = []string{"add-key", "remove-key", "threshold", "expires", "valid-for", "log-key", "witness", "witness-quorum", "max-checkpoint-age", "require-log"}

func newKeysRotateCmd(e *env) *cobra.Command {
	var o keysRotateOpts
	cmd := &cobra.Command{
		Use:   "rotate --current FILE [--add-key FILE]... [--remove-key ID]... [--threshold K] (--expires T | --valid-for D) --key FILE --out FILE|-  |  rotate --envelope FILE --key FILE [--current FILE] --out FILE|-",
		Short: "build and sign the next key-set version, or co-sign one (offline)",
		Long: `rotate builds the key-set document that follows --current (a key set
file, or the newest key-set envelope): version one higher, its keys less
each --remove-key (a key ID) plus the keys of each --add-key file, its
threshold --threshold (default: the current one), and the current log
policy unless a log flag replaces it (--log-key is then required). It
expires at --expires (RFC 3339) or after --valid-for, at least 1h away:
once the newest version has expired, nodes refuse the chain and provision
with their baked agent, so sign the next one in time. The document is
signed with --key and written atomically to --out (mode 0644).

A link is valid only when signed by the threshold of the current version's
keys AND by its own threshold of its own keys: with --envelope, rotate adds
--key's signature to an existing document instead, as release sign
--envelope does. Either way it prints how many more signatures of each set
are needed (of the current set only when --current is given). Nothing is
verified against a trusted root here: keys verify does that.`,
		Example: `  lpsctl keys rotate --current release-keys.pub --add-key d.pub --remove-key 34750f98bd59fcfc \
      --valid-for 365d --key a.key --out keyset-2.json
  lpsctl keys rotate --envelope keyset-2.json --current release-keys.pub --key d.key --out keyset-2.json`,
		Args:    positional(),
		PreRunE: o.output.preRun(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.envelope != "" {
				for _, f := range rotateBuildFlags {
					if cmd.Flags().Changed(f) {
						return usagef("--%s describes a new version; --envelope co-signs an existing one as it is", f)
					}
				}
				if err := required(cmd, "key", "out"); err != nil {
					return err
				}
			} else if err := required(cmd, "current", "key", "out"); err != nil {
				return err
			}
			o.logChanged = o.log.changed(cmd.Flags())
			return keysRotate(cmd, o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.current, "current", "", "the current key set: a key set `file` or the newest key-set envelope")
	fs.StringArrayVar(&o.addKeys, "add-key", nil, "public key `file` whose keys to add; repeatable")
	fs.StringArrayVar(&o.removeKeys, "remove-key", nil, "key `ID` to remove; repeatable")
	fs.IntVar(&o.threshold, "threshold", 0, "how many distinct keys of the new set must sign (default: the current threshold)")
	fs.StringVar(&o.expires, "expires", "", "expiry as an RFC 3339 `time` (or --valid-for)")
	newDuration(fs, &o.validFor, "valid-for", 0, "expiry as a `duration` from now, at least 1h, e.g. 365d (or --expires)")
	o.log.register(fs)
	fs.StringVar(&o.envelope, "envelope", "", "co-sign this key-set envelope `file` instead of building one")
	fs.StringVar(&o.key, "key", "", "release private key `file` to sign with")
	fs.StringVar(&o.out, "out", "", "`file` to write the signed key-set envelope to (- for stdout)")
	o.output.register(fs)
	return cmd
}

func keysRotate(cmd *cobra.Command, o keysRotateOpts, e *env) error {
	if o.out == "-" && o.output.structured() {
		return usagef("--out - prints the envelope itself; -o %s has nowhere to go", o.output.format)
	}
	var cur *release.KeySet
	if o.current != "" {
		ks, err := readCurrentKeySet(o.current)
		if err != nil {
			return err
		}
		cur = &ks
	}
	var env []byte
	var err error
	if o.envelope != "" {
		env, err = cosignKeySet(o)
	} else {
		env, err = buildKeySet(e.stderr, o, *cur, time.Now())
	}
	if err != nil {
		return err
	}
	if err := writeEnvelope(cmd.Context(), e.stdout, o.out, env); err != nil || o.out == "-" {
		return err
	}
	return printRotation(e, o, cur, env)
}

// readCurrentKeySet reads --current: a key-set envelope (its content,
// UNVERIFIED: it only seeds the next version) or a key set file.
func readCurrentKeySet(path string) (release.KeySet, error) {
	data, err := capfile.Read(path, max(release.MaxKeySetSize, release.MaxKeySetEnvelopeSize+1024))
	if err != nil {
		return release.KeySet{}, fmt.Errorf("--current: %w", err)
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		d, err := release.InspectKeySet(t)
		if err != nil {
			return release.KeySet{}, fmt.Errorf("--current %s: %w", path, err)
		}
		return d.KeySet()
	}
	ks, err := release.ParseKeySet(data)
	if err != nil {
		return release.KeySet{}, fmt.Errorf("--current %s: %w", path, err)
	}
	return ks, nil
}

func cosignKeySet(o keysRotateOpts) ([]byte, error) {
	data, err := readEnvelope(o.envelope, release.MaxKeySetEnvelopeSize, func(b []byte) error {
		_, err := release.InspectKeySet(b)
		return err
	})
	if err != nil {
		return nil, err
	}
	priv, err := readPrivateKey(o.key)
	if err != nil {
		return nil, err
	}
	env, err := release.AddSignature(bytes.TrimSpace(data), priv)
	if err != nil {
		return nil, fmt.Errorf("--envelope %s: %w", o.envelope, err)
	}
	return env, nil
}

// buildKeySet makes and signs the version after cur from the flags.
func buildKeySet(stderr io.Writer, o keysRotateOpts, cur release.KeySet, now time.Time) ([]byte, error) {
	expires, err := keySetExpiry(o.expires, o.validFor, now)
	if err != nil {
		return nil, err
	}
	d := cur.Document()
	d.Version++
	d.Expires = expires
	for _, id := range o.removeKeys {
		i := slices.IndexFunc(d.Keys, func(k ed25519.PublicKey) bool { return release.KeyID(k) == id })
		if i < 0 {
			return nil, usagef("--remove-key %s: not a key of version %d (%s)", id, cur.Version(), strings.Join(cur.KeyIDs(), ", "))
		}
		d.Keys = slices.Delete(d.Keys, i, i+1)
	}
	for _, path := range o.addKeys {
		ks, err := readKeySetFile("--add-key", path)
		if err != nil {
			return nil, err
		}
		for _, k := range ks.Document().Keys {
			if hasKey(d.Keys, k) {
				return nil, usagef("--add-key %s: key %s is already in the set", path, release.KeyID(k))
			}
			d.Keys = append(d.Keys, k)
		}
	}
	if o.threshold != 0 {
		d.Threshold = o.threshold
	}
	if o.logChanged {
		d.Log = o.log.policy()
	}
	if _, err := d.KeySet(); err != nil {
		return nil, usagef("version %d: %v", d.Version, err)
	}
	if err := checkLogPolicy(stderr, d.Log); err != nil {
		return nil, err
	}
	priv, err := readPrivateKey(o.key)
	if err != nil {
		return nil, err
	}
	return release.SignKeySet(d, priv)
}

// keySetExpiry returns the expiry from exactly one of --expires and
// --valid-for, at least minValidity away.
func keySetExpiry(expires string, validFor time.Duration, now time.Time) (time.Time, error) {
	var t time.Time
	switch {
	case (expires == "") == (validFor == 0):
		return t, usagef("give exactly one of --expires and --valid-for")
	case expires != "":
		var err error
		if t, err = time.Parse(time.RFC3339, expires); err != nil {
			return t, usagef("--expires %q: want RFC 3339, e.g. 2027-06-01T00:00:00Z", expires)
		}
	default:
		t = now.Add(validFor)
	}
	if d := t.Sub(now); d < minValidity {
		return t, usagef("expiry %s is %s away: a key set is signed for at least %s; give a later --expires or a longer --valid-for, e.g. 365d",
			formatTime(t), duration.Format(d.Round(time.Second)), duration.Format(minValidity))
	}
	return t.UTC(), nil
}

// printRotation prints the signed document and the signatures it still
// lacks.
func printRotation(e *env, o keysRotateOpts, cur *release.KeySet, env []byte) error {
	d, err := release.InspectKeySet(env)
	if err != nil {
		return err
	}
	next, err := d.KeySet()
	if err != nil {
		return err
	}
	j := toKeySetJSON(next, o.out)
	var lines []string
	var need []string
	ownSigners, _ := next.Signers(env)
	ownMissing := max(next.Threshold()-len(ownSigners), 0)
	j.MissingOwn = &ownMissing
	signers := ownSigners
	if cur != nil {
		curSigners, _ := cur.Signers(env)
		curMissing := max(cur.Threshold()-len(curSigners), 0)
		j.MissingCurrent = &curMissing
		lines = append(lines, fmt.Sprintf("  signed by %d of %d required keys of version %d (%s)", len(curSigners), cur.Threshold(), cur.Version(), strings.Join(curSigners, ", ")))
		if curMissing > 0 {
			need = append(need, fmt.Sprintf("%d more of version %d's keys", curMissing, cur.Version()))
		}
		for _, id := range curSigners {
			if !slices.Contains(signers, id) {
				signers = append(signers, id)
			}
		}
	}
	lines = append(lines, fmt.Sprintf("  signed by %d of %d required keys of its own (%s)", len(ownSigners), next.Threshold(), strings.Join(ownSigners, ", ")))
	if ownMissing > 0 {
		need = append(need, fmt.Sprintf("%d more of its own keys", ownMissing))
	}
	slices.Sort(signers)
	j.Signers = signers
	current := ""
	if o.current != "" {
		current = " --current " + o.current
	}
	switch {
	case len(need) > 0:
		lines = append(lines, fmt.Sprintf("needs %s: co-sign with 'lpsctl keys rotate --envelope %s%s --key FILE --out %s'", strings.Join(need, " and "), o.out, current, o.out))
	case cur == nil:
		lines = append(lines, "give --current to count the current version's signatures too")
	default:
		lines = append(lines, "fully signed: check the chain with 'lpsctl keys verify --root FILE LINK...'")
	}
	return printKeySet(e.stdout, &o.output, j, lines)
}
