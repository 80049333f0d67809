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
	// Args are rules on the arguments of the tools/call requests they
	// name: every rule whose tool glob matches the called tool must hold.
	// Empty: a tool that tools allows may be called with any arguments.
	Args []MCPArgRule `toml:"args"`
	// Capabilities are the client capabilities the server may use back
	// (MCPCapabilities): the others are taken out of the sandbox's
	// initialize before the server reads it. Empty: none.
	Capabilities []string `toml:"capabilities"`
}

// MCPCapabilities are the client capabilities a server may be given: what
// it can ask the sandbox's client for (a model's completion, the user's
// input, the client's folders).
var MCPCapabilities = []string{"elicitation", "roots", "sampling"}

// MCPServerRequests are the requests a server may send the client, by
// method, with the client capability each needs ("" for none): a client's
// JSON-RPC response to one is asked as an MCPQuestion whose Method is
// MCPResponse and whose Name is the request's method.
var MCPServerRequests = map[string]string{
	"sampling/createMessage": "sampling",
	"elicitation/create":     "elicitation",
	"roots/list":             "roots",
	"ping":                   "",
}

// MCPResponse is the Method of an MCPQuestion that asks whether a client
// may answer the server's request named by its Name.
const MCPResponse = "response"

// MCPArgRule is a rule on one argument of the tools a glob names: the
// argument, a top-level member of the call's arguments, must be sent and
// must be equal to Equals, match Glob, be one of In, or be a number within
// Min and Max (each rule sets one of Equals, Glob and In, or Min, Max or
// both). A call that does not send the argument is refused: a rule fails
// closed.
type MCPArgRule struct {
	// Tool is a glob on the tool names the rule applies to. Required.
	Tool string `toml:"tool"`
	// Arg is the argument's name in the call's arguments object. Required.
	Arg string `toml:"arg"`
	// Equals is the one string the argument may be.
	Equals *string `toml:"equals"`
	// Glob is a glob the argument, a string, must match (policy.md's
	// globs: "*" within a "/"-separated segment, "**" across them).
	Glob *string `toml:"glob"`
	// In are the strings the argument may be.
	In []string `toml:"in"`
	// Min and Max bound the argument, a number (inclusive).
	Min *float64 `toml:"min"`
	Max *float64 `toml:"max"`
}

// check reports whether v, the argument as JSON decodes it (a string, a
// float64, a bool, nil, a map or a slice; absent when sent is false), is
// one the rule allows, and if not, why.
func (r MCPArgRule) check(v any, sent bool) (bool, string) {
	if !sent {
		return false, fmt.Sprintf("argument %s is required by the policy and the call does not send it", r.Arg)
	}
	switch {
	case r.Equals != nil, r.Glob != nil, r.In != nil:
		s, ok := v.(string)
		switch {
		case !ok:
			return false, fmt.Sprintf("argument %s must be a string", r.Arg)
		case r.Equals != nil && s != *r.Equals:
			return false, fmt.Sprintf("argument %s must be %q", r.Arg, *r.Equals)
		case r.Glob != nil && !matchGlob(*r.Glob, s):
			return false, fmt.Sprintf("argument %s must match %q", r.Arg, *r.Glob)
		case r.In != nil && !slices.Contains(r.In, s):
			return false, fmt.Sprintf("argument %s must be one of %s", r.Arg, quotedList(r.In))
		}
		return true, ""
	}
	n, ok := v.(float64)
	switch {
	case !ok:
		return false, fmt.Sprintf("argument %s must be a number", r.Arg)
	case r.Min != nil && n < *r.Min:
		return false, fmt.Sprintf("argument %s must be at least %v", r.Arg, *r.Min)
	case r.Max != nil && n > *r.Max:
		return false, fmt.Sprintf("argument %s must be at most %v", r.Arg, *r.Max)
	}
	return true, ""
}

// quotedList is items quoted, comma-separated.
func quotedList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// MCPLifecycle are the methods every MCP session needs, allowed whenever
// the server is: the handshake of the sessions of 2025-11-25 and before
// (initialize, notifications/initialized, ping) and its stateless
// replacements of 2026-07-28 (server/discover, and subscriptions/listen,
// the stream of the server's notifications that the GET of a session was;
// each resource it subscribes to is decided as a resources/subscribe).
var MCPLifecycle = []string{"initialize", "notifications/initialized", "ping", "notifications/cancelled", "server/discover", "subscriptions/listen"}

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
// prompts/get, the Name (tool or prompt name, resource URI) it names. A
// client's response to a request of the server is Method MCPResponse, with
// Name the request's method (MCPServerRequests).
type MCPQuestion struct {
	Server string
	Method string
	Name   string
	// Args are a tools/call's arguments as JSON decodes them (a string, a
	// float64, …), for the server's args rules; nil when it sends none.
	Args map[string]any
	// Listed asks whether a list may show the tool (resource, prompt)
	// Name: whether it may be used at all. A call's arguments are not
	// known then, so the args rules are not asked.
	Listed bool
	// Capabilities are the client capabilities an initialize declares to
	// the server, each of which the server's capabilities must allow.
	Capabilities []string
	// Subscriptions are the resource URIs a subscriptions/listen asks to
	// hear of, each decided as a resources/subscribe of it.
	Subscriptions []string
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
	if q.Method == MCPResponse {
		// A response is decided by the capability the request it answers
		// needs, which the server asks for only if the profile gives it.
		c, known := MCPServerRequests[q.Name]
		var cd Decision
		switch {
		case !known:
			cd = Decision{Rule: fmt.Sprintf("mcp: %q is not a request of the server cproxy knows", q.Name)}
		case c == "":
			cd = Decision{Allow: true, Rule: fmt.Sprintf("mcp: %s needs no client capability", q.Name)}
		case slices.Contains(s.Capabilities, c):
			cd = Decision{Allow: true, Rule: pr.rule("%s.capabilities[%q]", sp, c)}
		default:
			cd = Decision{Rule: pr.rule("%s.capabilities: %s is not given", sp, c)}
		}
		a.Rule = cd.Rule
		a.ask("response to "+q.Name, "mcp.capabilities", cd, "")
		return a
	}
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
	for _, c := range q.Capabilities {
		cd := Decision{Rule: pr.rule("%s.capabilities: %s is not given", sp, c)}
		if slices.Contains(s.Capabilities, c) {
			cd = Decision{Allow: true, Rule: pr.rule("%s.capabilities[%q]", sp, c)}
		}
		a.Rule = cd.Rule
		if !a.ask("client capability "+c, "mcp.capabilities", cd, "") {
			return a
		}
	}
	if q.Method == "subscriptions/listen" {
		for _, uri := range q.Subscriptions {
			sd := Decision{Rule: pr.rule("%s.methods: resources/subscribe is not one of %s", sp, strings.Join(allowed, ", "))}
			if slices.Contains(allowed, "resources/subscribe") {
				sd = Decision{Allow: true, Rule: pr.rule("%s.methods[%q]", sp, "resources/subscribe")}
			}
			a.Rule = sd.Rule
			if !a.ask("method resources/subscribe of "+uri, "mcp.methods", sd, "") {
				return a
			}
			nd := pr.nameDecision(sp, "resources", "resource", s.Resources, uri)
			a.Rule = nd.Rule
			if !a.ask("resource "+uri, "mcp.resources", nd, "") {
				return a
			}
		}
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
	nd := pr.nameDecision(sp, key, what, globs, q.Name)
	a.Rule = nd.Rule
	if !a.ask(what+" "+q.Name, "mcp."+key, nd, "") || q.Method != "tools/call" || q.Listed {
		return a
	}
	for i, r := range s.Args {
		if !matchGlob(r.Tool, q.Name) {
			continue
		}
		v, sent := q.Args[r.Arg]
		ok, why := r.check(v, sent)
		ad := Decision{Allow: ok, Rule: pr.rule("%s.args[%d]", sp, i)}
		a.Rule = ad.Rule
		if !a.ask("argument "+r.Arg+" of "+q.Name, "mcp.args", ad, why) {
			return a
		}
	}
	return a
}

// nameDecision decides name, a tool or prompt name or a resource URI (a
// what), by the globs of the server's key (tools, resources, prompts);
// sp is the server's table.
func (pr *Profile) nameDecision(sp, key, what string, globs []string, name string) Decision {
	if name == "" {
		return Decision{Rule: pr.rule("%s: no %s named", sp, what)}
	}
	for _, g := range globs {
		if matchGlob(g, name) {
			return Decision{Allow: true, Rule: pr.rule("%s.%s[%q]", sp, key, g)}
		}
	}
	return Decision{Rule: pr.rule("%s: no %s entry matches", sp, key)}
}

// MCPCapability reports whether the profile gives the MCP server the
// client capability c (one of MCPCapabilities).
func (pr *Profile) MCPCapability(server, c string) bool {
	if pr == nil || pr.MCP[server] == nil {
		return false
	}
	return slices.Contains(pr.MCP[server].Capabilities, c)
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
		s.validateArgs(d, sp)
		for i, c := range s.Capabilities {
			if !slices.Contains(MCPCapabilities, c) {
				d.atValue(sp.key("capabilities").elem(i, false), "%s.capabilities: %q is not a client capability a server may be given (%s)", sp, c, strings.Join(MCPCapabilities, ", "))
			}
		}
	}
}

// validateArgs checks a server's args rules: a tool glob and an argument
// each, and one test, Equals, Glob, In, or bounds.
func (s *MCPServer) validateArgs(d *decoder, sp path) {
	ap := sp.key("args")
	for i, r := range s.Args {
		ep := ap.elem(i, isArrayOfTables(d, ap, i))
		if !d.has(ep.key("tool")) {
			d.missing(ep.key("tool"), ep, `%s: entry needs tool, a glob on tool names (e.g. tool = "create_issue")`, ap)
		} else if err := checkGlob(r.Tool); err != nil {
			d.atValue(ep.key("tool"), "%s.tool: %q %v", ap, r.Tool, err)
		} else if !strings.ContainsAny(r.Tool, "*?") && !slices.ContainsFunc(s.Tools, func(g string) bool { return matchGlob(g, r.Tool) }) {
			d.atValue(ep.key("tool"), "%s.tool: %q is not in this server's tools, so the rule can never apply", ap, r.Tool)
		}
		if !d.has(ep.key("arg")) || r.Arg == "" {
			d.missing(ep.key("arg"), ep, `%s: entry needs arg, the name of the argument it checks (e.g. arg = "repo")`, ap)
		}
		tests := 0
		for _, set := range []bool{r.Equals != nil, r.Glob != nil, r.In != nil, r.Min != nil || r.Max != nil} {
			if set {
				tests++
			}
		}
		switch {
		case tests != 1:
			d.atValue(ep, `%s: entry needs one test of the argument: equals, glob, in, or min and max (e.g. glob = "acme/*")`, ap)
		case r.Glob != nil:
			if err := checkGlob(*r.Glob); err != nil {
				d.atValue(ep.key("glob"), "%s.glob: %q %v", ap, *r.Glob, err)
			}
		case r.In != nil && len(r.In) == 0:
			d.atValue(ep.key("in"), "%s.in: is empty, so no call could pass: list the values the argument may take", ap)
		case r.Min != nil && r.Max != nil && *r.Min > *r.Max:
			d.atValue(ep.key("min"), "%s.min: %v is more than max, %v, so no call could pass", ap, *r.Min, *r.Max)
		}
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

// MCPHasArgRules reports whether the profile has args rules on the tool of
// the server: whether a call's arguments are needed to decide it.
func (pr *Profile) MCPHasArgRules(server, tool string) bool {
	if pr == nil {
		return false
	}
	s, ok := pr.MCP[server]
	if !ok {
		return false
	}
	for _, r := range s.Args {
		if matchGlob(r.Tool, tool) {
			return true
		}
	}
	return false
}
