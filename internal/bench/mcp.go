package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cproxy/cproxy/internal/fakes"
)

// The MCP benchmark: the official Go SDK's client talks to a fake MCP
// server built with the same SDK (internal/fakes.MCPServer on loopback,
// with MCPOptions.Tools generated tools beside its own three, and a Bearer
// credential), directly and through the real `cproxy serve` at /mcp/docs
// with a sandbox token, in turns. In each round each way opens one session,
// warms it up, then times Calls sequential tools/call of an allowed tool
// and Lists tools/list, whose answer cproxy filters down to the tools the
// policy allows (about half, by a glob) and holds to their pins. It reports
// each round's p50 and p90 per call and calls per second, the ratios of
// cproxy's medians to direct's with the range of the rounds, the time
// cproxy adds per call, and cproxy's memory and CPU per call.

// MCPOptions say what RunMCP does.
type MCPOptions struct {
	// Cproxy is the cproxy binary; empty: go build it.
	Cproxy string
	// Dir is where configs and logs go. Empty: a new temporary directory,
	// removed at the end.
	Dir string
	// Rounds is how many turns each way takes; Calls how many tools/call
	// and Lists how many tools/list each way times in a round; Tools how
	// many generated tools the server has beside its own three. Zero means
	// DefaultMCPOptions' value.
	Rounds, Calls, Lists, Tools int
	// Progress, if set, gets a line per step.
	Progress io.Writer
}

// DefaultMCPOptions time 150 calls and 30 lists of 203 tools per way in
// each of 6 rounds.
var DefaultMCPOptions = MCPOptions{Rounds: 6, Calls: 150, Lists: 30, Tools: 200}

// raisedLimits raise a route's per-token limits in cproxy's config (an
// MCP server's, the GitHub API's) far above a sandbox's defaults (1,200
// requests a minute, 32 at once): the benchmark's one token is busier than
// any sandbox, and the limiter is not what is measured.
const raisedLimits = "requests_per_minute = 10000000\nconcurrent = 1024\n"

// mcpWays are the ways of the MCP benchmark, in the order of the first
// round.
var mcpWays = []string{wayDirect, wayCproxy}

// mcpTool is the tool every timed tools/call calls: a generated one, which
// the policy's glob allows.
const mcpTool = "tool_042"

// cproxyMCPPolicy lets the sandbox call search and the generated tools
// tool_000 to tool_099, half of a 200-tool server's: every tools/list is
// filtered.
const cproxyMCPPolicy = `[profile.default]
models = ["claude-*"]

[profile.default.mcp.docs]
tools = ["search", "tool_0*"]
`

// MCPRound is one way's turn in one round: the latencies of its timed
// tools/call and tools/list, summed up.
type MCPRound struct {
	Way   string `json:"way"` // "direct" or "cproxy"
	Round int    `json:"round"`
	// CallP50 and CallP90 are percentiles of the round's tools/call
	// latencies, CallTime their sum (the calls run one after another);
	// ListP50 and ListP90 those of its tools/list.
	CallP50  time.Duration `json:"call_p50_ns"`
	CallP90  time.Duration `json:"call_p90_ns"`
	CallTime time.Duration `json:"call_time_ns"`
	ListP50  time.Duration `json:"list_p50_ns"`
	ListP90  time.Duration `json:"list_p90_ns"`
	// Listed is how many tools the last tools/list showed.
	Listed int `json:"listed"`
	// Heard is the tools/call the server received in the timed calls;
	// Audited the tools/call and tools/list cproxy's audit log recorded
	// over the round (warm-up included), zero for direct.
	Heard   int `json:"heard"`
	Audited int `json:"audited"`
	// CallCPU and ListCPU are the processor time cproxy used over the
	// timed calls and lists; zero for direct.
	CallCPU time.Duration `json:"call_cpu_ns"`
	ListCPU time.Duration `json:"list_cpu_ns"`
}

// MCPResult is a whole run.
type MCPResult struct {
	// Tools is how many tools the server lists, Allowed how many of them
	// the policy lets the sandbox see; Calls and Lists are per way and
	// round.
	Tools   int        `json:"tools"`
	Allowed int        `json:"allowed"`
	Calls   int        `json:"calls"`
	Lists   int        `json:"lists"`
	Ways    []string   `json:"ways"`
	Rounds  []MCPRound `json:"rounds"` // in the order run
	// Use is what cproxy used: its peak after all the rounds, its CPU over
	// the timed calls and lists.
	Use        CproxyUse     `json:"cproxy_use"`
	SDKVersion string        `json:"sdk_version"`
	Started    time.Time     `json:"started"`
	Took       time.Duration `json:"took_ns"`
}

// RunMCP runs the MCP benchmark.
func RunMCP(ctx context.Context, o MCPOptions) (_ *MCPResult, err error) {
	d := DefaultMCPOptions
	for _, f := range []struct{ v, def *int }{{&o.Rounds, &d.Rounds}, {&o.Calls, &d.Calls}, {&o.Lists, &d.Lists}, {&o.Tools, &d.Tools}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if o.Tools <= 42 {
		return nil, fmt.Errorf("%d generated tools: at least 43 are needed, for %s", o.Tools, mcpTool)
	}
	progress := progressTo(o.Progress, "bench-mcp")
	res := &MCPResult{Started: time.Now(), Ways: mcpWays, Tools: o.Tools + 3, Allowed: 1 + min(o.Tools, 100),
		Calls: o.Calls, Lists: o.Lists, SDKVersion: moduleVersion("github.com/modelcontextprotocol/go-sdk")}
	dir, done, err := workDir(o.Dir, "bench-mcp")
	if err != nil {
		return nil, err
	}
	defer done()
	if o.Cproxy, err = cproxyBinary(o.Cproxy, dir); err != nil {
		return nil, err
	}

	credential := "mcp-bench-" + randomHex(16)
	server := fakes.NewMCPServer(fakes.MCPServerOptions{Token: credential, Tools: o.Tools})
	defer server.Close()
	e := &Env{dir: filepath.Join(dir, "cproxy-serve")}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return nil, err
	}
	defer e.Close()
	cp, err := e.startRouteWay(o.Cproxy, wayCproxy, "docs", server.URL, credential, cproxyMCPPolicy, "bench-mcp", routeSetup{MCP: true, Upstream: raisedLimits}, &res.Use)
	if err != nil {
		return nil, err
	}
	endpoint := map[string]string{wayDirect: server.URL, wayCproxy: cp.URL + "/mcp/docs"}
	token := map[string]string{wayDirect: credential, wayCproxy: cp.token}
	progress("server: %d tools, %d allowed; cproxy RSS %.1f MiB at start", res.Tools, res.Allowed, mib(res.Use.RSSStart))

	for round := range o.Rounds {
		for _, way := range rotated(mcpWays, round) {
			var through *cproxyWay
			if way == wayCproxy {
				through = cp
			}
			r, err := mcpRound(ctx, way, endpoint[way], token[way], through, server, o)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", way, round+1, err)
			}
			r.Round = round + 1
			wantListed := res.Tools
			if through != nil {
				wantListed = res.Allowed
			}
			switch {
			case r.Listed != wantListed:
				return nil, fmt.Errorf("%s, round %d: tools/list showed %d tools, want %d", way, round+1, r.Listed, wantListed)
			case r.Heard != o.Calls:
				return nil, fmt.Errorf("%s, round %d: the server heard %d of %d calls", way, round+1, r.Heard, o.Calls)
			case through != nil && r.Audited < o.Calls+o.Lists:
				return nil, fmt.Errorf("%s, round %d: cproxy's audit log has %d tools/call and tools/list, want at least %d", way, round+1, r.Audited, o.Calls+o.Lists)
			}
			res.Use.CPU += r.CallCPU + r.ListCPU
			res.Rounds = append(res.Rounds, r)
			progress("%s #%d: tools/call p50 %s p90 %s, %.0f calls/s; tools/list p50 %s p90 %s", way, round+1,
				r.CallP50.Round(time.Microsecond), r.CallP90.Round(time.Microsecond), float64(o.Calls)/r.CallTime.Seconds(),
				r.ListP50.Round(time.Microsecond), r.ListP90.Round(time.Microsecond))
		}
	}
	m, err := cp.Memory()
	if err != nil {
		return nil, err
	}
	res.Use.Peak = m.Peak
	progress("cproxy RSS %.1f MiB at start, peak %.1f MiB", mib(res.Use.RSSStart), mib(res.Use.Peak))
	res.Took = time.Since(res.Started)
	return res, nil
}

// mcpRound is one way's turn: a new session, a few untimed calls and lists
// to warm it (the first list through a new cproxy pins the tools), then the
// timed calls and lists. through is the way's cproxy, nil for direct.
func mcpRound(ctx context.Context, way, endpoint, token string, through *cproxyWay, server *fakes.MCPServer, o MCPOptions) (r MCPRound, err error) {
	r.Way = way
	audited := 0
	if through != nil {
		if audited, err = mcpAudited(through); err != nil {
			return r, err
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	client := mcp.NewClient(&mcp.Implementation{Name: "cproxy-bench", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, base: transport}},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		return r, fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()
	args := &mcp.CallToolParams{Name: mcpTool, Arguments: map[string]any{"query": "tokens"}}
	want := mcpTool + ": tokens"
	call := func() error {
		res, err := cs.CallTool(ctx, args)
		if err != nil {
			return fmt.Errorf("tools/call %s: %w", mcpTool, err)
		}
		if res.IsError || len(res.Content) != 1 {
			return fmt.Errorf("tools/call %s: answered %+v", mcpTool, res)
		}
		if t, ok := res.Content[0].(*mcp.TextContent); !ok || t.Text != want {
			return fmt.Errorf("tools/call %s: answered %+v, want %q", mcpTool, res.Content[0], want)
		}
		return nil
	}
	list := func() error {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		r.Listed = len(res.Tools)
		return nil
	}
	for range 10 {
		if err := call(); err != nil {
			return r, err
		}
	}
	for range 2 {
		if err := list(); err != nil {
			return r, err
		}
	}
	cpu := func() (time.Duration, error) {
		if through == nil {
			return 0, nil
		}
		return through.CPU()
	}

	heard := mcpHeard(server)
	times := make([]time.Duration, o.Calls)
	cpu0, err := cpu()
	if err != nil {
		return r, err
	}
	for i := range times {
		t0 := time.Now()
		if err := call(); err != nil {
			return r, err
		}
		times[i] = time.Since(t0)
	}
	cpu1, err := cpu()
	if err != nil {
		return r, err
	}
	r.CallCPU = cpu1 - cpu0
	r.Heard = mcpHeard(server) - heard
	for _, t := range times {
		r.CallTime += t
	}
	slices.Sort(times)
	r.CallP50, r.CallP90 = percentile(times, 50), percentile(times, 90)

	times = make([]time.Duration, o.Lists)
	for i := range times {
		t0 := time.Now()
		if err := list(); err != nil {
			return r, err
		}
		times[i] = time.Since(t0)
	}
	cpu2, err := cpu()
	if err != nil {
		return r, err
	}
	r.ListCPU = cpu2 - cpu1
	slices.Sort(times)
	r.ListP50, r.ListP90 = percentile(times, 50), percentile(times, 90)

	if through != nil {
		// Closing the session sends a DELETE, which cproxy answers after
		// it logged every call before it.
		cs.Close()
		n, err := mcpAudited(through)
		if err != nil {
			return r, err
		}
		r.Audited = n - audited
	}
	return r, nil
}

// bearerTransport sends each request with a Bearer token, as an MCP
// client configured with one does.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// mcpHeard counts the tools/call the server has received.
func mcpHeard(s *fakes.MCPServer) int {
	n := 0
	for _, c := range s.Calls() {
		if c.Method == "tools/call" {
			n++
		}
	}
	return n
}

// mcpAudited counts the tools/call and tools/list in the way's cproxy log.
func mcpAudited(w *cproxyWay) (int, error) {
	b, err := os.ReadFile(w.proc.log)
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte(`target="docs tools/call `)) + bytes.Count(b, []byte(`target="docs tools/list"`)), nil
}

// moduleVersion is the version of the module path this binary was built
// with, or "unknown".
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "unknown"
}

// Markdown writes the result as tables.
func (r *MCPResult) Markdown(w io.Writer) {
	if len(r.Rounds) == 0 {
		return
	}
	fmt.Fprintf(w, "The official Go SDK (%s), client and server, %s, %s in all. The server lists %d tools; cproxy's policy allows %d of them (`tools = [\"search\", \"tool_0*\"]`), so it filters every tools/list, and checks each listed tool against its pin. Each way, in each of %d rounds, opens one session and times %d sequential tools/call of %s, then %d tools/list.\n\n",
		r.SDKVersion, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second), r.Tools, r.Allowed,
		len(r.Rounds)/len(r.Ways), r.Calls, mcpTool, r.Lists)
	fmt.Fprintln(w, "| round | way | tools/call p50 | p90 | calls/s | tools/list p50 | p90 | tools listed | calls the server heard | calls and lists cproxy logged |")
	fmt.Fprintln(w, "|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, x := range r.Rounds {
		fmt.Fprintf(w, "| %d | %s | %d µs | %d µs | %.0f | %d µs | %d µs | %d | %d | %d |\n", x.Round, x.Way,
			x.CallP50.Microseconds(), x.CallP90.Microseconds(), float64(r.Calls)/x.CallTime.Seconds(),
			x.ListP50.Microseconds(), x.ListP90.Microseconds(), x.Listed, x.Heard, x.Audited)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "| measure | direct, median of rounds | cproxy, median of rounds | cproxy ÷ direct, median (range of rounds) | cproxy adds |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|")
	for _, m := range []struct {
		name string
		of   func(MCPRound) time.Duration
	}{
		{"tools/call p50", func(x MCPRound) time.Duration { return x.CallP50 }},
		{"tools/call p90", func(x MCPRound) time.Duration { return x.CallP90 }},
		{"tools/call, mean per call", func(x MCPRound) time.Duration { return x.CallTime / time.Duration(max(r.Calls, 1)) }},
		{fmt.Sprintf("tools/list of %d tools p50", r.Tools), func(x MCPRound) time.Duration { return x.ListP50 }},
		{fmt.Sprintf("tools/list of %d tools p90", r.Tools), func(x MCPRound) time.Duration { return x.ListP90 }},
	} {
		d, c := r.series(wayDirect, m.of), r.series(wayCproxy, m.of)
		// speedRatio gives base ÷ way; cproxy ÷ direct is its inverse.
		inv, lo, hi := speedRatio(c, d)
		fmt.Fprintf(w, "| %s | %d µs | %d µs | %.2f× (%.2f–%.2f) | %d µs |\n", m.name, median(d).Microseconds(), median(c).Microseconds(),
			inv, lo, hi, (median(c) - median(d)).Microseconds())
	}
	fmt.Fprintln(w)

	calls, lists := 0, 0
	var callCPU, listCPU time.Duration
	for _, x := range r.Rounds {
		if x.Way == wayCproxy {
			calls, lists = calls+r.Calls, lists+r.Lists
			callCPU, listCPU = callCPU+x.CallCPU, listCPU+x.ListCPU
		}
	}
	fmt.Fprintln(w, "| cproxy RSS at start | cproxy peak RSS (VmHWM), whole run | cproxy CPU per tools/call | per tools/list |")
	fmt.Fprintln(w, "|--:|--:|--:|--:|")
	fmt.Fprintf(w, "| %.1f MiB | %.1f MiB | %d µs | %d µs |\n", mib(r.Use.RSSStart), mib(r.Use.Peak),
		(callCPU / time.Duration(max(calls, 1))).Microseconds(), (listCPU / time.Duration(max(lists, 1))).Microseconds())
}

// series is one measure of way's rounds, in the order run.
func (r *MCPResult) series(way string, of func(MCPRound) time.Duration) []time.Duration {
	var ts []time.Duration
	for _, x := range r.Rounds {
		if x.Way == way {
			ts = append(ts, of(x))
		}
	}
	return ts
}
