package routes

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/tokens"
)

// A request is charged once the upstream has it, whatever the client does
// next: clients that leave before the answer do not get a requests = 1
// budget past its one request.
func TestBudgetChargesAbandonedRequests(t *testing.T) {
	e := newBudgetEnv(t, nil)
	tok := e.token("single-1")
	gate := e.fake.HoldHeaders() // the upstream has each request, and answers none
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.proxy.URL+"/v1/messages", strings.NewReader(messageBody(40, false)))
	for k, v := range bearer(tok) {
		req.Header.Set(k, v)
	}
	done := make(chan error)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-gate.Reached()
	cancel() // the client leaves before the answer
	if err := <-done; err == nil {
		t.Fatal("the abandoned request got an answer")
	}
	e.proxy.Close() // waits for cproxy to settle it
	gate.Release()
	if u := spent(t, e, tok, "single"); u.Requests != 1 || u.Output != 40 {
		t.Errorf("usage %+v, want the request and its 40 output tokens reserved", u)
	}
	checkNotReported(t, e, "single", 1)

	again := httptest.NewServer(e.srv.ProxyHandler())
	defer again.Close()
	for i := range 3 {
		if r := e.doAt(again.URL, "POST", "/v1/messages", bearer(tok), messageBody(40, false)); r.status != 429 {
			t.Errorf("request %d after the abandoned one = %d %s", i+2, r.status, r.body)
		}
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests on a budget of one", n)
	}
}

// spent is what tok has spent in its window under profile's budget.
func spent(t *testing.T, e *env, tok, profile string) tokens.Usage {
	t.Helper()
	u, ok := e.srv.budgets.Usage(context.Background(), tokenID(t, e, tok), e.srv.Policy().Profiles[profile].Budget)
	if !ok {
		t.Fatalf("no usage for profile %s", profile)
	}
	return u
}

// checkNotReported checks that n requests of profile were audited with
// usage not reported and counted in cproxy_usage_not_reported_total.
func checkNotReported(t *testing.T, e *env, profile string, n int) {
	t.Helper()
	if got := strings.Count(e.logs.String(), `"not_reported":true`); got != n {
		t.Errorf("%d audit lines say the usage was not reported, want %d:\n%s", got, n, e.logs)
	}
	resp, err := http.Get(e.admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	want := `cproxy_usage_not_reported_total{profile="` + profile + `",route="model"} ` + strconv.Itoa(n)
	if !strings.Contains(string(b), want+"\n") {
		t.Errorf("metrics lack %s", want)
	}
}
