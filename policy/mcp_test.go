package policy

import (
	"strings"
	"testing"
)

const mcpPolicy = `[profile.web]
models = ["claude-*"]

[profile.web.mcp.docs]
tools = ["search", "get_*"]
resources = ["docs://public/**"]
prompts = ["summary"]

[profile.narrow.mcp.docs]
methods = ["tools/call"]
tools = ["search"]
`

func TestAskMCP(t *testing.T) {
	p, probs := loadPolicy("policy.toml", []byte(mcpPolicy))
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	web, narrow := p.Profiles["web"], p.Profiles["narrow"]
	for _, c := range []struct {
		pr    *Profile
		q     MCPQuestion
		allow bool
		rule  string
	}{
		{web, MCPQuestion{Server: "docs"}, true, "profile.web.mcp.docs"},
		{web, MCPQuestion{Server: "tracker"}, false, "profile.web: no [profile.web.mcp.tracker] table"},
		{web, MCPQuestion{Server: "docs", Method: "initialize"}, true, "mcp: initialize is a lifecycle method"},
		{web, MCPQuestion{Server: "docs", Method: "tools/list"}, true, "profile.web.mcp.docs.methods (default)"},
		{web, MCPQuestion{Server: "docs", Method: "tools/call", Name: "get_page"}, true, `profile.web.mcp.docs.tools["get_*"]`},
		{web, MCPQuestion{Server: "docs", Method: "tools/call", Name: "delete"}, false, "profile.web.mcp.docs: no tools entry matches"},
		{web, MCPQuestion{Server: "docs", Method: "tools/call"}, false, "profile.web.mcp.docs: no tool named"},
		{web, MCPQuestion{Server: "docs", Method: "resources/read", Name: "docs://public/a/b"}, true, `profile.web.mcp.docs.resources["docs://public/**"]`},
		{web, MCPQuestion{Server: "docs", Method: "resources/read", Name: "docs://private/a"}, false, "profile.web.mcp.docs: no resources entry matches"},
		{web, MCPQuestion{Server: "docs", Method: "prompts/get", Name: "summary"}, true, `profile.web.mcp.docs.prompts["summary"]`},
		{web, MCPQuestion{Server: "docs", Method: "sampling/createMessage"}, false, "mcp: sampling/createMessage is not a method cproxy knows"},
		{narrow, MCPQuestion{Server: "docs", Method: "tools/list"}, false, "profile.narrow.mcp.docs.methods: tools/list is not one of tools/call"},
		{narrow, MCPQuestion{Server: "docs", Method: "ping"}, true, "mcp: ping is a lifecycle method"},
		{nil, MCPQuestion{Server: "docs"}, false, "no profile"},
	} {
		a := c.pr.AskMCP(c.q)
		if a.Allow != c.allow || a.Rule != c.rule {
			t.Errorf("%+v = %v %q, want %v %q", c.q, a.Allow, a.Rule, c.allow, c.rule)
		}
	}
}

func TestMCPPolicyProblems(t *testing.T) {
	_, probs := loadPolicy("policy.toml", []byte(`[profile.web.mcp.Docs]
methods = ["tools/call", "sampling/createMessage"]
tools = ["a", "a"]
colour = 1
`))
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{`"Docs" is not an MCP server's name`, `"sampling/createMessage" is not a method cproxy knows`, `"a" is listed twice`, `unknown key "colour"`} {
		if !strings.Contains(all, want) {
			t.Errorf("problems:\n%s\nlack %s", all, want)
		}
	}
}
