package routes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cproxy/cproxy/routes/budget"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

const budgetPolicy = `
[profile.default]
models = ["claude-*"]

[profile.default.budget]
requests = 10

[profile.tight]
models = ["claude-*"]
budget = { output_tokens = 100, window = "day" }

[profile.rate]
models = ["claude-*"]
budget = { requests_per_minute = 2 }

[profile.one]
models = ["claude-*"]
budget = { concurrent = 1 }

[profile.single]
models = ["claude-*"]
budget = { requests = 1 }

[[sandbox]]
match = "tight-*"
profile = "tight"

[[sandbox]]
match = "single-*"
profile = "single"

[[sandbox]]
match = "rate-*"
profile = "rate"

[[sandbox]]
match = "one-*"
profile = "one"
`

func newBudgetEnv(t *testing.T, now func() time.Time) *env {
	return newEnv(t, func(o *testOptions) {
		o.Policy = mustPolicy(t, budgetPolicy)
		if now != nil {
			o.Now = now
		}
	})
}

func messageBody(maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, maxTokens, stream)
}

// The budget holds under concurrency: of 100 requests at once against a
// budget of 10, exactly 10 reach the upstream and the rest get 429 before
// any upstream contact.
func TestBudgetConcurrent(t *testing.T) {
	e := newBudgetEnv(t, nil)
	tok := e.token("conv-1")
	codes := atOnce(t, 100, func(int) (string, string) { return e.proxy.URL, messageBody(50, false) }, tok)
	if codes[200] != 10 || codes[429] != 90 {
		t.Errorf("statuses %v, want 10 × 200 and 90 × 429", codes)
	}
	if n := len(e.fake.Requests()); n != 10 {
		t.Errorf("the upstream got %d requests, want 10", n)
	}
	r := e.do("POST", "/v1/messages", map[string]string{"Authorization": "Bearer " + tok, "Anthropic-Version": "2023-06-01"}, messageBody(50, false))
	typ, msg := errorType(t, r)
	if r.status != 429 || typ != "rate_limit_error" || !strings.Contains(msg, "requests: 10 of 10 used") ||
		r.header.Get("X-Should-Retry") != "false" || r.header.Get("Retry-After") != "" {
		t.Errorf("over budget = %d %v %s", r.status, r.header, r.body)
	}
	// count_tokens and the model list are not charged.
	if r := e.do("GET", "/v1/models", map[string]string{"Authorization": "Bearer " + tok, "Anthropic-Version": "2023-06-01"}, ""); r.status != 200 {
		t.Errorf("models = %d", r.status)
	}
}

// atOnce sends n model requests with tok at once, the i-th to the base URL
// and with the body req(i) gives, reads each answer whole, and counts the
// statuses.
func atOnce(t *testing.T, n int, req func(i int) (base, body string), tok string) map[int]int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base, body := req(i)
			r, _ := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Anthropic-Version", "2023-06-01")
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return codes
}

func tokenID(t *testing.T, e *env, tok string) string {
	t.Helper()
	p, err := tokens.Parse(tok)
	if err != nil {
		t.Fatal(err)
	}
	return p.Hash().ID()
}

func TestBudgetRateAndConcurrency(t *testing.T) {
	e := newBudgetEnv(t, nil)
	auth := map[string]string{"Authorization": "Bearer " + e.token("rate-1"), "Anthropic-Version": "2023-06-01"}
	for i := range 2 {
		if r := e.do("POST", "/v1/messages/count_tokens", auth, `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`); r.status != 200 {
			t.Fatalf("request %d = %d", i, r.status)
		}
	}
	r := e.do("POST", "/v1/messages/count_tokens", auth, `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`)
	if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "over its rate (budget requests_per_minute = 2)") {
		t.Errorf("third in a minute = %d %v %s", r.status, r.header, r.body)
	}

	gate := e.fake.HoldHeaders()
	one := map[string]string{"Authorization": "Bearer " + e.token("one-1"), "Anthropic-Version": "2023-06-01"}
	done := make(chan reply)
	go func() { done <- e.do("POST", "/v1/messages", one, messageBody(10, false)) }()
	<-gate.Reached()
	if r := e.do("POST", "/v1/messages", one, messageBody(10, false)); r.status != 429 || !strings.Contains(r.body, "1 requests of sandbox one-1's token are in flight") {
		t.Errorf("a second at once = %d %s", r.status, r.body)
	}
	gate.Release()
	if r := <-done; r.status != 200 {
		t.Errorf("the first = %d", r.status)
	}
	if r := e.do("POST", "/v1/messages", one, messageBody(10, false)); r.status != 200 {
		t.Errorf("after the first ended = %d", r.status)
	}
}

// Usage survives a restart: exactly after a clean stop, and at least what
// was spent (the lease) after a crash, where nothing could be saved.
func TestBudgetPersists(t *testing.T) {
	e := newBudgetEnv(t, nil)
	tok := e.token("conv-1")
	id := tokenID(t, e, tok)
	auth := map[string]string{"Authorization": "Bearer " + tok, "Anthropic-Version": "2023-06-01"}
	for range 3 {
		if r := e.do("POST", "/v1/messages", auth, messageBody(10, false)); r.status != 200 {
			t.Fatal(r.status)
		}
	}
	lim := e.srv.Policy().Profiles["default"].Budget
	// A crash: a second server on the same store reads what is there.
	crashed := budget.New(e.srv.store, nil, e.srv.log, time.Now)
	u, _ := crashed.Usage(context.Background(), id, lim)
	if u.Requests < 3 {
		t.Errorf("after a crash: %d requests charged, want at least the 3 spent", u.Requests)
	}
	crashed.Close()
	// A clean stop saves the exact usage.
	e.srv.budgets.Close()
	after := budget.New(e.srv.store, nil, e.srv.log, time.Now)
	defer after.Close()
	if u, _ := after.Usage(context.Background(), id, lim); u.Requests != 3 {
		t.Errorf("after a clean stop: %d requests, want 3", u.Requests)
	}
}

// Replicas on one store (SharedLimits) add up their spending exactly: 100
// requests at once, spread over two servers, against a budget of 10 send
// exactly 10 upstream, and once they end the store holds what the upstream
// reported, no reservation left behind. A request over the output budget is
// refused with the same message as in one process.
func TestBudgetShared(t *testing.T) {
	e, second := newSharedBudgetEnv(t)

	tok := e.token("conv-1")
	codes := atOnce(t, 100, func(i int) (string, string) {
		if i%2 == 1 {
			return second, messageBody(50, i%3 == 0)
		}
		return e.proxy.URL, messageBody(50, i%3 == 0)
	}, tok)
	if codes[200] != 10 || codes[429] != 90 {
		t.Errorf("statuses %v, want 10 × 200 and 90 × 429", codes)
	}
	if n := len(e.fake.Requests()); n != 10 {
		t.Errorf("the upstream got %d requests, want 10", n)
	}
	// The fake answers six output tokens per request; the reservations of
	// 50 each were settled down to them.
	got, err := e.srv.store.LoadUsage(context.Background(), tokens.UsageKey(tokenID(t, e, tok), ""))
	if err != nil || got.Requests != 10 || got.Output != 60 {
		t.Errorf("the store holds %+v, %v; want 10 requests and 60 output tokens", got, err)
	}

	auth := map[string]string{"Authorization": "Bearer " + e.token("tight-1"), "Anthropic-Version": "2023-06-01"}
	if r := e.do("POST", "/v1/messages", auth, messageBody(90, false)); r.status != 200 {
		t.Fatalf("90 of 100 = %d %s", r.status, r.body)
	}
	r := e.do("POST", "/v1/messages", auth, messageBody(95, false))
	if r.status != 429 || !strings.Contains(r.body, "output_tokens: 6 of 100 used or held by requests in flight, and this request may use 95") ||
		r.header.Get("Retry-After") == "" {
		t.Errorf("over the shared output budget = %d %v %s", r.status, r.header, r.body)
	}
}

// newSharedBudgetEnv is newBudgetEnv with SharedLimits, and a second server
// on the same store, shared limits and upstream, as a second replica; it
// returns that server's proxy URL.
func newSharedBudgetEnv(t *testing.T) (*env, string) {
	var shared *memShared
	e := newEnv(t, func(o *testOptions) {
		o.Policy = mustPolicy(t, budgetPolicy)
		shared = newMemShared(o.Store)
		o.SharedLimits = shared
	})
	u, _ := url.Parse(e.fake.URL)
	o := testOptions{Options: Options{Store: e.srv.store, SharedLimits: shared, Policy: e.srv.Policy()},
		Anthropic: Upstream{URL: u, Credential: secrets.New(canaryKey), Auth: "api-key"}}
	other := New(o.build())
	t.Cleanup(other.Close)
	second := httptest.NewServer(other.ProxyHandler())
	t.Cleanup(second.Close)
	return e, second.URL
}

// The rate and concurrency limits hold across replicas too: two requests
// of 2 a minute, one through each, leave none for either; with one request
// in flight through one, the other refuses a second.
func TestBudgetSharedRateAndConcurrency(t *testing.T) {
	e, second := newSharedBudgetEnv(t)
	count := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`
	auth := map[string]string{"Authorization": "Bearer " + e.token("rate-1"), "Anthropic-Version": "2023-06-01"}
	if r := e.do("POST", "/v1/messages/count_tokens", auth, count); r.status != 200 {
		t.Fatalf("first = %d", r.status)
	}
	if r := e.doAt(second, "POST", "/v1/messages/count_tokens", auth, count); r.status != 200 {
		t.Fatalf("second, through the other replica = %d", r.status)
	}
	for _, base := range []string{e.proxy.URL, second} {
		r := e.doAt(base, "POST", "/v1/messages/count_tokens", auth, count)
		if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "over its rate (budget requests_per_minute = 2)") {
			t.Errorf("a third in a minute through %s = %d %v %s", base, r.status, r.header, r.body)
		}
	}

	gate := e.fake.HoldHeaders()
	one := map[string]string{"Authorization": "Bearer " + e.token("one-1"), "Anthropic-Version": "2023-06-01"}
	done := make(chan reply)
	go func() { done <- e.do("POST", "/v1/messages", one, messageBody(10, false)) }()
	<-gate.Reached()
	if r := e.doAt(second, "POST", "/v1/messages", one, messageBody(10, false)); r.status != 429 || !strings.Contains(r.body, "1 requests of sandbox one-1's token are in flight") {
		t.Errorf("a second at once, through the other replica = %d %s", r.status, r.body)
	}
	gate.Release()
	if r := <-done; r.status != 200 {
		t.Errorf("the first = %d", r.status)
	}
	if r := e.doAt(second, "POST", "/v1/messages", one, messageBody(10, false)); r.status != 200 {
		t.Errorf("after the first ended, through the other replica = %d %s", r.status, r.body)
	}
}

// A shared store that fails: a reservation that cannot be made refuses the
// request with 503 before anything is sent, and a settlement that cannot be
// made leaves the reservation charged (max_tokens, not the 6 tokens used):
// an over-charge, logged, never an under-charge.
func TestBudgetSharedStoreFails(t *testing.T) {
	var st *advStore
	e := newEnv(t, func(o *testOptions) {
		o.Policy = mustPolicy(t, budgetPolicy)
		st = &advStore{Store: o.Store, limits: newMemShared(o.Store)}
		o.Store, o.SharedLimits = st, st
	})
	tok, one := e.token("tight-1"), e.token("one-1")
	auth := map[string]string{"Authorization": "Bearer " + tok, "Anthropic-Version": "2023-06-01"}
	st.failWrites.Store(true)
	if r := e.do("POST", "/v1/messages", auth, messageBody(50, false)); r.status != 503 || !strings.Contains(r.body, "token store unavailable") {
		t.Errorf("reserving with the store failing = %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/messages", map[string]string{"Authorization": "Bearer " + one, "Anthropic-Version": "2023-06-01"}, messageBody(50, false)); r.status != 503 {
		t.Errorf("taking a concurrency slot with the store failing = %d %s", r.status, r.body)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
	st.failWrites.Store(false)

	gate := e.fake.HoldHeaders()
	done := make(chan reply)
	go func() { done <- e.do("POST", "/v1/messages", auth, messageBody(50, false)) }()
	<-gate.Reached()
	st.failWrites.Store(true) // reserved; now the settlement fails
	gate.Release()
	if r := <-done; r.status != 200 {
		t.Fatalf("the request = %d %s", r.status, r.body)
	}
	st.failWrites.Store(false)
	key := tokens.UsageKey(tokenID(t, e, tok), time.Now().UTC().Format("2006-01-02"))
	if u, err := st.LoadUsage(context.Background(), key); err != nil || u.Output != 50 || u.Requests != 1 {
		t.Errorf("after a failed settlement the store holds %+v, %v; want the reservation: 1 request, 50 output tokens", u, err)
	}
	if !strings.Contains(e.logs.String(), "settling a request in the token store failed") {
		t.Errorf("no log line for the failed settlement:\n%s", e.logs.String())
	}
}
