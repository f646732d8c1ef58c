package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehotfix/internal/store/etcdstore/etcdtest"
	"nodehotfix/test/harness"
)

const localDNSCorefile = ".:53 {\n    errors\n    forward . 168.63.129.16\n}\n"

// TestIntegrationComponentConfig: a localDNS configuration signed with the
// release key, published and rolled out through lpsctl on a timed plan,
// scoped to lpsd's deploy environment, reaches the node's `live-patching
// localDNS` (its signature verified with the node's release keys) and
// `fetch-localdns-config` writes its Corefile; a configuration for another
// environment is not served, and after a revocation the node is answered
// NotFound again. On etcd the node asks a second replica, which sees every
// change by watch.
func TestIntegrationComponentConfig(t *testing.T) {
	integration(t)
	t.Parallel()
	flags := []string{"--deploy-env", "staging", "--autopilot-interval", "200ms"}
	t.Run("bolt", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOpts{lpsdFlags: flags})
		componentScenario(t, s, s.lpsd)
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		spec := "etcd:" + strings.Join(etcdtest.Start(t), ",")
		s := newStack(t, stackOpts{store: spec, lpsdFlags: flags})
		other, err := harness.StartLPSD(t.Context(), env.bins, s.dir, harness.LPSDOptions{
			Name: "lpsd-b", IMDSRoots: s.imds.RootsFile, Store: spec, TLS: s.lpsd.TLS, Region: "eastus", Extra: flags,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Stop(10 * time.Second) })
		componentScenario(t, s, other)
	})
}

// componentScenario runs the component configuration's life through s's
// lpsd, with the node asking serving.
func componentScenario(t *testing.T, s *stack, serving *harness.LPSD) {
	dir := t.TempDir()
	sign := func(version, config string) string {
		cfg := filepath.Join(dir, "localdns-"+version+".json")
		if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		env := filepath.Join(dir, "localDNS-"+version+".envelope.json")
		s.ctl("component", "sign", "--key", s.priv, "--component", "localDNS", "--version", version, "--config", cfg, "--valid-for", "30d", "--out", env)
		s.ctl("component", "publish", "--envelope", env, "--reason", "e2e")
		return env
	}
	quoted, _ := json.Marshal(localDNSCorefile)
	sign("1", `{"corefile":`+string(quoted)+`}`)
	sign("2", `{"corefile":"prod only {\n}\n"}`)

	n := s.node(nodeOpts{})
	agent := n.Path("opt/azure/containers/aks-node-controller")
	runAgent := func(args ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, agent, append(args, "--root", n.Root, "--imds-url", s.imds.URL, "--lps-addr", serving.GRPCAddr)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}
	lastLine := func(s string) string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		return lines[len(lines)-1]
	}

	// Published, not rolled out: NotFound, as for nothing published.
	if code, out, errOut := runAgent("live-patching", "localDNS"); code != 1 || out != "" || !strings.Contains(errOut, "NotFound") {
		t.Errorf("drafts only: live-patching exit %d, stdout %q, stderr %q; want 1 and NotFound", code, out, errOut)
	}
	if code, out, _ := runAgent("fetch-localdns-config", "--output", n.Path("opt/azure/containers/localdns/livepatched.localdns.corefile")); code != 0 || lastLine(out) != "notFound" {
		t.Errorf("drafts only: fetch-localdns-config exit %d, stdout %q; want 0 and notFound", code, out)
	}

	s.ctl("rollout", "set", "localDNS@2", "--percent", "100", "--deploy-envs", "prod", "--reason", "e2e: prod config")
	s.ctl("rollout", "set", "localDNS@1", "--deploy-envs", "staging", "--reason", "e2e: staging scope")
	s.ctl("rollout", "plan", "localDNS@1", "--steps", "1:1s,100:0s", "--reason", "e2e timed plan")
	waitConfigState(t, s, "localDNS@1", "complete")
	waitConfigsSynced(t, s, serving)

	code, out, errOut := runAgent("live-patching", "localDNS")
	if code != 0 || !strings.Contains(out, `"corefile":`+string(quoted)) || !strings.Contains(out, `"nodehotfixConfigEnvelope":`) {
		t.Fatalf("rolled out: live-patching exit %d, stdout %q, stderr %q; want the signed localDNS@1 config", code, out, errOut)
	}
	corefilePath := n.Path("opt/azure/containers/localdns/livepatched.localdns.corefile")
	if code, out, errOut := runAgent("fetch-localdns-config", "--output", corefilePath); code != 0 || lastLine(out) != "applied" {
		t.Fatalf("fetch-localdns-config exit %d, stdout %q, stderr %q; want applied", code, out, errOut)
	}
	if got, err := os.ReadFile(corefilePath); err != nil || string(got) != localDNSCorefile {
		t.Errorf("corefile = %q (%v), want %q", got, err, localDNSCorefile)
	}
	if _, out, _ := runAgent("fetch-localdns-config", "--output", corefilePath); lastLine(out) != "alreadyCurrent" {
		t.Errorf("second fetch: %q, want alreadyCurrent", out)
	}
	if e, ok := n.EventWith("FetchLocalDNSConfig", "outcome=applied"); !ok {
		t.Errorf("no FetchLocalDNSConfig event with outcome=applied (%+v)", e)
	}
	explain := s.ctl("explain", "--component", "localDNS", "--vm-id", vmID, "--subscription", subscription)
	if !strings.Contains(explain, "localDNS@1: SERVED") || !strings.Contains(explain, "FAIL  deploy-env-in-scope") {
		t.Errorf("explain --component localDNS:\n%s", explain)
	}
	audit := s.ctl("audit", "--target", "localDNS@1")
	if !strings.Contains(audit, "auto-advance") {
		t.Errorf("the timed plan's advances are not in the audit log:\n%s", audit)
	}

	s.ctl("revoke", "localDNS@1", "--reason", "e2e")
	waitConfigsSynced(t, s, serving)
	if code, out, _ := runAgent("fetch-localdns-config", "--output", corefilePath); code != 0 || lastLine(out) != "notFound" {
		t.Errorf("after revoke: fetch-localdns-config exit %d, stdout %q; want 0 and notFound", code, out)
	}
}

type configListJSON struct {
	Configs []struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Revision int64  `json:"revision"`
	} `json:"component_configs"`
}

func listConfigs(t *testing.T, s *stack) configListJSON {
	t.Helper()
	var l configListJSON
	if err := json.Unmarshal([]byte(s.ctl("component", "list", "-o", "json")), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// waitConfigState waits until the configuration id is in state.
func waitConfigState(t *testing.T, s *stack, id, state string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, c := range listConfigs(t, s).Configs {
			if c.ID == id && c.State == state {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %s: %+v", id, state, listConfigs(t, s))
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitConfigsSynced waits until l serves from a snapshot as new as every
// component configuration record.
func waitConfigsSynced(t *testing.T, s *stack, l *harness.LPSD) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := lpsdStatus(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		synced := true
		for _, c := range listConfigs(t, s).Configs {
			synced = synced && c.Revision <= st.SnapshotRevision
		}
		if synced {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lpsd snapshot %d never caught up with the component configs", st.SnapshotRevision)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
