package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

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
		if u.Requests != 10 || u.OutputTokens != 60 {
			t.Errorf("replica %d lists usage %+v, want 10 requests and 60 output tokens (6 per answer)", i, u)
		}
	}
	if got := status(t, replicas[2], tok); got != 429 {
		t.Errorf("an eleventh request through C: %d, want 429", got)
	}
	checkNoPassword(t, os.Getenv("CPROXY_PG_DSN"), replicas...)
}

// listedUsage is the usage GET /tokens on r lists for sandbox's token.
func listedUsage(t *testing.T, r *served, sandbox string) client.Usage {
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
	return *out.Tokens[0].Usage
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

// MCP tool calls are counted in the shared store: with mcp_calls = 2, a
// call through each of two replicas passes (made by the official Go SDK's
// client) and a third, through either, is refused with the budget's
// JSON-RPC error before the server hears of it; both replicas list the two
// calls.
func TestReplicasShareMCPCalls(t *testing.T) {
	t.Setenv("CPROXY_PG_DSN", pgTestDatabase(t))
	t.Setenv("CPROXY_TEST_MCP_TOKEN", canaryMCP)
	srv := fakes.NewMCPServer(fakes.MCPServerOptions{Token: canaryMCP})
	t.Cleanup(srv.Close)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	pol := "[profile.default.budget]\nmcp_calls = 2\n\n[profile.default.mcp.docs]\ntools = [\"search\"]\n"
	// A table of its own after the [store] keys.
	mcpTable := fmt.Sprintf("\n[mcp.docs]\nurl = %q\ncredential = \"env:CPROXY_TEST_MCP_TOKEN\"\n", srv.URL)
	replicas := []*served{startReplicaWith(t, fake.URL, mcpTable, pol), startReplicaWith(t, fake.URL, mcpTable, pol)}
	tok := replicas[0].mint("conv-mcp")

	for i, r := range replicas {
		if text, err := callTool(t, r, tok, "search"); err != nil || text != "fake docs search results for two" {
			t.Fatalf("call %d through replica %d = %q, %v", i+1, i, text, err)
		}
	}
	for i, r := range replicas {
		req, _ := http.NewRequest("POST", r.proxy+"/mcp/docs", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"search","arguments":{"query":"more"}}}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"id":9,"error":{"code":-32001,"message":"cproxy: sandbox conv-mcp's token is over its budget: mcp_calls: 2 of 2 used`) {
			t.Errorf("a third call through replica %d = %s %s", i, resp.Status, body)
		}
	}
	n := 0
	for _, c := range srv.Calls() {
		if c.Method == "tools/call" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("the server heard %d tool calls, want 2", n)
	}
	for i, r := range replicas {
		if u := listedUsage(t, r, "conv-mcp"); u.MCPCalls != 2 {
			t.Errorf("replica %d lists %d MCP calls, want 2", i, u.MCPCalls)
		}
	}
}

// callTool calls tool through s's /mcp/docs with tok, in a session of the
// official Go SDK's client, and returns its result's text.
func callTool(t *testing.T, s *served, tok, tool string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "cproxy-test", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: s.proxy + "/mcp/docs", HTTPClient: &http.Client{Transport: bearer(tok)}, MaxRetries: -1}, nil)
	if err != nil {
		return "", err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: map[string]any{"query": "two"}})
	if err != nil {
		return "", err
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return strings.Join(text, "\n"), nil
}
