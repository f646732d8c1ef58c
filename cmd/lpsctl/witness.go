package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"nodehotfix/internal/translog"
)

// Witness server timeouts: requests are a few KiB and answered after one
// fsync, so anything slower is a stuck or hostile client.
const (
	witnessReadHeaderTimeout = 10 * time.Second
	witnessReadTimeout       = 30 * time.Second
	witnessWriteTimeout      = 30 * time.Second
	witnessIdleTimeout       = 2 * time.Minute
	witnessShutdownTimeout   = 10 * time.Second
)

// maxKeyFile bounds a key file read: an skey is one short line.
const maxKeyFile = 4 << 10

// Key kinds of witness keygen.
const (
	kindLog     = "log"
	kindWitness = "witness"
)

func newWitnessGroup(e *env) *cobra.Command {
	g := newGroup("witness", "run a transparency-log witness; make log and witness keys", groupOther)
	g.AddCommand(newWitnessServeCmd(e), newWitnessKeygenCmd(e))
	return g
}

type witnessServeOpts struct {
	key, state, listen string
	logKeys            []string
}

func newWitnessServeCmd(e *env) *cobra.Command {
	var o witnessServeOpts
	cmd := &cobra.Command{
		Use:   "serve --key FILE --log-key VKEY --state FILE --listen ADDR",
		Short: "cosign the log's checkpoints that extend the last one cosigned",
		Long: `serve runs a C2SP tlog-witness: POST /add-checkpoint with "old <size>", a
consistency proof and a checkpoint signed by a --log-key. It cosigns
(cosignature/v1) only a checkpoint that extends the last one it cosigned
for that log, which it keeps in --state, replaced atomically before it
answers. A fork (same size, other root; or a proof that does not verify)
is refused and logged at ERROR with the checkpoint as evidence.

A missing --state file is trust on first use: the first checkpoint of
each log is cosigned as it comes. A --state file that does not decode
stops the witness. Run it apart from lpsd, by someone else: a witness
whose key lpsd's operator holds protects nothing. SIGTERM or Ctrl-C
stops it gracefully.`,
		Example: "  lpsctl witness serve --key witness.key --log-key \"$(cat log.vkey)\" --state /var/lib/witness/state.json --listen :8440",
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "key", "log-key", "state", "listen"); err != nil {
				return err
			}
			return witnessServe(cmd.Context(), o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.key, "key", "", "`file` holding the witness's private key (witness keygen --kind witness)")
	fs.StringArrayVar(&o.logKeys, "log-key", nil, "a log's public key `vkey` to witness (repeatable)")
	fs.StringVar(&o.state, "state", "", "`file` of the last checkpoint cosigned per log")
	fs.StringVar(&o.listen, "listen", "", "`address` to serve on, host:port")
	return cmd
}

func witnessServe(ctx context.Context, o witnessServeOpts, e *env) error {
	skey, err := readKeyFile(o.key)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	signer, err := translog.NewCosigner(skey, nil)
	if err != nil {
		return fmt.Errorf("--key %s: %w", o.key, err)
	}
	var logs []note.Verifier
	for _, k := range o.logKeys {
		v, err := translog.ParseLogKey(k)
		if err != nil {
			return usagef("--log-key %q: %v", k, err)
		}
		logs = append(logs, v)
	}
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	w, err := translog.OpenWitness(o.state, signer, logs, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{
		Handler:           w.Handler(),
		ReadHeaderTimeout: witnessReadHeaderTimeout,
		ReadTimeout:       witnessReadTimeout,
		WriteTimeout:      witnessWriteTimeout,
		IdleTimeout:       witnessIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(e.stdout, "witness %s listening on %s\n", signer.Verifier(), ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), witnessShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("witness stopped")
	return nil
}

func readKeyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return "", fmt.Errorf("%s: over %d bytes, not a key", path, maxKeyFile)
	}
	return string(data), nil
}

type witnessKeygenOpts struct {
	kind, name, outPrivate, outPublic string
	out                               outputFlags
}

func newWitnessKeygenCmd(e *env) *cobra.Command {
	var o witnessKeygenOpts
	cmd := &cobra.Command{
		Use:   "keygen --kind log|witness --name NAME --out-private FILE --out-public FILE",
		Short: "create a log or witness key pair",
		Long: `keygen creates an Ed25519 key pair as C2SP signed-note text. --kind log is
lpsd's log key (algorithm 0x01): its name is the log's origin, e.g.
nodehotfix.example/log. --kind witness is a witness's cosignature/v1 key
(algorithm 0x04): name it for its operator, e.g. witness.example.org/w1.
The private key file ("PRIVATE+KEY+...") is created with mode 0600; the
public key file holds the vkey, the text key sets list
(nodehotfix-log-key, nodehotfix-witness). Neither file is overwritten.`,
		Example: "  lpsctl witness keygen --kind witness --name witness.example.org/w1 --out-private w1.key --out-public w1.vkey",
		Args:    positional(),
		PreRunE: o.out.preRun(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "kind", "name", "out-private", "out-public"); err != nil {
				return err
			}
			return witnessKeygen(o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.kind, "kind", "", "key `kind`: log or witness")
	fs.StringVar(&o.name, "name", "", "key `name`: the log's origin, or the witness's name")
	fs.StringVar(&o.outPrivate, "out-private", "", "`file` to create for the private key (mode 0600)")
	fs.StringVar(&o.outPublic, "out-public", "", "`file` to create for the public key (vkey)")
	o.out.register(fs)
	return cmd
}

func witnessKeygen(o witnessKeygenOpts, e *env) error {
	generate := map[string]func(string) (string, string, error){
		kindLog:     translog.GenerateLogKey,
		kindWitness: translog.GenerateWitnessKey,
	}[o.kind]
	if generate == nil {
		return usagef("--kind %q: want log or witness", o.kind)
	}
	if o.outPrivate == o.outPublic {
		return usagef("--out-private and --out-public name the same file")
	}
	for _, f := range [][2]string{{"out-private", o.outPrivate}, {"out-public", o.outPublic}} {
		if _, err := os.Lstat(f[1]); err == nil {
			return fmt.Errorf("--%s %s: already exists; refusing to overwrite a key", f[0], f[1])
		}
	}
	skey, vkey, err := generate(o.name)
	if err != nil {
		return usagef("--name %q: %v", o.name, err)
	}
	if err := createFile(o.outPrivate, []byte(skey+"\n"), 0o600); err != nil {
		return fmt.Errorf("--out-private: %w", err)
	}
	if err := createFile(o.outPublic, []byte(vkey+"\n"), 0o644); err != nil {
		// Leave no private key whose public half was never written.
		os.Remove(o.outPrivate)
		return fmt.Errorf("--out-public: %w", err)
	}
	if o.out.structured() {
		return o.out.write(e.stdout, struct {
			Kind       string `json:"kind"`
			VKey       string `json:"vkey"`
			PrivateKey string `json:"private_key"`
			PublicKey  string `json:"public_key"`
		}{o.kind, vkey, o.outPrivate, o.outPublic})
	}
	fmt.Fprintf(e.stdout, "%s key %s\nprivate key: %s (mode 0600; keep it secret)\npublic key:  %s\n", o.kind, vkey, o.outPrivate, o.outPublic)
	return nil
}
