package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/internal/fakes"
)

// budgetReplicas starts three replicas on a new database, in front of a
// new fake upstream, with every sandbox on a profile of budget.
func budgetReplicas(t *testing.T, budget string) (*fakes.Anthropic, []*served) {
	t.Helper()
	t.Setenv("CPROXY_PG_DSN", pgTestDatabase(t))
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	pol := "[profile.default]\nmodels = [\"claude-*\"]\n" + budget + "\n"
	return fake, []*served{startReplicaWith(t, fake.URL, "", pol), startReplicaWith(t, fake.URL, "", pol), startReplicaWith(t, fake.URL, "", pol)}
}

// The budget issue's concurrency test against three replicas at once: of
// 90 requests sent together through A, B and C with one token whose budget
// is 10 requests, exactly 10 reach the upstream and the rest are refused
// with 429 before any upstream contact; every replica then lists the
// token's usage as exactly what the upstream reported.
func TestReplicasShareBudget(t *testing.T) {
	fake, replicas := budgetReplicas(t, `budget = { requests = 10, output_tokens = 100000, window = "day" }`)
	tok := replicas[0].mint("conv-budget")

	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 90 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sdkClient(replicas[i%3].proxy, option.WithAuthToken(tok)).Messages.New(t.Context(), helloParams())
			code := 200
			var apiErr *anthropic.Error
			switch {
			case errors.As(err, &apiErr):
				code = apiErr.StatusCode
				if code == 429 && !strings.Contains(apiErr.Error(), "requests: 10 of 10 used or held by requests in flight") {
					t.Errorf("429 without the budget's reason: %v", apiErr)
				}
			case err != nil:
				t.Error(err)
				return
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[200] != 10 || codes[429] != 80 {
		t.Errorf("statuses %v, want 10 × 200 and 80 × 429", codes)
	}
	if n := len(fake.Requests()); n != 10 {
		t.Errorf("the upstream got %d requests, want 10", n)
	}
	for i, r := range replicas {
		u := listedUsage(t, r, "conv-budget")
		if u.Requests != 10 || u.Output != 60 {
			t.Errorf("replica %d lists usage %+v, want 10 requests and 60 output tokens (6 per answer)", i, u)
		}
	}
	if got := status(t, replicas[2], tok); got != 429 {
		t.Errorf("an eleventh request through C: %d, want 429", got)
	}
	checkNoPassword(t, os.Getenv("CPROXY_PG_DSN"), replicas...)
}

// listedUsage is the usage GET /tokens on r lists for sandbox's token.
func listedUsage(t *testing.T, r *served, sandbox string) (u struct{ Requests, Output int64 }) {
	t.Helper()
	resp, err := http.Get(r.admin + "/tokens?sandbox=" + sandbox)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out client.TokenPage
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Tokens) != 1 || out.Tokens[0].Usage == nil {
		t.Fatalf("GET /tokens?sandbox=%s: %s %+v %v", sandbox, resp.Status, out, err)
	}
	return struct{ Requests, Output int64 }{out.Tokens[0].Usage.Requests, out.Tokens[0].Usage.OutputTokens}
}

// The concurrency limit across three replicas: with a token's two slots
// held by requests in flight (the upstream holds its answers), a request
// through any replica is refused; once they end, one passes.
func TestReplicasShareConcurrency(t *testing.T) {
	fake, replicas := budgetReplicas(t, `budget = { concurrent = 2 }`)
	tok := replicas[0].mint("conv-slots")

	gate := fake.HoldHeaders()
	held := make(chan int, 2)
	for _, r := range replicas[:2] {
		go func() { held <- status(t, r, tok) }()
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(fake.Requests()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Fatalf("%d requests reached the upstream, want the 2 held", n)
	}
	for i, r := range replicas {
		if got := status(t, r, tok); got != 429 {
			t.Errorf("a third request in flight, through replica %d: %d, want 429", i, got)
		}
	}
	gate.Release()
	for range 2 {
		if got := <-held; got != 200 {
			t.Errorf("a held request ended with %d", got)
		}
	}
	if got := status(t, replicas[2], tok); got != 200 {
		t.Errorf("after they ended: %d, want 200", got)
	}
}
