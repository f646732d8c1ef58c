package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodehotfix/internal/capfile"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/lps/admin"
	"nodehotfix/internal/release"
)

func newReleasePublishCmd(e *env) *cobra.Command {
	var c service
	var envelope string
	cmd := &cobra.Command{
		Use:   "publish --envelope FILE",
		Short: "publish a signed release as a draft rollout",
		Long: `publish stores a signed envelope (from release sign) as a draft: nothing is
served until a rollout set, plan or complete. Publishing the byte-identical
envelope again changes nothing and succeeds; a different envelope under a
published version is refused (exit 6): sign the change as a new patch.
An envelope signed by fewer of lpsd's release keys than their threshold
is refused (exit 3), naming who has signed and how many more must:
co-sign it with release sign --envelope and publish the result.`,
		Example: "  lpsctl release publish --envelope 202604.01.3.json --reason \"ICM 1234: kubelet flag\"",
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "envelope"); err != nil {
				return err
			}
			data, err := readEnvelope(envelope, release.MaxEnvelopeSize, func(data []byte) error {
				_, err := release.Inspect(data)
				return err
			})
			if err != nil {
				return err
			}
			var resp *adminv1.PublishReleaseResponse
			var below bool
			err = c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: string(data), Reason: c.reason})
				below = belowThreshold(err)
				return err
			})
			if below {
				return fmt.Errorf("%w; co-sign it with 'lpsctl release sign --envelope %s --key FILE --out FILE' by another key holder, then publish that", err, envelope)
			}
			if err != nil {
				return err
			}
			return printRelease(e.stdout, &c.out, resp.GetRelease(), publishedAs(resp.GetUnchanged()))
		},
	}
	cmd.Flags().StringVar(&envelope, "envelope", "", "signed envelope `file` (from release sign)")
	c.registerChange(cmd)
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return cmd
}

// belowThreshold reports whether err is lpsd refusing an envelope that
// lacks co-signatures (admin.ReasonBelowThreshold).
func belowThreshold(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == admin.ErrorDomain && info.GetReason() == admin.ReasonBelowThreshold {
			return true
		}
	}
	return false
}

// readEnvelope reads the signed envelope --envelope names, at most limit
// bytes of it and a little more for the trailing newline sign writes, and
// checks it with inspect: a wrong or damaged file is caught here, named,
// before the server refuses it.
func readEnvelope(path string, limit int64, inspect func([]byte) error) ([]byte, error) {
	data, err := capfile.Read(path, limit+1024)
	if err != nil {
		return nil, fmt.Errorf("--envelope: %w", err)
	}
	if err := inspect(data); err != nil {
		return nil, fmt.Errorf("--envelope %s: %w", path, err)
	}
	return data, nil
}

// publishedAs is what a publish says the release or configuration already
// was when unchanged: a retried publish of the same envelope.
func publishedAs(unchanged bool) string {
	if unchanged {
		return "published with this envelope"
	}
	return ""
}
