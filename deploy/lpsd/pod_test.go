package deploy

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"nodehotfix/internal/release"
	"nodehotfix/internal/store/etcdstore"
	"nodehotfix/internal/store/etcdstore/etcdembed"
	"nodehotfix/test/harness"
)

// podUID is the uid and fsGroup of the manifests' pod.
const podUID = 65532

// TestIntegrationKubernetesPod runs the built lpsd with the Deployment's
// arguments as the kubelet would: every Secret and ConfigMap key the volumes
// list written under its mount (the keys the README's kubectl commands
// create), group-readable by the fsGroup and run as that uid when the test
// is root; the store an embedded etcd with TLS, client certificates and
// authentication, the user limited to lpsd's key prefix. Only the listeners'
// ports (to 0), the etcd endpoint and the drain delay (to 0s) are changed.
// lpsd must turn ready and stop cleanly on SIGTERM.
func TestIntegrationKubernetesPod(t *testing.T) {
	l := builtLPSD(t)
	d := readManifests(t).deployments[0]
	c := lpsdContainer(t, d)
	dir := t.TempDir()
	// The uid the pod runs as must reach the binary and the files.
	for _, p := range []string{filepath.Dir(l.bin), filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	pki, err := harness.MintEtcdPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	nodeTLS, err := harness.MintTLS(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := etcdembed.Start(filepath.Join(dir, "etcd"), 1, etcdembed.Options{
		NoFsync:   true,
		ClientTLS: &etcdembed.ClientTLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	endpoint := strings.TrimPrefix(cluster.Endpoints()[0], "https://")

	vals := map[string]string{}
	for _, a := range c.Args {
		name, v, _ := strings.Cut(strings.TrimPrefix(expandArg(t, d.Spec.Template, c, a), "--"), "=")
		vals[name] = v
	}
	password := hex.EncodeToString(randomBytes(t, 16))
	secureEtcd(t, cluster.Endpoints()[0], pki, vals["etcd-user"], password)

	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// What the README's kubectl commands put in each Secret and ConfigMap.
	content := map[string]map[string]string{
		"lpsd-tls":          {"tls.crt": mustRead(t, nodeTLS.CertFile), "tls.key": mustRead(t, nodeTLS.KeyFile)},
		"lpsd-admin-tokens": {"admin-tokens": "ops:" + hex.EncodeToString(randomBytes(t, 32)) + "\n"},
		"lpsd-etcd": {"ca.crt": mustRead(t, pki.CA), "tls.crt": mustRead(t, pki.ClientCert),
			"tls.key": mustRead(t, pki.ClientKey), "password": password + "\n"},
		"lpsd-release-keys": {"release-keys.pub": string(release.MarshalPublicKey(pub, "deploy test"))},
	}
	root := os.Geteuid() == 0
	mounts := map[string]string{} // mount path in the pod → directory here
	volumes := map[string]*podVolume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		switch {
		case v.Secret != nil:
			volumes[v.Name] = &podVolume{source: v.Secret.SecretName, items: v.Secret.Items, mode: v.Secret.DefaultMode}
		case v.ConfigMap != nil:
			volumes[v.Name] = &podVolume{source: v.ConfigMap.Name, items: v.ConfigMap.Items, mode: v.ConfigMap.DefaultMode}
		}
	}
	for _, vm := range c.VolumeMounts {
		v := volumes[vm.Name]
		if v == nil {
			t.Fatalf("mount %s: volume %s is no Secret or ConfigMap", vm.MountPath, vm.Name)
		}
		local := filepath.Join(dir, "volumes", vm.Name)
		if err := os.MkdirAll(local, 0o755); err != nil {
			t.Fatal(err)
		}
		mounts[vm.MountPath] = local
		for _, it := range v.items {
			data, ok := content[v.source][it.Key]
			if !ok {
				t.Fatalf("volume %s wants key %s of %s, which the README's commands do not create", vm.Name, it.Key, v.source)
			}
			p := filepath.Join(local, it.Path)
			if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			// The kubelet's fsGroup handling: group podUID, read bits for it.
			mode := os.FileMode(0o400)
			if v.mode != nil {
				mode = os.FileMode(*v.mode)
			}
			if root {
				mode |= 0o440
				if err := os.Chown(p, 0, podUID); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
	}

	addrFile := filepath.Join(dir, "addr.json")
	var args []string
	for _, a := range c.Args {
		name, v, _ := strings.Cut(strings.TrimPrefix(expandArg(t, d.Spec.Template, c, a), "--"), "=")
		switch {
		case name == "listen" || name == "admin-listen" || name == "http-listen":
			host, _, _ := net.SplitHostPort(v)
			v = net.JoinHostPort(host, "0")
		case name == "store":
			v = "etcd:" + endpoint
		case name == "drain-delay":
			v = "0s"
		case l.flags[name].kind == "file":
			local, ok := mounts[path.Dir(v)]
			if !ok {
				t.Fatalf("--%s=%s: no volume mounted at %s", name, v, path.Dir(v))
			}
			v = filepath.Join(local, path.Base(v))
		}
		args = append(args, "--"+name+"="+v)
	}
	args = append(args, "--addr-file="+addrFile)

	var cred *syscall.Credential
	if root {
		cred = &syscall.Credential{Uid: podUID, Gid: podUID, Groups: []uint32{podUID}}
		if err := os.Chown(filepath.Dir(addrFile), podUID, podUID); err != nil {
			t.Fatal(err)
		}
	}
	p := startProc(t, append([]string{l.bin}, args...), cred, addrFile)
	p.poll(t, "/readyz answers 200", func() bool { return p.get("/readyz") == http.StatusOK })
	if code := p.get("/healthz"); code != http.StatusOK {
		p.fatalf(t, "GET /healthz: %d, want 200", code)
	}
	p.stop(t, p.cmd.Process.Pid)
	t.Logf("lpsd ready on the Deployment's arguments (as uid %d: %v) against etcd with TLS and a prefix-limited user", podUID, root)
}

type podVolume struct {
	source string // Secret or ConfigMap name
	items  []corev1.KeyToPath
	mode   *int32
}

// secureEtcd creates user with a role that may read and write lpsd's key
// prefix only, and a root user, then turns authentication on.
func secureEtcd(t *testing.T, endpoint string, p harness.EtcdPKI, user, password string) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(mustRead(t, p.CA)))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second,
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := etcdstore.DefaultPrefix
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", hex.EncodeToString(randomBytes(t, 16))); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, user); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, user, password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, user, user); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("secure etcd, step %d: %v", i+1, err)
		}
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
