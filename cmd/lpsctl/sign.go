package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/agentversion"
	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/duration"
	"nodehotfix/internal/release"
)

// minValidity is the shortest life a release is signed for. Between
// signing and the fleet running it come publish, a rollout whose canary
// bakes for half an hour or more, and the clock skew between the signer and
// the nodes, which refuse an expired release: one signed for less would
// expire before it could be judged, let alone rolled out.
const minValidity = time.Hour

// maxKeyFileSize caps the private key file; a real one is about 120 bytes.
const maxKeyFileSize = 64 << 10

type signOpts struct {
	key, base, version string
	envelope           string
	artifacts          artifactFlag
	notAfter           string
	validFor           time.Duration
	skipVersionCheck   bool
	launchRecords      bool
	out                string
	output             outputFlags
}

// artifactFlag collects repeated --artifact PLATFORM=PATH,URL values.
type artifactFlag []artifactSpec

type artifactSpec struct{ platform, path, url string }

func (a *artifactFlag) String() string { return "" }

func (a *artifactFlag) Type() string { return "spec" }

func (a *artifactFlag) Set(s string) error {
	platform, rest, ok := strings.Cut(s, "=")
	path, url, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 || platform == "" || path == "" || url == "" {
		return fmt.Errorf("%q: want PLATFORM=PATH,URL (e.g. linux/amd64=./bin/anc,https://…)", s)
	}
	for _, prev := range *a {
		if prev.platform == platform {
			return fmt.Errorf("platform %s given twice", platform)
		}
	}
	*a = append(*a, artifactSpec{platform, path, url})
	return nil
}

func newReleaseSignCmd(e *env) *cobra.Command {
	var o signOpts
	cmd := &cobra.Command{
		Use:   "sign --key FILE (--base YYYYMM.DD --version YYYYMM.DD.PATCH --artifact PLATFORM=PATH,URL... (--not-after T | --valid-for D) [--skip-version-check] | --envelope FILE) --out FILE|-",
		Short: "sign a release envelope from local artifacts, or co-sign one (offline)",
		Long: `sign signs a release envelope with the private key. For each --artifact,
PLATFORM is os/arch (linux/amd64, linux/arm64), PATH the local binary, whose
sha256 and size are computed here, and URL the https address nodes download
it from (PATH cannot contain a comma; URL may). The expiry must be at least
1h away: publish, a canary's bake and clock skew between this machine and
the nodes take that long, and nodes refuse an expired release. The version
stamped into each artifact (make build's -X main.version) must be
--version, as nodes check the binary's "version" before staging it; it is
read from the file, never run (this machine holds the key), so a binary
for any architecture is checked. --skip-version-check signs a binary that
carries no stamp (stripped, or not built by make build). The
envelope is written atomically to --out (mode 0644), or printed with
--out -. No network is used.

With --envelope, sign adds the --key's signature to an existing envelope
instead (a release, a component configuration or a key-set document),
keeping its payload and signatures: holders of a key set's threshold sign
one after another, offline, in any order, each passing on the file. It
takes none of the flags that describe a new release, refuses a key that
has already signed, and verifies no signature (publish and nodes do).`,
		Example: `  lpsctl release sign --key release.key --base 202604.01 --version 202604.01.3 \
      --artifact linux/amd64=./aks-node-controller,https://example.com/anc-202604.01.3 \
      --valid-for 30d --out 202604.01.3.json
  lpsctl release sign --envelope 202604.01.3.json --key second.key --out 202604.01.3.json`,
		Args:    positional(),
		PreRunE: o.output.preRun(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.envelope != "" {
				if err := required(cmd, "key", "out"); err != nil {
					return err
				}
				return releaseCosign(cmd, o, e)
			}
			if err := required(cmd, "key", "base", "version", "out"); err != nil {
				return err
			}
			return releaseSign(cmd.Context(), o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.key, "key", "", "release private key `file` (from keys generate)")
	fs.StringVar(&o.base, "base", "", "image base `YYYYMM.DD` the hotfix applies to")
	fs.StringVar(&o.version, "version", "", "hotfix version `YYYYMM.DD.PATCH`")
	fs.Var(&o.artifacts, "artifact", "`PLATFORM=PATH,URL`: local binary for PLATFORM (linux/amd64, linux/arm64) and the https URL nodes fetch it from; repeatable")
	fs.StringVar(&o.notAfter, "not-after", "", "expiry as an RFC 3339 `time` (or --valid-for)")
	newDuration(fs, &o.validFor, "valid-for", 0, "expiry as a `duration` from now, at least 1h, e.g. 30d or 720h (or --not-after)")
	fs.BoolVar(&o.launchRecords, "launch-records", false, "declare that the agent writes launch records (this agent does), so launch may kill it when it wrote none within a minute; only for a base whose baked agent verifies the declaration (this version of the agent on), since older ones refuse such a release")
	fs.StringVar(&o.out, "out", "", "`file` to write the signed envelope to (- for stdout)")
	fs.StringVar(&o.envelope, "envelope", "", "co-sign this envelope `file` (release, component configuration or key set) instead of signing a new release")
	fs.BoolVar(&o.skipVersionCheck, "skip-version-check", false, "do not check that each artifact's stamped version is --version (for a binary without the stamp: stripped, or not built by make build)")
	o.output.register(fs)
	return cmd
}

func releaseSign(ctx context.Context, o signOpts, e *env) error {
	if len(o.artifacts) == 0 {
		return usagef("--artifact is required (at least one)")
	}
	if o.out == "-" && o.output.structured() {
		return usagef("--out - prints the envelope itself; -o %s has nowhere to go", o.output.format)
	}
	now := time.Now()
	notAfter, err := expiry(o.notAfter, o.validFor, now)
	if err != nil {
		return err
	}
	// Check the flags before hashing what may be gigabytes: the same
	// release with stand-in digests.
	rel := release.Release{Base: o.base, Version: o.version, NotAfter: notAfter, Artifacts: make(map[string]release.Artifact), LaunchRecords: o.launchRecords}
	for _, a := range o.artifacts {
		rel.Artifacts[a.platform] = release.Artifact{URL: a.url, SHA256: strings.Repeat("0", sha256.Size*2), Size: 1}
	}
	if err := rel.Validate(); err != nil {
		return usagef("%v", err)
	}

	priv, err := readPrivateKey(o.key)
	if err != nil {
		return err
	}
	for _, a := range o.artifacts {
		sum, size, err := digest(ctx, a.path)
		if err != nil {
			return fmt.Errorf("--artifact %s: %w", a.platform, err)
		}
		rel.Artifacts[a.platform] = release.Artifact{URL: a.url, SHA256: sum, Size: size}
	}
	if !o.skipVersionCheck {
		for _, a := range o.artifacts {
			if err := checkVersion(a, rel.Version); err != nil {
				return err
			}
		}
	}
	env, err := release.Sign(rel, priv)
	if err != nil {
		return err
	}
	if err := writeEnvelope(ctx, e.stdout, o.out, env); err != nil || o.out == "-" {
		return err
	}

	keyID := release.KeyID(priv.Public().(ed25519.PublicKey))
	if o.output.structured() {
		return o.output.write(e.stdout, struct {
			Out       string                      `json:"out"`
			KeyID     string                      `json:"key_id"`
			Base      string                      `json:"base"`
			Version   string                      `json:"version"`
			NotAfter  string                      `json:"not_after"`
			Artifacts map[string]release.Artifact `json:"artifacts"`
		}{o.out, keyID, rel.Base, rel.Version, formatTime(notAfter.Truncate(time.Second)), rel.Artifacts})
	}
	fmt.Fprintf(e.stdout, "signed %s (base %s) with key %s, valid until %s\n", rel.Version, rel.Base, keyID, formatTime(notAfter))
	for _, a := range o.artifacts {
		art := rel.Artifacts[a.platform]
		fmt.Fprintf(e.stdout, "  %s  %d bytes  sha256 %s  %s\n", a.platform, art.Size, art.SHA256, art.URL)
	}
	fmt.Fprintf(e.stdout, "wrote %s\n", o.out)
	return nil
}

// releaseCosign adds --key's signature to the --envelope file.
func releaseCosign(cmd *cobra.Command, o signOpts, e *env) error {
	for _, f := range []string{"base", "version", "artifact", "not-after", "valid-for", "launch-records", "skip-version-check"} {
		if cmd.Flags().Changed(f) {
			return usagef("--%s describes a new release; --envelope co-signs an existing one as it is", f)
		}
	}
	if o.out == "-" && o.output.structured() {
		return usagef("--out - prints the envelope itself; -o %s has nowhere to go", o.output.format)
	}
	data, what, err := readAnyEnvelope(o.envelope)
	if err != nil {
		return err
	}
	priv, err := readPrivateKey(o.key)
	if err != nil {
		return err
	}
	env, err := release.AddSignature(data, priv)
	if err != nil {
		return fmt.Errorf("--envelope %s: %w", o.envelope, err)
	}
	if err := writeEnvelope(cmd.Context(), e.stdout, o.out, env); err != nil || o.out == "-" {
		return err
	}
	keyID := release.KeyID(priv.Public().(ed25519.PublicKey))
	if o.output.structured() {
		return o.output.write(e.stdout, struct {
			Out   string `json:"out"`
			KeyID string `json:"key_id"`
			Type  string `json:"type"`
			ID    string `json:"id"`
		}{o.out, keyID, what.kind, what.id})
	}
	fmt.Fprintf(e.stdout, "co-signed %s %s with key %s\nwrote %s\n", what.kind, what.id, keyID, o.out)
	return nil
}

// signedDoc names what an envelope signs, UNVERIFIED: its kind (release,
// component-config, key-set) and its ID (version, component@version, key-set
// version).
type signedDoc struct{ kind, id string }

// readAnyEnvelope reads an envelope file of any kind and says what it is.
func readAnyEnvelope(path string) ([]byte, signedDoc, error) {
	var what signedDoc
	data, err := readEnvelope(path, release.MaxComponentEnvelopeSize, func(data []byte) error {
		if r, err := release.Inspect(data); err == nil {
			what = signedDoc{"release", r.Version}
			return nil
		}
		if c, err := release.InspectComponent(data); err == nil {
			what = signedDoc{"component-config", fmt.Sprintf("%s@%d", c.Component, c.Version)}
			return nil
		}
		d, err := release.InspectKeySet(data)
		if err == nil {
			what = signedDoc{"key-set", fmt.Sprintf("version %d", d.Version)}
			return nil
		}
		// A damaged envelope of a known type is refused for its damage.
		for _, check := range []func([]byte) error{
			func(b []byte) error { _, err := release.Inspect(b); return err },
			func(b []byte) error { _, err := release.InspectComponent(b); return err },
		} {
			if cerr := check(data); !isWrongType(cerr) {
				return cerr
			}
		}
		if isWrongType(err) {
			return errors.New("not a release, component configuration or key-set envelope")
		}
		return err
	})
	return data, what, err
}

func isWrongType(err error) bool {
	var ve *release.VerifyError
	return errors.As(err, &ve) && ve.Reason == release.ReasonWrongType
}

// readPrivateKey reads the release private key --key names.
func readPrivateKey(path string) (ed25519.PrivateKey, error) {
	keyPEM, err := capfile.Read(path, maxKeyFileSize)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}
	priv, err := release.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--key %s: %w", path, err)
	}
	return priv, nil
}

// writeEnvelope writes a signed envelope, with a final newline, to --out:
// atomically to the file out (mode 0644), or to stdout for "-". An
// interrupted sign writes nothing.
func writeEnvelope(ctx context.Context, stdout io.Writer, out string, env []byte) error {
	env = append(env, '\n')
	if err := ctx.Err(); err != nil {
		return err
	}
	if out == "-" {
		_, err := stdout.Write(env)
		return err
	}
	if err := atomicfile.WriteFile(out, env, 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// expiry returns the release expiry from exactly one of --not-after and
// --valid-for; it must be at least minValidity away, since nodes refuse an
// expired release.
func expiry(notAfter string, validFor time.Duration, now time.Time) (time.Time, error) {
	var t time.Time
	switch {
	case (notAfter == "") == (validFor == 0):
		return t, usagef("give exactly one of --not-after and --valid-for")
	case notAfter != "":
		var err error
		if t, err = time.Parse(time.RFC3339, notAfter); err != nil {
			return t, usagef("--not-after %q: want RFC 3339, e.g. 2026-06-01T00:00:00Z", notAfter)
		}
	default:
		t = now.Add(validFor)
	}
	if !t.After(now) {
		return t, usagef("expiry %s is not in the future", formatTime(t))
	}
	if d := t.Sub(now); d < minValidity {
		return t, usagef("expiry %s is %s away: a release is signed for at least %s (publish, a canary's bake and clock skew take that long); give a later --not-after or a longer --valid-for, e.g. 30d",
			formatTime(t), duration.Format(d.Round(time.Second)), duration.Format(minValidity))
	}
	return t.UTC(), nil
}

// checkVersion reads the version stamped into a's binary (make build's
// -X main.version) and fails unless it is want: nodes run the binary with
// `version` before staging it and refuse any other answer, so a mismatch
// would fail on every node. The binary is read, never run: this is the
// machine with the release key, and running an artifact would hand the key
// to whoever built it. A binary for any architecture can be checked here.
func checkVersion(a artifactSpec, want string) error {
	got, err := agentversion.Read(a.path)
	switch {
	case errors.Is(err, agentversion.ErrNotStamped):
		return fmt.Errorf("--artifact %s: %w; an agent built by make build carries one: sign that, or give --skip-version-check to sign it unchecked", a.platform, err)
	case err != nil:
		return fmt.Errorf("--artifact %s: %w; is it the agent binary? give --skip-version-check to sign it unchecked", a.platform, err)
	case got != want:
		return fmt.Errorf("--artifact %s: %s is stamped version %q, not --version %s: nodes would refuse it; sign the binary built as %s (or fix --version)", a.platform, a.path, got, want, want)
	}
	return nil
}

// digest returns the sha256 (lowercase hex) and size of the regular file at
// path, reading at most release.MaxArtifactSize+1 bytes.
func digest(ctx context.Context, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !fi.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s: not a regular file", path)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(ctxReader{ctx, f}, release.MaxArtifactSize+1))
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	if n == 0 || n > release.MaxArtifactSize {
		return "", 0, fmt.Errorf("%s: %d bytes, want 1 to %d", path, n, release.MaxArtifactSize)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// ctxReader stops reading once ctx is done, so Ctrl-C ends a long hash.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
