package deploy

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/routes"
)

// manifests is every object of one set of files under deploy/kubernetes,
// decoded strictly.
type manifests struct {
	namespaces  []corev1.Namespace
	configMaps  []corev1.ConfigMap
	pvcs        []corev1.PersistentVolumeClaim
	deployments []appsv1.Deployment
	services    []corev1.Service
	pdbs        []policyv1.PodDisruptionBudget
	policies    []networkingv1.NetworkPolicy // cproxy's namespace
	sandbox     []networkingv1.NetworkPolicy // sandboxes/, applied in the sandboxes' namespace
}

// replacedByReplicas are the files of deploy/kubernetes that the replicas/
// folder takes the place of; the others are applied with it.
var replacedByReplicas = []string{"10-configmap.yaml", "20-pvc.yaml", "30-deployment.yaml"}

// singleReplicaFiles is what kubectl apply -f kubernetes/ and
// kubectl apply -f kubernetes/sandboxes/ apply: the one-replica set.
func singleReplicaFiles(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	sandboxFiles, _ := filepath.Glob("kubernetes/sandboxes/*.yaml")
	if len(files) == 0 || len(sandboxFiles) == 0 {
		t.Fatal("no manifests under kubernetes/")
	}
	return append(files, sandboxFiles...)
}

// replicaFiles is the set for several replicas on the shared PostgreSQL
// store: kubernetes/*.yaml but replacedByReplicas, then kubernetes/replicas/
// and kubernetes/sandboxes/.
func replicaFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, f := range singleReplicaFiles(t) {
		if filepath.Dir(f) != "kubernetes" || !slices.Contains(replacedByReplicas, filepath.Base(f)) {
			files = append(files, f)
		}
	}
	replicas, _ := filepath.Glob("kubernetes/replicas/*.yaml")
	if len(replicas) == 0 || len(files) != len(singleReplicaFiles(t))-len(replacedByReplicas) {
		t.Fatalf("want kubernetes/replicas/*.yaml, and %v in kubernetes/ for them to replace", replacedByReplicas)
	}
	return append(files, replicas...)
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadManifests decodes each YAML document into its Kubernetes API type with
// decode: an unknown or misspelt field, or one given twice, fails the test,
// as kubectl apply --validate=strict would.
func loadManifests(t *testing.T, files []string) manifests {
	t.Helper()
	var m manifests
	for _, file := range files {
		for i, doc := range docSep.Split(readFile(t, file), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: document %d: %v", file, i+1, err)
			}
			where := fmt.Sprintf("%s: document %d (%s %s)", file, i+1, meta.APIVersion, meta.Kind)
			var err error
			switch meta.APIVersion + " " + meta.Kind {
			case "v1 Namespace":
				err = decode(doc, &m.namespaces)
			case "v1 ConfigMap":
				err = decode(doc, &m.configMaps)
			case "v1 PersistentVolumeClaim":
				err = decode(doc, &m.pvcs)
			case "apps/v1 Deployment":
				err = decode(doc, &m.deployments)
			case "v1 Service":
				err = decode(doc, &m.services)
			case "policy/v1 PodDisruptionBudget":
				err = decode(doc, &m.pdbs)
			case "networking.k8s.io/v1 NetworkPolicy":
				if filepath.Base(filepath.Dir(file)) == "sandboxes" {
					err = decode(doc, &m.sandbox)
				} else {
					err = decode(doc, &m.policies)
				}
			default:
				t.Fatalf("%s: a kind this test does not check: add it", where)
			}
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		}
	}
	return m
}

// decode is what the API server's strict field validation does: YAML to
// JSON refusing a key given twice, then JSON into the type with field names
// matched case-sensitively (encoding/json would take readOnlyRootFileSystem
// for readOnlyRootFilesystem) and unknown fields refused.
func decode[T any](doc string, list *[]T) error {
	data, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return err
	}
	var v T
	strict, err := kjson.UnmarshalStrict(data, &v)
	if err != nil {
		return err
	}
	if err := errors.Join(strict...); err != nil {
		return err
	}
	*list = append(*list, v)
	return nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// only returns the one element of list, failing on none or several.
func only[T any](t *testing.T, what string, list []T) T {
	t.Helper()
	if len(list) != 1 {
		t.Fatalf("want one %s, have %d", what, len(list))
	}
	return list[0]
}

const (
	namespace     = "cproxy"
	proxyPort     = 8080
	adminPort     = 9001
	sandboxLabel  = "cproxy.dev/role=sandbox"
	harnessLabel  = "cproxy.dev/role=harness"
	configDir     = "/etc/cproxy"
	configFile    = configDir + "/cproxy.toml"
	stateDir      = "/var/lib/cproxy"
	credentialEnv = "ANTHROPIC_API_KEY"
)

func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t, singleReplicaFiles(t))
	p := checkDeployment(t, m)

	// One process per store: one replica, and the old pod gone before the
	// new one opens the file.
	if p.d.Spec.Replicas == nil || *p.d.Spec.Replicas != 1 {
		t.Error("Deployment: want replicas: 1 (the embedded store is one process's)")
	}
	if p.d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("Deployment strategy %q, want Recreate", p.d.Spec.Strategy.Type)
	}
	pvc := only(t, "PersistentVolumeClaim", m.pvcs)
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("PVC access modes %v, want [ReadWriteOnce]", pvc.Spec.AccessModes)
	}
	if grace := p.pod.TerminationGracePeriodSeconds; grace == nil || float64(*grace) <= p.cfg.Listen.Drain.Seconds() {
		t.Errorf("terminationGracePeriodSeconds must be above listen.drain (%s)", p.cfg.Listen.Drain)
	}

	// The store on the PVC.
	stMount, ok := p.mounts[stateDir]
	if !ok || stMount.ReadOnly {
		t.Fatalf("want a writable mount at %s", stateDir)
	}
	if v := p.volumes[stMount.Name]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("volume %s: want PVC %s", stMount.Name, pvc.Name)
	}
	if filepath.Dir(p.cfg.Store.Path) != stateDir {
		t.Errorf("store.path %s is not on the PVC mounted at %s", p.cfg.Store.Path, stateDir)
	}

	checkNetworkPolicies(t, only(t, "NetworkPolicy for cproxy", m.policies), m.sandbox, p.labels)
}

// deployed is what checkDeployment found, for the checks particular to
// each set.
type deployed struct {
	d       appsv1.Deployment
	pod     corev1.PodSpec
	c       corev1.Container
	labels  labels.Set
	cfg     *config.Config // the ConfigMap's, with paths as the pod sees them
	mounts  map[string]corev1.VolumeMount
	volumes map[string]corev1.Volume
}

// checkDeployment checks what the one-replica and the replicas sets share:
// the namespace, the pod's security, ports, probes, config mount and
// credentials, and the Services.
func checkDeployment(t *testing.T, m manifests) deployed {
	t.Helper()
	ns := only(t, "Namespace", m.namespaces)
	if ns.Name != namespace {
		t.Errorf("Namespace %q, want %q", ns.Name, namespace)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("Namespace: pod-security enforce = %q, want restricted", got)
	}
	for _, obj := range namespaced(m) {
		if obj.Namespace != namespace {
			t.Errorf("%s %s: namespace %q, want %q", obj.kind, obj.Name, obj.Namespace, namespace)
		}
	}
	for _, np := range m.sandbox {
		if np.Namespace != "" {
			t.Errorf("sandboxes/ NetworkPolicy %s names namespace %q: it is applied with -n in the sandboxes' own", np.Name, np.Namespace)
		}
	}

	d := only(t, "Deployment", m.deployments)
	podLabels := labels.Set(d.Spec.Template.Labels)
	if sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels); !sel.Matches(podLabels) {
		t.Errorf("Deployment selector %s does not match its pods' labels %s", sel, podLabels)
	}

	pod := d.Spec.Template.Spec
	c := only(t, "container", pod.Containers)
	checkSecurity(t, pod, c)

	// Ports: named, on the listeners the ConfigMap's config asks for.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["proxy"] != proxyPort || ports["admin"] != adminPort || len(ports) != 2 {
		t.Errorf("container ports %v, want proxy %d and admin %d", ports, proxyPort, adminPort)
	}
	cfg := loadConfigMapConfig(t, only(t, "ConfigMap", m.configMaps))
	if cfg.Listen.Proxy != fmt.Sprintf(":%d", proxyPort) || cfg.Listen.Admin != fmt.Sprintf(":%d", adminPort) {
		t.Errorf("ConfigMap listen.proxy %q, listen.admin %q: want :%d and :%d", cfg.Listen.Proxy, cfg.Listen.Admin, proxyPort, adminPort)
	}

	checkProbes(t, c)
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Error("container resources: want cpu and memory requests and a memory limit")
	}

	// The config mount: the command's --config inside the ConfigMap's mount.
	if !slices.Equal(c.Command, []string{"/cproxy", "serve", "--config", configFile}) {
		t.Errorf("command %q", c.Command)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm
		if vm.SubPath != "" {
			t.Errorf("mount %s uses subPath: the kubelet never updates it, so policy changes would not arrive", vm.MountPath)
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	cfgMount, ok := mounts[configDir]
	if !ok || !cfgMount.ReadOnly {
		t.Fatalf("want a read-only mount at %s", configDir)
	}
	cm := only(t, "ConfigMap", m.configMaps)
	v := volumes[cfgMount.Name]
	if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || len(v.ConfigMap.Items) != 0 {
		t.Errorf("volume %s: want the whole ConfigMap %s", cfgMount.Name, cm.Name)
	}
	for _, key := range []string{filepath.Base(configFile), filepath.Base(cfg.PolicyPath())} {
		if _, ok := cm.Data[key]; !ok {
			t.Errorf("ConfigMap %s has no key %s, which the pod reads at %s", cm.Name, key, filepath.Join(configDir, key))
		}
	}

	// The credential: the env var the config names, from a Secret.
	if c := cfg.Upstream["anthropic"].Credential; c != "env:"+credentialEnv {
		t.Errorf("upstream.anthropic.credential = %q, want env:%s", c, credentialEnv)
	}
	for _, e := range c.Env {
		if e.Value != "" {
			t.Errorf("env %s has a literal value: credentials come from a Secret", e.Name)
		}
	}
	if ref := secretRef(c, credentialEnv); ref == nil || ref.Optional != nil && *ref.Optional {
		t.Errorf("env %s: want a required secretKeyRef", credentialEnv)
	}

	// Services: one per listener, selecting the Deployment's pods; the
	// sandbox-facing one has no admin port.
	svcs := map[string]corev1.Service{}
	for _, s := range m.services {
		svcs[s.Name] = s
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s does not select cproxy's pods", s.Name)
		}
	}
	checkService(t, c, svcs["cproxy-proxy"], proxyPort)
	checkService(t, c, svcs["cproxy-admin"], adminPort)
	if len(svcs) != 2 {
		t.Errorf("want the Services cproxy-proxy and cproxy-admin, have %d", len(svcs))
	}
	return deployed{d: d, pod: pod, c: c, labels: podLabels, cfg: cfg, mounts: mounts, volumes: volumes}
}

// secretRef returns the Secret key that environment variable name of c comes
// from, or nil.
func secretRef(c corev1.Container, name string) *corev1.SecretKeySelector {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil {
			return e.ValueFrom.SecretKeyRef
		}
	}
	return nil
}

// checkProbes checks the probes on the admin listener: readiness on
// GET /readyz, so that a replica whose store is gone gets no traffic, and
// liveness on GET /healthz, so that a database outage restarts no pod
// (a restart would not bring the database back, and a pod that cannot
// reach it at start does not start).
func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		name, path string
		probe      *corev1.Probe
	}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: want httpGet", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || resolvePort(t, c, p.probe.HTTPGet.Port) != adminPort {
			t.Errorf("%s probe: GET %s on %s, want %s on the admin port", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path)
		}
	}
	r := c.ReadinessProbe
	if r == nil {
		return
	}
	// The kubelet's timeout (1 s unless set) must leave cproxy time to
	// answer 503 with its reason, which it does once the store has had
	// routes.ReadyTimeout; and a replica whose database went away should be
	// out of the Service within half a minute (Kubernetes' defaults: a
	// period of 10 s, 3 failures).
	if timeout := time.Duration(max(r.TimeoutSeconds, 1)) * time.Second; timeout <= routes.ReadyTimeout {
		t.Errorf("readiness probe timeoutSeconds %d: want more than the store check's %s", r.TimeoutSeconds, routes.ReadyTimeout)
	}
	period, failures := cmp.Or(r.PeriodSeconds, 10), cmp.Or(r.FailureThreshold, 3)
	if out := time.Duration(period*failures) * time.Second; out > 30*time.Second {
		t.Errorf("readiness probe: %s of failures before the pod is taken out, want at most 30s", out)
	}
}

func checkSecurity(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	ps, sc := pod.SecurityContext, c.SecurityContext
	if ps == nil || sc == nil {
		t.Fatal("want pod and container securityContext")
	}
	isTrue := func(b *bool) bool { return b != nil && *b }
	if !isTrue(ps.RunAsNonRoot) || ps.RunAsUser == nil || *ps.RunAsUser == 0 || !isTrue(sc.RunAsNonRoot) {
		t.Error("want runAsNonRoot and a non-zero runAsUser")
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Error("want readOnlyRootFilesystem")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("want allowPrivilegeEscalation: false")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Error("want capabilities: drop ALL, add none")
	}
	for _, s := range []*corev1.SeccompProfile{ps.SeccompProfile, sc.SeccompProfile} {
		if s == nil || s.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Error("want seccompProfile RuntimeDefault on the pod and the container")
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("want automountServiceAccountToken: false (cproxy does not use the API)")
	}
	if c.Image == "" || strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
		t.Errorf("image %q: want a pinned tag or digest", c.Image)
	}
}

func checkService(t *testing.T, c corev1.Container, s corev1.Service, want int32) {
	t.Helper()
	if len(s.Spec.Ports) != 1 {
		t.Errorf("Service %q: want exactly one port, have %d", s.Name, len(s.Spec.Ports))
		return
	}
	p := s.Spec.Ports[0]
	if p.Port != want || resolvePort(t, c, p.TargetPort) != want {
		t.Errorf("Service %s: port %d → %s, want %d → the container's %d", s.Name, p.Port, p.TargetPort.String(), want, want)
	}
	if s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service %s: type %s exposes cproxy outside the cluster", s.Name, s.Spec.Type)
	}
}

// resolvePort turns a named or numbered port into the container's number.
func resolvePort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Errorf("port %q is not a container port", p.StrVal)
	return 0
}

// checkNetworkPolicies checks the rules of Hatchet's credential proxy
// cookbook "Credentials for Sandboxed Agents" (in Hatchet's documentation): sandbox pods
// reach cproxy's proxy port and nothing else; only the harness reaches the
// admin port; cproxy itself reaches DNS and HTTPS outside private ranges.
func checkNetworkPolicies(t *testing.T, np networkingv1.NetworkPolicy, sandbox []networkingv1.NetworkPolicy, podLabels labels.Set) {
	t.Helper()
	if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || !sel.Matches(podLabels) || sel.Empty() {
		t.Fatalf("NetworkPolicy %s does not select cproxy's pods", np.Name)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("NetworkPolicy %s: policyTypes %v, want Ingress and Egress", np.Name, np.Spec.PolicyTypes)
	}
	// Each port is open to exactly one kind of peer.
	peers := map[int32]string{}
	for i, rule := range np.Spec.Ingress {
		if len(rule.From) != 1 || len(rule.Ports) != 1 {
			t.Fatalf("ingress[%d]: want one peer and one port", i)
		}
		from := rule.From[0]
		if from.IPBlock != nil || from.NamespaceSelector == nil || from.PodSelector == nil {
			t.Fatalf("ingress[%d]: want a namespace and pod selector, nothing wider", i)
		}
		sel, err := metav1.LabelSelectorAsSelector(from.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		port := rule.Ports[0]
		if port.Port == nil || port.Port.Type != intstr.Int || port.Protocol == nil || *port.Protocol != corev1.ProtocolTCP {
			t.Fatalf("ingress[%d]: want a numbered TCP port", i)
		}
		if _, dup := peers[port.Port.IntVal]; dup {
			t.Errorf("ingress: port %d appears twice", port.Port.IntVal)
		}
		peers[port.Port.IntVal] = sel.String()
	}
	if peers[proxyPort] != sandboxLabel || peers[adminPort] != harnessLabel || len(peers) != 2 {
		t.Errorf("ingress: %v, want %d from %s and %d from %s only", peers, proxyPort, sandboxLabel, adminPort, harnessLabel)
	}

	var dns, https bool
	for i, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			switch {
			case p.Port == nil:
				t.Errorf("egress[%d]: a rule without a port opens every port", i)
			case p.Port.IntVal == 53:
				dns = true
			case p.Port.IntVal == 443:
				https = true
				for _, to := range rule.To {
					if to.IPBlock == nil || len(to.IPBlock.Except) == 0 {
						t.Errorf("egress[%d]: HTTPS to a peer that is not an ipBlock excluding private ranges", i)
					}
				}
			default:
				t.Errorf("egress[%d]: port %s: cproxy needs only DNS and HTTPS", i, p.Port.String())
			}
		}
	}
	if !dns || !https {
		t.Error("egress: want DNS (53) and HTTPS (443)")
	}

	// The sandboxes' own egress: cproxy's pods, proxy port, nothing else
	// (no DNS either).
	sp := only(t, "NetworkPolicy in sandboxes/", sandbox)
	sel, err := metav1.LabelSelectorAsSelector(&sp.Spec.PodSelector)
	if err != nil || sel.String() != sandboxLabel {
		t.Errorf("sandbox NetworkPolicy selects %v, want %s", sel, sandboxLabel)
	}
	if !slices.Equal(sp.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("sandbox NetworkPolicy: policyTypes %v, want Egress", sp.Spec.PolicyTypes)
	}
	rule := only(t, "sandbox egress rule", sp.Spec.Egress)
	to := only(t, "sandbox egress peer", rule.To)
	port := only(t, "sandbox egress port", rule.Ports)
	if to.PodSelector == nil || to.NamespaceSelector == nil || to.IPBlock != nil {
		t.Fatal("sandbox egress: want cproxy's pods by namespace and pod selector")
	}
	psel, _ := metav1.LabelSelectorAsSelector(to.PodSelector)
	nsel, _ := metav1.LabelSelectorAsSelector(to.NamespaceSelector)
	if !psel.Matches(podLabels) || !nsel.Matches(labels.Set{"kubernetes.io/metadata.name": namespace}) {
		t.Errorf("sandbox egress goes to pods %s in namespaces %s, not cproxy's", psel, nsel)
	}
	if port.Port == nil || port.Port.IntVal != proxyPort {
		t.Errorf("sandbox egress port %v, want %d", port.Port, proxyPort)
	}
}

type object struct {
	kind string
	metav1.ObjectMeta
}

func namespaced(m manifests) []object {
	var objs []object
	for _, o := range m.configMaps {
		objs = append(objs, object{"ConfigMap", o.ObjectMeta})
	}
	for _, o := range m.pvcs {
		objs = append(objs, object{"PersistentVolumeClaim", o.ObjectMeta})
	}
	for _, o := range m.deployments {
		objs = append(objs, object{"Deployment", o.ObjectMeta})
	}
	for _, o := range m.services {
		objs = append(objs, object{"Service", o.ObjectMeta})
	}
	for _, o := range m.pdbs {
		objs = append(objs, object{"PodDisruptionBudget", o.ObjectMeta})
	}
	for _, o := range m.policies {
		objs = append(objs, object{"NetworkPolicy", o.ObjectMeta})
	}
	return objs
}

// loadConfigMapConfig writes the ConfigMap's files to a directory, as the
// pod's mount would hold them, and loads them with cproxy's own loader.
func loadConfigMapConfig(t *testing.T, cm corev1.ConfigMap) *config.Config {
	t.Helper()
	dir := t.TempDir()
	for name, data := range cm.Data {
		writeFile(t, filepath.Join(dir, name), data)
	}
	cfg, err := config.LoadConfig(filepath.Join(dir, filepath.Base(configFile)))
	if err != nil {
		t.Fatalf("the ConfigMap's cproxy.toml does not load: %v", err)
	}
	// Paths inside the mount were resolved against dir; put them back.
	if rel, err := filepath.Rel(dir, cfg.PolicyPath()); err == nil && !strings.HasPrefix(rel, "..") {
		cfg.Policy = filepath.Join(configDir, rel)
	}
	return cfg
}

func TestKubernetesConfigLoads(t *testing.T) {
	cfg := loadConfigMapConfig(t, only(t, "ConfigMap", loadManifests(t, singleReplicaFiles(t)).configMaps))
	if cfg.PolicyPath() != filepath.Join(configDir, "policy.toml") {
		t.Errorf("policy = %q, want policy.toml beside cproxy.toml", cfg.PolicyPath())
	}
	if cfg.Log.Format != "json" {
		t.Errorf("log.format %q: want json for the cluster's log collector", cfg.Log.Format)
	}
}

const (
	pgEnv       = "CPROXY_PG_DSN" // the PostgreSQL connection string, in the replicas' environment
	pgSecret    = "cproxy-postgres"
	pgSecretKey = "dsn"
	pgPort      = 5432
)

// TestKubernetesReplicas checks kubernetes/replicas/, applied with the
// rest of kubernetes/ but replacedByReplicas: everything the one-replica set
// is checked for, and what running several pods on the shared store needs.
func TestKubernetesReplicas(t *testing.T) {
	m := loadManifests(t, replicaFiles(t))
	p := checkDeployment(t, m)

	// Several pods, rolled one at a time with never fewer ready.
	if p.d.Spec.Replicas == nil || *p.d.Spec.Replicas < 2 {
		t.Fatal("Deployment: want replicas: 2 or more")
	}
	replicas := int(*p.d.Spec.Replicas)
	st := p.d.Spec.Strategy
	if st.Type != appsv1.RollingUpdateDeploymentStrategyType || st.RollingUpdate == nil ||
		st.RollingUpdate.MaxUnavailable == nil || st.RollingUpdate.MaxSurge == nil {
		t.Fatalf("Deployment strategy %+v: want RollingUpdate with maxUnavailable and maxSurge", st)
	}
	unavailable, err1 := intstr.GetScaledValueFromIntOrPercent(st.RollingUpdate.MaxUnavailable, replicas, false)
	surge, err2 := intstr.GetScaledValueFromIntOrPercent(st.RollingUpdate.MaxSurge, replicas, true)
	if err1 != nil || err2 != nil || unavailable != 0 || surge < 1 {
		t.Errorf("rollingUpdate maxUnavailable %s, maxSurge %s: want 0 and at least 1", st.RollingUpdate.MaxUnavailable.String(), st.RollingUpdate.MaxSurge.String())
	}

	// No volume but the config: the store is the database, named by a
	// Secret.
	if len(m.pvcs) != 0 {
		t.Errorf("%d PersistentVolumeClaims: replicas keep no state", len(m.pvcs))
	}
	for _, v := range p.pod.Volumes {
		if v.ConfigMap == nil {
			t.Errorf("volume %s: want only the config, from the ConfigMap", v.Name)
		}
	}
	if p.cfg.Store.Kind != config.StorePostgres || p.cfg.Store.DSN != "env:"+pgEnv {
		t.Errorf("store.kind %q, store.dsn %q: want %q and env:%s", p.cfg.Store.Kind, p.cfg.Store.DSN, config.StorePostgres, pgEnv)
	}
	if ref := secretRef(p.c, pgEnv); ref == nil || ref.Name != pgSecret || ref.Key != pgSecretKey || ref.Optional != nil && *ref.Optional {
		t.Errorf("env %s: want a required secretKeyRef to Secret %s, key %s", pgEnv, pgSecret, pgSecretKey)
	}

	// Stopping: the preStop sleep while the endpoints are updated, then the
	// drain, both within the grace period.
	var sleep int64
	if lc := p.c.Lifecycle; lc != nil && lc.PreStop != nil && lc.PreStop.Sleep != nil {
		sleep = lc.PreStop.Sleep.Seconds
	}
	if sleep <= 0 {
		t.Error("want a preStop sleep: a stopping pod still gets new connections until every node has seen it leave the endpoints")
	}
	if grace := p.pod.TerminationGracePeriodSeconds; grace == nil || float64(*grace) <= float64(sleep)+p.cfg.Listen.Drain.Seconds() {
		t.Errorf("terminationGracePeriodSeconds must be above the preStop sleep (%ds) plus listen.drain (%s)", sleep, p.cfg.Listen.Drain)
	}

	// Spread: at most one pod more on any node than on another, counting
	// the current revision's pods and the nodes they may run on.
	perNode := false
	for i, tsc := range p.pod.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
		if err != nil || sel.Empty() || !sel.Matches(p.labels) {
			t.Errorf("topologySpreadConstraints[%d] does not select cproxy's pods", i)
		}
		if !slices.Contains(tsc.MatchLabelKeys, appsv1.DefaultDeploymentUniqueLabelKey) {
			t.Errorf("topologySpreadConstraints[%d]: want matchLabelKeys [%s], or a rollout counts the old pods too", i, appsv1.DefaultDeploymentUniqueLabelKey)
		}
		if tsc.TopologyKey == corev1.LabelHostname && tsc.WhenUnsatisfiable == corev1.DoNotSchedule && tsc.MaxSkew == 1 {
			perNode = true
			if tsc.NodeTaintsPolicy == nil || *tsc.NodeTaintsPolicy != corev1.NodeInclusionPolicyHonor {
				t.Errorf("topologySpreadConstraints[%d]: want nodeTaintsPolicy Honor, or a node no pod may run on (a tainted control plane) counts as empty and blocks the second pod", i)
			}
		}
	}
	if !perNode {
		t.Errorf("want a topologySpreadConstraint on %s, maxSkew 1, DoNotSchedule: replicas on different nodes", corev1.LabelHostname)
	}

	// Voluntary disruptions: a node can always be drained (one pod may go)
	// and two pods are left serving.
	pdb := only(t, "PodDisruptionBudget", m.pdbs)
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(p.labels) {
		t.Errorf("PodDisruptionBudget %s does not select cproxy's pods", pdb.Name)
	}
	var down int
	switch {
	case pdb.Spec.MaxUnavailable != nil && pdb.Spec.MinAvailable == nil:
		down, _ = intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, replicas, true)
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable == nil:
		least, _ := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, replicas, true)
		down = replicas - least
	default:
		t.Fatalf("PodDisruptionBudget %s: want one of minAvailable and maxUnavailable", pdb.Name)
	}
	if down < 1 || replicas-down < 2 {
		t.Errorf("PodDisruptionBudget %s lets %d of %d pods go at once: want at least 1, leaving at least 2", pdb.Name, down, replicas)
	}

	// NetworkPolicies: the one-replica set's, unchanged, and the way to the
	// database.
	byName := map[string]networkingv1.NetworkPolicy{}
	for _, np := range m.policies {
		byName[np.Name] = np
	}
	if _, ok := byName["cproxy"]; !ok || len(byName) != 2 {
		t.Fatalf("want NetworkPolicies cproxy and cproxy-postgres, have %v", slices.Sorted(maps.Keys(byName)))
	}
	if _, ok := byName["cproxy-postgres"]; !ok {
		t.Fatalf("want NetworkPolicies cproxy and cproxy-postgres, have %v", slices.Sorted(maps.Keys(byName)))
	}
	checkNetworkPolicies(t, byName["cproxy"], m.sandbox, p.labels)
	checkPostgresPolicy(t, byName["cproxy-postgres"], p.labels)
}

// checkPostgresPolicy checks that np lets cproxy's pods reach TCP 5432 on
// the database, named by its pods or an address block, and nothing else.
func checkPostgresPolicy(t *testing.T, np networkingv1.NetworkPolicy, podLabels labels.Set) {
	t.Helper()
	if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Fatalf("NetworkPolicy %q does not select cproxy's pods", np.Name)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(np.Spec.Ingress) != 0 {
		t.Errorf("NetworkPolicy %s: policyTypes %v: want Egress alone", np.Name, np.Spec.PolicyTypes)
	}
	if len(np.Spec.Egress) == 0 {
		t.Fatalf("NetworkPolicy %s has no egress rule", np.Name)
	}
	for i, rule := range np.Spec.Egress {
		if len(rule.To) == 0 {
			t.Errorf("egress[%d]: no peer allows every destination", i)
		}
		for j, to := range rule.To {
			switch {
			case to.IPBlock != nil:
				if pfx, err := netip.ParsePrefix(to.IPBlock.CIDR); err != nil || pfx.Bits() == 0 {
					t.Errorf("egress[%d].to[%d]: ipBlock %s: want the database's address or subnet", i, j, to.IPBlock.CIDR)
				}
			case to.NamespaceSelector == nil || to.PodSelector == nil || len(to.PodSelector.MatchLabels)+len(to.PodSelector.MatchExpressions) == 0:
				t.Errorf("egress[%d].to[%d]: want the database's pods by namespace and labels, or its ipBlock", i, j)
			}
		}
		port := only(t, fmt.Sprintf("port of egress[%d]", i), rule.Ports)
		if port.Port == nil || port.Port.Type != intstr.Int || port.Port.IntVal != pgPort || port.Protocol == nil || *port.Protocol != corev1.ProtocolTCP {
			t.Errorf("egress[%d]: port %v: want TCP %d", i, port.Port, pgPort)
		}
	}
}

// The replicas' ConfigMap is the one-replica set's but for [store], so a
// change made to one and not the other shows.
func TestKubernetesReplicasConfigMatches(t *testing.T) {
	single := only(t, "ConfigMap", loadManifests(t, singleReplicaFiles(t)).configMaps)
	replicas := only(t, "ConfigMap", loadManifests(t, replicaFiles(t)).configMaps)
	if single.Name != replicas.Name {
		t.Errorf("ConfigMap %s and replicas/ %s: want the same name, so applying one replaces the other", single.Name, replicas.Name)
	}
	if !slices.Equal(slices.Sorted(maps.Keys(single.Data)), slices.Sorted(maps.Keys(replicas.Data))) {
		t.Fatalf("ConfigMap keys differ: %v and %v", slices.Sorted(maps.Keys(single.Data)), slices.Sorted(maps.Keys(replicas.Data)))
	}
	for key := range single.Data {
		a, b := withoutTable(single.Data[key], "store"), withoutTable(replicas.Data[key], "store")
		if a != b {
			t.Errorf("%s differs between 10-configmap.yaml and replicas/10-configmap.yaml beyond [store]:\n%s\n----\n%s", key, a, b)
		}
	}
}

// withoutTable removes TOML table [name] (its header to the next header)
// from text, and every comment and blank line. No value in these files
// holds a #.
func withoutTable(text, name string) string {
	var b strings.Builder
	in := false
	for line := range strings.Lines(text) {
		if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "[") {
			in = trimmed == "["+name+"]"
		}
		if in {
			continue
		}
		if code, _, ok := strings.Cut(line, "#"); ok {
			line = strings.TrimRight(code, " ") + "\n"
		}
		if strings.TrimSpace(line) != "" {
			b.WriteString(line)
		}
	}
	return b.String()
}
