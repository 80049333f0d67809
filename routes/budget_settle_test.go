package routes

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/tokens"
)

// A model request the upstream had, and whose usage it did not report, is
// charged what it reserved: max_tokens of output, and the body's size for
// the input counts it did not report. Each is audited as not reported and
// counted in cproxy_usage_not_reported_total.
func TestBudgetChargesWhatIsNotReported(t *testing.T) {
	// A stream that ends without its usage: two streams with max_tokens 40
	// spend 80 of the 100 output tokens, so a third cannot start.
	t.Run("stream without usage", func(t *testing.T) {
		e := newBudgetEnv(t, nil)
		e.fake.SetAnswers(fakes.AnswerWithoutUsage)
		tok := e.token("tight-1")
		for i := range 2 {
			if r := e.do("POST", "/v1/messages", bearer(tok), messageBody(40, true)); r.status != 200 || !strings.Contains(r.body, "event: message_stop") {
				t.Fatalf("stream %d = %d %s", i, r.status, r.body)
			}
		}
		if r := e.do("POST", "/v1/messages", bearer(tok), messageBody(40, true)); r.status != 429 || !strings.Contains(r.body, "output_tokens: 80 of 100 used") {
			t.Errorf("a third stream = %d %s", r.status, r.body)
		}
		u := spent(t, e, tok, "tight")
		if u.Requests != 2 || u.Output != 80 || u.Input == 0 {
			t.Errorf("usage %+v, want 2 requests and 80 output tokens", u)
		}
		e.proxy.Close() // every audit line is written
		checkNotReported(t, e, "tight", 2)
	})

	// An answer over what cproxy reads to find its usage (4 MiB): its 40
	// reserved output tokens, not the 0 it could not read, and its input
	// counts as reserved, the body's size.
	t.Run("answer too large to read", func(t *testing.T) {
		e := newBudgetEnv(t, nil)
		e.fake.SetAnswers(fakes.AnswerHuge)
		tok := e.token("tight-1")
		body := messageBody(40, false)
		if r := e.do("POST", "/v1/messages", bearer(tok), body); r.status != 200 || len(r.body) < fakes.HugeAnswerBytes {
			t.Fatalf("huge answer = %d, %d bytes", r.status, len(r.body))
		}
		n := int64(len(body))
		if u := spent(t, e, tok, "tight"); u != (tokens.Usage{Requests: 1, Input: n, Output: 40, CacheRead: n, CacheWrite: n}) {
			t.Errorf("usage %+v, want the reservation: 1 request, 40 output, %d of each input kind", u, n)
		}
		e.proxy.Close()
		checkNotReported(t, e, "tight", 1)
	})

	// A client that leaves inside one huge streamed event, before the
	// message_delta that reports the output.
	t.Run("client leaves inside a huge event", func(t *testing.T) {
		e := newBudgetEnv(t, nil)
		e.fake.SetAnswers(fakes.AnswerHuge)
		// The stream stops after the huge event (message_start,
		// content_block_start, ping, one event per word of the reply, then
		// the huge one) until the client has gone: loopback buffers can
		// hold all 5 MiB, so without the stall the message_delta could
		// pass before the client leaves.
		e.fake.StallStreams(3 + len(strings.Fields(fakes.DefaultReply)) + 1)
		tok := e.token("tight-1")
		req, _ := http.NewRequest("POST", e.proxy.URL+"/v1/messages", strings.NewReader(messageBody(40, true)))
		for k, v := range bearer(tok) {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 2<<20)); err != nil {
			t.Fatalf("reading into the huge event: %v", err)
		}
		resp.Body.Close() // leaves: the rest of the event and message_delta are never read
		e.proxy.Close()   // waits for cproxy to settle the request
		if u := spent(t, e, tok, "tight"); u.Requests != 1 || u.Output != 40 {
			t.Errorf("usage %+v, want 1 request and the 40 output tokens reserved", u)
		}
		checkNotReported(t, e, "tight", 1)
	})
}

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
	u, ok := e.srv.budgets.Usage(context.Background(), tokenID(t, e, tok), e.srv.policy().Profiles[profile].Budget)
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
