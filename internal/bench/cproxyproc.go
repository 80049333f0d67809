package bench

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const cproxyRouteConfig = `policy = "policy.toml"

[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"
ready_file = "ready.json"
drain = "2s"
{{listen}}
[store]
path = "cproxy.db"

[upstream.anthropic]
url = "{{anthropic}}"
credential = "file:anthropic-key"

[{{table}}.{{name}}]
url = "{{url}}"
credential = "file:upstream-token"
{{upstream}}`

// routeSetup is what a benchmark's cproxy serves beyond the one upstream
// and its credential: more keys of the upstream's section, and the TLS
// listener.
type routeSetup struct {
	// Upstream is more lines of the [upstream.NAME] section, such as the
	// PyPI route's files_url; empty: none.
	Upstream string
	// TLS adds the TLS proxy listener (listen.proxy_tls) and its local CA
	// in ca/, for go, which sends a module proxy's credential over HTTPS
	// only.
	TLS bool
	// MCP serves the upstream as a remote MCP server, [mcp.NAME] at
	// /mcp/NAME, its credential sent as Authorization: Bearer; false: an
	// [upstream.NAME].
	MCP bool
	// Anthropic and AnthropicKey are the model route's upstream and its API
	// key; empty: an address nothing answers on, and a key never used.
	Anthropic, AnthropicKey string
	// More is config appended after the upstream's section, such as a
	// second upstream or a [runtime] table; its credentials are files in
	// Files. Empty: none.
	More  string
	Files map[string]string
	// Env is added to cproxy's environment, such as GOMAXPROCS, which
	// runtime.cpus takes as its default (allCPUs, oneCPU); nil: none.
	Env map[string]string
}

// startCproxyRoute starts `cproxy serve` from bin in front of one upstream
// (github, npm, pypi or gomod, or an MCP server's name with setup.MCP, at url, with realToken as its credential)
// under policy, as the target name, with the route's setup, and mints a
// token for sandbox; it returns the target, the token and the TLS
// listener's host:port (empty without setup.TLS).
func (e *Env) startCproxyRoute(bin, name, upstream, url, realToken, policy, sandbox string, setup routeSetup) (_ *Target, token, tlsAddr string, _ error) {
	listen := ""
	if setup.TLS {
		listen = "proxy_tls = \"127.0.0.1:0\"\nca_dir = \"ca\"\n"
	}
	table := "upstream"
	if setup.MCP {
		table = "mcp"
	}
	anthropic, key := setup.Anthropic, setup.AnthropicKey
	if anthropic == "" {
		anthropic, key = "http://127.0.0.1:9", "sk-ant-api03-bench-unused"
	}
	files := map[string]string{
		"anthropic-key":  key + "\n",
		"upstream-token": realToken + "\n",
		"policy.toml":    policy,
		"cproxy.toml": strings.NewReplacer("{{table}}", table, "{{name}}", upstream, "{{url}}", url, "{{listen}}", listen,
			"{{upstream}}", setup.Upstream, "{{anthropic}}", anthropic).Replace(cproxyRouteConfig) + setup.More,
	}
	maps.Copy(files, setup.Files)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(content), 0o600); err != nil {
			return nil, "", "", err
		}
	}
	ready := filepath.Join(e.dir, "ready.json")
	cmd := exec.Command(bin, "serve", "--config", filepath.Join(e.dir, "cproxy.toml"))
	cmd.Dir = e.dir
	cmd.Env = environ(setup.Env)
	p, err := e.start(name, cmd)
	if err != nil {
		return nil, "", "", err
	}
	var addrs struct {
		Proxy, Admin string
		ProxyTLS     string `json:"proxy_tls"`
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.exited:
			return nil, "", "", p.failed("exited at start")
		default:
		}
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &addrs) == nil && addrs.Proxy != "" && (addrs.ProxyTLS != "" || !setup.TLS) {
			break
		}
		if time.Now().After(deadline) {
			return nil, "", "", p.failed("wrote no ready file within " + startTimeout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	token, _, err = mintToken("http://"+addrs.Admin, sandbox)
	if err != nil {
		return nil, "", "", p.failed(err.Error())
	}
	return &Target{Name: name, URL: "http://" + addrs.Proxy, Header: bearer(token), proc: p, admin: "http://" + addrs.Admin, dir: e.dir}, token, addrs.ProxyTLS, nil
}

// CproxyUse is what one cproxy process used in the git or npm benchmark.
type CproxyUse struct {
	// RSSStart is its VmRSS once started and its token minted, before any
	// client ran; Peak is its VmHWM at the end.
	RSSStart int64 `json:"rss_start_bytes"`
	Peak     int64 `json:"peak_bytes"`
	// CPU is the processor time it used over the timed runs, in all.
	CPU time.Duration `json:"cpu_ns"`
}

// cproxyWay is one way through a cproxy in the git and npm benchmarks: its
// target, the sandbox token minted on it, and what it used, in use.
type cproxyWay struct {
	*Target
	token string
	// tlsAddr is the TLS proxy listener's host:port, with routeSetup.TLS.
	tlsAddr string
	use     *CproxyUse
	cpu0    time.Duration
}

// startWay starts a cproxy as startCproxyRoute does and reads its memory
// once started into use.
func (e *Env) startWay(bin, name, upstream, url, realToken, policy, sandbox string, use *CproxyUse) (*cproxyWay, error) {
	return e.startRouteWay(bin, name, upstream, url, realToken, policy, sandbox, routeSetup{}, use)
}

// startRouteWay is startWay with the route's setup.
func (e *Env) startRouteWay(bin, name, upstream, url, realToken, policy, sandbox string, setup routeSetup, use *CproxyUse) (*cproxyWay, error) {
	t, token, tlsAddr, err := e.startCproxyRoute(bin, name, upstream, url, realToken, policy, sandbox, setup)
	if err != nil {
		return nil, err
	}
	m, err := t.Memory()
	if err != nil {
		return nil, err
	}
	use.RSSStart = m.RSS
	return &cproxyWay{Target: t, token: token, tlsAddr: tlsAddr, use: use}, nil
}

// mark starts counting the CPU the way's cproxy uses.
func (w *cproxyWay) mark() (err error) {
	w.cpu0, err = w.CPU()
	return err
}

// finish reads the way's peak memory and the CPU it used since mark.
func (w *cproxyWay) finish() error {
	m, err := w.Memory()
	if err != nil {
		return err
	}
	cpu, err := w.CPU()
	if err != nil {
		return err
	}
	w.use.Peak, w.use.CPU = m.Peak, cpu-w.cpu0
	return nil
}

// rotated is ways starting from the rep-th, so that over the repetitions
// each way runs first, and after each other one, as often as the others:
// a slow stretch of a shared machine falls on every way alike. Two ways
// alternate.
func rotated(ways []string, rep int) []string {
	k := rep % len(ways)
	return slices.Concat(ways[k:], ways[:k])
}

// speedRatio compares the wall times of a way with those of base, run in
// pairs (the i-th of each): the ratio of the medians, base ÷ way (above 1,
// the way is faster), and the lowest and highest ratio of a pair.
func speedRatio(base, way []time.Duration) (ratio, lo, hi float64) {
	ratio = median(base).Seconds() / median(way).Seconds()
	for i := range min(len(base), len(way)) {
		x := base[i].Seconds() / way[i].Seconds()
		if i == 0 || x < lo {
			lo = x
		}
		if i == 0 || x > hi {
			hi = x
		}
	}
	return ratio, lo, hi
}
