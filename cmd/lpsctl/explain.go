package main

import (
	"context"
	"encoding/json"
	"fmt"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
)

type explainJSON struct {
	VMID           string          `json:"vm_id"`
	SubscriptionID string          `json:"subscription_id"`
	Region         string          `json:"region"`
	Decisions      []decisionJSON  `json:"decisions"`
	Pointer        json.RawMessage `json:"pointer"`
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
}

func runExplain(ctx context.Context, args []string, e *env) error {
	var c connFlags
	var o explainOpts
	fs := newFlagSet("explain", "--vm-id ID --subscription ID [--region R] [connection flags]", e)
	fs.StringVar(&o.vmID, "vm-id", "", "the node's VM `ID`")
	fs.StringVar(&o.subscription, "subscription", "", "the node's subscription `ID`")
	fs.StringVar(&o.region, "region", "", "region `label` to evaluate with (default: the lpsd instance's)")
	c.register(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if err := required([2]string{"vm-id", o.vmID}, [2]string{"subscription", o.subscription}); err != nil {
		return err
	}
	var resp *adminv1.ExplainResponse
	err := c.call(ctx, func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
		resp, err = cl.Explain(ctx, &adminv1.ExplainRequest{VmId: o.vmID, SubscriptionId: o.subscription, Region: o.region})
		return err
	})
	if err != nil {
		return err
	}
	if c.json {
		out := explainJSON{VMID: o.vmID, SubscriptionID: o.subscription, Region: o.region, Decisions: []decisionJSON{}, Pointer: json.RawMessage("null")}
		if p := resp.GetPointerJson(); p != "" {
			out.Pointer = json.RawMessage(p)
		}
		for _, d := range resp.GetDecisions() {
			dj := decisionJSON{Version: d.GetVersion(), Base: d.GetBase(), Included: d.GetIncluded(), Chosen: d.GetChosen(), Rules: []ruleJSON{}}
			for _, r := range d.GetRules() {
				dj.Rules = append(dj.Rules, ruleJSON{r.GetRule(), r.GetPassed(), r.GetDetail()})
			}
			out.Decisions = append(out.Decisions, dj)
		}
		return writeJSON(e.stdout, out)
	}
	return printExplain(e, o, resp)
}

func printExplain(e *env, o explainOpts, resp *adminv1.ExplainResponse) error {
	region := o.region
	if region == "" {
		region = "(this lpsd instance's)"
	}
	fmt.Fprintf(e.stdout, "node %s, subscription %s, region %s\n", o.vmID, o.subscription, region)
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
		fmt.Fprintf(e.stdout, "\n%s (base %s): %s\n", d.GetVersion(), d.GetBase(), verdict)
		tw := newTable(e.stdout)
		for _, r := range d.GetRules() {
			mark := "pass"
			if !r.GetPassed() {
				mark = "FAIL"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, r.GetRule(), r.GetDetail())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if p := resp.GetPointerJson(); p != "" {
		fmt.Fprintf(e.stdout, "\npointer served: %s\n", p)
	} else {
		fmt.Fprintln(e.stdout, "\nnothing is served: the node keeps its baked agent (NotFound)")
	}
	return nil
}
