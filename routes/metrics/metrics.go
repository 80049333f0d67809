// Package metrics is cproxy's Prometheus metrics (docs/metrics.md): the
// registry, its collectors, and the calls through which the proxy core
// counts what it does. It knows routes by name alone: the core tells it the
// configured routes' names and each request's labels.
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cproxy/cproxy/routes/internal/memo"
	"github.com/cproxy/cproxy/tokens"
)

// Token counts for cproxy_tokens come from counting the whole store (one
// query on PostgreSQL; a walk a page at a time, memory holding one page, on
// the embedded store), which takes longer with every token ever minted; a
// count is bounded in time and reused for a while, so several scrapers (an
// HA Prometheus pair) cost one count between them.
const (
	tokensListTimeout = 5 * time.Second
	tokensCacheFor    = 10 * time.Second
)

// upstreamBuckets span a registry's or git server's milliseconds and a
// model's first token, which on a long prompt takes minutes.
var upstreamBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}

// Metrics is one Server's Prometheus metrics, on a registry of its own:
// tests run several Servers in one process. Its labels come from the
// config and the policy (route, profile), from the response (status), and
// from sandbox ids on the budget gauge alone, whose series go when the
// sandbox's tokens are revoked: never from a token, a path or a model name
// the client chose. A nil *Metrics records nothing.
type Metrics struct {
	reg         *prometheus.Registry
	handler     http.Handler
	requests    *prometheus.CounterVec
	upstream    *prometheus.HistogramVec
	bytesIn     *prometheus.CounterVec
	bytesOut    *prometheus.CounterVec
	open        *prometheus.GaugeVec
	modelTokens *prometheus.CounterVec
	notReported *prometheus.CounterVec
	budget      *prometheus.GaugeVec
	// bodyMemory and bodyRefused are the memory request bodies read whole
	// hold, and the requests refused for want of it; connections and
	// connRefused are the sandboxes' open connections, and those closed
	// at once past runtime.max_connections.
	bodyMemory  prometheus.Gauge
	bodyRefused prometheus.Counter
	connections prometheus.Gauge
	connLimit   prometheus.Gauge
	connRefused prometheus.Counter
	// pruned counts the tokens pruned from the store.
	pruned prometheus.Counter
	// pinChanges counts the MCP tool definitions seen changed from their
	// pins, by server (a config name).
	pinChanges *prometheus.CounterVec
	// toolCalls counts MCP tool calls forwarded, by server and tool;
	// toolNames are the tool labels each server has, at most
	// MaxToolLabels (past it: "other").
	toolCalls *prometheus.CounterVec
	// warned counts requests a profile in warn mode let through.
	warned    *prometheus.CounterVec
	toolMu    sync.Mutex
	toolNames map[string]map[string]bool
	// approvals counts what happens to approval requests, by route and
	// event.
	approvals *prometheus.CounterVec

	// routes are each configured route's series, looked up once: a label
	// look-up hashes and checks its values on every call. Read-only once
	// built.
	routes map[string]*RouteSeries
	// requestSeries and tokenSeries remember the series Request and Usage
	// have looked up, by their labels (route, profile and status; profile
	// and kind), which come from the config, the policy and the upstream's
	// status, not from clients; bounded all the same.
	requestSeries memo.Memo[requestLabels, prometheus.Counter]
	tokenSeries   memo.Memo[tokenLabels, prometheus.Counter]
	mu            sync.RWMutex // guards budgetSeries
	// budgetSeries are each sandbox's cproxy_budget_remaining series, by
	// kind in budgetKinds' order (nil: not looked up yet); DeleteBudget
	// forgets a sandbox's with its series.
	budgetSeries map[string][6]prometheus.Gauge
}

// RouteSeries are one route's series of the metrics labelled by route
// alone. A nil *RouteSeries records nothing.
type RouteSeries struct {
	upstream          prometheus.Observer
	bytesIn, bytesOut prometheus.Counter
	open              prometheus.Gauge
}

type requestLabels struct {
	route, profile string
	status         int
}

type tokenLabels struct {
	profile string
	kind    int // in modelTokenKinds
}

// maxRememberedSeries bounds the sandboxes whose budget series are
// remembered; past it, theirs are looked up by label each time.
const maxRememberedSeries = 1024

// New builds the registry: cproxy's metrics, the token store's
// counts, build info, and the Go runtime's and the process's collectors.
// routes are the route labels to start at zero (every configured route), so
// a rate over a route that has not been used yet is 0, not absent.
func New(version string, store tokens.Store, now func() time.Time, log *slog.Logger, routes []string) *Metrics {
	if version == "" {
		version = "unknown"
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_requests_total",
			Help: "Requests on the proxy listener, by route, policy profile (empty when none applied) and the status sent.",
		}, []string{"route", "profile", "status"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cproxy_upstream_response_seconds",
			Help:    "Time from forwarding a request (its body included) to the upstream's response headers, by route. Requests the upstream never answered are not observed.",
			Buckets: upstreamBuckets,
		}, []string{"route"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_request_bytes_total",
			Help: "Request body bytes read from the sandboxes, by route.",
		}, []string{"route"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_response_bytes_total",
			Help: "Response body bytes sent to the sandboxes, by route.",
		}, []string{"route"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cproxy_open_requests",
			Help: "Requests being forwarded now, streams included, by route: from forwarding to the response's end.",
		}, []string{"route"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_model_tokens_total",
			Help: "Model tokens the upstream reported using, by policy profile and kind (input, output, cache_read, cache_write).",
		}, []string{"profile", "kind"}),
		notReported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_usage_not_reported_total",
			Help: "Model requests the upstream had but reported no usage for (or not all of it), by route and policy profile; each was charged what it reserved.",
		}, []string{"route", "profile"}),
		budget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cproxy_budget_remaining",
			Help: "What is left of a sandbox's budget, by sandbox and kind; a sandbox's series go when its tokens are revoked.",
		}, []string{"sandbox", "kind"}),
		pinChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_mcp_pin_changes_total",
			Help: "Tool definitions an MCP server listed changed from their pins, each counted once when this process first saw it pending, by server ([mcp.NAME]).",
		}, []string{"server"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_mcp_tool_calls_total",
			Help: "MCP tools/call requests forwarded to their server, by server ([mcp.NAME]) and tool; a server's tools past the first 256 seen are counted as tool=\"other\".",
		}, []string{"server", "tool"}),
		toolNames: map[string]map[string]bool{},
		warned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_policy_warnings_total",
			Help: "Requests the policy would have refused but forwarded because their profile is in warn mode (mode = \"warn\"), by route and profile.",
		}, []string{"route", "profile"}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cproxy_approvals_total",
			Help: "Approval requests and grants, by route and event: requested (a new request filed), refused (a request that needs one refused while it waits, or denied), approved, denied, used (a grant used by its request's retry), spent (a grant found used or expired when its request was sent).",
		}, []string{"route", "event"}),
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m.bodyMemory = gauge("cproxy_body_memory_bytes",
		"Memory that request bodies read whole to be checked (model requests, npm audits) hold now, of runtime.body_memory_mib.")
	m.bodyRefused = counter("cproxy_body_memory_refused_total",
		"Requests answered 503 because the memory for request bodies (runtime.body_memory_mib) stayed full.")
	m.connections = gauge("cproxy_sandbox_connections",
		"Connections open on the proxy listener and the per-sandbox sockets together, of runtime.max_connections.")
	m.connLimit = gauge("cproxy_sandbox_connections_limit",
		"runtime.max_connections in force (derived from the open-file limit unless the config sets it); 0: no bound.")
	m.connRefused = counter("cproxy_sandbox_connections_refused_total",
		"Connections to the proxy listener or a per-sandbox socket closed at once because runtime.max_connections were open.")
	m.pruned = counter("cproxy_store_pruned_total",
		"Tokens deleted from the token store, with their usage, for having expired or been revoked longer than store.retention (or an admin call's older_than) ago, by this process.")
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "cproxy_build_info",
		Help:        "Always 1; the version label is cproxy's version.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	m.reg.MustRegister(m.requests, m.upstream, m.bytesIn, m.bytesOut, m.open, m.modelTokens, m.notReported, m.budget, build,
		m.bodyMemory, m.bodyRefused, m.connections, m.connLimit, m.connRefused, m.pruned, m.pinChanges, m.toolCalls, m.warned, m.approvals,
		&tokenCounts{store: store, now: now, log: log},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.routes = make(map[string]*RouteSeries, len(routes))
	m.budgetSeries = make(map[string][6]prometheus.Gauge)
	for _, r := range routes {
		m.routes[r] = m.newRouteSeries(r)
	}
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// A collector that fails costs its own metrics, not the scrape.
		ErrorHandling: promhttp.ContinueOnError,
	})
	return m
}

// ServeHTTP answers GET /metrics: the registry in Prometheus' text format.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.handler.ServeHTTP(w, r)
}

// Request counts a finished request, by the labels and byte counts its
// audit record has: route is "" for a request no route took (counted as
// "none"), profile "" for one no profile applied to, status the status
// sent.
func (m *Metrics) Request(route, profile string, status int, bytesIn, bytesOut int64) {
	if m == nil {
		return
	}
	if route == "" {
		route = "none"
	}
	m.requestCounter(route, profile, status).Inc()
	rs := m.route(route)
	rs.bytesIn.Add(float64(bytesIn))
	rs.bytesOut.Add(float64(bytesOut))
}

func (m *Metrics) newRouteSeries(route string) *RouteSeries {
	return &RouteSeries{
		upstream: m.upstream.WithLabelValues(route),
		bytesIn:  m.bytesIn.WithLabelValues(route),
		bytesOut: m.bytesOut.WithLabelValues(route),
		open:     m.open.WithLabelValues(route),
	}
}

// route is route's series: a configured route's, made at start; any other
// (a refused request's "none") looked up now.
func (m *Metrics) route(route string) *RouteSeries {
	if rs, ok := m.routes[route]; ok {
		return rs
	}
	return m.newRouteSeries(route)
}

func (m *Metrics) requestCounter(route, profile string, status int) prometheus.Counter {
	k := requestLabels{route, profile, status}
	if c, ok := m.requestSeries.Get(k); ok {
		return c
	}
	c := m.requests.WithLabelValues(route, profile, strconv.Itoa(status))
	m.requestSeries.Put(k, c)
	return c
}

// modelTokenKinds are cproxy_model_tokens_total's kinds, in the order of
// Usage's arguments.
var modelTokenKinds = [4]string{"input", "output", "cache_read", "cache_write"}

func (m *Metrics) tokenCounter(profile string, kind int) prometheus.Counter {
	k := tokenLabels{profile, kind}
	if c, ok := m.tokenSeries.Get(k); ok {
		return c
	}
	c := m.modelTokens.WithLabelValues(profile, modelTokenKinds[kind])
	m.tokenSeries.Put(k, c)
	return c
}

// Forwarding counts a request on route as open, until the caller calls
// the returned series' Done, and returns the route's series: nil, and
// nothing counted, for a nil *Metrics.
func (m *Metrics) Forwarding(route string) *RouteSeries {
	if m == nil {
		return nil
	}
	rs := m.route(route)
	rs.open.Inc()
	return rs
}

// Answered observes d, the time from forwarding a request to the
// upstream's response headers. A request the upstream never answered is
// not observed.
func (rs *RouteSeries) Answered(d time.Duration) {
	if rs != nil {
		rs.upstream.Observe(d.Seconds())
	}
}

// Done counts a request Forwarding counted as open as no longer open: its
// response has ended.
func (rs *RouteSeries) Done() {
	if rs != nil {
		rs.open.Dec()
	}
}

// Usage adds the model tokens one response used to profile's counts. The
// usage counting calls it as a response's usage becomes known.
func (m *Metrics) Usage(profile string, input, output, cacheRead, cacheWrite int64) {
	if m == nil {
		return
	}
	for i, n := range [4]int64{input, output, cacheRead, cacheWrite} {
		if n > 0 {
			m.tokenCounter(profile, i).Add(float64(n))
		}
	}
}

// UsageNotReported counts a request on route that the upstream had but
// did not report all usage for, and that was charged what it reserved. It
// is rare (a stream cut short, a client gone): looked up each time.
func (m *Metrics) UsageNotReported(route, profile string) {
	if m == nil {
		return
	}
	m.notReported.WithLabelValues(route, profile).Inc()
}

// SetBodyMemory sets what request bodies hold now.
func (m *Metrics) SetBodyMemory(held int64) {
	if m != nil {
		m.bodyMemory.Set(float64(held))
	}
}

// BodyMemoryRefused counts a request refused for want of body memory.
func (m *Metrics) BodyMemoryRefused() {
	if m != nil {
		m.bodyRefused.Inc()
	}
}

// SetConnections sets the sandboxes' open connections.
func (m *Metrics) SetConnections(n int64) {
	if m != nil {
		m.connections.Set(float64(n))
	}
}

// SetConnectionLimit sets the bound on the sandboxes' open connections in
// force (runtime.max_connections); 0 is no bound.
func (m *Metrics) SetConnectionLimit(n int64) {
	if m != nil {
		m.connLimit.Set(float64(n))
	}
}

// ConnectionRefused counts a connection closed past the bound.
func (m *Metrics) ConnectionRefused() {
	if m != nil {
		m.connRefused.Inc()
	}
}

// budgetKinds are cproxy_budget_remaining's kinds, in the order of
// SetBudgetRemaining's left.
var budgetKinds = [6]string{"requests", "input", "output", "cache_read", "cache_write", "mcp_calls"}

// SetBudgetRemaining sets what is left of sandbox's budget, by kind:
// requests, then input, output, cache read and cache write tokens, then
// MCP tool calls. A kind
// at -1 (not limited) is left alone.
func (m *Metrics) SetBudgetRemaining(sandbox string, left [6]int64) {
	if m == nil {
		return
	}
	series := m.budgetGauges(sandbox, left)
	for i, v := range left {
		if v >= 0 {
			series[i].Set(float64(v))
		}
	}
}

// budgetGauges returns sandbox's budget series, at least those of the
// kinds left sets, remembered once looked up (for at most
// maxRememberedSeries sandboxes). They are looked up and remembered under
// mu's write lock, which DeleteBudget holds while it deletes: a remembered
// series is never one DeleteBudget has deleted. (A Set racing a deletion
// may land on a deleted series once, as a look-up by label could.)
func (m *Metrics) budgetGauges(sandbox string, left [6]int64) [6]prometheus.Gauge {
	m.mu.RLock()
	series, ok := m.budgetSeries[sandbox]
	m.mu.RUnlock()
	if ok && hasBudgetGauges(series, left) {
		return series
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	series, ok = m.budgetSeries[sandbox]
	for i, v := range left {
		if v >= 0 && series[i] == nil {
			series[i] = m.budget.WithLabelValues(sandbox, budgetKinds[i])
		}
	}
	if ok || len(m.budgetSeries) < maxRememberedSeries {
		m.budgetSeries[sandbox] = series
	}
	return series
}

// hasBudgetGauges reports whether series has one for each kind left sets.
func hasBudgetGauges(series [6]prometheus.Gauge, left [6]int64) bool {
	for i, v := range left {
		if v >= 0 && series[i] == nil {
			return false
		}
	}
	return true
}

// DeleteBudget drops every budget series of sandbox. It must run when the
// sandbox's tokens are revoked, or sandbox ids would pile up as series.
func (m *Metrics) DeleteBudget(sandbox string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.budgetSeries, sandbox)
	m.budget.DeletePartialMatch(prometheus.Labels{"sandbox": sandbox})
}

// TokensPruned counts n tokens pruned from the store.
func (m *Metrics) TokensPruned(n int) {
	if m != nil {
		m.pruned.Add(float64(n))
	}
}

// MCPPinChanged counts a tool of the MCP server named server whose
// definition changed from its pin.
func (m *Metrics) MCPPinChanged(server string) {
	if m != nil {
		m.pinChanges.WithLabelValues(server).Inc()
	}
}

// PolicyWarned counts a request a warn-mode profile let through.
func (m *Metrics) PolicyWarned(route, profile string) {
	if m != nil {
		m.warned.WithLabelValues(route, profile).Inc()
	}
}

// MaxToolLabels bounds the tool labels of one MCP server's
// cproxy_mcp_tool_calls_total: a policy that allows every tool lets the
// sandbox name any, and each name would be a series kept for good.
const MaxToolLabels = 256

// MCPToolCall counts a tools/call of tool forwarded to server.
func (m *Metrics) MCPToolCall(server, tool string) {
	if m == nil {
		return
	}
	m.toolMu.Lock()
	names := m.toolNames[server]
	if names == nil {
		names = map[string]bool{}
		m.toolNames[server] = names
	}
	if !names[tool] {
		if len(names) >= MaxToolLabels {
			tool = "other"
		} else {
			names[tool] = true
		}
	}
	m.toolMu.Unlock()
	m.toolCalls.WithLabelValues(server, tool).Inc()
}

// Approval counts an event of an approval request of route: "requested",
// "refused", "approved", "denied", "used" or "spent".
func (m *Metrics) Approval(route, event string) {
	if m != nil {
		m.approvals.WithLabelValues(route, event).Inc()
	}
}

// tokenCounts is cproxy_tokens: the store's tokens by state, counted at
// scrape time and reused for tokensCacheFor.
type tokenCounts struct {
	store tokens.Store
	now   func() time.Time
	log   *slog.Logger

	mu     sync.Mutex // held across a listing: concurrent scrapes share it
	at     time.Time  // when counts were taken; zero: never
	counts [3]float64 // live, revoked, expired
}

var (
	tokenStates = [3]tokens.State{tokens.StateLive, tokens.StateRevoked, tokens.StateExpired}
	tokensDesc  = prometheus.NewDesc("cproxy_tokens",
		"Tokens in the store by state (live, revoked, expired), counted at most every 10s. Absent when the store cannot be listed.",
		[]string{"state"}, nil)
)

func (c *tokenCounts) Describe(ch chan<- *prometheus.Desc) { ch <- tokensDesc }

func (c *tokenCounts) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.get()
	if err != nil {
		c.log.Warn("counting tokens for /metrics failed", "err", err)
		return
	}
	for i, st := range tokenStates {
		ch <- prometheus.MustNewConstMetric(tokensDesc, prometheus.GaugeValue, counts[i], string(st))
	}
}

func (c *tokenCounts) get() ([3]float64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.at.IsZero() && now.Sub(c.at) < tokensCacheFor && !now.Before(c.at) {
		return c.counts, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), tokensListTimeout)
	defer cancel()
	byState, err := tokens.CountStates(ctx, c.store, now)
	if err != nil {
		return [3]float64{}, err
	}
	var counts [3]float64
	for i, st := range tokenStates {
		counts[i] = float64(byState[st])
	}
	c.at, c.counts = now, counts
	return counts, nil
}
