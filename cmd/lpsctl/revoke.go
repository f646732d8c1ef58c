package main

import (
	"context"

	"github.com/spf13/cobra"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
)

func newRevokeCmd(e *env) *cobra.Command {
	var c change
	cmd := &cobra.Command{
		Use:   "revoke VERSION",
		Short: "revoke a release (staged copies removed) or component configuration: never served again",
		Long: `revoke stops serving a release for good: lpsd tells every node of its base
to remove staged copies, and no later change can serve it again. Sign a new
patch version to ship a fix. VERSION may name a component configuration
(localDNS@3): it is never served again; nodes are served the highest
version still included, or NotFound.`,
		Example: "  lpsctl revoke 202604.01.3 --reason \"superseded by 202604.01.4\"\n  lpsctl revoke 202604.01.3 --reason \"...\" --if-revision 7\n  lpsctl revoke localDNS@3 --reason \"bad corefile\"",
		GroupID: groupChange,
		Args:    positional("VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *adminv1.RevokeResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.Revoke(ctx, &adminv1.RevokeRequest{Version: args[0], Reason: c.reason, IfRevision: c.ifRevision})
				return err
			})
			if err != nil {
				return err
			}
			already := ""
			if resp.GetUnchanged() {
				already = "revoked"
			}
			if cc := resp.GetComponentConfig(); cc != nil {
				return printConfig(e.stdout, &c.out, cc, already)
			}
			return printRelease(e.stdout, &c.out, resp.GetRelease(), already)
		},
	}
	c.register(cmd)
	return cmd
}
