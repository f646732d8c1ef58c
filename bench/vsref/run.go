package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"nodehotfix/bench/internal/rig"
	"nodehotfix/bench/internal/stats"
	"nodehotfix/test/harness"
)

// innerEnv marks the re-run inside the namespaces.
const innerEnv = "NODEHOTFIX_VSREF_INNER"

// lpsIP is the API server name's address inside the namespace: not
// loopback, which our agent refuses for a target read from the node
// config, so both clients dial it as they would on a node.
const lpsIP = "10.255.0.1"

const buildHelp = `vsref: -ref is required: the path of the reference check-hotfix client, built outside this repository:

  # fetch the AgentBaker snapshot (github:Azure/AgentBaker), then, from its tree:
  mkdir -p /tmp/ref && git archive HEAD aks-node-controller aks-live-patching go.mod go.sum | tar -x -C /tmp/ref
  cd /tmp/ref/aks-node-controller && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-X main.Version=202604.01.0" -o /tmp/ref/aks-node-controller-ref .
  go run ./bench/vsref -ref /tmp/ref/aks-node-controller-ref

(the version is the rig's baked one; the tool runs as root: it needs network and mount namespaces)
`

type options struct {
	ref       string
	baselines []string
	n, warmup int
	keep      bool
	// rtt, when set, puts the metadata service and lpsd behind a proxy
	// with this round trip, for every client alike.
	rtt time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("vsref", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.ref, "ref", "", "path of the reference aks-node-controller binary (required; see -h)")
	fs.Func("baseline", "optional, repeatable: another build of our agent (e.g. from main) run in every round too, to measure a change in the same run", func(s string) error {
		o.baselines = append(o.baselines, s)
		return nil
	})
	fs.IntVar(&o.n, "n", 25, "measured interleaved rounds")
	fs.IntVar(&o.warmup, "warmup", 3, "unmeasured rounds first")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory")
	fs.DurationVar(&o.rtt, "rtt", 0, "round trip to add to the metadata service and lpsd (e.g. 2ms); 0 is bare loopback")
	fs.Usage = func() { fmt.Fprint(stderr, buildHelp, "\nflags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.ref == "" {
		fmt.Fprint(stderr, buildHelp)
		return 2
	}
	for _, p := range append([]*string{&o.ref}, ptrs(o.baselines)...) {
		abs, err := filepath.Abs(*p)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			fmt.Fprintf(stderr, "vsref: %v\n", err)
			return 2
		}
		*p = abs
	}
	if os.Getenv(innerEnv) == "" {
		return reexec(ctx, args, stdout, stderr)
	}
	return rig.Session(ctx, "vsref", o.keep, stdout, stderr, func(ctx context.Context, dir string) error {
		return bench(ctx, o, dir, stdout)
	})
}

// reexec runs this program again in new network and mount namespaces.
func reexec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "vsref: must run as root (network and mount namespaces for the reference's fixed addresses and paths)")
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "vsref:", err)
		return 1
	}
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--net", "--mount", "--propagation", "private", "--", self}, args...)...)
	cmd.Env = append(os.Environ(), innerEnv+"=1")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(stderr, "vsref: unshare:", err)
		return 1
	}
	return 0
}

// setupNamespace gives the namespace the reference's world: loopback up,
// the metadata address and the service's address on it, the API server
// name in /etc/hosts, and /opt/azure and /var/log/azure as the node root's.
func setupNamespace(dir, nodeRoot string) error {
	for _, c := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", "169.254.169.254/32", "dev", "lo"},
		{"ip", "addr", "add", lpsIP + "/32", "dev", "lo"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %v: %s", c, err, out)
		}
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+lpsIP+" "+harness.APIServerName+"\n"), 0o644); err != nil {
		return err
	}
	if err := unix.Mount(hosts, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind /etc/hosts: %w", err)
	}
	// tmpfs over the parents first: the mount points need not exist on
	// the host, and nothing is created there.
	for _, p := range []struct{ parent, sub string }{{"/opt", "azure"}, {"/var/log", "azure"}} {
		if err := unix.Mount("tmpfs", p.parent, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", p.parent, err)
		}
		target := filepath.Join(p.parent, p.sub)
		if err := os.Mkdir(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(filepath.Join(nodeRoot, target), target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", target, err)
		}
	}
	return nil
}

type client struct {
	name  string
	argv  []string
	times []float64
}

func bench(ctx context.Context, o options, dir string, out io.Writer) error {
	// One attested document per client run, signed before measuring.
	r, err := rig.New(ctx, dir, (3+len(o.baselines))*(o.n+o.warmup)+16)
	if err != nil {
		return err
	}
	floor, err := r.Build("./bench/floor/checkfloor")
	if err != nil {
		return err
	}
	node, err := r.NewNode("node", nil)
	if err != nil {
		return err
	}
	if err := setupNamespace(dir, node.Root); err != nil {
		return err
	}
	// The clients' fixed addresses; with -rtt the servers listen beside
	// them and a delaying proxy holds the fixed ones.
	imdsAt, lpsAt := "169.254.169.254:80", lpsIP+":443"
	if o.rtt > 0 {
		imdsAt, lpsAt = "169.254.169.254:8080", lpsIP+":8443"
	}
	ln, err := net.Listen("tcp", imdsAt)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r.IMDS}
	go srv.Serve(ln)
	defer srv.Close()
	env, err := r.SignRelease(rig.HotfixVersion, "https://artifacts.invalid/aks-node-controller", fmt.Sprintf("%064x", 1), 1)
	if err != nil {
		return err
	}
	lps, err := r.StartLPSAt(lpsAt, env)
	if err != nil {
		return err
	}
	if o.rtt > 0 {
		if _, err := rig.DelayProxy(ctx, "169.254.169.254:80", imdsAt, o.rtt/2); err != nil {
			return err
		}
		if lps, err = rig.DelayProxy(ctx, lpsIP+":443", lps, o.rtt/2); err != nil {
			return err
		}
	}
	// Every binary runs from a copy written the same way (one write, in
	// the work directory): here a process started up to 25 % faster from
	// such a copy than from the file the Go linker wrote, so binaries
	// written differently are not comparable.
	ours, err := copyExec(r.Agent, filepath.Join(dir, "ours-aks-node-controller"))
	if err != nil {
		return err
	}
	if floor, err = copyExec(floor, filepath.Join(dir, "floor-checkfloor")); err != nil {
		return err
	}
	ref, err := copyExec(o.ref, filepath.Join(dir, "reference-aks-node-controller"))
	if err != nil {
		return err
	}
	baselines := make([]string, len(o.baselines))
	for i, b := range o.baselines {
		if baselines[i], err = copyExec(b, filepath.Join(dir, baselineName(i)+"-aks-node-controller")); err != nil {
			return err
		}
	}
	// Both clients on their defaults: the metadata service at
	// 169.254.169.254, the service at <api_server_name>:443, the node's
	// files under /opt/azure (ours through --root, the same files).
	clients := []*client{
		{name: "ours", argv: []string{ours, "check-hotfix", "--root", node.Root}},
		{name: "reference", argv: []string{ref, "check-hotfix"}},
		{name: "floor", argv: []string{floor, "-imds-url", "http://169.254.169.254", "-lps-addr", lps, "-ca", r.TLS.CAFile}},
	}
	for i, b := range baselines {
		clients = append(clients, &client{name: baselineName(i), argv: []string{b, "check-hotfix", "--root", node.Root}})
	}
	pointer := "/opt/azure/containers/aks-node-controller-hotfix.json"
	network := ""
	if o.rtt > 0 {
		network = fmt.Sprintf(", a %s round trip to both services", o.rtt)
	}
	fmt.Fprintf(out, "check-hotfix vs the reference client, same lpsd (%s%s), same node files; %d rounds after %d warm-up, order rotating\n", lps, network, o.n, o.warmup)
	fmt.Fprintf(out, "  reference: %s\n", o.ref)
	for i, b := range o.baselines {
		fmt.Fprintf(out, "  %s: %s\n", baselineName(i), b)
	}
	fmt.Fprintln(out)
	for i := -o.warmup; i < o.n; i++ {
		k := len(clients)
		for j := range k {
			c := clients[(j+i+o.warmup)%k]
			os.Remove(pointer)
			res, err := rig.Run(ctx, c.argv)
			if err != nil {
				return err
			}
			if err := check(c, res, pointer); err != nil {
				return err
			}
			if i >= 0 {
				c.times = append(c.times, ms(res.Wall))
			}
		}
	}
	by := map[string]*client{}
	for _, c := range clients {
		by[c.name] = c
		fmt.Fprintf(out, "  %-26s %s\n", c.name, stats.Of(c.times).String("ms"))
	}
	quotients := []struct{ num, den, target string }{
		{"reference", "ours", ">= 1.2x (issue 25)"},
		{"ours", "floor", "<= 1.15x (issue 25)"},
		{"reference", "floor", ""},
	}
	for i := range o.baselines {
		quotients = append(quotients, struct{ num, den, target string }{baselineName(i), "ours", "> 1: ours is faster"}, struct{ num, den, target string }{baselineName(i), "floor", ""})
	}
	for _, q := range quotients {
		a, b := by[q.num], by[q.den]
		if a == nil || b == nil {
			continue
		}
		ratios := make([]float64, len(a.times))
		for i := range a.times {
			ratios[i] = a.times[i] / b.times[i]
		}
		s := stats.Of(ratios)
		fmt.Fprintf(out, "  %-26s median of per-round ratios %.3fx (min %.2f, max %.2f); ratio of medians %.3fx", q.num+" / "+q.den, s.Median, s.Min, s.Max, stats.Of(a.times).Median/stats.Of(b.times).Median)
		if q.target != "" {
			fmt.Fprintf(out, "; target %s", q.target)
		}
		fmt.Fprintln(out)
	}
	if n := r.IMDS.OnDemand(); n > 0 {
		fmt.Fprintf(out, "note: %d attested documents were signed during measurement (pool too small)\n", n)
	}
	return nil
}

// copyExec copies the executable at src to dst.
func copyExec(src, dst string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	return dst, os.WriteFile(dst, data, 0o755)
}

// baselineName names the i-th -baseline (counted from 0) in the output.
func baselineName(i int) string {
	if i == 0 {
		return "baseline"
	}
	return fmt.Sprintf("baseline%d", i+1)
}

func ptrs(ss []string) []*string {
	ps := make([]*string, len(ss))
	for i := range ss {
		ps[i] = &ss[i]
	}
	return ps
}

// check makes sure a client did the work measured: exit 0 and, for the
// two agents, the served hotfix staged in the pointer file.
func check(c *client, res rig.Result, pointer string) error {
	if res.Exit != 0 {
		return fmt.Errorf("%s exited %d:\n%s", c.name, res.Exit, res.Output)
	}
	if c.name == "floor" {
		return nil
	}
	data, err := os.ReadFile(pointer)
	if err != nil || !bytes.Contains(data, []byte(rig.HotfixVersion)) {
		return fmt.Errorf("%s did not stage %s (%v):\n%s", c.name, rig.HotfixVersion, err, strings.TrimSpace(string(res.Output)))
	}
	return nil
}

func ms(d interface{ Seconds() float64 }) float64 { return d.Seconds() * 1000 }
