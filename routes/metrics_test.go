package routes

import (
	"bufio"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cproxy/cproxy/tokens"
)

// metricsEnv is an env whose proxy listener says when each request's
// handler has returned, and so its audit record is finished and counted:
// the tests wait for that instead of for time to pass.
type metricsEnv struct {
	*env
	finished chan struct{}
}

func newMetricsEnv(t *testing.T, opts ...envOpt) *metricsEnv {
	t.Helper()
	e := &metricsEnv{env: newEnv(t, opts...), finished: make(chan struct{}, 64)}
	h := e.srv.ProxyHandler()
	e.proxy.Close()
	e.proxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { e.finished <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	return e
}

// request sends one request on the proxy listener and returns once cproxy
// has finished it.
func (e *metricsEnv) request(method, path string, header map[string]string, body string) reply {
	e.t.Helper()
	r := e.do(method, path, header, body)
	<-e.finished
	return r
}

// scrape is GET /metrics on the admin listener, parsed.
func (e *metricsEnv) scrape() scraped {
	e.t.Helper()
	resp, err := http.Get(e.admin.URL + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET /metrics: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		e.t.Fatalf("GET /metrics: Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.t.Fatalf("GET /metrics: %v", err)
	}
	return scraped{e.t, fams}
}

type scraped struct {
	t    *testing.T
	fams map[string]*dto.MetricFamily
}

// find returns the series of name whose labels are exactly labels, or nil.
func (s scraped) find(name string, labels map[string]string) *dto.Metric {
	s.t.Helper()
	mf := s.fams[name]
	if mf == nil {
		return nil
	}
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if maps.Equal(got, labels) {
			return m
		}
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's count; it fails
// the test if the series is absent.
func (s scraped) value(name string, labels map[string]string) float64 {
	s.t.Helper()
	m := s.find(name, labels)
	switch {
	case m == nil:
		s.t.Fatalf("no series %s%v", name, labels)
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	s.t.Fatalf("%s%v is of no known type", name, labels)
	return 0
}

func (s scraped) want(name string, labels map[string]string, want float64) {
	s.t.Helper()
	if got := s.value(name, labels); got != want {
		s.t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func route(r string) map[string]string { return map[string]string{"route": r} }

func requests(route, profile, status string) map[string]string {
	return map[string]string{"route": route, "profile": profile, "status": status}
}

func TestMetricsCountRequests(t *testing.T) {
	pol := mustPolicy(t, `
[profile.web]
models = ["claude-sonnet-*"]

[[sandbox]]
match = "conv-*"
profile = "web"
`)
	e := newMetricsEnv(t, func(o *testOptions) { o.Policy = pol; o.Version = "v1.2.3" })
	h := bearer(e.token("conv-42"))
	var bytesIn, bytesOut int

	// Before any request: the configured routes are there at zero.
	s := e.scrape()
	s.want("cproxy_open_requests", route("model"), 0)
	s.want("cproxy_request_bytes_total", route("model"), 0)
	s.want("cproxy_upstream_response_seconds", route("model"), 0)
	if s.find("cproxy_requests_total", requests("model", "web", "200")) != nil {
		t.Fatal("a request counted before any was made")
	}

	// Allowed, twice.
	for range 2 {
		r := e.request("POST", "/v1/messages", h, hello)
		if r.status != 200 {
			t.Fatalf("allowed: %d %s", r.status, r.body)
		}
		bytesIn += len(hello)
		bytesOut += len(r.body)
	}
	// Refused by the policy: its body is read, to learn the model.
	opus := `{"model":"claude-opus-4-1","max_tokens":1,"messages":[]}`
	if r := e.request("POST", "/v1/messages", h, opus); r.status != 403 {
		t.Fatalf("refused: %d %s", r.status, r.body)
	} else {
		bytesIn += len(opus)
		bytesOut += len(r.body)
	}
	// No token: refused before its body is read, and no profile.
	if r := e.request("POST", "/v1/messages", map[string]string{"Anthropic-Version": "2023-06-01"}, hello); r.status != 401 {
		t.Fatalf("unauthenticated: %d %s", r.status, r.body)
	} else {
		bytesOut += len(r.body)
	}
	// /metrics is not a route of the proxy listener.
	none := e.request("GET", "/metrics", nil, "")
	if none.status != 403 || !strings.Contains(none.body, "no such route") {
		t.Fatalf("GET /metrics on the proxy listener: %d %s", none.status, none.body)
	}

	// A stream, open while the upstream holds its last events.
	gate := e.fake.StallStreams(3)
	defer gate.Release()
	stream := strings.Replace(hello, `"max_tokens":64`, `"max_tokens":64,"stream":true`, 1)
	req, _ := http.NewRequest("POST", e.proxy.URL+"/v1/messages", strings.NewReader(stream))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "event: message_start\n" {
		t.Fatalf("first line %q, %v", first, err)
	}
	s = e.scrape()
	s.want("cproxy_open_requests", route("model"), 1)
	s.want("cproxy_upstream_response_seconds", route("model"), 3)
	gate.Release()
	rest, _ := io.ReadAll(br)
	<-e.finished
	bytesIn += len(stream)
	bytesOut += len(first) + len(rest)

	s = e.scrape()
	s.want("cproxy_requests_total", requests("model", "web", "200"), 3)
	s.want("cproxy_requests_total", requests("model", "web", "403"), 1)
	s.want("cproxy_requests_total", requests("model", "", "401"), 1)
	s.want("cproxy_requests_total", requests("none", "", "403"), 1)
	if n := len(s.fams["cproxy_requests_total"].GetMetric()); n != 4 {
		t.Errorf("cproxy_requests_total has %d series, want 4", n)
	}
	s.want("cproxy_open_requests", route("model"), 0)
	s.want("cproxy_upstream_response_seconds", route("model"), 3)
	s.want("cproxy_request_bytes_total", route("model"), float64(bytesIn))
	s.want("cproxy_response_bytes_total", route("model"), float64(bytesOut))
	s.want("cproxy_request_bytes_total", route("none"), 0)
	s.want("cproxy_response_bytes_total", route("none"), float64(len(none.body)))
	s.want("cproxy_build_info", map[string]string{"version": "v1.2.3"}, 1)
	s.want("cproxy_tokens", map[string]string{"state": "live"}, 1)
	if s.fams["go_goroutines"] == nil {
		t.Error("no Go runtime metrics")
	}
	for name, mf := range s.fams {
		if strings.HasPrefix(name, "cproxy_") && mf.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
	}
}

// An upstream that fails is counted by its status, and has no latency.
func TestMetricsUpstreamFailure(t *testing.T) {
	e := newMetricsEnv(t, func(o *testOptions) { o.Anthropic.HeaderTimeout = time.Nanosecond })
	gate := e.fake.HoldHeaders()
	defer gate.Release()
	if r := e.request("POST", "/v1/messages", bearer(e.token("conv-1")), hello); r.status != 504 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	s := e.scrape()
	s.want("cproxy_requests_total", requests("model", "default", "504"), 1)
	s.want("cproxy_upstream_response_seconds", route("model"), 0)
	s.want("cproxy_open_requests", route("model"), 0)
}

// countingStore counts its tokens by state itself, as PostgreSQL does in
// one query, and fails a listing.
type countingStore struct {
	tokens.Store
	counts map[tokens.State]int
}

func (s countingStore) CountStates(context.Context, time.Time) (map[tokens.State]int, error) {
	return s.counts, nil
}

func (countingStore) List(context.Context, tokens.ListQuery) (tokens.Page, error) {
	return tokens.Page{}, errors.New("listed")
}

// A store that counts its tokens by state is asked for the counts rather
// than listed.
func TestMetricsTokensCounted(t *testing.T) {
	e := newMetricsEnv(t, func(o *testOptions) {
		o.Store = countingStore{o.Store, map[tokens.State]int{tokens.StateLive: 3, tokens.StateRevoked: 20_000, tokens.StateExpired: 7}}
	})
	s := e.scrape()
	s.want("cproxy_tokens", map[string]string{"state": "live"}, 3)
	s.want("cproxy_tokens", map[string]string{"state": "revoked"}, 20_000)
	s.want("cproxy_tokens", map[string]string{"state": "expired"}, 7)
}

func TestMetricsTokens(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	e := newMetricsEnv(t, func(o *testOptions) { o.Now = clock })
	states := func(live, revoked, expired float64) {
		t.Helper()
		s := e.scrape()
		s.want("cproxy_tokens", map[string]string{"state": "live"}, live)
		s.want("cproxy_tokens", map[string]string{"state": "revoked"}, revoked)
		s.want("cproxy_tokens", map[string]string{"state": "expired"}, expired)
	}
	states(0, 0, 0)
	e.token("conv-1")
	e.token("conv-2")
	e.token("conv-3", "ttl=1m")
	// Counted at most every tokensCacheFor.
	states(0, 0, 0)
	advance(tokensCacheFor)
	states(3, 0, 0)
	req, _ := http.NewRequest("DELETE", e.admin.URL+"/tokens?sandbox=conv-2", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("DELETE /tokens: %s", resp.Status)
	}
	advance(2 * time.Minute)
	states(1, 1, 1)
}

// The usage and budget hooks, as the usage counting and budgets call them.
func TestMetricsUsageAndBudget(t *testing.T) {
	e := newMetricsEnv(t)
	m := e.srv.metrics
	m.usage("web", 100, 20, 0, 5)
	m.usage("web", 1, 2, 3, 0)
	m.usage("ci", 7, 0, 0, 0)
	m.setBudgetRemaining("conv-1", budgetLeft(map[string]int64{"output": 500}))
	m.setBudgetRemaining("conv-1", budgetLeft(map[string]int64{"output": 500, "input": 9000}))
	m.setBudgetRemaining("conv-2", budgetLeft(map[string]int64{"output": 12}))
	m.setBudgetRemaining("conv-2", budgetLeft(map[string]int64{"output": 10}))
	s := e.scrape()
	for kind, want := range map[string]float64{"input": 101, "output": 22, "cache_read": 3, "cache_write": 5} {
		s.want("cproxy_model_tokens_total", map[string]string{"profile": "web", "kind": kind}, want)
	}
	s.want("cproxy_model_tokens_total", map[string]string{"profile": "ci", "kind": "input"}, 7)
	if s.find("cproxy_model_tokens_total", map[string]string{"profile": "ci", "kind": "output"}) != nil {
		t.Error("a kind with no tokens has a series")
	}
	s.want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-1", "kind": "output"}, 500)
	s.want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-1", "kind": "input"}, 9000)
	s.want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-2", "kind": "output"}, 10)

	m.deleteBudget("conv-1")
	s = e.scrape()
	if n := len(s.fams["cproxy_budget_remaining"].GetMetric()); n != 1 {
		t.Errorf("after deleteBudget(conv-1): %d budget series, want 1", n)
	}
	s.want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-2", "kind": "output"}, 10)

	// A sandbox whose series were deleted gets them again when it spends:
	// the series remembered for it went with them.
	m.setBudgetRemaining("conv-1", budgetLeft(map[string]int64{"requests": 3}))
	s = e.scrape()
	s.want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-1", "kind": "requests"}, 3)
	if s.find("cproxy_budget_remaining", map[string]string{"sandbox": "conv-1", "kind": "output"}) != nil {
		t.Error("a deleted budget series came back unset")
	}
}

// budgetLeft is setBudgetRemaining's argument: left by kind, the kinds not
// named not limited.
func budgetLeft(left map[string]int64) [5]int64 {
	out := [5]int64{-1, -1, -1, -1, -1}
	for i, kind := range budgetKinds {
		if v, ok := left[kind]; ok {
			out[i] = v
		}
	}
	return out
}

func TestMetricsEndpoint(t *testing.T) {
	e := newMetricsEnv(t)
	resp, err := http.Post(e.admin.URL+"/metrics", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("POST /metrics: %s, Allow %q", resp.Status, resp.Header.Get("Allow"))
	}
	resp, err = http.Get(e.admin.URL + "/metrics?name[]=go_info")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `unknown parameter \"name[]\" (this endpoint takes no query parameters)`) {
		t.Fatalf("GET /metrics?name[]=: %s %s", resp.Status, b)
	}
	// Two Servers in one process each have their own counts.
	other := newMetricsEnv(t)
	e.request("GET", "/nope", nil, "")
	if other.scrape().find("cproxy_requests_total", requests("none", "", "403")) != nil {
		t.Fatal("a request to one Server counted by another")
	}
	e.scrape().want("cproxy_requests_total", requests("none", "", "403"), 1)
}
