package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MCPServer is a profile's use of one remote MCP server ([mcp.NAME] of
// the config), as [profile.X.mcp.NAME]: the JSON-RPC methods it may send
// beyond the lifecycle ones, and the tools, resources and prompts it may
// use. A profile without the server's table may not use the server.
type MCPServer struct {
	// Methods are the JSON-RPC methods allowed beyond MCPLifecycle. Empty:
	// MCPDefaultMethods.
	Methods []string `toml:"methods"`
	// Tools are globs on the tool names tools/call may name. Empty: none.
	Tools []string `toml:"tools"`
	// Resources are globs on the URIs resources/read may name. Empty: none.
	Resources []string `toml:"resources"`
	// Prompts are globs on the prompt names prompts/get may name. Empty:
	// none.
	Prompts []string `toml:"prompts"`
}

// MCPLifecycle are the methods every MCP session needs, allowed whenever
// the server is.
var MCPLifecycle = []string{"initialize", "notifications/initialized", "ping", "notifications/cancelled"}

// MCPDefaultMethods are the methods a server's table allows when it lists
// no methods: listing and using tools, resources and prompts (each use
// still checked against tools, resources and prompts).
var MCPDefaultMethods = []string{"tools/list", "tools/call", "resources/list", "resources/templates/list", "resources/read", "prompts/list", "prompts/get"}

// MCPMethods are the methods cproxy knows: every other one is refused.
var MCPMethods = append(append(slices.Clone(MCPLifecycle), MCPDefaultMethods...),
	"notifications/progress", "notifications/roots/list_changed", "completion/complete", "logging/setLevel",
	"resources/subscribe", "resources/unsubscribe")

var mcpNameGlobRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// MCPQuestion asks whether a sandbox may send one message to the MCP
// server Server: its JSON-RPC Method ("" asks of the server alone, as a GET
// or DELETE of the session does) and, for tools/call, resources/read and
// prompts/get, the Name (tool or prompt name, resource URI) it names.
type MCPQuestion struct {
	Server string
	Method string
	Name   string
}

// AskMCP answers q: the server's table, the method, then the tool,
// resource or prompt.
func (pr *Profile) AskMCP(q MCPQuestion) Answer {
	a := newAnswer()
	if pr == nil {
		a.ask("mcp server "+q.Server, "mcp", Decision{Rule: "no profile"}, "")
		return a
	}
	s, ok := pr.MCP[q.Server]
	d := Decision{Allow: ok, Rule: pr.rule(".mcp.%s", tomlKey(q.Server))}
	if !ok {
		d.Rule = pr.rule(": no [profile.%s.mcp.%s] table", tomlKey(pr.Name), tomlKey(q.Server))
	}
	a.Rule = d.Rule
	if !a.ask("mcp server "+q.Server, "mcp", d, "") || q.Method == "" {
		return a
	}
	sp := fmt.Sprintf(".mcp.%s", tomlKey(q.Server))
	allowed := s.Methods
	if len(allowed) == 0 {
		allowed = MCPDefaultMethods
	}
	var md Decision
	switch {
	case !slices.Contains(MCPMethods, q.Method):
		md = Decision{Rule: fmt.Sprintf("mcp: %s is not a method cproxy knows", q.Method)}
	case slices.Contains(MCPLifecycle, q.Method):
		md = Decision{Allow: true, Rule: fmt.Sprintf("mcp: %s is a lifecycle method", q.Method)}
	case slices.Contains(allowed, q.Method):
		md = Decision{Allow: true, Rule: pr.rule("%s.methods[%q]", sp, q.Method)}
		if len(s.Methods) == 0 {
			md.Rule = pr.rule("%s.methods (default)", sp)
		}
	default:
		md = Decision{Rule: pr.rule("%s.methods: %s is not one of %s", sp, q.Method, strings.Join(allowed, ", "))}
	}
	a.Rule = md.Rule
	if !a.ask("method "+q.Method, "mcp.methods", md, "") {
		return a
	}
	var key, what string
	var globs []string
	switch q.Method {
	case "tools/call":
		key, what, globs = "tools", "tool", s.Tools
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		key, what, globs = "resources", "resource", s.Resources
	case "prompts/get":
		key, what, globs = "prompts", "prompt", s.Prompts
	default:
		return a
	}
	nd := Decision{Rule: pr.rule("%s: no %s named", sp, what)}
	if q.Name != "" {
		nd.Rule = pr.rule("%s: no %s entry matches", sp, key)
		for _, g := range globs {
			if matchGlob(g, q.Name) {
				nd = Decision{Allow: true, Rule: pr.rule("%s.%s[%q]", sp, key, g)}
				break
			}
		}
	}
	a.Rule = nd.Rule
	a.ask(what+" "+q.Name, "mcp."+key, nd, "")
	return a
}

// MCPServers are the names of the MCP servers the profile has a table
// for, sorted.
func (pr *Profile) MCPServers() []string {
	if pr == nil {
		return nil
	}
	return sortedKeys(pr.MCP)
}

func (pr *Profile) validateMCP(d *decoder, pp path) {
	for _, name := range sortedKeys(pr.MCP) {
		sp := pp.key("mcp").key(name)
		if !mcpNameGlobRE.MatchString(name) {
			d.atKey(sp, "%s: %q is not an MCP server's name (lower-case letters, digits, - and _, at most 32)", pp.key("mcp"), name)
		}
		s := pr.MCP[name]
		if s == nil {
			continue
		}
		for i, m := range s.Methods {
			if !slices.Contains(MCPMethods, m) {
				d.atValue(sp.key("methods").elem(i, false), "%s.methods: %q is not a method cproxy knows (it knows %s)", sp, m, strings.Join(MCPMethods, ", "))
			}
		}
		checkGlobs(d, sp.key("tools"), s.Tools, nil)
		checkGlobs(d, sp.key("resources"), s.Resources, nil)
		checkGlobs(d, sp.key("prompts"), s.Prompts, nil)
	}
}

// CheckMCP finds what a policy file loaded on its own cannot know is
// wrong: each [profile.X.mcp.NAME] that names none of servers, the MCP
// servers of the config called config, a mistake that would otherwise
// silently allow nothing. The problems are the policy file's.
func (p *Policy) CheckMCP(servers []string, config string) Problems {
	ix := p.ix
	if ix == nil { // a policy built in code
		ix = newIndex("")
	}
	d := newDecoder(p.Path, ix)
	for _, name := range sortedKeys(p.Profiles) {
		for _, s := range sortedKeys(p.Profiles[name].MCP) {
			if slices.Contains(servers, s) {
				continue
			}
			known := "none"
			if len(servers) > 0 {
				known = strings.Join(servers, ", ")
			}
			d.atKey(keyPath("profile", name, "mcp", s), "profile.%s.mcp.%s names no [mcp.%s] in %s (MCP servers there: %s)", tomlKey(name), tomlKey(s), tomlKey(s), config, known)
		}
	}
	sortProblems(d.probs)
	return d.probs
}
