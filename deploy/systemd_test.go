package deploy

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/config"
)

const (
	unitFile        = "systemd/cproxy.service"
	replicaUnitFile = "systemd/cproxy@.service" // one instance per replica on the shared PostgreSQL store
)

// unit is a systemd unit file as section → key → values, in file order. A
// key may appear more than once (SystemCallFilter=, Environment=).
type unit map[string]map[string][]string

// parseUnit reads the subset of systemd's unit syntax the unit uses:
// sections, key=value lines, comments. No line continuations.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: line continuations are not parsed here", path, n)
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, n, line)
			}
			u[section][key] = append(u[section][key], value)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// one returns the single value of key, failing if it is missing or repeated.
// wantService checks that [Service] sets each key of want once, to its value.
func (u unit) wantService(t *testing.T, want map[string]string) {
	t.Helper()
	for key, value := range want {
		if got := u.one(t, "Service", key); got != value {
			t.Errorf("[Service] %s=%s, want %s=%s", key, got, key, value)
		}
	}
}

func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Fatalf("[%s] %s: want one value, have %q", section, key, v)
	}
	return v[0]
}

func TestSystemdUnitHardening(t *testing.T) {
	u := parseUnit(t, unitFile)
	want := map[string]string{
		"Type":                    "simple",
		"ExecStart":               "/usr/local/bin/cproxy serve --config /etc/cproxy/cproxy.toml",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"KillSignal":              "SIGTERM",
		"Restart":                 "on-failure",
		"DynamicUser":             "yes",
		"StateDirectory":          "cproxy",
		"StateDirectoryMode":      "0700",
		"ConfigurationDirectory":  "cproxy",
		"LogsDirectory":           "cproxy",
		"RuntimeDirectory":        "cproxy cproxy/sandboxes",
		"UMask":                   "0077",
		"NoNewPrivileges":         "yes",
		"CapabilityBoundingSet":   "",
		"AmbientCapabilities":     "",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectControlGroups":    "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"RestrictNamespaces":      "yes",
		"RestrictSUIDSGID":        "yes",
		"LockPersonality":         "yes",
		"MemoryDenyWriteExecute":  "yes",
		"SystemCallArchitectures": "native",
	}
	u.wantService(t, want)
	if got := u["Service"]["SystemCallFilter"]; len(got) == 0 || got[0] != "@system-service" {
		t.Errorf("[Service] SystemCallFilter=%q, want @system-service first", got)
	}
	if got := u.one(t, "Install", "WantedBy"); got != "multi-user.target" {
		t.Errorf("[Install] WantedBy=%s", got)
	}

	// The stop timeout must outlast the drain the shipped config asks for,
	// or systemd kills cproxy in the middle of it.
	stop, err := time.ParseDuration(u.one(t, "Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v (write it with a unit, e.g. 45s)", err)
	}
	cfg := loadSystemdConfig(t)
	if stop <= cfg.Listen.Drain.Duration {
		t.Errorf("TimeoutStopSec=%s is not above listen.drain = %s", stop, cfg.Listen.Drain)
	}
}

// loadSystemdConfig loads deploy/systemd/cproxy.toml and policy.toml with
// cproxy's own loader, as /etc/cproxy would hold them. Only log.audit's
// directory, /var/log/cproxy (which the unit's LogsDirectory= creates), is
// moved into a temporary directory: the loader checks that it exists.
func loadSystemdConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	logs := filepath.Join(dir, "log")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	data := readFile(t, "systemd/cproxy.toml")
	if !strings.Contains(data, `"/var/log/cproxy/`) {
		t.Fatal("systemd/cproxy.toml: log.audit is no longer under /var/log/cproxy: update this test")
	}
	data = strings.ReplaceAll(data, `"/var/log/cproxy/`, `"`+logs+`/`)
	writeFile(t, filepath.Join(dir, "cproxy.toml"), data)
	writeFile(t, filepath.Join(dir, "policy.toml"), readFile(t, "systemd/policy.toml"))
	cfg, err := config.LoadConfig(filepath.Join(dir, "cproxy.toml"))
	if err != nil {
		t.Fatalf("systemd/cproxy.toml does not load: %v", err)
	}
	return cfg
}

// The sample config puts each file where the unit lets the service write,
// and reads the credentials where LoadCredential= puts them.
func TestSystemdConfigMatchesUnit(t *testing.T) {
	u := parseUnit(t, unitFile)
	cfg := loadSystemdConfig(t)

	state := "/var/lib/" + u.one(t, "Service", "StateDirectory") + "/"
	if !strings.HasPrefix(cfg.Store.Path, state) {
		t.Errorf("store.path = %q, want it under the unit's StateDirectory %s", cfg.Store.Path, state)
	}
	if cfg.PolicyPath() == "" {
		t.Error("the sample config names no policy file")
	}
	// Environment=XDG_STATE_HOME keeps the default store path in the state
	// directory too.
	if env := u["Service"]["Environment"]; !slices.Contains(env, "XDG_STATE_HOME=/var/lib") {
		t.Errorf("Environment=%q: want XDG_STATE_HOME=/var/lib", env)
	}

	creds := map[string]bool{}
	for _, lc := range u["Service"]["LoadCredential"] {
		name, src, ok := strings.Cut(lc, ":")
		if !ok || !strings.HasPrefix(src, "/etc/cproxy/") {
			t.Errorf("LoadCredential=%s: want NAME:/etc/cproxy/…", lc)
		}
		creds[name] = true
	}
	const credDir = "file:/run/credentials/cproxy.service/"
	named := 0
	for _, up := range cfg.Upstream {
		c := up.Credential
		name, ok := strings.CutPrefix(c, credDir)
		if !ok {
			continue
		}
		named++
		if !creds[name] {
			t.Errorf("the config reads %s, but the unit has no LoadCredential=%s:…", c, name)
		}
	}
	if named == 0 {
		t.Errorf("no credential of the sample config is read from %s", credDir)
	}
	// A systemd credential file is 0400, owned by the service's user: the
	// mode cproxy's file: source accepts.
}

// The replica unit is cproxy.service but where a replica on the shared
// PostgreSQL store differs: a config per instance, no state directory, a
// log and runtime directory per instance, and the database's credential.
// Every other setting, the hardening included, is the same.
func TestSystemdReplicaUnit(t *testing.T) {
	single, replica := parseUnit(t, unitFile), parseUnit(t, replicaUnitFile)
	differ := map[string]bool{
		"ExecStart": true, "StateDirectory": true, "StateDirectoryMode": true, "Environment": true,
		"LogsDirectory": true, "RuntimeDirectory": true, "LoadCredential": true,
	}
	keys := map[string]bool{}
	for _, u := range []unit{single, replica} {
		for key := range u["Service"] {
			keys[key] = true
		}
	}
	for key := range keys {
		if !differ[key] && !slices.Equal(single["Service"][key], replica["Service"][key]) {
			t.Errorf("[Service] %s: %q in %s, %q in %s: keep them the same", key,
				single["Service"][key], unitFile, replica["Service"][key], replicaUnitFile)
		}
	}
	if !maps.EqualFunc(single["Install"], replica["Install"], slices.Equal) {
		t.Errorf("[Install] %v in %s, %v in %s", single["Install"], unitFile, replica["Install"], replicaUnitFile)
	}

	want := map[string]string{
		"ExecStart":         "/usr/local/bin/cproxy serve --config /etc/cproxy/replica-%i.toml",
		"LogsDirectory":     "cproxy-%i",
		"LogsDirectoryMode": "0700",
		"RuntimeDirectory":  "cproxy-%i cproxy-%i/sandboxes",
	}
	replica.wantService(t, want)
	// Instances must not share a directory systemd removes at stop or
	// chowns at start, and the store is the database.
	for _, key := range []string{"StateDirectory", "Environment"} {
		if v, ok := replica["Service"][key]; ok {
			t.Errorf("[Service] %s=%q: a replica keeps no state on the machine", key, v)
		}
	}
	if lc := replica["Service"]["LoadCredential"]; !slices.Contains(lc, pgCredential+":/etc/cproxy/credentials/"+pgCredential) {
		t.Errorf("LoadCredential=%q: want %s:/etc/cproxy/credentials/%s", lc, pgCredential, pgCredential)
	}
}

// pgCredential is the name under which the replica unit passes the
// PostgreSQL connection string.
const pgCredential = "postgres-dsn"

// replicaConfig is deploy/systemd/replica-1.toml made into replica n's as
// its header comment says: n for the 1 of 8081, 9011, cproxy-1 and
// cproxy@1.
func replicaConfig(t *testing.T, n int) string {
	t.Helper()
	data := readFile(t, "systemd/replica-1.toml")
	for _, s := range []string{":8081\"", ":9011\"", "/cproxy-1/", "/cproxy@1.service/"} {
		if !strings.Contains(data, s) {
			t.Fatalf("systemd/replica-1.toml has no %s: update this test and the file's header", s)
		}
		data = strings.ReplaceAll(data, s, strings.Replace(s, "1", strconv.Itoa(n), 1))
	}
	return data
}

// loadReplicaConfig loads replica n's config and the shared policy.toml
// with cproxy's own loader, as /etc/cproxy would hold them, log.audit's
// directory moved into a temporary directory (the loader checks that it
// exists) and put back in the result.
func loadReplicaConfig(t *testing.T, n int) *config.Config {
	t.Helper()
	dir := t.TempDir()
	logs := filepath.Join(dir, "log")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	logDir := fmt.Sprintf("/var/log/cproxy-%d/", n)
	data := replicaConfig(t, n)
	if !strings.Contains(data, `"`+logDir) {
		t.Fatalf("replica %d: log.audit is not under %s: update this test", n, logDir)
	}
	writeFile(t, filepath.Join(dir, fmt.Sprintf("replica-%d.toml", n)), strings.ReplaceAll(data, `"`+logDir, `"`+logs+"/"))
	writeFile(t, filepath.Join(dir, "policy.toml"), readFile(t, "systemd/policy.toml"))
	cfg, err := config.LoadConfig(filepath.Join(dir, fmt.Sprintf("replica-%d.toml", n)))
	if err != nil {
		t.Fatalf("systemd/replica-1.toml as replica %d does not load: %v", n, err)
	}
	if rest, ok := strings.CutPrefix(cfg.Log.Audit, logs+"/"); ok {
		cfg.Log.Audit = logDir + rest
	}
	if filepath.Dir(cfg.PolicyPath()) != dir {
		t.Errorf("replica %d: policy %s is not beside the config: every replica shares /etc/cproxy/policy.toml", n, cfg.PolicyPath())
	}
	return cfg
}

// Three replicas made from replica-1.toml each load, on the shared store,
// with their own ports, log and credentials where their instance of the
// unit puts them.
func TestSystemdReplicaConfigMatchesUnit(t *testing.T) {
	u := parseUnit(t, replicaUnitFile)
	stop, err := time.ParseDuration(u.one(t, "Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	creds := map[string]bool{}
	for _, lc := range u["Service"]["LoadCredential"] {
		name, _, _ := strings.Cut(lc, ":")
		creds[name] = true
	}
	ports := map[string]int{}
	publicURL := ""
	for n := 1; n <= 3; n++ {
		instance := func(s string) string { return strings.ReplaceAll(s, "%i", strconv.Itoa(n)) }
		cfg := loadReplicaConfig(t, n)

		if want := fmt.Sprintf("replica-%d.toml", n); filepath.Base(instance(u.one(t, "Service", "ExecStart"))) != want {
			t.Errorf("replica %d: the unit's ExecStart does not read %s", n, want)
		}
		if cfg.Store.Kind != config.StorePostgres {
			t.Errorf("replica %d: store.kind = %q, want %q", n, cfg.Store.Kind, config.StorePostgres)
		}
		credDir := instance("file:/run/credentials/cproxy@%i.service/")
		if want := credDir + pgCredential; cfg.Store.DSN != want {
			t.Errorf("replica %d: store.dsn = %q, want %q (the unit's LoadCredential=%s:…)", n, cfg.Store.DSN, want, pgCredential)
		}
		sources := []string{cfg.Store.DSN}
		for _, up := range cfg.Upstream {
			sources = append(sources, up.Credential)
		}
		for _, c := range sources {
			if !strings.HasPrefix(c, "file:") {
				continue
			}
			name, ok := strings.CutPrefix(c, credDir)
			if !ok || !creds[name] {
				t.Errorf("replica %d reads %s, which no LoadCredential= of %s provides", n, c, instance("cproxy@%i.service"))
			}
		}
		if logDir := "/var/log/" + instance(u.one(t, "Service", "LogsDirectory")) + "/"; !strings.HasPrefix(cfg.Log.Audit, logDir) {
			t.Errorf("replica %d: log.audit = %q, want it under the unit's LogsDirectory %s", n, cfg.Log.Audit, logDir)
		}
		if stop <= cfg.Listen.Drain.Duration {
			t.Errorf("TimeoutStopSec=%s is not above replica %d's listen.drain = %s", stop, n, cfg.Listen.Drain)
		}
		for _, addr := range []string{cfg.Listen.Proxy, cfg.Listen.Admin} {
			if m, dup := ports[addr]; dup {
				t.Errorf("replicas %d and %d both listen on %s", m, n, addr)
			}
			ports[addr] = n
		}
		// Sandboxes are given the load balancer's address, whichever
		// replica minted their token.
		if n == 1 {
			publicURL = cfg.Listen.PublicURL
		} else if cfg.Listen.PublicURL != publicURL {
			t.Errorf("replica %d: listen.public_url %q, replica 1's %q: want the load balancer's, the same for all", n, cfg.Listen.PublicURL, publicURL)
		}
	}
	if publicURL == "" {
		t.Error("listen.public_url is not set: npm tarball URLs would name the replica's own address, not the load balancer's")
	}
}

// TestSystemdAnalyzeVerify runs systemd's own checker on the units. Their
// ExecStart names /usr/local/bin/cproxy, which is not installed here, and
// verify refuses a unit whose program does not exist; each unit is checked
// with that path pointed at a stand-in executable, everything else as
// shipped. verify exits 0 on an unknown or misspelt key (it only warns), so
// any output fails the test. verify checks a template (cproxy@.service) as
// the instance cproxy@i.service.
func TestSystemdAnalyzeVerify(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed; .ci/run installs Debian's systemd package for it")
		}
		t.Skip("systemd-analyze is not installed (Debian package systemd): the units were not verified")
	}
	for _, file := range []string{unitFile, replicaUnitFile} {
		t.Run(filepath.Base(file), func(t *testing.T) { verifyUnit(t, tool, file) })
	}
}

func verifyUnit(t *testing.T, tool, file string) {
	dir := t.TempDir()
	stub := filepath.Join(dir, "cproxy")
	writeFile(t, stub, "#!/bin/sh\nexit 0\n")
	if err := os.Chmod(stub, 0o755); err != nil {
		t.Fatal(err)
	}
	unitText := readFile(t, file)
	if !strings.Contains(unitText, "/usr/local/bin/cproxy ") {
		t.Fatalf("%s: ExecStart no longer names /usr/local/bin/cproxy: update this test", file)
	}
	path := filepath.Join(dir, filepath.Base(file))
	writeFile(t, path, strings.ReplaceAll(unitText, "/usr/local/bin/cproxy ", stub+" "))

	cmd := exec.Command(tool, "verify", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", file, err, out)
	}

	// systemd's own exposure score for the hardening settings (0 is the
	// most locked down, 10 the least). --offline reads the file alone;
	// older systemd versions lack it.
	out, err = exec.Command(tool, "security", "--offline=true", "--no-pager", path).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Logf("systemd-analyze security --offline gave no score (%v); skipped that part", err)
		return
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security %s: exposure %.1f", file, score)
	if score > 2.0 {
		t.Errorf("systemd-analyze security rates %s's exposure %.1f, want at most 2.0:\n%s", file, score, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
