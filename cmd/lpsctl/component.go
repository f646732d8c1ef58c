package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nodehotfix/internal/atomicfile"
	"nodehotfix/internal/capfile"
	"nodehotfix/internal/duration"
	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/release"
	"nodehotfix/internal/rollout"
)

// configJSON is a component configuration in -o json output (schema in
// doc.go).
type configJSON struct {
	ID            string          `json:"id"`
	Component     string          `json:"component"`
	Version       int64           `json:"version"`
	State         string          `json:"state"`
	Percent       int32           `json:"percent"`
	Subscriptions []string        `json:"subscriptions"`
	Regions       []string        `json:"regions"`
	DeployEnvs    []string        `json:"deploy_envs"`
	Revoked       bool            `json:"revoked"`
	NotAfter      *time.Time      `json:"not_after"`
	Expired       bool            `json:"expired"`
	PublishedAt   time.Time       `json:"published_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	Revision      int64           `json:"revision"`
	Plan          *planJSON       `json:"plan,omitempty"`
	Config        json.RawMessage `json:"config"`
	Unchanged     bool            `json:"unchanged,omitempty"`
}

func toConfigJSON(c *adminv1.ComponentConfig) configJSON {
	var notAfter *time.Time
	if c.GetNotAfter() != nil {
		t := c.GetNotAfter().AsTime()
		notAfter = &t
	}
	cfg := json.RawMessage("null")
	if s := c.GetConfigJson(); s != "" && json.Valid([]byte(s)) {
		cfg = json.RawMessage(s)
	}
	ro := c.GetRollout()
	return configJSON{
		ID:            rollout.ConfigID(c.GetComponent(), c.GetVersion()),
		Component:     c.GetComponent(),
		Version:       c.GetVersion(),
		State:         ro.GetState(),
		Percent:       ro.GetPercent(),
		Subscriptions: nonNil(ro.GetSubscriptions()),
		Regions:       nonNil(ro.GetRegions()),
		DeployEnvs:    nonNil(ro.GetDeployEnvs()),
		Revoked:       c.GetRevoked(),
		NotAfter:      notAfter,
		Expired:       notAfter == nil || !time.Now().Before(*notAfter),
		PublishedAt:   c.GetPublishedAt().AsTime(),
		UpdatedAt:     c.GetUpdatedAt().AsTime(),
		Revision:      c.GetRevision(),
		Plan:          toPlanJSON(ro.GetPlan()),
		Config:        cfg,
	}
}

// printConfig prints the component configuration a change left, as
// printRelease prints a release.
func printConfig(w io.Writer, o *outputFlags, c *adminv1.ComponentConfig, already string) error {
	if o.structured() {
		doc := toConfigJSON(c)
		doc.Unchanged = already != ""
		return o.write(w, doc)
	}
	id := quote.Text(rollout.ConfigID(c.GetComponent(), c.GetVersion()))
	if already != "" {
		fmt.Fprintf(w, "%s is already %s; nothing changed (nothing recorded in the audit log)\n", id, already)
	}
	_, err := fmt.Fprintln(w, configLine(c))
	return err
}

// configLine describes a component configuration on one line.
func configLine(c *adminv1.ComponentConfig) string {
	ro := c.GetRollout()
	line := fmt.Sprintf("%s: %s at %d%%, subscriptions %s, regions %s, deploy envs %s, revision %d",
		quote.Text(rollout.ConfigID(c.GetComponent(), c.GetVersion())), quote.Text(ro.GetState()), ro.GetPercent(),
		scope(ro.GetSubscriptions()), scope(ro.GetRegions()), scope(ro.GetDeployEnvs()), c.GetRevision())
	if p := ro.GetPlan(); p != nil && len(p.GetSteps()) > 0 {
		line += fmt.Sprintf(", timed plan step %d/%d", p.GetStep()+1, len(p.GetSteps()))
	}
	if c.GetRevoked() {
		line += ", REVOKED"
	}
	switch na := c.GetNotAfter(); {
	case na == nil:
		line += ", EXPIRED"
	case !time.Now().Before(na.AsTime()):
		line += ", EXPIRED " + formatTime(na.AsTime())
	default:
		line += ", not after " + formatTime(na.AsTime())
	}
	return line
}

// unchangedConfigAs is unchangedAs for a component configuration.
func unchangedConfigAs(unchanged bool, c *adminv1.ComponentConfig) string {
	if !unchanged {
		return ""
	}
	return quote.Text(c.GetRollout().GetState())
}

func newComponentGroup(e *env) *cobra.Command {
	g := newGroup("component", "sign, publish and list configurations of components other than the agent (localDNS)", groupChange)
	g.AddCommand(newComponentSignCmd(e), newComponentPublishCmd(e), newComponentListCmd(e))
	return g
}

type componentSignOpts struct {
	key, component, config, notAfter, out string
	version                               int64
	validFor                              time.Duration
	output                                outputFlags
}

func newComponentSignCmd(e *env) *cobra.Command {
	var o componentSignOpts
	cmd := &cobra.Command{
		Use:   "sign --key FILE --component NAME --version N --config FILE (--not-after T | --valid-for D) --out FILE|-",
		Short: "sign a component configuration with a release key (offline)",
		Long: `sign signs the configuration of a component other than the agent with a
release key: --config is a JSON object (at most 12 KiB) that nodes are
served verbatim as the component's config, with the envelope beside it in
the member nodehotfixConfigEnvelope, which reference nodes ignore. For
localDNS it holds corefile (or corefileBase64, coreFile), optionally per
agent pool under agentPools or profiles, keyed by the node's
kubernetes.azure.com/agentpool label. --version numbers the component's
configurations: nodes get the highest one whose rollout includes them. The
configuration is published and rolled out as <component>@<version>
(localDNS@3). No network is used.`,
		Example: `  lpsctl component sign --key release.key --component localDNS --version 3 \
      --config localdns.json --valid-for 30d --out localDNS-3.json`,
		Args:    positional(),
		PreRunE: o.output.preRun(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "key", "component", "version", "config", "out"); err != nil {
				return err
			}
			return componentSign(cmd.Context(), o, e)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.key, "key", "", "release private key `file` (from keys generate)")
	fs.StringVar(&o.component, "component", "", "the component's `name` as nodes ask for it (localDNS)")
	newInt(fs, &o.version, "version", 0, 1, release.MaxComponentVersion, "the configuration's version `N`, 1 or more; nodes get the highest served to them")
	fs.StringVar(&o.config, "config", "", "the configuration: a JSON object `file`")
	fs.StringVar(&o.notAfter, "not-after", "", "expiry as an RFC 3339 `time` (or --valid-for)")
	newDuration(fs, &o.validFor, "valid-for", 0, "expiry as a `duration` from now, at least 1h, e.g. 30d (or --not-after)")
	fs.StringVar(&o.out, "out", "", "`file` to write the signed envelope to (- for stdout)")
	o.output.register(fs)
	return cmd
}

func componentSign(ctx context.Context, o componentSignOpts, e *env) error {
	if o.out == "-" && o.output.structured() {
		return usagef("--out - prints the envelope itself; -o %s has nowhere to go", o.output.format)
	}
	if !release.ValidComponentName(o.component) {
		return usagef("--component %q: want a letter, then letters and digits, at most 64 (localDNS)", o.component)
	}
	notAfter, err := expiry(o.notAfter, o.validFor, time.Now())
	if err != nil {
		return err
	}
	config, err := capfile.Read(o.config, release.MaxComponentConfigSize+1)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	cc := release.ComponentConfig{Component: o.component, Version: o.version, Config: strings.TrimSpace(string(config)), NotAfter: notAfter}
	if err := cc.Validate(); err != nil {
		return usagef("--config %s: %v", o.config, err)
	}
	keyPEM, err := capfile.Read(o.key, maxKeyFileSize)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	priv, err := release.ParsePrivateKey(keyPEM)
	if err != nil {
		return fmt.Errorf("--key %s: %w", o.key, err)
	}
	env, err := release.SignComponent(cc, priv)
	if err != nil {
		return err
	}
	env = append(env, '\n')
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.out == "-" {
		_, err := e.stdout.Write(env)
		return err
	}
	if err := atomicfile.WriteFile(o.out, env, 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	keyID := release.KeyID(priv.Public().(ed25519.PublicKey))
	id := rollout.ConfigID(cc.Component, cc.Version)
	if o.output.structured() {
		return o.output.write(e.stdout, struct {
			Out      string `json:"out"`
			KeyID    string `json:"key_id"`
			ID       string `json:"id"`
			NotAfter string `json:"not_after"`
			Bytes    int    `json:"config_bytes"`
		}{o.out, keyID, id, formatTime(notAfter.Truncate(time.Second)), len(cc.Config)})
	}
	fmt.Fprintf(e.stdout, "signed %s (%d bytes of configuration) with key %s, valid until %s\nwrote %s\n", id, len(cc.Config), keyID, formatTime(notAfter), o.out)
	return nil
}

func newComponentPublishCmd(e *env) *cobra.Command {
	var c service
	var envelope string
	cmd := &cobra.Command{
		Use:   "publish --envelope FILE",
		Short: "publish a signed component configuration as a draft rollout",
		Long: `publish stores a signed component configuration (from component sign) as a
draft: nothing is served until a rollout set, plan or complete of its
<component>@<version>. Publishing the byte-identical envelope again changes
nothing and succeeds; a different envelope under a published version is
refused (exit 6): sign the change as a new version.`,
		Example: "  lpsctl component publish --envelope localDNS-3.json --reason \"forward to the new resolver\"",
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "envelope"); err != nil {
				return err
			}
			data, err := capfile.Read(envelope, release.MaxComponentEnvelopeSize+1024)
			if err != nil {
				return fmt.Errorf("--envelope: %w", err)
			}
			if _, err := release.InspectComponent(data); err != nil {
				var ve *release.VerifyError
				if errors.As(err, &ve) && ve.Reason == release.ReasonWrongType {
					return fmt.Errorf("--envelope %s: %w (a release envelope goes to lpsctl release publish)", envelope, err)
				}
				return fmt.Errorf("--envelope %s: %w", envelope, err)
			}
			var resp *adminv1.PublishComponentConfigResponse
			err = c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.PublishComponentConfig(ctx, &adminv1.PublishComponentConfigRequest{EnvelopeJson: string(data), Reason: c.reason})
				return err
			})
			if err != nil {
				return err
			}
			already := ""
			if resp.GetUnchanged() {
				already = "published with this envelope"
			}
			return printConfig(e.stdout, &c.out, resp.GetComponentConfig(), already)
		},
	}
	cmd.Flags().StringVar(&envelope, "envelope", "", "signed envelope `file` (from component sign)")
	c.registerChange(cmd)
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return cmd
}

func newComponentListCmd(e *env) *cobra.Command {
	var c service
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "list the published component configurations and their rollouts",
		Example: "  lpsctl component list -o json",
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *adminv1.StatusResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.Status(ctx, &adminv1.StatusRequest{})
				return err
			})
			if err != nil {
				return err
			}
			if c.out.structured() {
				doc := struct {
					DeployEnv string       `json:"deploy_env"`
					Configs   []configJSON `json:"component_configs"`
				}{resp.GetDeployEnv(), []configJSON{}}
				for _, cc := range resp.GetComponentConfigs() {
					doc.Configs = append(doc.Configs, toConfigJSON(cc))
				}
				return c.out.write(e.stdout, doc)
			}
			env := quote.Text(resp.GetDeployEnv())
			if env == "" {
				env = "none"
			}
			fmt.Fprintf(e.stdout, "lpsd deploy environment: %s\n", env)
			if len(resp.GetComponentConfigs()) == 0 {
				fmt.Fprintln(e.stdout, "no component configurations published")
			}
			for _, cc := range resp.GetComponentConfigs() {
				fmt.Fprintln(e.stdout, configLine(cc))
			}
			return nil
		},
	}
	c.register(cmd)
	return cmd
}

// parseTimedSteps reads a component configuration's timed plan,
// "PERCENT:BAKE,...".
func parseTimedSteps(s string) (*adminv1.Plan, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("required, e.g. 10:1h,50:1h,100:0")
	}
	plan := &adminv1.Plan{Timed: true}
	for i, part := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(part), ":")
		if len(f) != 2 {
			return nil, fmt.Errorf("step %d %q: a component configuration's step is PERCENT:BAKE (nothing reports on it, so no canary nodes or reports)", i+1, part)
		}
		pct, err := strconv.Atoi(strings.TrimSuffix(f[0], "%"))
		if err != nil || pct < 1 || pct > 100 {
			return nil, fmt.Errorf("step %d: percent %q: want 1 to 100", i+1, f[0])
		}
		bake, err := duration.Parse(f[1])
		if err != nil {
			return nil, fmt.Errorf("step %d: bake %q: %v", i+1, f[1], err)
		}
		plan.Steps = append(plan.Steps, &adminv1.PlanStep{Percent: int32(pct), BakeSeconds: int64(bake / time.Second)})
	}
	return plan, nil
}
