package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/tokens"
)

// countingStore counts its tokens by state itself, as PostgreSQL does in
// one query, and fails a listing.
type countingStore struct {
	tokens.Store
	mu     sync.Mutex
	counts map[tokens.State]int
	asked  int
}

func (s *countingStore) CountStates(context.Context, time.Time) (map[tokens.State]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	return s.counts, nil
}

func (*countingStore) List(context.Context, tokens.ListQuery) (tokens.Page, error) {
	return tokens.Page{}, errors.New("listed")
}

func newTestMetrics(t *testing.T, store tokens.Store, now func() time.Time) *Metrics {
	t.Helper()
	if now == nil {
		now = time.Now
	}
	return New("v1", store, now, slog.New(slog.NewTextHandler(io.Discard, nil)), []string{"model"})
}

// scrape is GET /metrics of m, parsed.
func scrape(t *testing.T, m *Metrics) testutil.Scrape {
	t.Helper()
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", w.Code, w.Body)
	}
	return testutil.ParseScrape(t, w.Body)
}

// The usage and budget hooks, as the usage counting and budgets call them.
func TestUsageAndBudget(t *testing.T) {
	m := newTestMetrics(t, &countingStore{}, nil)
	m.Usage("web", 100, 20, 0, 5)
	m.Usage("web", 1, 2, 3, 0)
	m.Usage("ci", 7, 0, 0, 0)
	m.SetBudgetRemaining("conv-1", budgetLeft(map[string]int64{"output": 500}))
	m.SetBudgetRemaining("conv-1", budgetLeft(map[string]int64{"output": 500, "input": 9000}))
	m.SetBudgetRemaining("conv-2", budgetLeft(map[string]int64{"output": 12}))
	m.SetBudgetRemaining("conv-2", budgetLeft(map[string]int64{"output": 10}))
	s := scrape(t, m)
	for kind, want := range map[string]float64{"input": 101, "output": 22, "cache_read": 3, "cache_write": 5} {
		s.Want("cproxy_model_tokens_total", map[string]string{"profile": "web", "kind": kind}, want)
	}
	s.Want("cproxy_model_tokens_total", map[string]string{"profile": "ci", "kind": "input"}, 7)
	if s.Find("cproxy_model_tokens_total", map[string]string{"profile": "ci", "kind": "output"}) != nil {
		t.Error("a kind with no tokens has a series")
	}
	s.Want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-1", "kind": "output"}, 500)
	s.Want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-1", "kind": "input"}, 9000)
	s.Want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-2", "kind": "output"}, 10)

	m.DeleteBudget("conv-1")
	s = scrape(t, m)
	if n := len(s.Families["cproxy_budget_remaining"].GetMetric()); n != 1 {
		t.Errorf("after DeleteBudget(conv-1): %d budget series, want 1", n)
	}
	s.Want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-2", "kind": "output"}, 10)

	// A sandbox whose series were deleted gets them again when it spends:
	// the series remembered for it went with them.
	m.SetBudgetRemaining("conv-1", budgetLeft(map[string]int64{"requests": 3}))
	s = scrape(t, m)
	s.Want("cproxy_budget_remaining", map[string]string{"sandbox": "conv-1", "kind": "requests"}, 3)
	if s.Find("cproxy_budget_remaining", map[string]string{"sandbox": "conv-1", "kind": "output"}) != nil {
		t.Error("a deleted budget series came back unset")
	}
}

// budgetLeft is SetBudgetRemaining's argument: left by kind, the kinds not
// named not limited.
func budgetLeft(left map[string]int64) [6]int64 {
	out := [6]int64{-1, -1, -1, -1, -1, -1}
	for i, kind := range budgetKinds {
		if v, ok := left[kind]; ok {
			out[i] = v
		}
	}
	return out
}

// A request no route took is counted as route "none"; the configured
// routes' series are there at zero before any request.
func TestRequest(t *testing.T) {
	m := newTestMetrics(t, &countingStore{}, nil)
	s := scrape(t, m)
	s.Want("cproxy_request_bytes_total", map[string]string{"route": "model"}, 0)
	s.Want("cproxy_open_requests", map[string]string{"route": "model"}, 0)
	m.Request("model", "web", 200, 10, 20)
	m.Request("model", "web", 200, 1, 2)
	m.Request("", "", 403, 0, 7)
	rs := m.Forwarding("model")
	rs.Answered(time.Second)
	s = scrape(t, m)
	s.Want("cproxy_requests_total", map[string]string{"route": "model", "profile": "web", "status": "200"}, 2)
	s.Want("cproxy_requests_total", map[string]string{"route": "none", "profile": "", "status": "403"}, 1)
	s.Want("cproxy_request_bytes_total", map[string]string{"route": "model"}, 11)
	s.Want("cproxy_response_bytes_total", map[string]string{"route": "model"}, 22)
	s.Want("cproxy_response_bytes_total", map[string]string{"route": "none"}, 7)
	s.Want("cproxy_open_requests", map[string]string{"route": "model"}, 1)
	s.Want("cproxy_upstream_response_seconds", map[string]string{"route": "model"}, 1)
	rs.Done()
	scrape(t, m).Want("cproxy_open_requests", map[string]string{"route": "model"}, 0)

	// A nil *Metrics records nothing, and does not fail.
	var none *Metrics
	none.Request("model", "", 200, 1, 1)
	none.Forwarding("model").Answered(time.Second)
	none.Forwarding("model").Done()
	none.Usage("web", 1, 1, 1, 1)
	none.SetBudgetRemaining("conv-1", budgetLeft(nil))
	none.DeleteBudget("conv-1")
}

// A store that counts its tokens by state is asked for the counts rather
// than listed, at most every tokensCacheFor.
func TestTokensCounted(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	store := &countingStore{counts: map[tokens.State]int{tokens.StateLive: 3, tokens.StateRevoked: 20_000, tokens.StateExpired: 7}}
	m := newTestMetrics(t, store, clock)
	states := func(live, revoked, expired float64) {
		t.Helper()
		s := scrape(t, m)
		s.Want("cproxy_tokens", map[string]string{"state": "live"}, live)
		s.Want("cproxy_tokens", map[string]string{"state": "revoked"}, revoked)
		s.Want("cproxy_tokens", map[string]string{"state": "expired"}, expired)
	}
	states(3, 20_000, 7)
	store.mu.Lock()
	store.counts = map[tokens.State]int{tokens.StateLive: 4}
	store.mu.Unlock()
	advance(tokensCacheFor - time.Second)
	states(3, 20_000, 7)
	advance(time.Second)
	states(4, 0, 0)
	if store.asked != 2 {
		t.Errorf("the store was asked %d times for its counts, want 2", store.asked)
	}
}

// MCP tool calls are counted by server and tool, and one server's tool
// labels stop at MaxToolLabels: past it, a sandbox that makes up names
// adds to tool="other", never a new series.
func TestMCPToolCallLabelsAreBounded(t *testing.T) {
	m := newTestMetrics(t, &countingStore{}, nil)
	m.MCPToolCall("docs", "search")
	m.MCPToolCall("docs", "search")
	for i := range MaxToolLabels + 10 {
		m.MCPToolCall("wild", fmt.Sprintf("tool_%d", i))
	}
	m.MCPToolCall("wild", "tool_0")
	s := scrape(t, m)
	s.Want("cproxy_mcp_tool_calls_total", map[string]string{"server": "docs", "tool": "search"}, 2)
	s.Want("cproxy_mcp_tool_calls_total", map[string]string{"server": "wild", "tool": "tool_0"}, 2)
	s.Want("cproxy_mcp_tool_calls_total", map[string]string{"server": "wild", "tool": "other"}, 10)
	wild := 0
	for _, series := range s.Families["cproxy_mcp_tool_calls_total"].GetMetric() {
		for _, l := range series.GetLabel() {
			if l.GetName() == "server" && l.GetValue() == "wild" {
				wild++
			}
		}
	}
	if wild != MaxToolLabels+1 {
		t.Errorf("server wild has %d series, want %d and other", wild, MaxToolLabels)
	}
	var none *Metrics
	none.MCPToolCall("docs", "search")
}
