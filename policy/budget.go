package policy

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Budget windows.
const (
	WindowToken = "token" // the token's whole lifetime (the default)
	WindowDay   = "day"   // each UTC day
)

// Budget caps what one token may spend on the model route and in MCP tool
// calls ([profile.NAME.budget], or per token at creation). Every limit is
// optional: zero is no limit, except RequestsPerMinute and Concurrent,
// where zero is DefaultRequestsPerMinute and DefaultConcurrent.
type Budget struct {
	// Window is what the counts are over: WindowToken (default) or WindowDay.
	Window string `toml:"window" json:"window,omitempty"`
	// Requests caps model requests (POST /v1/messages).
	Requests int64 `toml:"requests" json:"requests,omitempty"`
	// InputTokens, OutputTokens, CacheReadTokens and CacheWriteTokens cap
	// the model's usage as the upstream reports it.
	InputTokens      int64 `toml:"input_tokens" json:"input_tokens,omitempty"`
	OutputTokens     int64 `toml:"output_tokens" json:"output_tokens,omitempty"`
	CacheReadTokens  int64 `toml:"cache_read_tokens" json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `toml:"cache_write_tokens" json:"cache_write_tokens,omitempty"`
	// RequestsPerMinute caps the rate of model-route requests. Zero:
	// DefaultRequestsPerMinute.
	RequestsPerMinute int64 `toml:"requests_per_minute" json:"requests_per_minute,omitempty"`
	// Concurrent caps the model-route requests in flight at once. Zero:
	// DefaultConcurrent.
	Concurrent int64 `toml:"concurrent" json:"concurrent,omitempty"`
	// MCPCalls caps MCP tool calls (tools/call, every server together).
	MCPCalls int64 `toml:"mcp_calls" json:"mcp_calls,omitempty"`
	// MCPCallsPerMinute caps the rate of MCP tool calls, every server
	// together. Zero: no rate but each server's ([mcp.NAME]
	// requests_per_minute).
	MCPCallsPerMinute int64 `toml:"mcp_calls_per_minute" json:"mcp_calls_per_minute,omitempty"`
	// Ask makes a model request over one of the window's limits (requests
	// and the token counts, not the rate or concurrency) wait for an
	// operator's approval instead of being refused (docs/approvals.md): an
	// approval lets one request past them. False: refused.
	Ask bool `toml:"ask" json:"ask,omitempty"`
}

// The bounds a token has when its budget sets none, so that one sandbox
// cannot hold a whole host's connections and memory (each open stream
// costs about 73 KiB, 4 goroutines and 2 file descriptors) or fill the
// audit log at thousands of requests a second. Each process counts them in
// its own memory, replicas included: they bound what one process spends.
// They are far above what Claude Code does (a few requests in flight, a
// few a second, subagents included); a profile sets its own to go higher.
const (
	// DefaultConcurrent is budget.concurrent when none is set.
	DefaultConcurrent = 64
	// DefaultRequestsPerMinute is budget.requests_per_minute when none is
	// set: 50 a second sustained, up to 3000 at once.
	DefaultRequestsPerMinute = 3000
)

// IsZero reports whether the budget limits nothing (Ask alone limits
// nothing).
func (b Budget) IsZero() bool {
	return b.Requests == 0 && b.InputTokens == 0 && b.OutputTokens == 0 && b.CacheReadTokens == 0 &&
		b.CacheWriteTokens == 0 && b.RequestsPerMinute == 0 && b.Concurrent == 0 && b.MCPCalls == 0 && b.MCPCallsPerMinute == 0
}

// Over returns b with every limit o sets (and its window, if set) in place
// of b's: a token's budget over its profile's.
func (b Budget) Over(o Budget) Budget {
	set := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	if o.Window != "" {
		b.Window = o.Window
	}
	set(&b.Requests, o.Requests)
	set(&b.InputTokens, o.InputTokens)
	set(&b.OutputTokens, o.OutputTokens)
	set(&b.CacheReadTokens, o.CacheReadTokens)
	set(&b.CacheWriteTokens, o.CacheWriteTokens)
	set(&b.RequestsPerMinute, o.RequestsPerMinute)
	set(&b.Concurrent, o.Concurrent)
	set(&b.MCPCalls, o.MCPCalls)
	set(&b.MCPCallsPerMinute, o.MCPCallsPerMinute)
	b.Ask = b.Ask || o.Ask
	return b
}

// budgetLimits names each limit for messages, in order.
func (b Budget) limits() []struct {
	key string
	v   int64
} {
	return []struct {
		key string
		v   int64
	}{{"requests", b.Requests}, {"input_tokens", b.InputTokens}, {"output_tokens", b.OutputTokens},
		{"cache_read_tokens", b.CacheReadTokens}, {"cache_write_tokens", b.CacheWriteTokens},
		{"requests_per_minute", b.RequestsPerMinute}, {"concurrent", b.Concurrent},
		{"mcp_calls", b.MCPCalls}, {"mcp_calls_per_minute", b.MCPCallsPerMinute}}
}

// Check returns what is wrong with a budget given at token creation, or "".
func (b Budget) Check() string {
	if b.Window != "" && b.Window != WindowToken && b.Window != WindowDay {
		return fmt.Sprintf(`budget window %q: use "token" (the token's lifetime) or "day" (each UTC day)`, b.Window)
	}
	for _, l := range b.limits() {
		if l.v < 0 {
			return fmt.Sprintf("budget %s must not be negative (leave it out for the profile's)", l.key)
		}
	}
	return ""
}

// ParseBudget decodes a budget given as JSON at token creation, strictly.
func ParseBudget(raw []byte) (Budget, error) {
	var b Budget
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return Budget{}, fmt.Errorf("a budget is an object of window, requests, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, requests_per_minute, concurrent, mcp_calls, mcp_calls_per_minute and ask: %v", err)
	}
	if msg := b.Check(); msg != "" {
		return Budget{}, fmt.Errorf("%s", msg)
	}
	return b, nil
}

func (pr *Profile) validateBudget(d *decoder, pp path) {
	bp := pp.key("budget")
	b := pr.Budget
	if b.Window != "" && b.Window != WindowToken && b.Window != WindowDay {
		d.atValue(bp.key("window"), `%s.window: %q is not a budget window (use "token", the token's lifetime, or "day", each UTC day)`, bp, b.Window)
	}
	for _, l := range b.limits() {
		if l.v < 0 {
			d.atValue(bp.key(l.key), "%s.%s: must not be negative (leave it out for no limit)", bp, l.key)
		}
	}
}
