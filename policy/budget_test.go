package policy

import (
	"strings"
	"testing"
)

// The MCP keys of a budget load from the policy, go over a profile's one
// by one as the others do, and come with a token at creation.
func TestBudgetOfMCPCalls(t *testing.T) {
	p, err := ParsePolicy("policy.toml", []byte(`[profile.web.budget]
window = "day"
requests = 10
mcp_calls = 200
mcp_calls_per_minute = 20
`))
	if err != nil {
		t.Fatal(err)
	}
	b := p.Profiles["web"].Budget
	if want := (Budget{Window: WindowDay, Requests: 10, MCPCalls: 200, MCPCallsPerMinute: 20}); b != want {
		t.Fatalf("budget = %+v, want %+v", b, want)
	}
	own, err := ParseBudget([]byte(`{"mcp_calls": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.Over(own), (Budget{Window: WindowDay, Requests: 10, MCPCalls: 5, MCPCallsPerMinute: 20}); got != want {
		t.Errorf("a token's mcp_calls over the profile's = %+v, want %+v", got, want)
	}
	if (Budget{MCPCallsPerMinute: 1}).IsZero() {
		t.Error("a budget of an MCP rate alone is zero")
	}
	for raw, want := range map[string]string{
		`{"mcp_calls": -1}`:            "budget mcp_calls must not be negative (leave it out for the profile's)",
		`{"mcp_calls_per_minute": -3}`: "budget mcp_calls_per_minute must not be negative (leave it out for the profile's)",
		`{"mcp_cals": 1}`:              "mcp_calls, mcp_calls_per_minute and ask",
	} {
		if _, err := ParseBudget([]byte(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseBudget(%s) = %v, want %q", raw, err, want)
		}
	}
}
