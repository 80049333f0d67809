package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cproxy/cproxy/client"
)

// Bounds on waiting for a process to come up or go away.
const (
	startTimeout = 20 * time.Second
	stopTimeout  = 5 * time.Second
)

// Target is one way for the client to reach the upstream: directly or through
// one of the proxies.
type Target struct {
	// Name is "direct", "goproxy", "nginx", "cproxy", LimitsTarget, and with
	// Options "routes", SharedProxyTarget, the one-CPU pair
	// (OneCPUProxyTarget, OneCPUCproxyTarget) and the earlier build's
	// "cproxy@REV" (BeforeTarget).
	Name string
	// URL is the base URL the client sends /v1/messages to.
	URL string
	// Header is the credential the client sends: the real API key for direct,
	// a sandbox token (as Claude Code sends it) for the proxies.
	Header http.Header
	// proc is the proxy's process; nil for direct.
	proc *proc
	// admin is cproxy's admin API base URL, dir its directory and tokenID
	// the id of the token in Header; empty for the other targets.
	admin, dir, tokenID string
	// ok counts the requests the target answered with 200, for checking
	// them against what cproxy metered.
	ok atomic.Int64
}

// PIDs are the proxy's processes (nginx: the master and its workers); none
// for direct.
func (t *Target) PIDs() []int {
	if t.proc == nil {
		return nil
	}
	return t.proc.pids()
}

// Options say what Start starts.
type Options struct {
	// Cproxy is the cproxy binary. Empty: Start builds it with `go build`,
	// which needs the go command and a working directory inside the module.
	Cproxy string
	// Proxy is the benchproxy binary, which runs the do-nothing Go proxy
	// (and, with Profile, the routes stand-in) as a program of its own.
	// Empty: Start builds it with `go build`, as for Cproxy.
	Proxy string
	// SharedProxy adds SharedProxyTarget: the do-nothing Go proxy run from
	// this executable, which the client and the upstream run too, as the
	// floor was run until 2026-11-30 (see cmd/benchproxy).
	SharedProxy bool
	// OneCPU adds the comparison on one CPU: OneCPUProxyTarget and
	// OneCPUCproxyTarget, the do-nothing Go proxy and cproxy each with
	// GOMAXPROCS=1. Every other Go proxy (the floor, cproxy, cproxy+limits,
	// an earlier build) runs on all the machine's CPUs, so each pair the
	// table divides runs on as many.
	OneCPU bool
	// Nginx is the nginx binary. Empty: nginx on PATH, else /usr/sbin/nginx;
	// when there is none the nginx target is left out and NginxMissing says so.
	Nginx string
	// NoNginx leaves nginx out even when it is installed.
	NoNginx bool
	// RequireNginx makes a missing nginx an error (under CI) rather than a
	// column left out.
	RequireNginx bool
	// Dir holds configs, stores and logs. Empty: a new temporary directory,
	// removed by Close.
	Dir string
	// Streams is the most streams the caller will hold open at once, for the
	// file-descriptor limit. Zero means DefaultPlan.Streams.
	Streams int
	// Profile, if set, is a directory where the do-nothing proxy and the
	// upstream write CPU profiles when they stop, and it adds the target
	// "routes": routes.Server served as `cproxy serve` serves it, in a
	// process that writes a CPU profile too. Empty: no profiles, no routes.
	Profile string
	// Trace, if set, is a directory where the do-nothing proxies and the
	// routes target (started as with Profile, and on one CPU too with
	// OneCPU) write execution traces when they stop: what wakes each
	// process per request, which a CPU profile does not show. Empty: none.
	Trace string
	// Before, if set, is the cproxy binary of an earlier build, run as a
	// target of its own (BeforeTarget(BeforeRev)) with plain cproxy's
	// config and policy, so that one run measures both builds at equal
	// settings. Empty: no earlier build.
	Before string
	// BeforeRev names Before's build, such as the commit it was built
	// from; see BeforeTarget.
	BeforeRev string
}

// Env is a running comparison: the upstream and every target in front of it.
type Env struct {
	// UpstreamURL is the upstream's base URL, for direct requests and for
	// ReleasePath.
	UpstreamURL string
	// Targets are direct, goproxy, nginx (when there is one), cproxy and
	// LimitsTarget, in that order (and routes, with Options.Profile).
	Targets []*Target
	// NginxMissing, when nginx was left out, says why.
	NginxMissing string
	// NginxVersion is what `nginx -v` printed, when nginx runs.
	NginxVersion string

	dir      string
	ownDir   bool
	proxyBin string // benchproxy
	profile  string
	trace    string
	procs    []*proc
	scraper  *scraper
}

// Start starts the upstream and the proxies in front of it, each as its own
// process on a loopback port, mints a sandbox token for each cproxy, and
// starts scraping LimitsTarget's metrics. Close stops them.
func Start(o Options) (_ *Env, err error) {
	if o.Streams == 0 {
		o.Streams = DefaultPlan.Streams
	}
	if err := raiseFileLimit(uint64(3*o.Streams + 256)); err != nil {
		return nil, err
	}
	e := &Env{dir: o.Dir}
	if e.dir == "" {
		if e.dir, err = os.MkdirTemp("", "cproxy-bench-"); err != nil {
			return nil, err
		}
		e.ownDir = true
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	key := "sk-ant-api03-bench-" + randomHex(16)

	e.profile, e.trace = o.Profile, o.Trace
	e.proxyBin = o.Proxy
	if e.proxyBin == "" {
		if e.proxyBin, err = e.build("benchproxy", "github.com/cproxy/cproxy/internal/bench/cmd/benchproxy"); err != nil {
			return nil, err
		}
	}
	if err := e.startUpstream(key); err != nil {
		return nil, err
	}
	e.Targets = append(e.Targets, &Target{Name: "direct", URL: e.UpstreamURL, Header: http.Header{"X-Api-Key": {key}}})

	// The proxies all receive what Claude Code sends them with
	// ANTHROPIC_AUTH_TOKEN set: the sandbox token as a bearer token. Only
	// cproxy checks it; the others overwrite x-api-key with the real key.
	all := allCPUs()
	if err := e.startGoProxy("goproxy", e.proxyBin, key, all); err != nil {
		return nil, err
	}
	if o.SharedProxy {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		if err := e.startGoProxy(SharedProxyTarget, self, key, all); err != nil {
			return nil, err
		}
	}
	if o.OneCPU {
		if err := e.startGoProxy(OneCPUProxyTarget, e.proxyBin, key, oneCPU); err != nil {
			return nil, err
		}
	}

	if !o.NoNginx {
		nginx := o.Nginx
		if nginx == "" {
			nginx = findNginx()
		}
		switch {
		case nginx == "" && o.RequireNginx:
			return nil, errors.New("nginx is not installed: apt-get install nginx (.ci/bench does)")
		case nginx == "":
			e.NginxMissing = "nginx is not installed (apt-get install nginx)"
		default:
			t, err := e.startNginx(nginx, key)
			if err != nil {
				return nil, err
			}
			e.Targets = append(e.Targets, t)
		}
	} else {
		e.NginxMissing = "left out on request"
	}

	bin := o.Cproxy
	if bin == "" {
		if bin, err = e.buildCproxy(); err != nil {
			return nil, err
		}
	}
	variants := []cproxyVariant{plainCproxy, limitsCproxy}
	if o.OneCPU {
		variants = append(variants, oneCPUCproxy)
	}
	for _, v := range variants {
		t, err := e.startCproxy(bin, key, v)
		if err != nil {
			return nil, err
		}
		e.Targets = append(e.Targets, t)
	}
	if o.Before != "" {
		name, err := BeforeTarget(o.BeforeRev)
		if err != nil {
			return nil, err
		}
		t, err := e.startCproxy(o.Before, key, cproxyVariant{name: name, dir: "before", config: cproxyConfig, policy: cproxyPolicy, env: all})
		if err != nil {
			return nil, err
		}
		e.Targets = append(e.Targets, t)
	}
	e.scraper = startScraper(e.Target(LimitsTarget).admin, scrapeInterval)
	if o.Profile != "" || o.Trace != "" {
		t, err := e.startRoutes("routes", key, nil)
		if err != nil {
			return nil, err
		}
		e.Targets = append(e.Targets, t)
		if o.Trace != "" && o.OneCPU {
			t, err := e.startRoutes(OneCPURoutesTarget, key, oneCPU)
			if err != nil {
				return nil, err
			}
			e.Targets = append(e.Targets, t)
		}
	}
	return e, nil
}

// startUpstreamOnly starts an environment of the upstream alone, in dir or,
// if empty, a new temporary directory named with prefix (removed by Close).
// It returns the environment, the cproxy binary to run (cproxy, or else one
// built into the directory) and the upstream's API key.
func startUpstreamOnly(dir, prefix, cproxy string) (_ *Env, bin, key string, err error) {
	e := &Env{dir: dir}
	if e.dir == "" {
		if e.dir, err = os.MkdirTemp("", prefix); err != nil {
			return nil, "", "", err
		}
		e.ownDir = true
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	bin = cproxy
	if bin == "" {
		if bin, err = e.buildCproxy(); err != nil {
			return nil, "", "", err
		}
	}
	key = "sk-ant-api03-bench-" + randomHex(16)
	if err := e.startUpstream(key); err != nil {
		return nil, "", "", err
	}
	return e, bin, key, nil
}

// Close stops every process Start started and removes its directory.
func (e *Env) Close() {
	if e.scraper != nil {
		e.scraper.stop()
		e.scraper = nil
	}
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].stop()
	}
	e.procs = nil
	if e.ownDir {
		os.RemoveAll(e.dir)
	}
}

// Target returns the named target, or nil.
func (e *Env) Target(name string) *Target {
	for _, t := range e.Targets {
		if t.Name == name {
			return t
		}
	}
	return nil
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// proc is a process Start started. Its stderr goes to a log file in the
// environment's directory, quoted when it fails.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.Closer
	log    string
	exited chan struct{}
	err    error
}

func (e *Env) start(name string, cmd *exec.Cmd) (*proc, error) {
	p := &proc{name: name, cmd: cmd, log: filepath.Join(e.dir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	// A role exits when its stdin closes, so it dies with this process even
	// on SIGKILL; Pdeathsig does the same for nginx and cproxy.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p.stdin = stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	e.procs = append(e.procs, p)
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// failed describes a process that did not come up, with the end of its log.
func (p *proc) failed(what string) error {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	select {
	case <-p.exited:
		return fmt.Errorf("%s: %s (exited: %v); its log:\n%s", p.name, what, p.err, b)
	default:
		return fmt.Errorf("%s: %s; its log:\n%s", p.name, what, b)
	}
}

func (p *proc) stop() {
	p.stdin.Close()
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// pids is the process and its children (nginx's workers).
func (p *proc) pids() []int { return withChildren(p.cmd.Process.Pid) }

// withChildren is pid and its children's pids.
func withChildren(pid int) []int {
	pids := []int{pid}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			pids = append(pids, c)
		}
	}
	return pids
}

// startUpstream starts the upstream and sets UpstreamURL. It runs from this
// executable, as the client does: it does the same work for every target,
// direct included. The proxies run from executables of their own (see
// cmd/benchproxy).
func (e *Env) startUpstream(key string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	_, addr, err := e.startRole(self, "upstream", map[string]string{keyEnv: key})
	if err != nil {
		return err
	}
	e.UpstreamURL = "http://" + addr
	return nil
}

// startGoProxy starts the do-nothing Go proxy from exe, with env added to
// its environment, and adds it as the target name.
func (e *Env) startGoProxy(name, exe, key string, env map[string]string) error {
	vars := map[string]string{keyEnv: key, upstreamEnv: e.UpstreamURL}
	maps.Copy(vars, env)
	p, addr, err := e.startRole(exe, "goproxy", vars)
	if err != nil {
		return err
	}
	e.Targets = append(e.Targets, &Target{Name: name, URL: "http://" + addr, Header: bearer("cpx_not-checked-by-this-proxy"), proc: p})
	return nil
}

// startRole runs exe (this executable or benchproxy) as role, with env
// added to this process's environment, and reads the address it listens on
// from its first line of output.
func (e *Env) startRole(exe, role string, env map[string]string) (*proc, string, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	// Each file named by the role and its CPUs: the floor runs twice.
	name := role
	if n := env["GOMAXPROCS"]; n != "" {
		name += "-" + n + "cpu"
	}
	if e.profile != "" {
		cmd.Env = append(cmd.Env, profileEnv+"="+filepath.Join(e.profile, name+".cpu.pprof"))
	}
	if e.trace != "" && role != "upstream" {
		cmd.Env = append(cmd.Env, traceEnv+"="+filepath.Join(e.trace, name+".trace"))
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	p, err := e.start(role, cmd)
	if err != nil {
		return nil, "", err
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Scan()
		line <- s.Text()
		io.Copy(io.Discard, out)
	}()
	select {
	case addr := <-line:
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, "", p.failed("printed no address")
		}
		return p, addr, nil
	case <-time.After(startTimeout):
		return nil, "", p.failed("no address within " + startTimeout.String())
	}
}

func findNginx() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// nginxConf is nginx as a plain reverse proxy, as an operator would set it up
// in front of an SSE API: upstream keep-alive, no response buffering (each
// event passes as it comes), request bodies streamed rather than spooled to a
// temporary file, and the one credential header set, like the do-nothing Go
// proxy. worker_processes auto is one worker per core, Debian's default.
const nginxConf = `# written by the cproxy benchmark
daemon off;
{{user}}
worker_processes auto;
worker_rlimit_nofile 16384;
pid {{dir}}/nginx.pid;
error_log {{dir}}/nginx-error.log warn;
events {
	worker_connections 8192;
}
http {
	access_log off;
	client_body_temp_path {{dir}}/client_body;
	proxy_temp_path {{dir}}/proxy;
	fastcgi_temp_path {{dir}}/fastcgi;
	uwsgi_temp_path {{dir}}/uwsgi;
	scgi_temp_path {{dir}}/scgi;
	upstream anthropic {
		server {{upstream}};
		keepalive 64;
	}
	server {
		listen 127.0.0.1:{{port}} backlog=4096;
		client_max_body_size 32m;
		client_body_buffer_size 64k;
		location / {
			proxy_pass http://anthropic;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header X-Api-Key "{{key}}";
			proxy_buffering off;
			proxy_request_buffering off;
			proxy_read_timeout 1h;
		}
	}
}
`

func (e *Env) startNginx(bin, key string) (*Target, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// Run as the current user: as root nginx would otherwise switch its
	// workers to nobody, who cannot use this directory.
	userLine := ""
	if os.Geteuid() == 0 {
		if u, err := user.Current(); err == nil {
			userLine = "user " + u.Username + ";"
		}
	}
	conf := strings.NewReplacer("{{user}}", userLine, "{{dir}}", e.dir, "{{port}}", strconv.Itoa(port),
		"{{upstream}}", strings.TrimPrefix(e.UpstreamURL, "http://"), "{{key}}", key).Replace(nginxConf)
	confPath := filepath.Join(e.dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if v, err := exec.Command(bin, "-v").CombinedOutput(); err == nil {
		e.NginxVersion = strings.TrimSpace(strings.TrimPrefix(string(v), "nginx version: "))
	}
	p, err := e.start("nginx", exec.Command(bin, "-p", e.dir, "-e", filepath.Join(e.dir, "nginx-error.log"), "-c", confPath))
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.exited:
			return nil, p.failed("exited at start")
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return nil, p.failed("not listening within " + startTimeout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &Target{Name: "nginx", URL: "http://" + addr, Header: bearer("cpx_not-checked-by-this-proxy"), proc: p}, nil
}

// freePort picks a loopback port for nginx, which cannot report the one it
// got: the kernel hands out a free one, which is closed and passed on.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// modelsPolicy is a policy a platform engineer would write: models by glob.
const modelsPolicy = `[profile.default]
models = ["claude-*"]
`

// cproxyPolicy is modelsPolicy with a token's rate and requests in flight
// raised far above cproxy's defaults (policy.DefaultRequestsPerMinute and
// DefaultConcurrent), which the benchmark's one token, busier than any
// sandbox (1,000 streams at once, up to ~10^6 requests a minute), would
// pass. Nothing is metered.
const cproxyPolicy = modelsPolicy + `budget = { requests_per_minute = 100_000_000, concurrent = 100_000 }
`

// cproxyConfig runs cproxy on ephemeral loopback ports with its store, key
// and ready file in its directory. Logging stays at its default (text, info:
// one audit line per request) and goes to a file.
const cproxyConfig = `policy = "policy.toml"

[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"
ready_file = "ready.json"
drain = "2s"

[store]
path = "cproxy.db"

[upstream.anthropic]
url = "{{upstream}}"
credential = "file:anthropic-key"
`

// limitsPolicy is cproxyPolicy with a budget that meters every kind the
// model route counts, per UTC day, and limits rate and concurrency, so each
// request is reserved, settled and its stream's usage read, as in
// production. The limits are far above what a run spends (per repetition,
// about 10^5 requests of 5,120 input tokens each, holding 32,000 max_tokens
// of output and the body's 22 KB of each input kind while in flight, 1,000
// streams at once, up to ~10^6 requests a minute), so none refuses. A
// budget this size leases half a thousandth of each limit from the store
// at a time: a few bbolt writes per repetition (every ~15,600 requests for
// the output tokens' 32,000 max_tokens, every 50,000 for the requests), and
// none as requests settle (each holds far less than a thousandth), as in
// production for a budget far from its end.
const limitsPolicy = modelsPolicy + `
[profile.default.budget]
window = "day"
requests = 100_000_000
input_tokens = 1_000_000_000_000
output_tokens = 1_000_000_000_000
cache_read_tokens = 1_000_000_000_000
cache_write_tokens = 1_000_000_000_000
requests_per_minute = 100_000_000
concurrent = 100_000
`

// limitsConfig is cproxyConfig with the audit records going to a JSON
// lines file, as an operator who meters would; the metrics are always on and
// Env's scraper reads them.
const limitsConfig = cproxyConfig + `
[log]
audit = "audit.jsonl"
`

// A cproxyVariant is one way of running `cproxy serve` as a target.
type cproxyVariant struct {
	name   string // the target's name
	dir    string // its directory, under the environment's; "" for the environment's own
	config string // the config file, with {{upstream}} for the upstream's URL
	policy string
	// env is added to its environment: GOMAXPROCS, which runtime.cpus
	// takes as its default when the config leaves it out (cproxyConfig
	// does). Nil: cproxy's own default.
	env map[string]string
}

var (
	plainCproxy  = cproxyVariant{name: "cproxy", config: cproxyConfig, policy: cproxyPolicy, env: allCPUs()}
	limitsCproxy = cproxyVariant{name: LimitsTarget, dir: "limits", config: limitsConfig, policy: limitsPolicy, env: allCPUs()}
	oneCPUCproxy = cproxyVariant{name: OneCPUCproxyTarget, dir: "one-cpu", config: cproxyConfig, policy: cproxyPolicy, env: oneCPU}
)

// allCPUs is the environment that runs a Go proxy on every CPU of the
// machine, whatever the proxy's own default, and oneCPU on one: the pairs
// the tables divide run on as many CPUs.
func allCPUs() map[string]string {
	return map[string]string{"GOMAXPROCS": strconv.Itoa(runtime.NumCPU())}
}

var oneCPU = map[string]string{"GOMAXPROCS": "1"}

// environ is this process's environment with extra added, or nil (the
// same, inherited) when there is nothing to add.
func environ(extra map[string]string) []string {
	if extra == nil {
		return nil
	}
	env := os.Environ()
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// SharedProxyTarget is the do-nothing Go proxy run from the benchmark's own
// executable (Options.SharedProxy).
const SharedProxyTarget = "goproxy-shared"

// OneCPUProxyTarget and OneCPUCproxyTarget are the do-nothing Go proxy and
// cproxy on one CPU (Options.OneCPU).
const (
	OneCPUProxyTarget  = "goproxy-1cpu"
	OneCPUCproxyTarget = "cproxy-1cpu"
	// OneCPURoutesTarget is the routes target on one CPU (Options.Trace).
	OneCPURoutesTarget = "routes-1cpu"
)

// BeforeTarget is the name of the target, or of the way in the git and npm
// benchmarks, that runs an earlier build of cproxy (Options.Before):
// "cproxy@" and rev, or "cproxy@before" without one. rev goes into file
// names, so it is letters, digits, '.', '_' and '-' only: a commit id or a
// tag, not a ref path.
func BeforeTarget(rev string) (string, error) {
	if rev == "" {
		rev = "before"
	}
	if !revName.MatchString(rev) {
		return "", fmt.Errorf("the earlier build's name %q may hold only letters, digits, '.', '_' and '-': give a commit id (git rev-parse --short REV)", rev)
	}
	return "cproxy@" + rev, nil
}

var revName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// LimitsTarget is the cproxy target with budgets, the JSON audit log and a
// metrics scraper on; "cproxy" keeps the default config.
const LimitsTarget = "cproxy+limits"

// files are the variant's files, by name in its directory.
func (v cproxyVariant) files(upstreamURL, key string) map[string]string {
	return map[string]string{
		"anthropic-key": key + "\n",
		"policy.toml":   v.policy,
		"cproxy.toml":   strings.ReplaceAll(v.config, "{{upstream}}", upstreamURL),
	}
}

// buildCproxy builds cproxy into the environment's directory.
func (e *Env) buildCproxy() (string, error) {
	return e.build("cproxy", "github.com/cproxy/cproxy/cmd/cproxy")
}

// build builds the command pkg into the environment's directory as name.
func (e *Env) build(name, pkg string) (string, error) {
	bin := filepath.Join(e.dir, name)
	build := exec.Command("go", "build", "-o", bin, pkg)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

func (e *Env) startCproxy(bin, key string, v cproxyVariant) (*Target, error) {
	dir := filepath.Join(e.dir, v.dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// A directory kept with Options.Dir holds the last repetition's audit
	// log, which would be appended to.
	if err := os.Remove(filepath.Join(dir, "audit.jsonl")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for name, content := range v.files(e.UpstreamURL, key) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	ready := filepath.Join(dir, "ready.json")
	cmd := exec.Command(bin, "serve", "--config", filepath.Join(dir, "cproxy.toml"))
	cmd.Dir = dir
	cmd.Env = environ(v.env)
	p, err := e.start(v.name, cmd)
	if err != nil {
		return nil, err
	}
	var addrs struct{ Proxy, Admin string }
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.exited:
			return nil, p.failed("exited at start")
		default:
		}
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &addrs) == nil && addrs.Proxy != "" {
			break
		}
		if time.Now().After(deadline) {
			return nil, p.failed("wrote no ready file within " + startTimeout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	admin := "http://" + addrs.Admin
	token, id, err := mintToken(admin, "bench-1")
	if err != nil {
		return nil, p.failed(err.Error())
	}
	return &Target{Name: v.name, URL: "http://" + addrs.Proxy, Header: bearer(token), proc: p, admin: admin, dir: dir, tokenID: id}, nil
}

// mintToken asks cproxy's admin API for a sandbox token; it returns the
// token and its id.
func mintToken(admin, sandbox string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := adminAPI(admin)
	if err != nil {
		return "", "", fmt.Errorf("mint token: %w", err)
	}
	tok, err := c.CreateToken(ctx, sandbox, client.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("mint token: %w", err)
	}
	return tok.Reveal(), tok.ID, nil
}

// adminAPI is a client of cproxy's admin API at admin, bounded by its
// callers' contexts alone: a pruning pass over a large store may take
// longer than the client's own timeout.
func adminAPI(admin string) (*client.Client, error) {
	return client.New(admin, client.WithHTTPClient(http.DefaultClient))
}

// CPU is the processor time the target's processes have used so far, user
// and system, from /proc/PID/stat (in clock ticks of 10 ms); zero for direct.
func (t *Target) CPU() (time.Duration, error) { return procCPU(t.PIDs()) }

// procCPU is the processor time the processes pids have used so far.
func procCPU(pids []int) (time.Duration, error) {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// The command name, in parentheses, may hold spaces; the fields
		// after it are numbers. utime and stime are fields 14 and 15.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
		}
		for _, s := range f[11:13] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
			}
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// Mem is a process's memory, from /proc/PID/status, in bytes: summed over
// the target's processes (for nginx, pages shared between the master and its
// workers count once per process).
type Mem struct {
	RSS  int64 `json:"rss_bytes"`  // VmRSS: resident now
	Peak int64 `json:"peak_bytes"` // VmHWM: the most resident since the process started
	// Anon is RssAnon, the anonymous part of RSS: the heap and stacks, without
	// files mapped in (cproxy's embedded store is one). Zero in reports made
	// before it was measured.
	Anon int64 `json:"anon_bytes,omitempty"`
}

// Memory reads the target's memory; zero for direct.
func (t *Target) Memory() (Mem, error) {
	var m Mem
	for _, pid := range t.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return Mem{}, err
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			field := map[string]*int64{"VmRSS": &m.RSS, "VmHWM": &m.Peak, "RssAnon": &m.Anon}[k]
			if !ok || field == nil {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return Mem{}, fmt.Errorf("/proc/%d/status: %s: %w", pid, line, err)
			}
			*field += kb << 10
		}
	}
	if m.Peak == 0 && t.proc != nil {
		return Mem{}, errors.New("no VmHWM in /proc/PID/status")
	}
	return m, nil
}

// raiseFileLimit lifts the soft limit on open files to the hard one, so the
// held streams fit: each costs the driver one descriptor, the upstream one,
// and a proxy two. Go raises its own soft limit at start but gives child
// processes the original one back unless the limit was set explicitly, as
// here; so nginx and cproxy inherit the raised limit too.
func raiseFileLimit(need uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return err
		}
	}
	if l.Cur < need {
		return fmt.Errorf("open files are limited to %d and the benchmark needs about %d: raise the hard limit (ulimit -Hn, as root)", l.Cur, need)
	}
	return nil
}
