package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/duration"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/release"
)

func newKeysPublishCmd(e *env) *cobra.Command {
	var c service
	var envelope string
	cmd := &cobra.Command{
		Use:   "publish --envelope FILE --reason TEXT",
		Short: "publish the next release key-set version (from keys rotate) to lpsd",
		Long: `publish stores a signed key-set document (from keys rotate, co-signed until
both the current set's threshold and its own have signed) as the next link
of the chain lpsd serves: nodes walk from the set their image was baked
with to it, and from then on releases verify against it (its keys, its
threshold, its log policy). It is appended to the transparency log.

lpsd refuses (exit 3) a link under either threshold, one that is not the
successor of its newest version, and one requiring a transparency log of
which it keeps no checkpoint (nodes would refuse every release). Publishing
the byte-identical envelope again changes nothing and succeeds.`,
		Example: "  lpsctl keys publish --envelope keyset-3.json --reason \"retire key 5e0c…, CHG 4711\"",
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "envelope"); err != nil {
				return err
			}
			data, err := readEnvelope(envelope, release.MaxKeySetEnvelopeSize, func(data []byte) error {
				_, err := release.InspectKeySet(data)
				return err
			})
			if err != nil {
				return err
			}
			var resp *adminv1.PublishKeySetResponse
			err = c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.PublishKeySet(ctx, &adminv1.PublishKeySetRequest{EnvelopeJson: string(data), Reason: c.reason})
				return err
			})
			if err != nil {
				return err
			}
			var extra []string
			if resp.GetUnchanged() {
				extra = append(extra, "already published with this envelope")
			} else {
				extra = append(extra, "published: nodes walk to it on their next provisioning")
			}
			return printKeySet(e.stdout, &c.out, keySetFromProto(resp.GetKeySet()), extra)
		},
	}
	cmd.Flags().StringVar(&envelope, "envelope", "", "signed key-set `file` (from keys rotate)")
	c.registerChange(cmd)
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return cmd
}

func newKeysListCmd(e *env) *cobra.Command {
	var c service
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list the release key-set chain lpsd serves",
		Long: `list prints lpsd's root key set (its --release-keys, what images are baked
with) and every published key-set version after it, oldest first: the
chain nodes walk. A reader may run it.`,
		Example: "  lpsctl keys list -o json",
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *adminv1.ListKeySetsResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.ListKeySets(ctx, &adminv1.ListKeySetsRequest{})
				return err
			})
			if err != nil {
				return err
			}
			var sets []keySetJSON
			if r := resp.GetRoot(); r != nil {
				sets = append(sets, keySetFromProto(r))
			}
			for _, l := range resp.GetLinks() {
				sets = append(sets, keySetFromProto(l))
			}
			if c.out.structured() {
				return c.out.write(e.stdout, map[string]any{"key_sets": sets})
			}
			if len(sets) == 0 {
				_, err := fmt.Fprintln(e.stdout, "lpsd has no release keys (--release-keys): publish verifies nothing")
				return err
			}
			for _, s := range sets {
				if err := printKeySet(e.stdout, &c.out, s, nil); err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.register(cmd)
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return cmd
}

// keySetFromProto is a key set lpsd described, as keys prints them.
func keySetFromProto(p *adminv1.KeySet) keySetJSON {
	j := keySetJSON{Version: p.GetVersion(), Threshold: int(p.GetThreshold()), Keys: p.GetKeyIds()}
	if t := p.GetExpires(); t != nil {
		j.Expires = formatTime(t.AsTime())
	}
	if p.GetLogKey() != "" {
		j.Log = &logPolicyJSON{
			Key: p.GetLogKey(), Witnesses: append([]string{}, p.GetWitnesses()...), Quorum: int(p.GetWitnessQuorum()),
			MaxCheckpointAge: duration.Format(time.Duration(p.GetMaxCheckpointAgeSeconds()) * time.Second), Required: p.GetLogRequired(),
		}
	}
	return j
}
