package routes

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/testutil"
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
func (e *metricsEnv) scrape() testutil.Scrape {
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
	return testutil.ParseScrape(e.t, resp.Body)
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
	s.Want("cproxy_open_requests", route("model"), 0)
	s.Want("cproxy_request_bytes_total", route("model"), 0)
	s.Want("cproxy_upstream_response_seconds", route("model"), 0)
	if s.Find("cproxy_requests_total", requests("model", "web", "200")) != nil {
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
	s.Want("cproxy_open_requests", route("model"), 1)
	s.Want("cproxy_upstream_response_seconds", route("model"), 3)
	gate.Release()
	rest, _ := io.ReadAll(br)
	<-e.finished
	bytesIn += len(stream)
	bytesOut += len(first) + len(rest)

	s = e.scrape()
	s.Want("cproxy_requests_total", requests("model", "web", "200"), 3)
	s.Want("cproxy_requests_total", requests("model", "web", "403"), 1)
	s.Want("cproxy_requests_total", requests("model", "", "401"), 1)
	s.Want("cproxy_requests_total", requests("none", "", "403"), 1)
	if n := len(s.Families["cproxy_requests_total"].GetMetric()); n != 4 {
		t.Errorf("cproxy_requests_total has %d series, want 4", n)
	}
	s.Want("cproxy_open_requests", route("model"), 0)
	s.Want("cproxy_upstream_response_seconds", route("model"), 3)
	s.Want("cproxy_request_bytes_total", route("model"), float64(bytesIn))
	s.Want("cproxy_response_bytes_total", route("model"), float64(bytesOut))
	s.Want("cproxy_request_bytes_total", route("none"), 0)
	s.Want("cproxy_response_bytes_total", route("none"), float64(len(none.body)))
	s.Want("cproxy_build_info", map[string]string{"version": "v1.2.3"}, 1)
	s.Want("cproxy_tokens", map[string]string{"state": "live"}, 1)
	if s.Families["go_goroutines"] == nil {
		t.Error("no Go runtime metrics")
	}
	for name, mf := range s.Families {
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
	s.Want("cproxy_requests_total", requests("model", "default", "504"), 1)
	s.Want("cproxy_upstream_response_seconds", route("model"), 0)
	s.Want("cproxy_open_requests", route("model"), 0)
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
		s.Want("cproxy_tokens", map[string]string{"state": "live"}, live)
		s.Want("cproxy_tokens", map[string]string{"state": "revoked"}, revoked)
		s.Want("cproxy_tokens", map[string]string{"state": "expired"}, expired)
	}
	states(0, 0, 0)
	e.token("conv-1")
	e.token("conv-2")
	e.token("conv-3", "ttl=1m")
	// Counted at most every 10s: the first scrape's counts hold until
	// then (the metrics package's tests hold the period to the second).
	states(0, 0, 0)
	advance(30 * time.Second)
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

// Two Servers in one process each have their own counts.
func TestMetricsPerServer(t *testing.T) {
	e := newMetricsEnv(t)
	other := newMetricsEnv(t)
	e.request("GET", "/nope", nil, "")
	if other.scrape().Find("cproxy_requests_total", requests("none", "", "403")) != nil {
		t.Fatal("a request to one Server counted by another")
	}
	e.scrape().Want("cproxy_requests_total", requests("none", "", "403"), 1)
}
