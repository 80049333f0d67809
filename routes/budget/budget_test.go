package budget

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/tokens"
)

// Crashes add up to little: each charges at most a lease step (a
// thousandth of each limit, see leaseParts) beyond what was spent, so
// twenty crashes, each after one request, leave a 1,000,000-request budget
// with at most 20,020 requests charged, where a step of a twentieth of the
// limit spent it all.
func TestBudgetCrashesAddUpToLittle(t *testing.T) {
	store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "cproxy.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	log := slog.New(slog.DiscardHandler)
	lim := policy.Budget{Requests: 1_000_000, OutputTokens: 1_000_000_000}
	tok := Token{ID: "tok_0123456789ab", Sandbox: "conv-1", Limits: lim}
	for range 20 {
		b := New(store, nil, log, time.Now)
		res, err := b.reserve(context.Background(), tok, tokens.Usage{Requests: 1, Output: 32_000}, true)
		if err != nil {
			t.Fatal(err)
		}
		res.Settle(tokens.Usage{Requests: 1, Output: 500})
		// The process dies: its flusher stops, and the clean stop's exact
		// save never happens.
		close(b.stop)
		<-b.done
	}
	after := New(store, nil, log, time.Now)
	defer after.Close()
	u, _ := after.Usage(context.Background(), tok.ID, lim)
	if u.Requests < 20 || u.Requests > 20+20*1000 || u.Output < 20*500 || u.Output > 20*(32_000+1_000_000) {
		t.Errorf("after 20 crashes: %+v charged, want 20 to 20,020 requests and 10,000 to 20,640,000 output tokens", u)
	}
}

// A request that held much more than it spent gives the rest back to the
// store as it settles: a crash after it charges what it spent and at most
// a thousandth of the limit, not its max_tokens.
func TestBudgetCrashAfterLargeHold(t *testing.T) {
	store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "cproxy.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	log := slog.New(slog.DiscardHandler)
	lim := policy.Budget{OutputTokens: 1_000_000, InputTokens: 1_000_000}
	tok := Token{ID: "tok_0123456789ab", Sandbox: "conv-1", Limits: lim}
	b := New(store, nil, log, time.Now)
	res, err := b.reserve(context.Background(), tok, tokens.Usage{Requests: 1, Output: 100_000, Input: 50_000}, true)
	if err != nil {
		t.Fatal(err)
	}
	res.InputKnown(tokens.Usage{Input: 2_000})
	if u, _ := store.LoadUsage(context.Background(), tok.ID); u.Input > 2_000+1_000 || u.Output < 100_000 {
		t.Errorf("a stream that reported 2,000 input tokens, holding 100,000 output: the store holds %+v, want its input within 1,000 of 2,000 and its output held", u)
	}
	res.Settle(tokens.Usage{Requests: 1, Output: 6, Input: 2_000})
	close(b.stop)
	<-b.done
	after := New(store, nil, log, time.Now)
	defer after.Close()
	if u, _ := after.Usage(context.Background(), tok.ID, lim); u.Output < 6 || u.Output > 6+1_000 || u.Input < 2_000 || u.Input > 2_000+1_000 {
		t.Errorf("after a crash following a request that spent 6 output and 2,000 input tokens: %+v charged, want at most 1,000 more of each", u)
	}
}

// A pruned token's usage, rate and in-flight count leave memory with it:
// the flusher does not write its usage back, and the token's limits are
// not kept for a token that can never be used again.
func TestForget(t *testing.T) {
	store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "cproxy.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	b := New(store, nil, slog.New(slog.DiscardHandler), time.Now)
	defer b.Close()
	gone := Token{ID: "tok_0123456789ab", Sandbox: "conv-1", Limits: policy.Budget{Requests: 10, RequestsPerMinute: 2}}
	kept := Token{ID: "tok_ba9876543210", Sandbox: "conv-2", Limits: gone.Limits}
	for _, tok := range []Token{gone, kept} {
		res, err := b.reserve(context.Background(), tok, tokens.Usage{Requests: 1}, true)
		if err != nil {
			t.Fatal(err)
		}
		res.Settle(tokens.Usage{Requests: 1})
	}
	// The store prunes the token, and its usage with it.
	if err := store.SaveUsage(context.Background(), gone.ID, tokens.Usage{}); err != nil {
		t.Fatal(err)
	}
	b.Forget([]tokens.Record{{ID: gone.ID}})
	b.mu.Lock()
	_, limited := b.limit[gone.ID]
	_, counted := b.accts[gone.ID]
	_, keptLimit := b.limit[kept.ID]
	b.mu.Unlock()
	if limited || counted {
		t.Errorf("a forgotten token's rate (%v) or usage (%v) is still in memory", limited, counted)
	}
	if !keptLimit {
		t.Error("Forget dropped another token's rate")
	}
	b.Close()
	for _, c := range []struct {
		id   string
		want int64
	}{{gone.ID, 0}, {kept.ID, 1}} {
		if u, err := store.LoadUsage(context.Background(), c.id); err != nil || u.Requests != c.want {
			t.Errorf("%s: the store holds %+v, %v after a clean stop; want %d requests", c.id, u, err, c.want)
		}
	}
}

// Tool calls and model requests are each held to their own limits: a
// token whose input tokens the upstream reported past their limit (input is
// counted after the fact) may still call tools, and one whose mcp_calls
// are spent may still make model requests.
func TestMCPCallsAndModelLimitsApart(t *testing.T) {
	store, err := tokens.OpenBolt(filepath.Join(t.TempDir(), "cproxy.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	b := New(store, nil, slog.New(slog.DiscardHandler), time.Now)
	defer b.Close()
	ctx := context.Background()
	tok := Token{ID: "tok_0123456789ab", Sandbox: "conv-1", Limits: policy.Budget{InputTokens: 100, MCPCalls: 1, Requests: 10}}
	res, err := b.reserve(ctx, tok, tokens.Usage{Requests: 1, Input: 50}, true)
	if err != nil {
		t.Fatal(err)
	}
	res.Settle(tokens.Usage{Requests: 1, Input: 5_000})
	call := tokens.Usage{MCPCalls: 1}
	res, err = b.reserve(ctx, tok, call, true)
	if err != nil {
		t.Fatalf("a tool call of a token over its input_tokens: %v", err)
	}
	res.Settle(call)
	if _, err := b.reserve(ctx, tok, call, true); err == nil || err.Error() != "sandbox conv-1's token is over its budget: mcp_calls: 1 of 1 used or held by requests in flight, and this request may use 1 (MCP tool calls, every server together); they are spent for the token's lifetime: the sandbox needs a new token, or the operator a higher budget mcp_calls" {
		t.Errorf("a second tool call of 1: %v", err)
	}
	tok.Limits.InputTokens = 0
	if res, err := b.reserve(ctx, tok, tokens.Usage{Requests: 1, Input: 50}, true); err != nil {
		t.Errorf("a model request of a token whose tool calls are spent: %v", err)
	} else {
		res.Settle(tokens.Usage{Requests: 1, Input: 50})
	}
	if u, _ := b.Usage(ctx, tok.ID, tok.Limits); u != (tokens.Usage{Requests: 2, Input: 5_050, MCPCalls: 1}) {
		t.Errorf("usage %+v", u)
	}
}
