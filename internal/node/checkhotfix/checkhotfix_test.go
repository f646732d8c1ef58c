package checkhotfix

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lpsv1 "nodehotfix/internal/gen/akslivepatching/v1"
	"nodehotfix/internal/hotfix"
	"nodehotfix/internal/node/layout"
	"nodehotfix/internal/node/lpsclient"
	"nodehotfix/internal/node/lpsclient/lpstest"
)

const (
	apiHost     = "myapi.test.local"
	bakedVer    = "202604.01.0"
	token       = "attested-doc-token"
	servedMatch = `{"hotfixes":{"202604.01":"202604.01.1","202605.30":"202605.30.1"}}`
)

// node is a hermetic node root plus the servers it talks to.
type node struct {
	t       *testing.T
	root    layout.Root
	ca      *lpstest.CA
	lps     *lpstest.Server
	imdsURL string
	budget  time.Duration // the command's budget; zero: DefaultBudget
	last    Result
}

type nodeOpts struct {
	handler     lpstest.Handler
	cert        func(ca *lpstest.CA) *lpstest.CA // issuer override
	serverNames []string
	config      string // node config JSON; "" = default, "-" = absent
	imds        http.HandlerFunc
}

func newNode(t *testing.T, o nodeOpts) *node {
	t.Helper()
	n := &node{t: t, root: layout.Root(t.TempDir()), ca: lpstest.NewCA(t), budget: 2 * time.Second}
	issuer := n.ca
	if o.cert != nil {
		issuer = o.cert(n.ca)
	}
	names := o.serverNames
	if names == nil {
		names = []string{lpsclient.ServerName}
	}
	if o.handler == nil {
		o.handler = lpstest.Config(servedMatch)
	}
	n.lps = lpstest.Start(t, issuer.Leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), names...), o.handler, lpstest.Options{})
	if o.imds == nil {
		o.imds = func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"encoding":"pkcs7","signature":"` + token + `"}`))
		}
	}
	imdsSrv := httptest.NewServer(o.imds)
	t.Cleanup(imdsSrv.Close)
	n.imdsURL = imdsSrv.URL
	if err := os.MkdirAll(n.root.Containers(), 0o755); err != nil {
		t.Fatal(err)
	}
	switch o.config {
	case "-":
	case "":
		n.writeConfig(`{"version":"v1","api_server_config":{"api_server_name":"` + apiHost + `"},"kubernetes_ca_cert":"` + n.caB64() + `"}`)
	default:
		n.writeConfig(strings.ReplaceAll(o.config, "$CA", n.caB64()))
	}
	return n
}

func (n *node) caB64() string { return base64.StdEncoding.EncodeToString(n.ca.PEM) }

func (n *node) writeConfig(s string) {
	n.t.Helper()
	if err := os.WriteFile(n.root.NodeConfig(), []byte(s), 0o600); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) seedPointer(s string, mode os.FileMode) {
	n.t.Helper()
	if err := os.WriteFile(n.root.Pointer(), []byte(s), mode); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Chmod(n.root.Pointer(), mode); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) run() Result {
	n.t.Helper()
	ctx := n.t.Context()
	budget := n.budget
	if budget == 0 {
		budget = DefaultBudget
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	n.last = Run(ctx, Config{Root: n.root, Version: bakedVer, IMDSURL: n.imdsURL, LPSAddr: n.lps.Addr})
	return n.last
}

func (n *node) pointer() (string, bool) {
	n.t.Helper()
	data, err := os.ReadFile(n.root.Pointer())
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		n.t.Fatal(err)
	}
	return string(data), true
}

// checkEvent asserts the last run's outcome and that its event message (the
// command writes it) names that outcome.
func (n *node) checkEvent(outcome Outcome) map[string]string {
	n.t.Helper()
	msg := n.last.Message()
	if n.last.Outcome != outcome || !strings.HasPrefix(msg, "check-hotfix outcome="+string(outcome)) {
		n.t.Errorf("last run = %s, message %q; want outcome %s", n.last.Outcome, msg, outcome)
	}
	if n.last.Failed() != (outcome == Failed) {
		n.t.Errorf("Failed() = %v for outcome %s", n.last.Failed(), outcome)
	}
	return map[string]string{"Message": msg}
}

func TestRunStagesServedPointer(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{})
	res := n.run()
	if res.Outcome != LPSRead || res.Err != nil {
		t.Fatalf("Run = %+v, want lpsRead", res)
	}
	got, ok := n.pointer()
	if !ok || got != servedMatch {
		t.Errorf("pointer = %q, want %q", got, servedMatch)
	}
	if fi, _ := os.Stat(n.root.Pointer()); fi.Mode().Perm() != 0o644 {
		t.Errorf("new pointer mode = %v, want 0644", fi.Mode().Perm())
	}
	n.checkEvent(LPSRead)
	reqs := n.lps.Requests()
	if len(reqs) != 1 || reqs[0].Component != "aksNodeController" || !cmp.Equal(reqs[0].Authorization, []string{token}) || reqs[0].ServerName != apiHost {
		t.Errorf("server saw %+v", reqs)
	}
}

func TestRunNoHotfixForBaseStillStages(t *testing.T) {
	t.Parallel()
	served := `{"hotfixes":{"202607.15":"202607.15.1"}}`
	n := newNode(t, nodeOpts{handler: lpstest.Config(served)})
	if res := n.run(); res.Outcome != NoHotfixForBase {
		t.Fatalf("Run = %+v, want noHotfixForBase", res)
	}
	if got, _ := n.pointer(); got != served {
		t.Errorf("pointer = %q, want the full served map %q", got, served)
	}
	n.checkEvent(NoHotfixForBase)
}

func TestRunEmptyServedConfigLeavesPointerAlone(t *testing.T) {
	t.Parallel()
	const seeded = `{"version":"202604.01.3","hotfixes":{"202604.01":"202604.01.2"}}`
	for name, body := range map[string]string{
		"empty object":     `{}`,
		"empty map":        `{"hotfixes":{}}`,
		"legacy-only body": `{"version":"202604.01.9","scripts_version":"202604.01.9"}`,
		"empty body":       "  \n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t, nodeOpts{handler: lpstest.Config(body)})
			n.seedPointer(seeded, 0o600)
			res := n.run()
			if res.Outcome != NoHotfixAvailable || res.Err != nil {
				t.Fatalf("Run = %+v, want noHotfixAvailable", res)
			}
			if got, _ := n.pointer(); got != seeded {
				t.Errorf("pointer = %q, want untouched %q", got, seeded)
			}
			n.checkEvent(NoHotfixAvailable)
		})
	}
}

func TestRunPreservesKeysItDoesNotOwn(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{})
	n.seedPointer(`{"version":"202604.01.3","scripts_version":"202604.01.4","hotfixes":{"202601.01":"202601.01.1"},"artifacts":{"k":"v"},"zz_future":[1,2,3]}`, 0o640)
	if res := n.run(); res.Outcome != LPSRead {
		t.Fatalf("Run = %+v", res)
	}
	got, _ := n.pointer()
	want := `{"version":"202604.01.3","scripts_version":"202604.01.4","hotfixes":{"202601.01":"202601.01.1","202604.01":"202604.01.1","202605.30":"202605.30.1"},"artifacts":{"k":"v"},"zz_future":[1,2,3]}`
	if got != want {
		t.Errorf("pointer = %s\nwant      %s", got, want)
	}
	if fi, _ := os.Stat(n.root.Pointer()); fi.Mode().Perm() != 0o640 {
		t.Errorf("pointer mode = %v, want the existing 0640", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(n.root.Containers())
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file left behind: %s", e.Name())
		}
	}
}

func TestRunDoesNotFollowSymlinkAtPointer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		o           nodeOpts
		want        Outcome
		wantPointer string
	}{
		{"served", nodeOpts{}, LPSRead, servedMatch},
		{"cold-start", nodeOpts{handler: lpstest.Error(status.Error(codes.Unavailable, "x")), config: coldStartConfig}, CustomDataFallback, `{"hotfixes":{"202604.01":"202604.01.7"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t, tt.o)
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte(`{"hotfixes":{"202604.01":"202604.01.9"}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, n.root.Pointer()); err != nil {
				t.Fatal(err)
			}
			if res := n.run(); res.Outcome != tt.want {
				t.Fatalf("Run = %+v, want %s", res, tt.want)
			}
			if data, _ := os.ReadFile(victim); string(data) != `{"hotfixes":{"202604.01":"202604.01.9"}}` {
				t.Errorf("symlink target was overwritten: %q", data)
			}
			fi, err := os.Lstat(n.root.Pointer())
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("pointer path is %v, %v; want a regular file replacing the link", fi.Mode(), err)
			}
			// The link's target is not read either: nothing of it is merged.
			if got, _ := n.pointer(); got != tt.wantPointer {
				t.Errorf("pointer = %q, want %q", got, tt.wantPointer)
			}
		})
	}
}

// releases returns a JSON array of n signed-looking releases tagged tag,
// with SAS-style URLs dense in '&' and '<', '>' in an opaque field.
func releases(tag string, n int) string {
	var rs []string
	for size := 0; size < n; {
		r := fmt.Sprintf(`{"tag":%q,"url":"https://store.example/agent/%d?sv=2026-01-01&ss=b&srt=o&sp=r&se=2026-12-31&spr=https&sig=a%%2Bb","note":"<signed & sealed>"}`, tag, len(rs))
		rs = append(rs, r)
		size += len(r) + 1
	}
	return "[" + strings.Join(rs, ",") + "]"
}

// TestRunStagesServedBytesUnchanged stages a canonical served document full
// of characters json.Marshal would HTML-escape: the staged file must be the
// same bytes, or a document well under download-hotfix's read limit could
// be staged over it.
func TestRunStagesServedBytesUnchanged(t *testing.T) {
	t.Parallel()
	for _, size := range []int{12_700, hotfix.MaxPointerSize - 500} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			served := `{"hotfixes":{"202604.01":"202604.01.1"},"releases":` + releases("served", size) + `}`
			n := newNode(t, nodeOpts{handler: lpstest.Config(served)})
			if res := n.run(); res.Outcome != LPSRead {
				t.Fatalf("Run = %+v, want lpsRead", res)
			}
			if got, _ := n.pointer(); got != served {
				t.Errorf("staged %d bytes from a served %d bytes, want them unchanged", len(got), len(served))
			}
		})
	}
}

// TestRunRefusesPointerOverReadLimit merges a served document into a staged
// one whose releases it must keep, giving more than download-hotfix reads:
// nothing is written and the old file is intact.
func TestRunRefusesPointerOverReadLimit(t *testing.T) {
	t.Parallel()
	// Revocations are never shed, so a staged list this long plus the
	// served releases cannot fit.
	var revoked []string
	for i := range 3000 {
		revoked = append(revoked, fmt.Sprintf("%q", fmt.Sprintf("202604.01.%d", i+10)))
	}
	seeded := `{"hotfixes":{"202604.01":"202604.01.7"},"revoked":[` + strings.Join(revoked, ",") + `]}`
	served := `{"hotfixes":{"202607.15":"202607.15.1"},"releases":` + releases("served", 30<<10) + `}`
	n := newNode(t, nodeOpts{handler: lpstest.Config(served)})
	n.seedPointer(seeded, 0o640)
	res := n.run()
	if res.Outcome != Failed || res.Err == nil || !strings.Contains(res.Err.Error(), "read limit") {
		t.Fatalf("Run = %+v, want failed over the limit", res)
	}
	if got, _ := n.pointer(); got != seeded {
		t.Errorf("pointer changed to %d bytes, want the old %d bytes intact", len(got), len(seeded))
	}
	if fi, _ := os.Stat(n.root.Pointer()); fi.Mode().Perm() != 0o640 {
		t.Errorf("pointer mode = %v, want the existing 0640", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(n.root.Containers())
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file left behind: %s", e.Name())
		}
	}
	n.checkEvent(Failed)
}

// TestRunShedsStagedOnlyReleasesOverReadLimit: releases only the node's
// file holds pile up across rotations; once the merge passes the read cap
// they are shed, so the served pointer (and its revocations) still stage.
func TestRunShedsStagedOnlyReleasesOverReadLimit(t *testing.T) {
	t.Parallel()
	seeded := `{"hotfixes":{"202604.01":"202604.01.7"},"releases":` + releases("custom-data", 40<<10) + `,"revoked":["202604.01.3"]}`
	served := `{"hotfixes":{"202607.15":"202607.15.1"},"releases":` + releases("served", 30<<10) + `,"revoked":["202604.01.5"]}`
	n := newNode(t, nodeOpts{handler: lpstest.Config(served)})
	n.seedPointer(seeded, 0o640)
	if res := n.run(); res.Outcome != NoHotfixForBase {
		t.Fatalf("Run = %+v, want noHotfixForBase (staged; nothing served for this base)", res)
	}
	got, _ := n.pointer()
	p, err := hotfix.ParsePointer([]byte(got))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "custom-data") || !strings.Contains(got, `"served"`) {
		t.Errorf("staged releases: custom-data kept %v, served kept %v", strings.Contains(got, "custom-data"), strings.Contains(got, `"served"`))
	}
	if p.Hotfixes["202604.01"] != "202604.01.7" || p.Hotfixes["202607.15"] != "202607.15.1" {
		t.Errorf("hotfixes = %v, want both bases", p.Hotfixes)
	}
	if want := []string{"202604.01.3", "202604.01.5"}; !slices.Equal(p.Revoked, want) {
		t.Errorf("revoked = %v, want %v", p.Revoked, want)
	}
}

// TestRunServedMapForOtherBasesKeepsCustomData seeds what custom data
// stages (a map entry for this node's base, with its release) and serves a
// map for other bases only.
func TestRunServedMapForOtherBasesKeepsCustomData(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{handler: lpstest.Config(`{"version":"202699.01.1","hotfixes":{"202607.15":"202607.15.1","202604.01":""},"releases":[{"r":"15"},{"r":"7"}],"revoked":["202604.01.5","202604.01.3"]}`)})
	n.seedPointer(`{"version":"202604.01.2","hotfixes":{"202604.01":"202604.01.7","202605.30":"202605.30.1"},"releases":[{"r":"7"},{"r":"30"}],"revoked":["202604.01.3"]}`, 0o644)
	if res := n.run(); res.Outcome != NoHotfixForBase {
		t.Fatalf("Run = %+v, want noHotfixForBase", res)
	}
	// 202604.01 is served (blank), so the served entry wins; 202605.30 is
	// not, so the staged entry and its release stay.
	want := `{"version":"202604.01.2","hotfixes":{"202604.01":"","202605.30":"202605.30.1","202607.15":"202607.15.1"},"releases":[{"r":"15"},{"r":"7"},{"r":"30"}],"revoked":["202604.01.3","202604.01.5"]}`
	if got, _ := n.pointer(); got != want {
		t.Errorf("pointer = %s\nwant      %s", got, want)
	}
}

// TestRunColdStartKeepsStagedPointer runs with the service down over a
// pointer an earlier answer staged: the cold-start map adds only bases the
// pointer lacks, and its releases and revocations stay, so an outage
// cannot make download-hotfix remove a verified hotfix.
func TestRunColdStartKeepsStagedPointer(t *testing.T) {
	t.Parallel()
	const config = `{"version":"v1","api_server_config":{"api_server_name":"` + apiHost + `"},"kubernetes_ca_cert":"$CA","hotfixes":{"202604.01":"202604.01.7","202605.30":"202605.30.2"}}`
	n := newNode(t, nodeOpts{handler: lpstest.Error(status.Error(codes.Unavailable, "x")), config: config})
	n.seedPointer(`{"version":"202604.01.4","hotfixes":{"202604.01":"202604.01.1"},"releases":[{"r":"1"}],"revoked":["202604.01.7"],"x":1}`, 0o644)
	if res := n.run(); res.Outcome != CustomDataFallback {
		t.Fatalf("Run = %+v, want customDataFallback", res)
	}
	want := `{"version":"202604.01.4","hotfixes":{"202604.01":"202604.01.1","202605.30":"202605.30.2"},"releases":[{"r":"1"}],"revoked":["202604.01.7"],"x":1}`
	if got, _ := n.pointer(); got != want {
		t.Errorf("pointer = %s\nwant      %s", got, want)
	}
	n.checkEvent(CustomDataFallback)
}

const coldStartConfig = `{"version":"v1","api_server_config":{"api_server_name":"` + apiHost + `"},"kubernetes_ca_cert":"$CA","hotfixes":{"202604.01":"202604.01.7"}}`

func TestRunErrorMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		handler     lpstest.Handler
		coldStart   bool
		want        Outcome
		wantPointer string // "" = absent
		wantMsg     string
	}{
		{name: "unauthenticated is benign", handler: lpstest.Error(status.Error(codes.Unauthenticated, "x")), coldStart: true, want: NoHotfixAvailable, wantMsg: "code Unauthenticated"},
		{name: "permission denied is benign", handler: lpstest.Error(status.Error(codes.PermissionDenied, "x")), coldStart: true, want: NoHotfixAvailable, wantMsg: "code PermissionDenied"},
		{name: "not found is benign", handler: lpstest.Error(status.Error(codes.NotFound, "x")), coldStart: true, want: NoHotfixAvailable, wantMsg: "code NotFound"},
		{name: "invalid argument does not fall back", handler: lpstest.Error(status.Error(codes.InvalidArgument, "x")), coldStart: true, want: Failed, wantMsg: "not falling back"},
		{name: "resource exhausted does not fall back", handler: lpstest.Error(status.Error(codes.ResourceExhausted, "x")), coldStart: true, want: Failed, wantMsg: "not falling back"},
		{name: "unavailable falls back to cold start", handler: lpstest.Error(status.Error(codes.Unavailable, "x")), coldStart: true, want: CustomDataFallback, wantPointer: `{"hotfixes":{"202604.01":"202604.01.7"}}`},
		{name: "internal falls back to cold start", handler: lpstest.Error(status.Error(codes.Internal, "x")), coldStart: true, want: CustomDataFallback, wantPointer: `{"hotfixes":{"202604.01":"202604.01.7"}}`},
		{name: "unavailable without cold start", handler: lpstest.Error(status.Error(codes.Unavailable, "x")), want: NoColdStartPointer, wantMsg: "no cold-start pointer present"},
		{name: "invalid body", handler: lpstest.Config(`{"hotfixes":`), coldStart: true, want: Failed, wantMsg: "parse hotfix pointer"},
		{name: "garbage body", handler: lpstest.Config("<html>captive portal</html>"), want: Failed, wantMsg: "parse hotfix pointer"},
		{name: "oversized body", handler: lpstest.Config(`{"x":"` + strings.Repeat("a", 2<<20) + `"}`), coldStart: true, want: Failed, wantMsg: "ResourceExhausted"},
		{name: "body over the pointer cap", handler: lpstest.Config(`{"x":"` + strings.Repeat("a", 100<<10) + `"}`), want: Failed, wantMsg: "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := nodeOpts{handler: tt.handler}
			if tt.coldStart {
				o.config = coldStartConfig
			}
			n := newNode(t, o)
			res := n.run()
			if res.Outcome != tt.want {
				t.Fatalf("Run = %+v, want %s", res, tt.want)
			}
			got, ok := n.pointer()
			if tt.wantPointer == "" && ok {
				t.Errorf("pointer staged %q, want none", got)
			}
			if tt.wantPointer != "" && got != tt.wantPointer {
				t.Errorf("pointer = %q, want %q", got, tt.wantPointer)
			}
			ev := n.checkEvent(tt.want)
			if !strings.Contains(ev["Message"], tt.wantMsg) {
				t.Errorf("event message %q does not contain %q", ev["Message"], tt.wantMsg)
			}
		})
	}
}

func TestRunTLSFailureIsNotFallbackEligible(t *testing.T) {
	t.Parallel()
	other := lpstest.NewCA(t)
	tests := []struct {
		name string
		o    nodeOpts
		want string
	}{
		{"wrong CA", nodeOpts{cert: func(*lpstest.CA) *lpstest.CA { return other }, config: coldStartConfig}, "unknown authority"},
		{"wrong name", nodeOpts{serverNames: []string{apiHost}, config: coldStartConfig}, "TLS verification failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t, tt.o)
			res := n.run()
			if res.Outcome != Failed || res.Err == nil || !strings.Contains(res.Err.Error(), tt.want) {
				t.Fatalf("Run = %+v, want failed mentioning %q", res, tt.want)
			}
			if got, ok := n.pointer(); ok {
				t.Errorf("pointer staged %q after a TLS failure, want none", got)
			}
			if len(n.lps.Requests()) != 0 {
				t.Error("the token reached a server that failed verification")
			}
			n.checkEvent(Failed)
		})
	}
}

// TestRunHungServerReturnsWithinBudget runs against a server that accepts
// and never answers. Run has no deadline but its own budget: if the budget
// were not enforced the test would hang until the test binary's timeout.
func TestRunHungServerReturnsWithinBudget(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{handler: lpstest.Hang(), config: coldStartConfig})
	n.budget = 300 * time.Millisecond
	res := n.run()
	if res.Outcome != CustomDataFallback || res.Err == nil || !strings.Contains(res.Err.Error(), "DeadlineExceeded") {
		t.Fatalf("Run = %+v, want a deadline then cold-start fallback", res)
	}
	n.checkEvent(CustomDataFallback)
}

func TestRunIMDSFailures(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	tests := []struct {
		name    string
		imds    http.HandlerFunc
		wantMsg string
	}{
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, "imds returned status 500"},
		{"missing signature", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"encoding":"pkcs7"}`)) }, "empty signature"},
		{"huge", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(strings.Repeat("x", 1<<20))) }, "exceeds"},
		{"slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t, nodeOpts{imds: tt.imds})
			n.budget = 500 * time.Millisecond
			res := n.run()
			// Fallback-eligible, and the node config has no cold-start map.
			if res.Outcome != NoColdStartPointer || !strings.Contains(res.Err.Error(), tt.wantMsg) {
				t.Fatalf("Run = %+v, want noColdStartPointer mentioning %q", res, tt.wantMsg)
			}
			if len(n.lps.Requests()) != 0 {
				t.Error("LPS was called without a token")
			}
			n.checkEvent(NoColdStartPointer)
		})
	}
}

// TestRunHandshakesWhileIMDSAnswers: the TLS handshake with the service
// runs while the metadata service prepares the document. Here the
// document comes only once the service has seen the handshake: a
// check-hotfix that dialed after the document would never get one.
func TestRunHandshakesWhileIMDSAnswers(t *testing.T) {
	t.Parallel()
	var n *node
	n = newNode(t, nodeOpts{imds: func(w http.ResponseWriter, r *http.Request) {
		for n.lps.Handshakes() == 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
		w.Write([]byte(`{"encoding":"pkcs7","signature":"` + token + `"}`))
	}})
	if res := n.run(); res.Outcome != LPSRead {
		t.Fatalf("Run = %+v, want lpsRead: the handshake did not overlap the metadata call", res)
	}
	if reqs := n.lps.Requests(); len(reqs) != 1 || len(reqs[0].Authorization) != 1 || reqs[0].Authorization[0] != token {
		t.Errorf("service saw %+v, want one call carrying the document", reqs)
	}
}

func TestRunIMDSDown(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{config: coldStartConfig})
	n.imdsURL = "http://127.0.0.1:1"
	if res := n.run(); res.Outcome != CustomDataFallback {
		t.Fatalf("Run = %+v, want customDataFallback", res)
	}
}

func TestRunTargetFallbacks(t *testing.T) {
	t.Parallel()
	const (
		absent   = "node config not found, trying nbc-cmd.sh fallback"
		nameless = "node config lacks the API server name, trying nbc-cmd.sh fallback"
		loaded   = "loaded LPS target from nbc-cmd.sh fallback"
		dialed   = "check-hotfix LPS gRPC dial"
	)
	tests := []struct {
		name   string
		config string
		nbc    string
		want   Outcome
		// lines are the messages logged of the target, in order (the
		// reference's e2e greps the fallback's two).
		lines []string
	}{
		{"node config", "", "", LPSRead, []string{dialed}},
		{"nbc-cmd when config absent", "-", `API_SERVER_NAME=` + apiHost + ` KUBE_CA_CRT="$CA" /bin/bash /opt/azure/containers/provision_start.sh`, LPSRead, []string{absent, loaded, dialed}},
		{"nbc-cmd with unquoted CA", "-", `API_SERVER_NAME=` + apiHost + ` KUBE_CA_CRT=$CA /bin/true`, LPSRead, []string{absent, loaded, dialed}},
		{"nbc-cmd when config lacks the name", `{"version":"v1"}`, `API_SERVER_NAME=` + apiHost + `; KUBE_CA_CRT='$CA'; /bin/true`, LPSRead, []string{nameless, loaded, dialed}},
		{"no CA anywhere", "-", `API_SERVER_NAME=` + apiHost + ` /bin/true`, NoColdStartPointer, []string{absent}},
		{"nothing at all", "-", "", NoColdStartPointer, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t, nodeOpts{config: tt.config})
			if tt.nbc != "" {
				nbc := strings.ReplaceAll(tt.nbc, "$CA", n.caB64())
				if err := os.WriteFile(n.root.NBCCmd(), []byte(nbc), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logged bytes.Buffer
			res := Run(t.Context(), Config{Root: n.root, Version: bakedVer, IMDSURL: n.imdsURL, LPSAddr: n.lps.Addr, Log: slog.New(slog.NewJSONHandler(&logged, nil))})
			if res.Outcome != tt.want {
				t.Fatalf("Run = %+v, want %s", res, tt.want)
			}
			n.last = res
			n.checkEvent(tt.want)
			lines := slices.DeleteFunc(messages(t, &logged), func(m string) bool {
				return !slices.Contains([]string{absent, nameless, loaded, dialed}, m)
			})
			if !slices.Equal(lines, tt.lines) {
				t.Errorf("target lines %q, want %q", lines, tt.lines)
			}
		})
	}
}

// messages returns the messages of the JSON log lines in logged.
func messages(t *testing.T, logged *bytes.Buffer) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		var rec struct{ Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, rec.Msg)
	}
	return out
}

// TestRunLogsTheDialWhenIMDSFails: the dial line is logged when the dial
// starts, before the metadata service is asked, so a node whose IMDS
// fails still says it connected (the service saw a handshake; a hostile
// review found the line lost when it was logged after the document).
func TestRunLogsTheDialWhenIMDSFails(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{imds: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }})
	var logged bytes.Buffer
	res := Run(t.Context(), Config{Root: n.root, Version: bakedVer, IMDSURL: n.imdsURL, LPSAddr: n.lps.Addr, Log: slog.New(slog.NewJSONHandler(&logged, nil))})
	if res.Outcome != NoColdStartPointer {
		t.Fatalf("Run = %+v, want %s", res, NoColdStartPointer)
	}
	if msgs := messages(t, &logged); !slices.Contains(msgs, "check-hotfix LPS gRPC dial") {
		t.Errorf("logged %q, want the dial line", msgs)
	}
}

func TestRunRefusesWithoutCA(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{config: `{"api_server_config":{"api_server_name":"` + apiHost + `"}}`})
	res := n.run()
	if res.Outcome != NoColdStartPointer || !strings.Contains(res.Err.Error(), "refusing to fetch over unverified TLS") {
		t.Fatalf("Run = %+v", res)
	}
	if len(n.lps.Requests()) != 0 {
		t.Error("LPS was called without a CA")
	}
}

func TestRunUnparsableVersionIsNoHotfixForBase(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{})
	res := Run(t.Context(), Config{Root: n.root, Version: "dev", IMDSURL: n.imdsURL, LPSAddr: n.lps.Addr})
	if res.Outcome != NoHotfixForBase {
		t.Fatalf("Run = %+v, want noHotfixForBase", res)
	}
}

func TestRunStagesRevocationsWithAnEmptyMap(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{handler: lpstest.Config(`{"hotfixes":{},"revoked":["202604.01.1"]}`)})
	n.seedPointer(`{"version":"202604.01.1","revoked":["202604.01.0"],"x":1}`, 0o600)
	res := n.run()
	if res.Outcome != NoHotfixAvailable || !strings.Contains(res.Detail, "revoked") {
		t.Fatalf("Run = %+v, want noHotfixAvailable staging revocations", res)
	}
	got, _ := n.pointer()
	if want := `{"version":"202604.01.1","hotfixes":{},"revoked":["202604.01.0","202604.01.1"],"x":1}`; got != want {
		t.Errorf("pointer = %s, want %s", got, want)
	}
}

// TestRunStagesReadableRevocationsOfAnUnreadableList: a served document
// with one revoked entry that is not a version is staged, not refused, so
// its readable revocation takes effect; the bad entry is staged too, so the
// pointer's readers this boot run the baked agent. The next answer without
// it lets the hotfix run again.
func TestRunStagesReadableRevocationsOfAnUnreadableList(t *testing.T) {
	t.Parallel()
	var body atomic.Value
	body.Store(`{"hotfixes":{"202604.01":"202604.01.2"},"revoked":["202604.01.1","202604.01.x"]}`)
	n := newNode(t, nodeOpts{handler: func(ctx context.Context, req *lpsv1.GetComponentConfigRequest) (*lpsv1.GetComponentConfigResponse, error) {
		return lpstest.Config(body.Load().(string))(ctx, req)
	}})
	// What an earlier answer staged: hotfix .1, since revoked.
	n.seedPointer(`{"hotfixes":{"202604.01":"202604.01.1"}}`, 0o644)
	res := n.run()
	if res.Outcome != LPSRead || res.Err != nil || !strings.Contains(res.Detail, "not versions") {
		t.Fatalf("Run = %+v, want lpsRead saying revoked entries are not versions", res)
	}
	n.checkEvent(LPSRead)
	got, _ := n.pointer()
	if want := `{"hotfixes":{"202604.01":"202604.01.2"},"revoked":["202604.01.1","202604.01.x"]}`; got != want {
		t.Errorf("pointer = %s, want %s", got, want)
	}
	staged, err := hotfix.ParsePointer([]byte(got))
	if err != nil {
		t.Fatal(err)
	}
	if !staged.IsRevoked(hotfix.MustParseVersion("202604.01.1")) {
		t.Error("the readable revocation of 202604.01.1 is not staged")
	}
	ready := hotfix.Staged{Present: true, Reported: "202604.01.2"}
	if d := hotfix.Select(hotfix.Input{Baked: bakedVer, Pointer: staged, Staged: ready}); d.Agent != hotfix.AgentBaked || d.Reason != hotfix.ReasonUnreadableRevocation || !d.Remove {
		t.Errorf("Select on the staged pointer = %s/%s remove=%v (%s), want baked/unreadableRevocation, the staged file removed", d.Agent, d.Reason, d.Remove, d.Detail)
	}

	body.Store(`{"hotfixes":{"202604.01":"202604.01.2"},"revoked":["202604.01.1"]}`)
	if res := n.run(); res.Outcome != LPSRead || res.Detail != "" {
		t.Fatalf("second Run = %+v, want lpsRead", res)
	}
	got, _ = n.pointer()
	if want := `{"hotfixes":{"202604.01":"202604.01.2"},"revoked":["202604.01.1"]}`; got != want {
		t.Errorf("pointer after a readable answer = %s, want %s", got, want)
	}
	if staged, err = hotfix.ParsePointer([]byte(got)); err != nil {
		t.Fatal(err)
	}
	if d := hotfix.Select(hotfix.Input{Baked: bakedVer, Pointer: staged, Staged: ready}); d.Agent != hotfix.AgentHotfix {
		t.Errorf("Select after a readable answer = %s/%s (%s), want the hotfix", d.Agent, d.Reason, d.Detail)
	}
}

// TestRunStagesUnreadableRevocationsWithAnEmptyMap: a served document with
// no hotfixes and only an unreadable revoked entry is staged too.
func TestRunStagesUnreadableRevocationsWithAnEmptyMap(t *testing.T) {
	t.Parallel()
	n := newNode(t, nodeOpts{handler: lpstest.Config(`{"hotfixes":{},"revoked":[7]}`)})
	n.seedPointer(`{"hotfixes":{"202604.01":"202604.01.1"}}`, 0o644)
	if res := n.run(); res.Outcome != NoHotfixAvailable || !strings.Contains(res.Detail, "not versions") {
		t.Fatalf("Run = %+v, want noHotfixAvailable staging the unreadable entry", res)
	}
	if got, _ := n.pointer(); got != `{"hotfixes":{"202604.01":"202604.01.1"},"revoked":[7]}` {
		want := `{"hotfixes":{"202604.01":"202604.01.1"},"revoked":[7]}`
		t.Errorf("pointer = %s, want %s", got, want)
	}
}

// runAt is run with the service dialed at addr.
func (n *node) runAt(addr string) Result {
	n.t.Helper()
	budget := n.budget
	if budget == 0 {
		budget = DefaultBudget
	}
	ctx, cancel := context.WithTimeout(n.t.Context(), budget)
	defer cancel()
	n.last = Run(ctx, Config{Root: n.root, Version: bakedVer, IMDSURL: n.imdsURL, LPSAddr: addr})
	return n.last
}

// TestRunRedialsAfterAnEarlyDialFailed: the service drops the connection
// check-hotfix opens while IMDS takes 200 ms, and serves normally from
// then on. The early attempt is not the call's: check-hotfix dials again
// when it has the token and reads the service (it fell back to the
// cold-start map before Conn.Fresh; found by a hostile review).
func TestRunRedialsAfterAnEarlyDialFailed(t *testing.T) {
	t.Parallel()
	var accepted *atomic.Int32
	n := newNode(t, nodeOpts{config: coldStartConfig, imds: func(w http.ResponseWriter, r *http.Request) {
		// The document comes once the early connection was dropped,
		// and the client has had 200 ms to see it fail.
		for accepted.Load() == 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Write([]byte(`{"encoding":"pkcs7","signature":"` + token + `"}`))
	}})
	n.budget = DefaultBudget
	var addr string
	addr, accepted = lpstest.Route(t, func(c int) string {
		if c == 1 {
			return "" // the early connection, reset
		}
		return n.lps.Addr
	})
	res := n.runAt(addr)
	if res.Outcome != LPSRead {
		t.Fatalf("Run = %+v (proxy accepted %d connections), want lpsRead: the service was healthy when the token came", res, accepted.Load())
	}
}
