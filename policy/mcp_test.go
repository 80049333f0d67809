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

[profile.subs.mcp.docs]
methods = ["resources/subscribe"]
resources = ["docs://public/**"]
`

func TestAskMCP(t *testing.T) {
	p, probs := loadPolicy("policy.toml", []byte(mcpPolicy))
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	web, narrow, subs := p.Profiles["web"], p.Profiles["narrow"], p.Profiles["subs"]
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
		{narrow, MCPQuestion{Server: "docs", Method: "server/discover"}, true, "mcp: server/discover is a lifecycle method"},
		{narrow, MCPQuestion{Server: "docs", Method: "subscriptions/listen"}, true, "mcp: subscriptions/listen is a lifecycle method"},
		{web, MCPQuestion{Server: "docs", Method: "subscriptions/listen", Subscriptions: []string{"docs://public/a"}}, false, "profile.web.mcp.docs.methods: resources/subscribe is not one of tools/list, tools/call, resources/list, resources/templates/list, resources/read, prompts/list, prompts/get"},
		{subs, MCPQuestion{Server: "docs", Method: "subscriptions/listen", Subscriptions: []string{"docs://public/a"}}, true, `profile.subs.mcp.docs.resources["docs://public/**"]`},
		{subs, MCPQuestion{Server: "docs", Method: "subscriptions/listen", Subscriptions: []string{"docs://public/a", "docs://private/b"}}, false, "profile.subs.mcp.docs: no resources entry matches"},
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

// A tool's args rules are asked of its calls after the tool: each rule
// whose glob names the tool, in order, the first that fails deciding; a
// list asks none of them.
func TestAskMCPArgs(t *testing.T) {
	p, probs := loadPolicy("policy.toml", []byte(`[profile.web.mcp.tracker]
tools = ["create_issue", "search"]
args = [
  { tool = "create_*", arg = "repo", glob = "acme/*" },
  { tool = "create_issue", arg = "priority", min = 1, max = 3.5 },
  { tool = "search", arg = "index", in = ["public"] },
  { tool = "search", arg = "scope", equals = "all" },
]
`))
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	web := p.Profiles["web"]
	for _, c := range []struct {
		name   string
		args   map[string]any
		listed bool
		allow  bool
		rule   string
		reason string
	}{
		{"create_issue", map[string]any{"repo": "acme/app", "priority": 3.5}, false, true, "profile.web.mcp.tracker.args[1]", ""},
		{"create_issue", map[string]any{"repo": "evil/app", "priority": 2.0}, false, false, "profile.web.mcp.tracker.args[0]", `argument repo must match "acme/*"`},
		{"create_issue", map[string]any{"repo": "acme/app", "priority": 0.5}, false, false, "profile.web.mcp.tracker.args[1]", "argument priority must be at least 1"},
		{"create_issue", map[string]any{"repo": "acme/app"}, false, false, "profile.web.mcp.tracker.args[1]", "argument priority is required by the policy and the call does not send it"},
		{"create_issue", nil, true, true, `profile.web.mcp.tracker.tools["create_issue"]`, ""},
		{"search", map[string]any{"index": "public", "scope": "all"}, false, true, "profile.web.mcp.tracker.args[3]", ""},
		{"search", map[string]any{"index": "public", "scope": "some"}, false, false, "profile.web.mcp.tracker.args[3]", `argument scope must be "all"`},
		{"search", map[string]any{"index": true, "scope": "all"}, false, false, "profile.web.mcp.tracker.args[2]", "argument index must be a string"},
	} {
		a := web.AskMCP(MCPQuestion{Server: "tracker", Method: "tools/call", Name: c.name, Args: c.args, Listed: c.listed})
		step, _ := a.Refusal()
		if a.Allow != c.allow || a.Rule != c.rule || step.Reason != c.reason {
			t.Errorf("%s %v = %v %q %q, want %v %q %q", c.name, c.args, a.Allow, a.Rule, step.Reason, c.allow, c.rule, c.reason)
		}
	}
}

// An args rule must name a tool the server's tools allow, an argument, and
// one test of it that some call could pass.
func TestMCPArgsProblems(t *testing.T) {
	_, probs := loadPolicy("policy.toml", []byte(`[profile.web.mcp.tracker]
tools = ["search"]

[[profile.web.mcp.tracker.args]]
tool = "delete"
arg = "x"
equals = "a"

[[profile.web.mcp.tracker.args]]
tool = "search"
glob = "a"
in = ["b"]

[[profile.web.mcp.tracker.args]]
tool = "search"
arg = "n"
min = 5
max = 1

[[profile.web.mcp.tracker.args]]
tool = "search"
arg = "n"
in = []

[[profile.web.mcp.tracker.args]]
arg = "n"
max = "x"
`))
	want := []string{
		`policy.toml:5:8: profile.web.mcp.tracker.args.tool: "delete" is not in this server's tools, so the rule can never apply`,
		`policy.toml:9:1: profile.web.mcp.tracker.args: entry needs arg, the name of the argument it checks (e.g. arg = "repo")`,
		`policy.toml:9:1: profile.web.mcp.tracker.args: entry needs one test of the argument: equals, glob, in, or min and max (e.g. glob = "acme/*")`,
		`policy.toml:17:7: profile.web.mcp.tracker.args.min: 5 is more than max, 1, so no call could pass`,
		`policy.toml:23:6: profile.web.mcp.tracker.args.in: is empty, so no call could pass: list the values the argument may take`,
		`policy.toml:25:1: profile.web.mcp.tracker.args: entry needs tool, a glob on tool names (e.g. tool = "create_issue")`,
		`policy.toml:27:7:`,
	}
	got := probs.Error()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in\n%s", w, got)
		}
	}
}

// capabilities names the client capabilities a server is given; an
// initialize declaring another is refused (the route takes them out first,
// so only a reload between can make it so), and a name that is no client
// capability is a problem of the file.
func TestMCPCapabilities(t *testing.T) {
	p, probs := loadPolicy("policy.toml", []byte("[profile.web.mcp.docs]\ncapabilities = [\"roots\"]\n"))
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	web := p.Profiles["web"]
	if !web.MCPCapability("docs", "roots") || web.MCPCapability("docs", "sampling") || web.MCPCapability("other", "roots") {
		t.Error("MCPCapability")
	}
	a := web.AskMCP(MCPQuestion{Server: "docs", Method: "initialize", Capabilities: []string{"roots", "sampling"}})
	if a.Allow || a.Rule != "profile.web.mcp.docs.capabilities: sampling is not given" {
		t.Errorf("sampling: %v %q", a.Allow, a.Rule)
	}
	// A client's response to a request of the server is decided by the
	// capability the request needs; ping needs none.
	for _, c := range []struct {
		answers string
		allow   bool
		rule    string
	}{
		{"roots/list", true, `profile.web.mcp.docs.capabilities["roots"]`},
		{"sampling/createMessage", false, "profile.web.mcp.docs.capabilities: sampling is not given"},
		{"elicitation/create", false, "profile.web.mcp.docs.capabilities: elicitation is not given"},
		{"ping", true, "mcp: ping needs no client capability"},
		{"tasks/get", false, `mcp: "tasks/get" is not a request of the server cproxy knows`},
	} {
		a := web.AskMCP(MCPQuestion{Server: "docs", Method: MCPResponse, Name: c.answers})
		if a.Allow != c.allow || a.Rule != c.rule {
			t.Errorf("response to %s: %v %q", c.answers, a.Allow, a.Rule)
		}
	}
	if a := web.AskMCP(MCPQuestion{Server: "other", Method: MCPResponse, Name: "ping"}); a.Allow {
		t.Errorf("response to another server's ping: %q", a.Rule)
	}
	_, probs = loadPolicy("policy.toml", []byte("[profile.web.mcp.docs]\ncapabilities = [\"roots\", \"files\"]\n"))
	if got := probs.Error(); !strings.Contains(got, `policy.toml:2:26: profile.web.mcp.docs.capabilities: "files" is not a client capability a server may be given (elicitation, roots, sampling)`) {
		t.Errorf("problems: %s", got)
	}
}
