package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// APIServerName is the API server FQDN nodes dial; --lps-addr redirects
// the dial to loopback while TLS still verifies the service name.
const APIServerName = "myapi.test.local"

// NodeOptions describe a node root.
type NodeOptions struct {
	// BakedAgent is the path of the agent binary baked into the image.
	BakedAgent string
	// ClusterCA is the CA the node trusts for the live-patching service.
	ClusterCA []byte
	// Features is the node config's enabled_features map.
	Features map[string]string
	// ReleaseKeys is the image's trusted release key file content; nil
	// means none.
	ReleaseKeys []byte
	// Pointer is a custom-data pointer to pre-stage; nil means none.
	Pointer []byte
	// Bootstrap is the nbc-cmd.sh content; empty means a script that
	// records which agent provisioned.
	Bootstrap string
}

// HotfixHelper is the hotfix flow helper script, relative to the repository.
const HotfixHelper = "deploy/node/aks-node-controller-hotfix.sh"

// Node is a node root on disk.
type Node struct {
	Root string
}

// NewNode lays out a node root in dir as the boothook would.
func NewNode(dir string, o NodeOptions) (*Node, error) {
	n := &Node{Root: dir}
	c := n.Path("opt/azure/containers")
	for _, d := range []string{c, n.Path("etc"), n.Path("proc/sys/kernel/random"), n.Path("var/log/azure")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"version":            "v1",
		"api_server_config":  map[string]string{"api_server_name": APIServerName},
		"kubernetes_ca_cert": base64.StdEncoding.EncodeToString(o.ClusterCA),
	}
	if len(o.Features) > 0 {
		cfg["enabled_features"] = o.Features
	}
	cfgJSON, _ := json.MarshalIndent(cfg, "", "  ")
	bootstrap := o.Bootstrap
	if bootstrap == "" {
		bootstrap = "echo \"provisioned by aks-node-controller ${AKS_NODE_CONTROLLER_VERSION:-unknown}\"\n"
	}
	// Under a node root the launcher reads the kernel's hostname from
	// proc/sys/kernel/hostname.
	files := map[string][]byte{
		"etc/hostname":             []byte(host + "\n"),
		"proc/sys/kernel/hostname": []byte(host + "\n"),
		// A boot ID per node root: each root is one boot of one node.
		"proc/sys/kernel/random/boot_id":                       []byte(bootID() + "\n"),
		"opt/azure/containers/aks-node-controller-config.json": cfgJSON,
		"opt/azure/containers/aks-node-controller-nbc-cmd.sh":  []byte(bootstrap),
	}
	if feats := renderFeatures(o.Features); feats != nil {
		files["opt/azure/containers/enabled_features.sh"] = feats
	}
	if o.ReleaseKeys != nil {
		files["opt/azure/containers/aks-node-controller-release-keys.pub"] = o.ReleaseKeys
	}
	if o.Pointer != nil {
		files["opt/azure/containers/aks-node-controller-hotfix.json"] = o.Pointer
	}
	for rel, data := range files {
		if err := os.WriteFile(n.Path(rel), data, 0o600); err != nil {
			return nil, err
		}
	}
	baked, err := os.ReadFile(o.BakedAgent)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(n.Path("opt/azure/containers/aks-node-controller"), baked, 0o755); err != nil {
		return nil, err
	}
	// The hotfix flow helper, which the image always installs beside the
	// launcher (make install-node): later reference launchers source it.
	repo, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	helper, err := os.ReadFile(filepath.Join(repo, HotfixHelper))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(n.Path("opt/azure/containers/aks-node-controller-hotfix.sh"), helper, 0o755); err != nil {
		return nil, err
	}
	return n, nil
}

// bootID returns a random UUID, the shape of the kernel's boot_id.
func bootID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func renderFeatures(m map[string]string) []byte {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, m[k])
	}
	return b.Bytes()
}

// Path returns rel under the node root.
func (n *Node) Path(rel string) string { return filepath.Join(n.Root, rel) }

// LaunchResult is one launcher run.
type LaunchResult struct {
	ExitCode int
	Output   string
	Duration time.Duration
}

// RunLauncher runs the launcher against the node with the given metadata
// service and live-patching address (either may be empty: defaults).
func (n *Node) RunLauncher(ctx context.Context, launcher, imdsURL, lpsAddr string, extraEnv ...string) (LaunchResult, error) {
	return n.RunLauncherWith(ctx, LaunchOptions{Launcher: launcher, IMDSURL: imdsURL, LPSAddr: lpsAddr, Env: extraEnv})
}

// LaunchOptions configure RunLauncherWith.
type LaunchOptions struct {
	Launcher string
	// IMDSURL and LPSAddr override the agent's defaults when set.
	IMDSURL, LPSAddr string
	// Env adds environment variables.
	Env []string
	// Prefix wraps the command, e.g. InNetns(name).
	Prefix []string
}

// RunLauncherWith runs the launcher against the node.
func (n *Node) RunLauncherWith(ctx context.Context, o LaunchOptions) (LaunchResult, error) {
	env := append(os.Environ(),
		"NODE_ROOT="+n.Root,
		"HOSTNAME_WAIT_SECONDS=5",
	)
	if o.IMDSURL != "" {
		env = append(env, "IMDS_URL="+o.IMDSURL)
	}
	if o.LPSAddr != "" {
		env = append(env, "LPS_ADDR="+o.LPSAddr)
	}
	env = append(env, o.Env...)
	argv := append(append([]string(nil), o.Prefix...), "/bin/bash", o.Launcher)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	res := LaunchResult{Output: out.String(), Duration: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		res.ExitCode = ee.ExitCode()
		return res, nil
	}
	return res, err
}

// Event is a telemetry event file.
type Event struct {
	File    string
	Task    string `json:"TaskName"`
	Level   string `json:"EventLevel"`
	Message string `json:"Message"`
	Start   string `json:"Timestamp"`
	End     string `json:"OperationId"`
	Version string `json:"Version"`
}

// Events returns the node's telemetry events in file (time) order.
func (n *Node) Events() ([]Event, error) {
	dir := n.Path("var/log/azure/Microsoft.Azure.Extensions.CustomScript/events")
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(files)
	var out []Event
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var e Event
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		e.File = filepath.Base(f)
		out = append(out, e)
	}
	return out, nil
}

// EventWith returns the first event of task whose message contains s.
func (n *Node) EventWith(task, s string) (Event, bool) {
	evs, _ := n.Events()
	for _, e := range evs {
		if strings.HasSuffix(e.Task, task) && strings.Contains(e.Message, s) {
			return e, true
		}
	}
	return Event{}, false
}

// Provisioned returns provision.json, if written.
func (n *Node) Provisioned() (map[string]string, error) {
	data, err := os.ReadFile(n.Path("var/log/azure/aks/provision.json"))
	if err != nil {
		return nil, err
	}
	var m map[string]string
	return m, json.Unmarshal(data, &m)
}
