package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/quote"
	"nodehotfix/internal/release"
	"nodehotfix/internal/uuid"
)

type explainJSON struct {
	VMID           string          `json:"vm_id"`
	SubscriptionID string          `json:"subscription_id"`
	Region         string          `json:"region"`
	Decisions      []decisionJSON  `json:"decisions"`
	Pointer        json.RawMessage `json:"pointer"`
	// Component, DeployEnv and Config are set for --component: Config is
	// what the node would be served (null: NotFound).
	Component string          `json:"component,omitempty"`
	DeployEnv string          `json:"deploy_env,omitempty"`
	Config    json.RawMessage `json:"config,omitempty"`
	// Trust is, per base of the decisions, what its nodes verify.
	Trust []baseTrustJSON `json:"trust,omitempty"`
}

// baseTrustJSON is what a base's nodes verify before they run a release.
type baseTrustJSON struct {
	Base          string `json:"base"`
	KeySetVersion int64  `json:"keyset_version"`
	Threshold     int32  `json:"threshold"`
	LogRequired   bool   `json:"log_required"`
	NodesDeclared uint64 `json:"nodes_declared"`
	NodesLegacy   uint64 `json:"nodes_legacy"`
	Detail        string `json:"detail"`
}

type decisionJSON struct {
	Version  string     `json:"version"`
	Base     string     `json:"base"`
	Included bool       `json:"included"`
	Chosen   bool       `json:"chosen"`
	Rules    []ruleJSON `json:"rules"`
}

type ruleJSON struct {
	Rule   string `json:"rule"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"`
}

type explainOpts struct {
	vmID, subscription, region string
	component, deployEnv       string
}

func newExplainCmd(e *env) *cobra.Command {
	var c service
	var o explainOpts
	cmd := &cobra.Command{
		Use:   "explain --vm-id ID --subscription ID [--region R] [--deploy-env E] [--component NAME]",
		Short: "say what one node would be served, rule by rule",
		Long: `explain shows, release by release and rule by rule, what a node would be
served, from the snapshot this lpsd instance serves. Rules are evaluated in
order (not-revoked, not-expired, state-serving, subscription-in-scope,
region-in-scope, deploy-env-in-scope when the rollout has that scope, then
canary-seat or percentage) up to the first that fails. With --component
(localDNS), the decisions are that component's configurations' instead,
and the config the node would be served is shown.`,
		Example: "  lpsctl explain --vm-id 6c8f2f4e-1b7a-4d3e-9a51-0f6d2c7b8e90 --subscription 3f2b9c1d-5e6a-4b7c-8d9e-0a1b2c3d4e5f --region eastus",
		GroupID: groupInspect,
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "vm-id", "subscription"); err != nil {
				return err
			}
			// Nodes are bucketed by the vmId of their attested document,
			// always a GUID: explaining anything else describes no node.
			for _, f := range []struct{ name, v string }{{"vm-id", o.vmID}, {"subscription", o.subscription}} {
				if _, ok := uuid.Canonical(f.v); !ok {
					return usagef("--%s %q: want a GUID (8-4-4-4-12 hex digits, as in the VM's attested document or the portal)", f.name, f.v)
				}
			}
			var resp *adminv1.ExplainResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.Explain(ctx, &adminv1.ExplainRequest{VmId: o.vmID, SubscriptionId: o.subscription, Region: o.region, Component: o.component, DeployEnv: o.deployEnv})
				return err
			})
			if err != nil {
				return err
			}
			if c.out.structured() {
				return c.out.write(e.stdout, toExplainJSON(o, resp))
			}
			return printExplain(e, o, resp)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.vmID, "vm-id", "", "the node's VM `ID`")
	fs.StringVar(&o.subscription, "subscription", "", "the node's subscription `ID`")
	fs.StringVar(&o.region, "region", "", "region `label` to evaluate with (unset: the lpsd instance's)")
	fs.StringVar(&o.deployEnv, "deploy-env", "", "deploy-environment `label` to evaluate with (unset: the lpsd instance's)")
	fs.StringVar(&o.component, "component", "", "explain this component's configurations (`name`, e.g. localDNS) instead of the agent's releases")
	fs.SetNormalizeFunc(aliases(map[string]string{"subscriptions": "subscription", "vmid": "vm-id", "vm": "vm-id"}))
	c.register(cmd)
	return cmd
}

func toExplainJSON(o explainOpts, resp *adminv1.ExplainResponse) explainJSON {
	out := explainJSON{VMID: o.vmID, SubscriptionID: o.subscription, Region: o.region, Decisions: []decisionJSON{}, Pointer: json.RawMessage("null"),
		Component: o.component, DeployEnv: o.deployEnv}
	if o.component != "" {
		out.Config = json.RawMessage("null")
		if c := resp.GetConfigJson(); c != "" && json.Valid([]byte(c)) {
			out.Config = json.RawMessage(c)
		}
	}
	if p := resp.GetPointerJson(); p != "" && json.Valid([]byte(p)) {
		out.Pointer = json.RawMessage(p)
	}
	for _, d := range resp.GetDecisions() {
		dj := decisionJSON{Version: d.GetVersion(), Base: d.GetBase(), Included: d.GetIncluded(), Chosen: d.GetChosen(), Rules: []ruleJSON{}}
		for _, r := range d.GetRules() {
			dj.Rules = append(dj.Rules, ruleJSON{r.GetRule(), r.GetPassed(), r.GetDetail()})
		}
		out.Decisions = append(out.Decisions, dj)
	}
	for _, t := range resp.GetTrust() {
		out.Trust = append(out.Trust, baseTrustJSON{Base: t.GetBase(), KeySetVersion: t.GetKeysetVersion(), Threshold: t.GetThreshold(),
			LogRequired: t.GetLogRequired(), NodesDeclared: t.GetNodesDeclared(), NodesLegacy: t.GetNodesLegacy(), Detail: t.GetDetail()})
	}
	return out
}

func printExplain(e *env, o explainOpts, resp *adminv1.ExplainResponse) error {
	region := quote.Text(o.region)
	if o.region == "" {
		region = "(this lpsd instance's)"
	}
	fmt.Fprintf(e.stdout, "node %s, subscription %s, region %s\n", quote.Text(o.vmID), quote.Text(o.subscription), region)
	if o.component != "" {
		return printExplainComponent(e, o, resp)
	}
	if len(resp.GetDecisions()) == 0 {
		fmt.Fprintln(e.stdout, "\nno releases published")
	}
	for _, d := range resp.GetDecisions() {
		verdict := "not served"
		switch {
		case d.GetChosen():
			verdict = "SERVED"
		case d.GetIncluded():
			verdict = "included, but a higher patch of the base is served"
		}
		fmt.Fprintf(e.stdout, "\n%s (base %s): %s\n", quote.Text(d.GetVersion()), quote.Text(d.GetBase()), verdict)
		tw := newTable(e.stdout)
		for _, r := range d.GetRules() {
			mark := "pass"
			if !r.GetPassed() {
				mark = "FAIL"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, quote.Text(r.GetRule()), quote.Text(r.GetDetail()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, t := range resp.GetTrust() {
		fmt.Fprintf(e.stdout, "\ntrust, base %s: %s\n", quote.Text(t.GetBase()), quote.Text(t.GetDetail()))
	}
	p := resp.GetPointerJson()
	if p == "" {
		fmt.Fprintln(e.stdout, "\nnothing is served: the node keeps its baked agent (NotFound)")
		return nil
	}
	fmt.Fprintf(e.stdout, "\npointer served (%d bytes; the whole document with -o json):\n", len(p))
	for _, line := range pointerSummary([]byte(p)) {
		fmt.Fprintf(e.stdout, "  %s\n", line)
	}
	return nil
}

// pointerSummary describes a pointer document in lines for people: each
// base's hotfix (or tombstone), its signed release, and the revocations.
func pointerSummary(doc []byte) []string {
	ptr, err := hotfix.ParsePointer(doc)
	if err != nil {
		return []string{"unreadable: " + quote.Text(err.Error())}
	}
	signed := make(map[string]release.Release)
	var lines []string
	for i, env := range ptr.Releases {
		r, err := release.Inspect(env)
		if err != nil {
			lines = append(lines, fmt.Sprintf("release %d: unreadable envelope: %s", i+1, quote.Text(err.Error())))
			continue
		}
		signed[r.Version] = r
	}
	for _, base := range slices.Sorted(maps.Keys(ptr.Hotfixes)) {
		v := ptr.Hotfixes[base]
		line := fmt.Sprintf("base %s: %s", quote.Text(base), quote.Text(v))
		switch r, ok := signed[v]; {
		case v == hotfix.Tombstone(base):
			line += " (tombstone: the base has a revoked release, so no custom-data pointer installs it)"
		case ok:
			line += fmt.Sprintf(" (signed release, %s, not after %s)", strings.Join(slices.Sorted(maps.Keys(r.Artifacts)), ", "), formatTime(r.NotAfter))
		default:
			line += " (no signed release: package route)"
		}
		lines = append(lines, line)
	}
	if len(ptr.Revoked) > 0 {
		q := make([]string, len(ptr.Revoked))
		for i, v := range ptr.Revoked {
			q[i] = quote.Text(v)
		}
		lines = append(lines, "revoked: "+strings.Join(q, ", "))
	}
	if len(ptr.RevokedUnreadable) > 0 {
		q := make([]string, len(ptr.RevokedUnreadable))
		for i, e := range ptr.RevokedUnreadable {
			q[i] = quote.Text(string(e))
		}
		lines = append(lines, "revoked, not versions (a node runs no hotfix while it holds them): "+strings.Join(q, ", "))
	}
	if len(lines) == 0 {
		lines = append(lines, "empty")
	}
	return lines
}

// printExplainComponent prints explain's answer for a component's
// configurations.
func printExplainComponent(e *env, o explainOpts, resp *adminv1.ExplainResponse) error {
	if len(resp.GetDecisions()) == 0 {
		fmt.Fprintf(e.stdout, "\nno configurations of %s published\n", quote.Text(o.component))
	}
	for _, d := range resp.GetDecisions() {
		verdict := "not served"
		switch {
		case d.GetChosen():
			verdict = "SERVED"
		case d.GetIncluded():
			verdict = "included, but a higher version is served"
		}
		fmt.Fprintf(e.stdout, "\n%s: %s\n", quote.Text(d.GetVersion()), verdict)
		tw := newTable(e.stdout)
		for _, r := range d.GetRules() {
			mark := "pass"
			if !r.GetPassed() {
				mark = "FAIL"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, quote.Text(r.GetRule()), quote.Text(r.GetDetail()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if resp.GetConfigJson() == "" {
		fmt.Fprintf(e.stdout, "\nnothing is served for %s: the node is answered NotFound\n", quote.Text(o.component))
		return nil
	}
	fmt.Fprintf(e.stdout, "\nconfig served (%d bytes, with its signature; the whole document with -o json)\n", len(resp.GetConfigJson()))
	return nil
}
