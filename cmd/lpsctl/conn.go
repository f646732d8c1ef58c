package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/capfile"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/quote"
)

// Environment variables that supply flag defaults: the connection's, and
// a change's --reason for scripts.
const (
	envServer    = "LPSCTL_SERVER"
	envTokenFile = "LPSCTL_TOKEN_FILE"
	envCA        = "LPSCTL_CA"
	envReason    = "LPSCTL_REASON"
)

// defaultTimeout bounds one admin call, connection included; admin calls
// are single store reads or writes.
const defaultTimeout = 30 * time.Second

// maxPEMFileSize caps the CA bundle and client certificate files.
const maxPEMFileSize = 1 << 20

// connFlags are the flags of every command that talks to lpsd.
type connFlags struct {
	server     string
	tokenFile  string
	ca         string
	cert, key  string
	serverName string
	timeout    time.Duration
}

func (c *connFlags) register(fs *pflag.FlagSet) {
	conn := pflag.NewFlagSet("connection", pflag.ContinueOnError)
	conn.SortFlags = false
	conn.StringVar(&c.server, "server", os.Getenv(envServer), "lpsd admin `host:port` ($"+envServer+")")
	conn.StringVar(&c.tokenFile, "token-file", os.Getenv(envTokenFile), "`file` holding the admin bearer token ($"+envTokenFile+")")
	conn.StringVar(&c.ca, "ca", os.Getenv(envCA), "PEM `file` of CAs to verify the server with ($"+envCA+"; unset: the system roots)")
	conn.StringVar(&c.cert, "cert", "", "PEM client certificate `file` for mTLS (with --key)")
	conn.StringVar(&c.key, "key", "", "PEM client private key `file` for mTLS (with --cert)")
	conn.StringVar(&c.serverName, "server-name", "", "TLS `name` to verify the server certificate for (unset: the --server host)")
	newDuration(conn, &c.timeout, "timeout", defaultTimeout, "overall time limit of the call")
	conn.VisitAll(func(f *pflag.Flag) { f.Annotations = map[string][]string{annotationConn: nil} })
	fs.AddFlagSet(conn)
}

// dial returns an admin client and a function that closes its connection.
// Nothing is sent until the first call.
func (c *connFlags) dial() (adminv1.AdminServiceClient, func(), error) {
	if c.server == "" {
		return nil, nil, usagef("--server (or $%s) is required", envServer)
	}
	if (c.cert == "") != (c.key == "") {
		return nil, nil, usagef("--cert and --key go together")
	}
	if c.tokenFile == "" && c.cert == "" {
		return nil, nil, usagef("no credentials: set --token-file (or $%s), or --cert and --key", envTokenFile)
	}
	if c.timeout <= 0 {
		return nil, nil, usagef("--timeout must be positive")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: c.serverName}
	if c.ca != "" {
		pem, err := capfile.Read(c.ca, maxPEMFileSize)
		if err != nil {
			return nil, nil, fmt.Errorf("--ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--ca %s: no PEM certificates", c.ca)
		}
	}
	if c.cert != "" {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return nil, nil, fmt.Errorf("--cert %s / --key %s: %w", c.cert, c.key, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}
	if c.tokenFile != "" {
		data, err := capfile.Read(c.tokenFile, 64<<10)
		if err != nil {
			return nil, nil, fmt.Errorf("--token-file: %w", err)
		}
		tok, err := admin.ClientToken(data)
		if err != nil {
			return nil, nil, fmt.Errorf("--token-file %s: %w", c.tokenFile, err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(tok)))
	}
	cc, err := grpc.NewClient(c.server, opts...)
	if err != nil {
		return nil, nil, usagef("--server %q: %v", c.server, err)
	}
	return adminv1.NewAdminServiceClient(cc), func() { cc.Close() }, nil
}

// call dials, runs f with a ctx bounded by --timeout, and converts a
// failed call's status to an *rpcError (the server's messages name the
// release).
func (c *connFlags) call(ctx context.Context, f func(context.Context, adminv1.AdminServiceClient) error) error {
	client, closeConn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := f(ctx, client); err != nil {
		st, ok := status.FromError(err)
		if !ok {
			return err
		}
		// The message is the server's (or the transport's): quoted, so
		// no escape or line break from it reaches the terminal raw.
		re := &rpcError{code: st.Code(), msg: quote.Text(st.Message())}
		if st.Code() == codes.Unavailable {
			re.msg = fmt.Sprintf("lpsd at %s: %s", c.server, re.msg)
		}
		return re
	}
	return nil
}

// bearer sends the admin token, and only over TLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// rpcError is a failed admin call: the server's code and message.
type rpcError struct {
	code codes.Code
	msg  string
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (%s)", e.msg, e.code) }

// completeVersions completes a VERSION argument with the releases lpsd
// has for which offer is true (nil: every one), when the connection flags
// (or their environment) reach it within a couple of seconds; otherwise it
// offers nothing.
func completeVersions(c *connFlags, offer func(*adminv1.Release) bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		q := *c
		q.timeout = min(q.timeout, 2*time.Second)
		var st *adminv1.StatusResponse
		err := q.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
			st, err = cl.Status(ctx, &adminv1.StatusRequest{})
			return err
		})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, r := range st.GetReleases() {
			// Only what a shell line can take as it is.
			v, state := r.GetVersion(), r.GetRollout().GetState()
			if offer != nil && !offer(r) {
				continue
			}
			if strings.HasPrefix(v, prefix) && quote.Text(v) == v && !strings.ContainsAny(v, " \t'\"\\$`") {
				out = append(out, cobra.CompletionWithDesc(v, quote.Text(state)))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// service is the flags of a command that talks to lpsd: the connection and
// the output format.
type service struct {
	conn connFlags
	out  outputFlags
	// reason is --reason, for commands that change something.
	reason string
}

// register adds the flags to cmd and checks the output format before it
// runs.
func (s *service) register(cmd *cobra.Command) {
	s.out.register(cmd.Flags())
	s.conn.register(cmd.Flags())
	cmd.PreRunE = s.out.preRun()
}

// registerChange registers the flags of a command that changes what lpsd
// serves, and marks it as one. Every change needs a reason, for the audit
// log: --reason, or $LPSCTL_REASON; a dry run (--dry-run) changes nothing
// and needs none.
func (s *service) registerChange(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.reason, "reason", os.Getenv(envReason), "why, in words, for the audit log; required (at most 1024 bytes; $"+envReason+")")
	s.register(cmd)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := admin.CheckReason(s.reason); err != nil {
			return usagef("--%v", err) // "--reason is 1025 bytes, ..."
		}
		if strings.TrimSpace(s.reason) == "" && !dryRun(cmd) {
			return usagef(`--reason is required: every change says why in the audit log, e.g. --reason "ICM 1234: kubelet flag" (a script may set $%s instead)`, envReason)
		}
		return s.out.resolve(cmd.Flags())
	}
	cmd.Annotations = map[string]string{annotationChange: "true"}
	cmd.ValidArgsFunction = completeVersions(&s.conn, nil)
}

// dryRun reports whether cmd was asked for a dry run (--dry-run), which
// changes nothing.
func dryRun(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("dry-run")
	return f != nil && f.Value.String() == "true"
}
