package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// The GitHub API benchmark: requests a sandbox's gh sends, to the fake
// GitHub API of the route's tests (internal/fakes.GitHubREST, in this
// process, on loopback), directly with the real token, through the
// do-nothing Go proxy (benchproxy, setting the real Authorization) and
// through the real `cproxy serve` with a sandbox token, each proxy on every
// CPU and on one, in turns that rotate between rounds. In each turn a way
// times Reads sequential REST reads (GET /repos/acme/app/pulls/1; through
// cproxy at /api/v3/…), then the same read from 16 clients for Slice, then
// Queries sequential GraphQL queries of gh pr view 1 (through cproxy at
// /api/graphql, which parses and decides each before it forwards it), and
// reads the proxy's CPU around each. Then, with gh installed, the real gh
// runs gh pr view 1 directly against the fake over HTTPS and through each
// cproxy's TLS listener, as a sandbox runs it. Each cproxy's audit log
// must hold a line for every request it answered.

// GitHubOptions say what RunGitHub does.
type GitHubOptions struct {
	// Cproxy is the cproxy binary and Proxy the benchproxy binary; empty:
	// go build them.
	Cproxy, Proxy string
	// Dir is where configs and logs go. Empty: a new temporary directory,
	// removed at the end.
	Dir string
	// Rounds is how many turns each way takes; Reads how many sequential
	// REST reads and Queries how many sequential GraphQL queries each way
	// times in a turn; Slice how long its 16 clients read. Zero means
	// DefaultGitHubOptions' value.
	Rounds, Reads, Queries int
	Slice                  time.Duration
	// Gh is how many gh pr view each gh way runs in a round. Zero means
	// DefaultGitHubOptions' value; negative leaves gh out.
	Gh int
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

// DefaultGitHubOptions time 500 reads, a second of 16 clients and 200
// queries per way in each of 6 rounds, and 5 gh pr view per gh way and
// round.
var DefaultGitHubOptions = GitHubOptions{Rounds: 6, Reads: 500, Queries: 200, Slice: time.Second, Gh: 5}

// The ways of the GitHub API benchmark, in the order of the first round,
// and those gh runs.
var (
	githubWays   = []string{wayDirect, "goproxy", wayCproxy, OneCPUProxyTarget, OneCPUCproxyTarget}
	githubGhWays = []string{wayDirectTLS, wayCproxy, OneCPUCproxyTarget}
)

// githubClients are the clients of the throughput measure.
const githubClients = 16

// githubMaxOps bounds one turn of the throughput measure.
const githubMaxOps = 100_000

// The repository and pull request every request reads.
const (
	githubRepo = "acme/app"
	githubPull = 1
)

// githubPRView is the query gh 2.23 sends for gh pr view N, as
// routes/githubapi's benchmark has it.
const githubPRView = `query PullRequestByNumber($owner: String!, $repo: String!, $pr_number: Int!) { repository(owner: $owner, name: $repo) { pullRequest(number: $pr_number) { id url number title state body author{login} isDraft baseRefName headRefName headRepositoryOwner{login} headRepository{name} isCrossRepository maintainerCanModify additions deletions createdAt mergeable assignees(first:100){nodes{login},totalCount} labels(first:100){nodes{name},totalCount} milestone{title} comments(last: 1){nodes{author{login} body createdAt},totalCount} reviewRequests(first:100){nodes{requestedReviewer{...on User{login}}}} reviews(first:100){nodes{author{login} state}} } } }`

// cproxyGitHubPolicy lets the sandbox read the benchmark's repository.
const cproxyGitHubPolicy = `[profile.default]
repos = [
  { repo = "acme/app", access = "read", api = ["read"] },
]
`

// GitHubMeasure is one measure of one way's turn.
type GitHubMeasure struct {
	// P50 and P99 are percentiles of the requests' latencies; PerSec is
	// requests completed per second of the measure's wall time; Ops how
	// many requests it timed.
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	PerSec float64       `json:"per_sec"`
	Ops    int           `json:"ops"`
	// CPU is the processor time the way's proxy used over the measure;
	// zero for direct.
	CPU time.Duration `json:"cpu_ns"`
}

// GitHubTurn is one way's turn in one round.
type GitHubTurn struct {
	Way   string `json:"way"`
	Round int    `json:"round"`
	// Read is the sequential REST reads, Reads16 the REST reads of 16
	// clients, Query the sequential GraphQL queries.
	Read    GitHubMeasure `json:"read"`
	Reads16 GitHubMeasure `json:"reads_16"`
	Query   GitHubMeasure `json:"query"`
}

// GitHubGhTurn is one gh way's turn in one round: the wall time of each
// gh pr view.
type GitHubGhTurn struct {
	Way   string          `json:"way"`
	Round int             `json:"round"`
	Times []time.Duration `json:"times_ns"`
}

// GitHubResult is a whole run.
type GitHubResult struct {
	Ways    []string      `json:"ways"`
	Reads   int           `json:"reads"`
	Queries int           `json:"queries"`
	Slice   time.Duration `json:"slice_ns"`
	Turns   []GitHubTurn  `json:"turns"` // in the order run
	// CPUs is how many CPUs each cproxy ran on, as its metrics say.
	CPUs map[string]int `json:"cpus"`
	// Answered is how many requests each cproxy answered before gh ran,
	// Audited how many request lines its audit log held then: the run
	// fails unless they are equal.
	Answered map[string]int `json:"answered"`
	Audited  map[string]int `json:"audited"`
	// GhTurns are gh's, in the order run; GhVersion is gh --version's
	// first line, GhMissing why gh was left out (empty when it ran).
	GhTurns   []GitHubGhTurn `json:"gh_turns,omitempty"`
	GhVersion string         `json:"gh_version,omitempty"`
	GhMissing string         `json:"gh_missing,omitempty"`
	// Use is what each cproxy used: RSS once started, peak at the end, CPU
	// over the timed measures.
	Use     map[string]CproxyUse `json:"cproxy_use"`
	Started time.Time            `json:"started"`
	Took    time.Duration        `json:"took_ns"`
}

// githubWay is one way the client reaches the API: its base URL, the
// paths of the REST read and of GraphQL there, and the credential it sends.
type githubWay struct {
	name, base, read, graphql, auth string
	// proc is the way's proxy; nil for direct.
	proc *proc
	// cp is the way's cproxy; nil for direct and the Go proxies.
	cp *cproxyWay
}

// RunGitHub runs the GitHub API benchmark.
func RunGitHub(ctx context.Context, o GitHubOptions) (_ *GitHubResult, err error) {
	d := DefaultGitHubOptions
	for _, f := range []struct{ v, def *int }{{&o.Rounds, &d.Rounds}, {&o.Reads, &d.Reads}, {&o.Queries, &d.Queries}, {&o.Gh, &d.Gh}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if o.Slice == 0 {
		o.Slice = d.Slice
	}
	progress := progressTo(o.Progress, "bench-github")
	res := &GitHubResult{Started: time.Now(), Ways: githubWays, Reads: o.Reads, Queries: o.Queries, Slice: o.Slice,
		CPUs: map[string]int{}, Answered: map[string]int{}, Audited: map[string]int{}, Use: map[string]CproxyUse{}}
	dir, done, err := workDir(o.Dir, "bench-github")
	if err != nil {
		return nil, err
	}
	defer done()
	if o.Cproxy, err = cproxyBinary(o.Cproxy, dir); err != nil {
		return nil, err
	}
	if o.Proxy, err = benchproxyBinary(o.Proxy, dir); err != nil {
		return nil, err
	}

	realToken := "ghp_bench" + randomHex(16)
	api := fakes.NewGitHubREST(fakes.GitHubRESTOptions{Token: realToken, Repos: []string{githubRepo}, TLS: true, Forget: true})
	defer api.Close()
	if err := githubPullRequest(ctx, api.URL, realToken); err != nil {
		return nil, err
	}

	ways := map[string]*githubWay{wayDirect: {name: wayDirect, base: api.URL, auth: "Bearer " + realToken}}
	proxies := &Env{dir: filepath.Join(dir, "goproxy"), UpstreamURL: api.URL}
	if err := os.MkdirAll(proxies.dir, 0o755); err != nil {
		return nil, err
	}
	defer proxies.Close()
	for name, cpus := range map[string]map[string]string{"goproxy": allCPUs(), OneCPUProxyTarget: oneCPU} {
		env := map[string]string{headerEnv: "Authorization"}
		maps.Copy(env, cpus)
		if err := proxies.startGoProxy(name, o.Proxy, "Bearer "+realToken, env); err != nil {
			return nil, err
		}
		t := proxies.Target(name)
		ways[name] = &githubWay{name: name, base: t.URL, auth: "Bearer cpx_not-checked-by-this-proxy", proc: t.proc}
	}
	for _, w := range []*githubWay{ways[wayDirect], ways["goproxy"], ways[OneCPUProxyTarget]} {
		w.read, w.graphql = fmt.Sprintf("/repos/%s/pulls/%d", githubRepo, githubPull), "/graphql"
	}
	for name, cpus := range map[string]map[string]string{wayCproxy: allCPUs(), OneCPUCproxyTarget: oneCPU} {
		e := &Env{dir: filepath.Join(dir, name+"-serve")}
		if err := os.MkdirAll(e.dir, 0o755); err != nil {
			return nil, err
		}
		defer e.Close()
		use := &CproxyUse{}
		cp, err := e.startRouteWay(o.Cproxy, name, "githubapi", api.URL, realToken, cproxyGitHubPolicy, "bench-github",
			routeSetup{Upstream: raisedLimits, TLS: true, Env: cpus}, use)
		if err != nil {
			return nil, err
		}
		if res.CPUs[name], err = fromMetrics(ctx, cp.admin, parseCPUs); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if want := map[string]int{wayCproxy: runtime.NumCPU(), OneCPUCproxyTarget: 1}[name]; res.CPUs[name] != want {
			return nil, fmt.Errorf("%s runs on %d CPUs, want %d", name, res.CPUs[name], want)
		}
		ways[name] = &githubWay{name: name, base: cp.URL, read: fmt.Sprintf("/api/v3/repos/%s/pulls/%d", githubRepo, githubPull),
			graphql: "/api/graphql", auth: "Bearer " + cp.token, proc: cp.proc, cp: cp}
		res.Use[name] = *use
	}
	progress("fake GitHub API at %s; Go proxy and cproxy on %d CPUs and on 1", api.URL, runtime.NumCPU())

	query, err := json.Marshal(map[string]any{"query": githubPRView,
		"variables": map[string]any{"owner": "acme", "repo": "app", "pr_number": githubPull}})
	if err != nil {
		return nil, err
	}
	clients := map[string]*http.Client{}
	for _, name := range githubWays {
		clients[name] = NewClient(githubClients)
		defer clients[name].CloseIdleConnections()
		// Warm up: connections open, code paged in, pools filled; the
		// requests count as answered all the same.
		if _, err := githubTurn(ctx, ways[name], clients[name], query, GitHubOptions{Reads: max(o.Reads/10, 1), Queries: max(o.Queries/10, 1), Slice: o.Slice / 4}, res.Answered); err != nil {
			return nil, fmt.Errorf("%s, warming up: %w", name, err)
		}
	}
	for round := range o.Rounds {
		for _, name := range rotated(githubWays, round) {
			t, err := githubTurn(ctx, ways[name], clients[name], query, o, res.Answered)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", name, round+1, err)
			}
			t.Round = round + 1
			res.Turns = append(res.Turns, t)
			progress("%s #%d: read p50 %s p99 %s; 16 clients %.0f req/s; query p50 %s", name, round+1,
				t.Read.P50.Round(time.Microsecond), t.Read.P99.Round(time.Microsecond), t.Reads16.PerSec, t.Query.P50.Round(time.Microsecond))
		}
	}
	for _, name := range []string{wayCproxy, OneCPUCproxyTarget} {
		cp := ways[name].cp
		if res.Audited[name], err = auditedAll(cp, res.Answered[name]); err != nil {
			return nil, err
		}
		if res.Audited[name] != res.Answered[name] {
			return nil, fmt.Errorf("%s: its audit log has %d requests, and it answered %d", name, res.Audited[name], res.Answered[name])
		}
		m, err := cp.Memory()
		if err != nil {
			return nil, err
		}
		u := res.Use[name]
		u.Peak = m.Peak
		for _, t := range res.Turns {
			if t.Way == name {
				u.CPU += t.Read.CPU + t.Reads16.CPU + t.Query.CPU
			}
		}
		res.Use[name] = u
	}
	progress("audit: cproxy logged %d requests of %d, cproxy on 1 CPU %d of %d", res.Audited[wayCproxy], res.Answered[wayCproxy],
		res.Audited[OneCPUCproxyTarget], res.Answered[OneCPUCproxyTarget])

	if o.Gh > 0 {
		if err := githubGh(ctx, res, api, realToken, ways, dir, o, progress); err != nil {
			return nil, fmt.Errorf("gh: %w", err)
		}
	}
	res.Took = time.Since(res.Started)
	return res, nil
}

// githubPullRequest opens pull request 1, which every request reads.
func githubPullRequest(ctx context.Context, apiURL, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+"/repos/"+githubRepo+"/pulls",
		strings.NewReader(`{"title":"Fix the parser","head":"agent/x","base":"main","body":"It reads quotes now."}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("open the pull request: %w", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !bytes.Contains(b, []byte(fmt.Sprintf(`"number":%d`, githubPull))) {
		return fmt.Errorf("open the pull request: %s %s", resp.Status, b)
	}
	return nil
}

// githubTurn is one way's turn: o.Reads sequential reads, o.Slice of
// reads from githubClients clients, o.Queries sequential queries, the way's
// proxy's CPU read around each. It adds the requests the way answered to
// answered.
func githubTurn(ctx context.Context, w *githubWay, hc *http.Client, query []byte, o GitHubOptions, answered map[string]int) (GitHubTurn, error) {
	t := GitHubTurn{Way: w.name}
	want := []byte(fmt.Sprintf(`"number":%d`, githubPull))
	read := githubOp(hc, http.MethodGet, w.base+w.read, w.auth, nil, want)
	ask := githubOp(hc, http.MethodPost, w.base+w.graphql, w.auth, query, want)
	for _, m := range []struct {
		into        *GitHubMeasure
		conc, ops   int
		slice       time.Duration
		do          op
		description string
	}{
		{&t.Read, 1, o.Reads, time.Hour, read, "REST read"},
		{&t.Reads16, githubClients, githubMaxOps, o.Slice, read, "REST reads from 16 clients"},
		{&t.Query, 1, o.Queries, time.Hour, ask, "GraphQL query"},
	} {
		cpu0, err := w.cpu()
		if err != nil {
			return t, err
		}
		lats, wall, err := loop(ctx, m.conc, m.slice, m.ops, m.do)
		if err != nil {
			return t, fmt.Errorf("%s: %w", m.description, err)
		}
		cpu1, err := w.cpu()
		if err != nil {
			return t, err
		}
		answered[w.name] += len(lats)
		slices.Sort(lats)
		*m.into = GitHubMeasure{P50: percentile(lats, 50), P99: percentile(lats, 99), PerSec: float64(len(lats)) / wall.Seconds(),
			Ops: len(lats), CPU: cpu1 - cpu0}
	}
	return t, nil
}

// cpu is the processor time the way's proxy has used so far; zero for
// direct.
func (w *githubWay) cpu() (time.Duration, error) {
	if w.proc == nil {
		return 0, nil
	}
	return procCPU(w.proc.pids())
}

// githubOp sends one request and times it to the answer's last byte; the
// answer must be a 200 holding want and no GraphQL errors.
func githubOp(hc *http.Client, method, url, auth string, body, want []byte) op {
	return func(ctx context.Context) (time.Duration, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", auth)
		req.Header.Set("Accept", "application/vnd.github+json")
		if body != nil {
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, want) || bytes.Contains(b, []byte(`"errors"`)) {
			return 0, fmt.Errorf("%s %s: %s %.300s", method, url, resp.Status, b)
		}
		return took, nil
	}
}

// auditedAll counts the request lines of the way's cproxy log, waiting a
// little for those of the last requests, which cproxy may write just after
// it answered them.
func auditedAll(w *cproxyWay, want int) (int, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := w.auditLines("githubapi")
		if err != nil || n >= want || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// githubGh runs gh pr view directly against the API over HTTPS and
// through each cproxy's TLS listener, in rotating turns, as a sandbox runs
// it (GH_HOST, GH_ENTERPRISE_TOKEN and the CA in SSL_CERT_FILE). Without gh
// it says so on progress and in res.GhMissing.
func githubGh(ctx context.Context, res *GitHubResult, api *fakes.GitHubREST, realToken string, ways map[string]*githubWay, dir string, o GitHubOptions, progress func(string, ...any)) error {
	gh, err := exec.LookPath("gh")
	if err != nil {
		res.GhMissing = "gh is not installed (apt-get install gh)"
		progress("%s: its part is left out", res.GhMissing)
		return nil
	}
	if v, err := exec.CommandContext(ctx, gh, "--version").Output(); err == nil {
		res.GhVersion, _, _ = strings.Cut(strings.TrimSpace(string(v)), "\n")
	}
	ca := filepath.Join(dir, "fake-github.pem")
	if err := os.WriteFile(ca, api.CertPEM, 0o644); err != nil {
		return err
	}
	// host, token and CA file per gh way.
	type ghWay struct{ host, token, ca string }
	gw := map[string]ghWay{wayDirectTLS: {strings.TrimPrefix(api.TLSURL, "https://"), realToken, ca}}
	for _, name := range githubGhWays[1:] {
		cp := ways[name].cp
		// The local CA gh trusts for the TLS listener, as a sandbox gets it.
		pem, err := exec.CommandContext(ctx, o.Cproxy, "ca", "--config", filepath.Join(cp.dir, "cproxy.toml")).Output()
		if err != nil {
			return fmt.Errorf("%s: cproxy ca: %w", name, err)
		}
		f := filepath.Join(cp.dir, "ca.pem")
		if err := os.WriteFile(f, pem, 0o644); err != nil {
			return err
		}
		gw[name] = ghWay{cp.tlsAddr, cp.token, f}
	}
	run := func(name string) (time.Duration, error) {
		w := gw[name]
		cmd := exec.CommandContext(ctx, gh, "pr", "view", fmt.Sprint(githubPull), "-R", w.host+"/"+githubRepo)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "LANG=C",
			"GH_HOST=" + w.host, "GH_ENTERPRISE_TOKEN=" + w.token, "SSL_CERT_FILE=" + w.ca,
			"GH_CONFIG_DIR=" + filepath.Join(dir, "gh-"+name), "GH_NO_UPDATE_NOTIFIER=1", "GH_PROMPT_DISABLED=1",
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		took := time.Since(start)
		if err != nil {
			return 0, fmt.Errorf("%s: gh pr view: %w: %s", name, err, stderr.Bytes())
		}
		if !bytes.Contains(out, []byte("Fix the parser")) {
			return 0, fmt.Errorf("%s: gh pr view printed %q", name, out)
		}
		return took, nil
	}
	for _, name := range githubGhWays {
		if _, err := run(name); err != nil {
			return err
		}
	}
	for round := range o.Rounds {
		for _, name := range rotated(githubGhWays, round) {
			t := GitHubGhTurn{Way: name, Round: round + 1}
			for range o.Gh {
				took, err := run(name)
				if err != nil {
					return err
				}
				t.Times = append(t.Times, took)
			}
			res.GhTurns = append(res.GhTurns, t)
			progress("gh %s #%d: median %s", name, round+1, median(t.Times).Round(time.Millisecond))
		}
	}
	return nil
}

// Markdown writes the result as tables.
func (r *GitHubResult) Markdown(w io.Writer) {
	if len(r.Turns) == 0 {
		return
	}
	rounds := len(r.Turns) / len(r.Ways)
	fmt.Fprintf(w, "%s, %s in all: the fake GitHub API (internal/fakes.GitHubREST) on loopback, directly, through the do-nothing Go proxy and through `cproxy serve`, each proxy on %d CPUs (cproxy's metrics: %d) and on 1 (%d). %d round%s; in each, every way in turn times %d sequential REST reads (`GET /repos/%s/pulls/%d`; through cproxy `/api/v3/…`), %s of them from %d clients, and %d sequential GraphQL queries of `gh pr view %d` (through cproxy `/api/graphql`).\n\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second), runtime.NumCPU(), r.CPUs[wayCproxy], r.CPUs[OneCPUCproxyTarget],
		rounds, plural(rounds), r.Reads, githubRepo, githubPull, r.Slice, githubClients, r.Queries, githubPull)

	fmt.Fprint(w, "| measure | unit |")
	for _, way := range r.Ways {
		fmt.Fprintf(w, " %s |", columnTitle(way))
	}
	fmt.Fprintln(w, " cproxy ÷ Go proxy | cproxy ÷ direct | cproxy ÷ Go proxy, both 1 CPU |")
	fmt.Fprintln(w, "|---|---|"+strings.Repeat("--:|", len(r.Ways)+3))
	for _, row := range githubRows {
		fmt.Fprintf(w, "| %s | %s |", row.name, row.unit)
		for _, way := range r.Ways {
			fmt.Fprintf(w, " %s |", r.cell(row, way))
		}
		for _, p := range [][2]string{{wayCproxy, "goproxy"}, {wayCproxy, wayDirect}, {OneCPUCproxyTarget, OneCPUProxyTarget}} {
			fmt.Fprintf(w, " %s |", formatRatio(r.ratios(row, p[0], p[1])))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nLatency rows: what the proxy adds to the direct connection's time in the same round (median over the rounds), then the total in parentheses; ÷ Go proxy divides added latencies, ÷ direct total ones. CPU rows: the proxy's user and system time over the measure, per request, over all the rounds (10 ms ticks). Ratios are medians over the %d round%s, with their range in parentheses.\n\n", rounds, plural(rounds))
	fmt.Fprintf(w, "Audit: cproxy logged %d request lines for the %d requests it answered; cproxy on 1 CPU %d for %d. cproxy's RSS at start %.1f MiB, peak %.1f MiB; on 1 CPU %.1f and %.1f MiB.\n\n",
		r.Audited[wayCproxy], r.Answered[wayCproxy], r.Audited[OneCPUCproxyTarget], r.Answered[OneCPUCproxyTarget],
		mib(r.Use[wayCproxy].RSSStart), mib(r.Use[wayCproxy].Peak), mib(r.Use[OneCPUCproxyTarget].RSSStart), mib(r.Use[OneCPUCproxyTarget].Peak))

	switch {
	case r.GhMissing != "":
		fmt.Fprintf(w, "gh left out: %s.\n", r.GhMissing)
	case len(r.GhTurns) > 0:
		fmt.Fprintf(w, "%s, as a process: `gh pr view %d -R HOST/%s` with GH_HOST, GH_ENTERPRISE_TOKEN and SSL_CERT_FILE, directly against the fake API over HTTPS (direct-tls, under GitHub Enterprise Server's paths) and through each cproxy's TLS listener; %d run%s per way in each of %d round%s, wall time per run.\n\n",
			r.GhVersion, githubPull, githubRepo, len(r.GhTurns[0].Times), plural(len(r.GhTurns[0].Times)), rounds, plural(rounds))
		fmt.Fprintln(w, "| way | gh pr view, median of the rounds' medians | way ÷ direct-tls, median (range of rounds) | way adds |")
		fmt.Fprintln(w, "|---|--:|--:|--:|")
		d := r.ghSeries(wayDirectTLS)
		for _, way := range githubGhWays {
			s := r.ghSeries(way)
			// speedRatio gives base ÷ way; way ÷ direct-tls is its inverse.
			inv, lo, hi := speedRatio(s, d)
			fmt.Fprintf(w, "| %s | %.1f ms | %.3f (%.3f–%.3f) | %.1f ms |\n", columnTitle(way), float64(median(s).Microseconds())/1000, inv, lo, hi,
				float64((median(s)-median(d)).Microseconds())/1000)
		}
	}
}

// A githubRow is one row of the table: a measure of a turn, and whether it
// is a latency (shown added to direct's), a rate, or the proxy's CPU per
// request.
type githubRow struct {
	name, unit string
	kind       string // "latency", "rate" or "cpu"
	of         func(GitHubTurn) GitHubMeasure
	value      func(GitHubMeasure) float64
}

var githubRows = func() []githubRow {
	p50 := func(m GitHubMeasure) float64 { return micros(m.P50) }
	p99 := func(m GitHubMeasure) float64 { return micros(m.P99) }
	perSec := func(m GitHubMeasure) float64 { return m.PerSec }
	read := func(t GitHubTurn) GitHubMeasure { return t.Read }
	reads := func(t GitHubTurn) GitHubMeasure { return t.Reads16 }
	ask := func(t GitHubTurn) GitHubMeasure { return t.Query }
	return []githubRow{
		{"REST read, added latency p50, 1 client", "µs", "latency", read, p50},
		{"REST read, added latency p99, 1 client", "µs", "latency", read, p99},
		{"REST read, throughput, 16 clients", "req/s", "rate", reads, perSec},
		{"REST read, added latency p50, 16 clients", "µs", "latency", reads, p50},
		{"gh pr view's GraphQL query, added latency p50, 1 client", "µs", "latency", ask, p50},
		{"gh pr view's GraphQL query, added latency p99, 1 client", "µs", "latency", ask, p99},
		{"proxy CPU per REST read, 1 client", "µs", "cpu", read, nil},
		{"proxy CPU per REST read, 16 clients", "µs", "cpu", reads, nil},
		{"proxy CPU per GraphQL query, 1 client", "µs", "cpu", ask, nil},
	}
}()

// turn is way's turn in round, and whether there is one.
func (r *GitHubResult) turn(way string, round int) (GitHubTurn, bool) {
	for _, t := range r.Turns {
		if t.Way == way && t.Round == round {
			return t, true
		}
	}
	return GitHubTurn{}, false
}

// perRound is row's value for way in each round: for a latency row, added
// to direct's of the round unless total; for a CPU row, per request.
func (r *GitHubResult) perRound(row githubRow, way string, total bool) across {
	var a across
	for _, t := range r.Turns {
		if t.Way != way {
			continue
		}
		m := row.of(t)
		switch {
		case row.kind == "cpu":
			if way == wayDirect {
				return nil
			}
			a = append(a, micros(m.CPU)/float64(max(m.Ops, 1)))
		case row.kind == "latency" && !total && way != wayDirect:
			d, ok := r.turn(wayDirect, t.Round)
			if !ok {
				continue
			}
			a = append(a, row.value(m)-row.value(row.of(d)))
		default:
			a = append(a, row.value(m))
		}
	}
	return a
}

// cell is way's value in row: the median over the rounds; a latency added
// to direct's with the total after it; CPU per request over all the rounds.
func (r *GitHubResult) cell(row githubRow, way string) string {
	switch {
	case row.kind == "cpu" && way == wayDirect:
		return "—"
	case row.kind == "cpu":
		var cpu time.Duration
		ops := 0
		for _, t := range r.Turns {
			if t.Way == way {
				cpu, ops = cpu+row.of(t).CPU, ops+row.of(t).Ops
			}
		}
		return fmt.Sprintf("%.0f", micros(cpu)/float64(max(ops, 1)))
	case row.kind == "latency" && way != wayDirect:
		return fmt.Sprintf("+%.0f (%.0f)", r.perRound(row, way, false).median(), r.perRound(row, way, true).median())
	}
	return fmt.Sprintf("%.0f", r.perRound(row, way, false).median())
}

// ratios is row's num ÷ den in each round: added latencies against a
// proxy, total ones against direct; none for CPU against direct, or where
// the denominator is not positive (noise can make an added latency ≤ 0).
func (r *GitHubResult) ratios(row githubRow, num, den string) across {
	if row.kind == "cpu" && den == wayDirect {
		return nil
	}
	total := den == wayDirect
	n, d := r.perRound(row, num, total), r.perRound(row, den, total)
	var a across
	for i := range min(len(n), len(d)) {
		if d[i] > 0 {
			a = append(a, n[i]/d[i])
		}
	}
	return a
}

// ghSeries is the median gh pr view time of each of way's turns, in the
// order run.
func (r *GitHubResult) ghSeries(way string) []time.Duration {
	var ts []time.Duration
	for _, t := range r.GhTurns {
		if t.Way == way {
			ts = append(ts, median(t.Times))
		}
	}
	return ts
}

// columnTitle is the way's title in the tables, as the model route's.
func columnTitle(way string) string {
	for _, c := range columns {
		if c.target == way {
			return c.title
		}
	}
	return way
}
