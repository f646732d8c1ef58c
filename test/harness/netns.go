package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace with addresses on its loopback device and
// its own /etc/hosts (ip netns exec bind-mounts /etc/netns/NAME/hosts).
type Netns struct {
	Name string
}

// NewNetns creates namespace name with lo up and addrs (CIDR) on lo, and
// an /etc/hosts mapping each name in hosts to its address.
func NewNetns(name string, addrs []string, hosts map[string]string) (*Netns, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	ns := &Netns{Name: name}
	cmds := [][]string{{"ip", "-n", name, "link", "set", "lo", "up"}}
	for _, a := range addrs {
		cmds = append(cmds, []string{"ip", "-n", name, "addr", "add", a, "dev", "lo"})
	}
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			ns.Close()
			return nil, fmt.Errorf("%v: %v: %s", c, err, out)
		}
	}
	etc := filepath.Join("/etc/netns", name)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		ns.Close()
		return nil, err
	}
	content := "127.0.0.1 localhost\n"
	for h, ip := range hosts {
		content += ip + " " + h + "\n"
	}
	if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(content), 0o644); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// Prefix returns the argv prefix that runs a command in the namespace.
func (ns *Netns) Prefix() []string { return []string{"ip", "netns", "exec", ns.Name} }

// Listen opens a TCP listener inside the namespace. The socket keeps its
// namespace after the thread that created it leaves.
func (ns *Netns) Listen(addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread is never unlocked: after Setns it belongs to another
		// namespace, and Go discards a locked thread when its goroutine ends.
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/var/run/netns", ns.Name))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

// Close deletes the namespace and its /etc/netns directory.
func (ns *Netns) Close() {
	exec.Command("ip", "netns", "del", ns.Name).Run()
	os.RemoveAll(filepath.Join("/etc/netns", ns.Name))
}

// NetnsUsable reports whether namespaces can be created here, and why not.
func NetnsUsable() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "not running as root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return false, "ip (iproute2) not installed"
	}
	probe := fmt.Sprintf("nhprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return false, fmt.Sprintf("ip netns add failed: %v: %s", err, out)
	}
	exec.Command("ip", "netns", "del", probe).Run()
	return true, ""
}
