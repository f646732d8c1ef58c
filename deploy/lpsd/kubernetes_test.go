package deploy

import (
	"fmt"
	"net"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"nodehotfix/internal/rollout"
)

const manifestGlob = "kubernetes/*.yaml"

// manifests are the decoded Kubernetes objects, by kind.
type manifests struct {
	serviceAccounts []*corev1.ServiceAccount
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	budgets         []*policyv1.PodDisruptionBudget
	policies        []*networkingv1.NetworkPolicy
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readManifests decodes every document of every manifest strictly (unknown
// or duplicate fields fail) into the API type its apiVersion and kind name;
// any other kind fails too.
func readManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob(manifestGlob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests %s (%v)", manifestGlob, err)
	}
	var m manifests
	for _, f := range files {
		for i, doc := range docSeparator.Split(mustRead(t, f), -1) {
			where := fmt.Sprintf("%s document %d", f, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if tm == (metav1.TypeMeta{}) {
				continue // comments only
			}
			gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
			var obj any
			switch gvk {
			case corev1.SchemeGroupVersion.WithKind("ServiceAccount"):
				o := new(corev1.ServiceAccount)
				m.serviceAccounts, obj = append(m.serviceAccounts, o), o
			case appsv1.SchemeGroupVersion.WithKind("Deployment"):
				o := new(appsv1.Deployment)
				m.deployments, obj = append(m.deployments, o), o
			case corev1.SchemeGroupVersion.WithKind("Service"):
				o := new(corev1.Service)
				m.services, obj = append(m.services, o), o
			case policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"):
				o := new(policyv1.PodDisruptionBudget)
				m.budgets, obj = append(m.budgets, o), o
			case networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"):
				o := new(networkingv1.NetworkPolicy)
				m.policies, obj = append(m.policies, o), o
			default:
				t.Errorf("%s: %s is not a kind this test knows; add it to readManifests", where, gvk)
				continue
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s (%s): strict decode: %v", where, tm.Kind, err)
			}
		}
	}
	if len(m.deployments) != 1 || len(m.serviceAccounts) != 1 || len(m.budgets) != 1 || len(m.services) == 0 {
		t.Fatalf("%s: %d Deployments, %d ServiceAccounts, %d PodDisruptionBudgets, %d Services; want 1, 1, 1 and at least 1",
			manifestGlob, len(m.deployments), len(m.serviceAccounts), len(m.budgets), len(m.services))
	}
	return m
}

// lpsdContainer returns the Deployment's lpsd container.
func lpsdContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "lpsd" {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("Deployment %s has no container lpsd", d.Name)
	return nil
}

// kubeletVar is a $(VAR) reference in a container's argument.
var kubeletVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandArg expands the $(VAR) references of a container argument as the
// kubelet does, from the container's env: a value, or one of the pod's
// labels by the downward API.
func expandArg(t *testing.T, pod corev1.PodTemplateSpec, c *corev1.Container, arg string) string {
	t.Helper()
	return kubeletVar.ReplaceAllStringFunc(arg, func(m string) string {
		name := kubeletVar.FindStringSubmatch(m)[1]
		for _, e := range c.Env {
			if e.Name != name {
				continue
			}
			if e.ValueFrom == nil {
				return e.Value
			}
			if f := e.ValueFrom.FieldRef; f != nil {
				if key, ok := strings.CutPrefix(f.FieldPath, "metadata.labels['"); ok {
					key = strings.TrimSuffix(key, "']")
					if v, ok := pod.Labels[key]; ok {
						return v
					}
					t.Errorf("env %s: the pod has no label %s", name, key)
					return ""
				}
			}
			t.Errorf("env %s: a source this test does not resolve", name)
			return ""
		}
		t.Errorf("argument %q: no env %s", arg, name)
		return m
	})
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// TestKubernetesManifests checks what needs no lpsd binary: replicas,
// selectors, the security context, resources, spreading, the budget.
func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t)
	d := m.deployments[0]
	pod := d.Spec.Template
	c := lpsdContainer(t, d)

	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("Deployment replicas = %v, want 3", d.Spec.Replicas)
	}
	if !selects(t, d.Spec.Selector, pod.Labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", d.Spec.Selector, pod.Labels)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("Deployment rolling update %v: want maxUnavailable 0, so a rollout never drops below 3 serving replicas", ru)
	}

	sa := m.serviceAccounts[0]
	if pod.Spec.ServiceAccountName != sa.Name {
		t.Errorf("pod serviceAccountName %q, want the manifests' ServiceAccount %q", pod.Spec.ServiceAccountName, sa.Name)
	}
	if p := pod.Spec.AutomountServiceAccountToken; p == nil || *p {
		t.Errorf("pod automountServiceAccountToken %v, want false: lpsd never calls the API server", p)
	}

	psc := pod.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", psc)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext: want seccompProfile RuntimeDefault")
	}
	csc := c.SecurityContext
	switch {
	case csc == nil:
		t.Errorf("container lpsd has no securityContext")
	case csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem:
		t.Errorf("container lpsd: want readOnlyRootFilesystem true")
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
		t.Errorf("container lpsd: want allowPrivilegeEscalation false")
	case csc.Privileged != nil && *csc.Privileged:
		t.Errorf("container lpsd: privileged")
	case csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0:
		t.Errorf("container lpsd capabilities %+v: want drop [ALL] and nothing added", csc.Capabilities)
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			t.Errorf("container lpsd %s: request %v, limit %v; want both, request ≤ limit", r, &req, &lim)
		}
	}

	if c.Image == "" || strings.HasSuffix(c.Image, ":latest") || !strings.Contains(path.Base(c.Image), ":") {
		t.Errorf("container lpsd image %q: want a versioned tag", c.Image)
	}
	if len(c.Command) > 0 {
		t.Errorf("container lpsd command %q: want none, so the image's ENTRYPOINT (lpsd) runs with args", c.Command)
	}

	spread := map[string]bool{}
	for _, tsc := range pod.Spec.TopologySpreadConstraints {
		if !selects(t, tsc.LabelSelector, pod.Labels) {
			t.Errorf("topology spread on %s: selector %v does not select lpsd's pods", tsc.TopologyKey, tsc.LabelSelector)
		}
		spread[tsc.TopologyKey] = true
	}
	for _, key := range []string{corev1.LabelTopologyZone, corev1.LabelHostname} {
		if !spread[key] {
			t.Errorf("pod: no topology spread over %s", key)
		}
	}

	pdb := m.budgets[0]
	if !selects(t, pdb.Spec.Selector, pod.Labels) {
		t.Errorf("PodDisruptionBudget selector %v does not select lpsd's pods", pdb.Spec.Selector)
	}
	// With 3 replicas: one voluntary disruption at a time, two keep serving.
	replicas := 3
	allowed := -1
	if v := pdb.Spec.MaxUnavailable; v != nil {
		n, err := intstr.GetScaledValueFromIntOrPercent(v, replicas, false)
		if err == nil {
			allowed = n
		}
	} else if v := pdb.Spec.MinAvailable; v != nil {
		n, err := intstr.GetScaledValueFromIntOrPercent(v, replicas, true)
		if err == nil {
			allowed = replicas - n
		}
	}
	if allowed != 1 {
		t.Errorf("PodDisruptionBudget allows %d of %d replicas down, want 1", allowed, replicas)
	}

	for _, s := range m.services {
		if !selects(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, pod.Labels) {
			t.Errorf("Service %s selector %v does not select lpsd's pods", s.Name, s.Spec.Selector)
		}
	}
	for _, np := range m.policies {
		if !selects(t, &np.Spec.PodSelector, pod.Labels) {
			t.Errorf("NetworkPolicy %s does not select lpsd's pods", np.Name)
		}
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0) {
			t.Errorf("volume %s: Secret without a defaultMode that denies others (0400)", v.Name)
		}
	}
	for _, vm := range c.VolumeMounts {
		if _, ok := volumes[vm.Name]; !ok {
			t.Errorf("container lpsd mounts %s, which is no volume of the pod", vm.Name)
		}
		if !vm.ReadOnly {
			t.Errorf("container lpsd mount %s at %s: want readOnly", vm.Name, vm.MountPath)
		}
	}
}

// secretFlags name files holding secrets: they come from Secrets, never
// ConfigMaps.
var secretFlags = []string{"tls-key", "admin-tls-key", "admin-token-file", "etcd-key", "etcd-password-file"}

// TestKubernetesFlags checks the container's arguments against the built
// lpsd: real flags; probes, ports and Services on the listeners they name;
// every file flag on a mounted volume; the grace period over the drain.
func TestKubernetesFlags(t *testing.T) {
	l := builtLPSD(t)
	m := readManifests(t)
	d := m.deployments[0]
	pod := d.Spec.Template.Spec
	c := lpsdContainer(t, d)
	vals := checkArgs(t, "container lpsd args", c.Args, l.flags)
	flag := func(name string) string {
		if v, ok := vals[name]; ok {
			return v
		}
		return l.flags[name].def
	}

	// Each replica's labels, which rollout scopes match, come from its
	// pod's labels: set, and of the form lpsd takes.
	for _, name := range []string{"region", "deploy-env"} {
		v, ok := vals[name]
		if !ok || !kubeletVar.MatchString(v) {
			t.Errorf("--%s=%q: want it from the pod's labels by the downward API, $(VAR)", name, v)
			continue
		}
		if got := expandArg(t, d.Spec.Template, c, v); !rollout.ValidRegion(got) {
			t.Errorf("--%s=%s is %q: want a label (a letter, then letters and digits)", name, v, got)
		}
	}
	if store := flag("store"); !strings.HasPrefix(store, "etcd:") {
		t.Errorf("--store=%s: three replicas need the shared etcd store", store)
	}
	if vals["etcd-ca"] == "" || vals["etcd-cert"] == "" || vals["etcd-key"] == "" {
		t.Errorf("etcd flags %q %q %q: want --etcd-ca, --etcd-cert and --etcd-key (TLS with a client certificate)", vals["etcd-ca"], vals["etcd-cert"], vals["etcd-key"])
	}
	if _, ok := vals["etcd-allow-plaintext"]; ok {
		t.Errorf("--etcd-allow-plaintext set: etcd must be TLS")
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	resolve := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			return ports[p.StrVal]
		}
		return p.IntVal
	}
	listenPort := func(name string) (host string, port int32) {
		h, ps, err := net.SplitHostPort(flag(name))
		n, err2 := strconv.Atoi(ps)
		if err != nil || err2 != nil {
			t.Fatalf("--%s=%s: want HOST:PORT", name, flag(name))
		}
		return h, int32(n)
	}
	loopback := func(host string) bool {
		ip := net.ParseIP(host)
		return host == "localhost" || ip != nil && ip.IsLoopback()
	}

	httpHost, httpPort := listenPort("http-listen")
	if loopback(httpHost) {
		t.Errorf("--http-listen=%s: the kubelet probes the pod's IP, not its loopback", flag("http-listen"))
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"readiness", c.ReadinessProbe, "/readyz"},
		{"liveness", c.LivenessProbe, "/healthz"},
	} {
		switch {
		case p.probe == nil || p.probe.HTTPGet == nil:
			t.Errorf("container lpsd: no %s probe over HTTP", p.name)
		case p.probe.HTTPGet.Path != p.path || resolve(p.probe.HTTPGet.Port) != httpPort:
			t.Errorf("%s probe GET %s on port %v (%d), want %s on --http-listen's port %d",
				p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), resolve(p.probe.HTTPGet.Port), p.path, httpPort)
		case p.probe.HTTPGet.Scheme != "" && p.probe.HTTPGet.Scheme != corev1.URISchemeHTTP:
			t.Errorf("%s probe scheme %s: the HTTP listener is plain HTTP", p.name, p.probe.HTTPGet.Scheme)
		}
	}

	_, nodePort := listenPort("listen")
	adminHost, adminPort := listenPort("admin-listen")
	listeners := []int32{nodePort, httpPort}
	if !loopback(adminHost) {
		listeners = append(listeners, adminPort)
	}
	for name, p := range ports {
		if !slices.Contains(listeners, p) {
			t.Errorf("container port %s (%d) is no port lpsd listens on beyond loopback (%v)", name, p, listeners)
		}
	}
	var nodeServed bool
	for _, s := range m.services {
		for _, sp := range s.Spec.Ports {
			target := resolve(sp.TargetPort)
			switch {
			case target == nodePort:
				nodeServed = true
			case target == 0 || !slices.Contains(listeners, target):
				t.Errorf("Service %s port %s targets %v, which lpsd does not listen on beyond loopback", s.Name, sp.Name, sp.TargetPort.String())
			}
		}
	}
	if !nodeServed {
		t.Errorf("no Service targets the node listener's port %d (--listen)", nodePort)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for name, p := range fileFlags(vals, l.flags) {
		var vol *corev1.Volume
		for _, vm := range c.VolumeMounts {
			if vm.SubPath == "" && path.Dir(p) == vm.MountPath {
				v := volumes[vm.Name]
				vol = &v
			}
		}
		switch {
		case vol == nil:
			t.Errorf("--%s=%s: no volume is mounted at %s", name, p, path.Dir(p))
		case vol.Secret == nil && vol.ConfigMap == nil:
			t.Errorf("--%s=%s: volume %s is neither a Secret nor a ConfigMap", name, p, vol.Name)
		case slices.Contains(secretFlags, name) && vol.Secret == nil:
			t.Errorf("--%s=%s: a secret on volume %s, which is not a Secret", name, p, vol.Name)
		default:
			var items []corev1.KeyToPath
			if vol.Secret != nil {
				items = vol.Secret.Items
			} else {
				items = vol.ConfigMap.Items
			}
			if !slices.ContainsFunc(items, func(k corev1.KeyToPath) bool { return k.Path == path.Base(p) }) {
				t.Errorf("--%s=%s: volume %s lists no item with path %s", name, p, vol.Name, path.Base(p))
			}
		}
	}

	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatalf("pod: no terminationGracePeriodSeconds")
	}
	checkStopTimeout(t, "terminationGracePeriodSeconds", fmt.Sprintf("%ds", *pod.TerminationGracePeriodSeconds), flag("drain-delay"))
}
