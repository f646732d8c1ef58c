package main

import (
	"context"
	"fmt"

	"nodehotfix/internal/capfile"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/release"
)

func runReleasePublish(ctx context.Context, args []string, e *env) error {
	var c connFlags
	var envelope string
	fs := newFlagSet("release publish", "--envelope FILE [connection flags]", e)
	fs.StringVar(&envelope, "envelope", "", "signed envelope `file` (from release sign)")
	c.register(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if err := required([2]string{"envelope", envelope}); err != nil {
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
	err = c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		resp, err = cl.PublishRelease(ctx, &adminv1.PublishReleaseRequest{EnvelopeJson: string(data)})
		return err
	})
	if err != nil {
		return err
	}
	if resp.GetUnchanged() && !c.json {
		fmt.Fprintf(e.stdout, "%s: this envelope is already published; nothing changed\n", quote.Text(resp.GetRelease().GetVersion()))
	}
	return printRelease(e.stdout, c.json, resp.GetRelease())
}
