package main

import (
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"nodehotfix/internal/release"
)

type keysOpts struct {
	outPrivate, outPublic, comment string
	out                            outputFlags
}

func newKeysGenerateCmd(e *env) *cobra.Command {
	var o keysOpts
	cmd := &cobra.Command{
		Use:   "generate --out-private FILE --out-public FILE [--comment TEXT]",
		Short: "create a release signing key pair",
		Long: `generate creates an ed25519 release key pair. The private key is a PEM
PKCS #8 file created with mode 0600; keep it offline. The public key is one
line of a key set file, the format nodes trust. Neither file is ever
overwritten: if one exists, nothing is written.`,
		Example: "  lpsctl keys generate --out-private release.key --out-public release.pub --comment 'ops 2026'",
		Args:    positional(),
		PreRunE: o.out.preRun(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "out-private", "out-public"); err != nil {
				return err
			}
			return keysGenerate(o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.outPrivate, "out-private", "", "`file` to create for the private key (PEM PKCS #8, mode 0600)")
	fs.StringVar(&o.outPublic, "out-public", "", "`file` to create for the public key (one key-set line)")
	fs.StringVar(&o.comment, "comment", "", "comment on the public key line")
	o.out.register(fs)
	return cmd
}

func keysGenerate(o keysOpts, e *env) error {
	if o.outPrivate == o.outPublic {
		return usagef("--out-private and --out-public name the same file")
	}
	for _, f := range [][2]string{{"out-private", o.outPrivate}, {"out-public", o.outPublic}} {
		if _, err := os.Lstat(f[1]); err == nil {
			return fmt.Errorf("--%s %s: already exists; refusing to overwrite a key", f[0], f[1])
		}
	}
	pub, priv, err := release.GenerateKey(nil)
	if err != nil {
		return err
	}
	privPEM, err := release.MarshalPrivateKey(priv)
	if err != nil {
		return err
	}
	if err := createFile(o.outPrivate, privPEM, 0o600); err != nil {
		return fmt.Errorf("--out-private: %w", err)
	}
	if err := createFile(o.outPublic, release.MarshalPublicKey(pub, o.comment), 0o644); err != nil {
		// Leave no private key whose public half was never written.
		os.Remove(o.outPrivate)
		return fmt.Errorf("--out-public: %w", err)
	}
	id := release.KeyID(pub)
	if o.out.structured() {
		return o.out.write(e.stdout, struct {
			KeyID      string `json:"key_id"`
			PrivateKey string `json:"private_key"`
			PublicKey  string `json:"public_key"`
		}{id, o.outPrivate, o.outPublic})
	}
	fmt.Fprintf(e.stdout, "key %s\nprivate key: %s (mode 0600; keep it offline)\npublic key:  %s\n", id, o.outPrivate, o.outPublic)
	return nil
}

// createFile writes data to a new file at path, failing if anything exists
// there (a symlink included), and syncs it.
func createFile(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
