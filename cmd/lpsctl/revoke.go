package main

import (
	"context"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
)

func runRevoke(ctx context.Context, args []string, e *env) error {
	var c connFlags
	fs := newFlagSet("revoke", "VERSION [connection flags]", e)
	c.register(fs)
	pos, err := parse(fs, args, "VERSION")
	if err != nil {
		return err
	}
	var resp *adminv1.RevokeResponse
	err = c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		resp, err = cl.Revoke(ctx, &adminv1.RevokeRequest{Version: pos[0]})
		return err
	})
	if err != nil {
		return err
	}
	return printRelease(e.stdout, c.json, resp.GetRelease())
}
