package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"nodehotfix/internal/capfile"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
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
published version is refused (exit 6): sign the change as a new patch.`,
		Example: "  lpsctl release publish --envelope 202604.01.3.json",
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "envelope"); err != nil {
				return err
			}
			// Room for the trailing newline release sign writes, and a little more.
			data, err := capfile.Read(envelope, release.MaxEnvelopeSize+1024)
			if err != nil {
				return fmt.Errorf("--envelope: %w", err)
			}
			// Catch a wrong or damaged file here, naming it, before the server does.
			if _, err := release.Inspect(data); err != nil {
				return fmt.Errorf("--envelope %s: %w", envelope, err)
			}
			var resp *adminv1.PublishReleaseResponse
			err = c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: string(data), Reason: c.reason})
				return err
			})
			if err != nil {
				return err
			}
			already := ""
			if resp.GetUnchanged() {
				already = "published with this envelope"
			}
			return printRelease(e.stdout, &c.out, resp.GetRelease(), already)
		},
	}
	cmd.Flags().StringVar(&envelope, "envelope", "", "signed envelope `file` (from release sign)")
	c.registerChange(cmd)
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return cmd
}
