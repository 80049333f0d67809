package deploy

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/cproxy/cproxy/policy"
)

// manifests is every object in deploy/kubernetes, decoded strictly.
type manifests struct {
	namespaces  []corev1.Namespace
	configMaps  []corev1.ConfigMap
	pvcs        []corev1.PersistentVolumeClaim
	deployments []appsv1.Deployment
	services    []corev1.Service
	policies    []networkingv1.NetworkPolicy // cproxy's namespace
	sandbox     []networkingv1.NetworkPolicy // sandboxes/, applied in the sandboxes' namespace
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadManifests decodes each YAML document into its Kubernetes API type with
// decode: an unknown or misspelt field, or one given twice, fails the test,
// as kubectl apply --validate=strict would.
func loadManifests(t *testing.T) manifests {
	t.Helper()
	var m manifests
	files, _ := filepath.Glob("kubernetes/*.yaml")
	sandboxFiles, _ := filepath.Glob("kubernetes/sandboxes/*.yaml")
	if len(files) == 0 || len(sandboxFiles) == 0 {
		t.Fatal("no manifests under kubernetes/")
	}
	for _, file := range append(files, sandboxFiles...) {
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
	m := loadManifests(t)
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

	// One process per store: one replica, and the old pod gone before the
	// new one opens the file.
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Error("Deployment: want replicas: 1 (the embedded store is one process's)")
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("Deployment strategy %q, want Recreate", d.Spec.Strategy.Type)
	}
	pvc := only(t, "PersistentVolumeClaim", m.pvcs)
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("PVC access modes %v, want [ReadWriteOnce]", pvc.Spec.AccessModes)
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
	if grace := pod.TerminationGracePeriodSeconds; grace == nil || float64(*grace) <= cfg.Listen.Drain.Seconds() {
		t.Errorf("terminationGracePeriodSeconds must be above listen.drain (%s)", cfg.Listen.Drain)
	}

	// Probes: GET /healthz on the admin listener.
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: want httpGet", name)
			continue
		}
		if p.HTTPGet.Path != "/healthz" || resolvePort(t, c, p.HTTPGet.Port) != adminPort {
			t.Errorf("%s probe: GET %s on %s, want /healthz on the admin port", name, p.HTTPGet.Path, p.HTTPGet.Port.String())
		}
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Error("container resources: want cpu and memory requests and a memory limit")
	}

	// Config and state mounts: the command's --config inside the ConfigMap's
	// mount, the store on the PVC.
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
	stMount, ok := mounts[stateDir]
	if !ok || stMount.ReadOnly {
		t.Fatalf("want a writable mount at %s", stateDir)
	}
	if v := volumes[stMount.Name]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("volume %s: want PVC %s", stMount.Name, pvc.Name)
	}
	if filepath.Dir(cfg.Store.Path) != stateDir {
		t.Errorf("store.path %s is not on the PVC mounted at %s", cfg.Store.Path, stateDir)
	}

	// The credential: the env var the config names, from a Secret.
	if cfg.Upstream.Anthropic.Credential != "env:"+credentialEnv {
		t.Errorf("upstream.anthropic.credential = %q, want env:%s", cfg.Upstream.Anthropic.Credential, credentialEnv)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
		if e.Value != "" {
			t.Errorf("env %s has a literal value: credentials come from a Secret", e.Name)
		}
	}
	if e := env[credentialEnv]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional {
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

	checkNetworkPolicies(t, m, podLabels)
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

// checkNetworkPolicies checks the rules the cookbook asks for: sandbox pods
// reach cproxy's proxy port and nothing else; only the harness reaches the
// admin port; cproxy itself reaches DNS and HTTPS outside private ranges.
func checkNetworkPolicies(t *testing.T, m manifests, podLabels labels.Set) {
	t.Helper()
	np := only(t, "NetworkPolicy for cproxy", m.policies)
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
	sp := only(t, "NetworkPolicy in sandboxes/", m.sandbox)
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
	for _, o := range m.policies {
		objs = append(objs, object{"NetworkPolicy", o.ObjectMeta})
	}
	return objs
}

// loadConfigMapConfig writes the ConfigMap's files to a directory, as the
// pod's mount would hold them, and loads them with cproxy's own loader.
func loadConfigMapConfig(t *testing.T, cm corev1.ConfigMap) *policy.Config {
	t.Helper()
	dir := t.TempDir()
	for name, data := range cm.Data {
		writeFile(t, filepath.Join(dir, name), data)
	}
	cfg, err := policy.LoadConfig(filepath.Join(dir, filepath.Base(configFile)))
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
	cfg := loadConfigMapConfig(t, only(t, "ConfigMap", loadManifests(t).configMaps))
	if cfg.PolicyPath() != filepath.Join(configDir, "policy.toml") {
		t.Errorf("policy = %q, want policy.toml beside cproxy.toml", cfg.PolicyPath())
	}
	if cfg.Log.Format != "json" {
		t.Errorf("log.format %q: want json for the cluster's log collector", cfg.Log.Format)
	}
}
