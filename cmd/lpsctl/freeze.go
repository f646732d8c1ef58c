package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	adminv1 "nodehotfix/internal/gen/nodehotfix/admin/v1"
	"nodehotfix/internal/quote"
)

// newFreezeCmd is `freeze` (frozen) or `unfreeze`.
func newFreezeCmd(e *env, frozen bool) *cobra.Command {
	var c change
	name, short, long, example := "freeze", "freeze every rollout: nothing starts or advances until unfreeze",
		`freeze holds every rollout of the fleet, releases and component
configurations alike, until unfreeze: lpsd refuses rollout set, rollout
plan, rollout skip, rollout resume and rollout complete (exit 3, naming the
freeze), and its autopilot advances no plan step. Halts, pauses and
revocations go on, the autopilot still halts a regressing release, and
nodes keep being served what they are served. A freeze is audited (action
freeze, target fleet) and shown by status and the dashboard; freezing a
frozen fleet changes nothing. --reason is required.`,
		"  lpsctl freeze --reason \"holiday change freeze, CHG 5120\""
	if !frozen {
		name, short, long, example = "unfreeze", "end the freeze: rollouts start and advance again",
			`unfreeze ends the freeze: the changes it refused are allowed again, and
the autopilot advances each plan step that came due meanwhile at its next
look. Audited (action unfreeze, target fleet); --reason is required.`,
			"  lpsctl unfreeze --reason \"freeze over, CHG 5120\"\n  lpsctl unfreeze --reason \"...\" --if-revision 12"
	}
	cmd := &cobra.Command{
		Use:     name + " --reason TEXT",
		Short:   short,
		Long:    long,
		Example: example,
		GroupID: groupChange,
		Args:    positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *adminv1.SetFreezeResponse
			err := c.conn.call(cmd.Context(), func(ctx context.Context, cl adminv1.AdminServiceClient) (err error) {
				resp, err = cl.SetFreeze(ctx, &adminv1.SetFreezeRequest{Frozen: frozen, Reason: c.reason, IfRevision: c.ifRevision})
				return err
			})
			if err != nil {
				return err
			}
			doc := toFreezeJSON(resp.GetFreeze())
			if c.out.structured() {
				return c.out.write(e.stdout, map[string]any{"freeze": doc, "unchanged": resp.GetUnchanged()})
			}
			if resp.GetUnchanged() {
				fmt.Fprintln(e.stdout, "nothing changed: already so")
			}
			return printFreeze(e.stdout, doc)
		},
	}
	c.register(cmd)
	cmd.Flag("if-revision").Usage = "apply only if the freeze is still at this `revision` (from status; 0: whatever it is)"
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return cmd
}

// freezeJSON is the freeze in -o json output (schema in doc.go).
type freezeJSON struct {
	Frozen   bool       `json:"frozen"`
	Reason   string     `json:"reason,omitempty"`
	Actor    string     `json:"actor,omitempty"`
	Since    *time.Time `json:"since,omitempty"`
	Revision int64      `json:"revision"`
}

func toFreezeJSON(f *adminv1.Freeze) freezeJSON {
	j := freezeJSON{Frozen: f.GetFrozen(), Reason: f.GetReason(), Actor: f.GetActor(), Revision: f.GetRevision()}
	if f.GetSince() != nil {
		t := f.GetSince().AsTime()
		j.Since = &t
	}
	return j
}

// printFreeze says whether every rollout is frozen, by whom, since when
// and why.
func printFreeze(w io.Writer, f freezeJSON) error {
	state := "not frozen: rollouts start and advance"
	if f.Frozen {
		state = "FROZEN: no rollout starts or advances (halts, pauses and revocations go on)"
	}
	var by string
	switch {
	case f.Since != nil:
		by = fmt.Sprintf(", since %s by %s: %s", formatTime(*f.Since), quote.Text(f.Actor), quote.Text(f.Reason))
	case f.Reason != "":
		by = ": " + quote.Text(f.Reason) // an unreadable record says so
	}
	_, err := fmt.Fprintf(w, "%s%s (revision %d)\n", state, by, f.Revision)
	return err
}
