package mcp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/mcp"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

const canary = "mcp_CANARYmcp0123456789abcdefghij"

const testPolicy = `
[profile.default]
models = ["claude-*"]

[profile.default.mcp.docs]
tools = ["search", "get_*", "create_issue"]
resources = ["docs://public/**"]
prompts = ["summary"]

[[profile.default.mcp.docs.args]]
tool = "create_issue"
arg = "repo"
glob = "acme/*"

[[profile.default.mcp.docs.args]]
tool = "create_issue"
arg = "priority"
min = 1
max = 3

[[profile.default.mcp.docs.args]]
tool = "search"
arg = "query"
glob = "*"

[profile.roots.mcp.docs]
tools = ["search", "ask_model", "list_roots"]
capabilities = ["roots"]

[profile.asks.mcp.docs]
tools = ["ask_model", "list_roots"]
capabilities = ["sampling", "roots"]

[[sandbox]]
match = "asks-*"
profile = "asks"

[[sandbox]]
match = "roots-*"
profile = "roots"

[profile.confirms.mcp.docs]
tools = ["get_confirmed", "search"]
capabilities = ["elicitation"]

[[sandbox]]
match = "confirms-*"
profile = "confirms"

[profile.subs.mcp.docs]
methods = ["resources/read", "resources/subscribe"]
resources = ["docs://public/**"]

[[sandbox]]
match = "subs-*"
profile = "subs"

[profile.other]
models = ["claude-*"]

[[sandbox]]
match = "other-*"
profile = "other"
`

// upstream is a stand-in MCP server that records what it heard and
// answers each request with an empty result; it wants the canary.
type upstream struct {
	mu    sync.Mutex
	heard []string
	n     int
	// searchDescription, when set, is the description search is listed
	// with: a test changes it to change the tool's definition.
	searchDescription string
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.heard = append(u.heard, r.Method+" "+string(b)+" session="+r.Header.Get("Mcp-Session-Id")+" auth="+r.Header.Get("Authorization"))
	u.n++
	u.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+canary {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://x/.well-known/oauth-protected-resource"`)
		w.WriteHeader(401)
		return
	}
	if r.Header.Get("X-Test-Asks") != "" {
		// The session's stream asks the client for a completion, its
		// roots, a ping, and what no client capability names.
		w.Header().Set("Content-Type", "text/event-stream")
		for _, m := range []string{`"id":"s1","method":"sampling/createMessage","params":{}`, `"id":7,"method":"roots/list"`,
			`"id":"p1","method":"ping"`, `"id":"x1","method":"tasks/get","params":{}`, `"method":"notifications/message","params":{}`} {
			io.WriteString(w, "data: {\"jsonrpc\":\"2.0\","+m+"}\n\n")
		}
		return
	}
	if strings.Contains(string(b), `"tools/list"`) {
		search := ""
		u.mu.Lock()
		if u.searchDescription != "" {
			search = `"description":"` + u.searchDescription + `",`
		}
		u.mu.Unlock()
		list := `{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"search",` + search + `"inputSchema":{"type":"object"}},{"name":"delete_all","inputSchema":{"type":"object"}},{"name":"get_page","description":"a\\nb"}],"nextCursor":"c2"}}`
		if r.Header.Get("X-Test-Sse") != "" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, "id: 2\ndata: "+list+"\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, list)
		return
	}
	if strings.Contains(string(b), `"initialize"`) {
		w.Header().Set("Mcp-Session-Id", "session-"+string(rune('a'+u.n)))
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
}

func (u *upstream) count() int { u.mu.Lock(); defer u.mu.Unlock(); return len(u.heard) }

// newEnv serves the stand-in as server docs, changed by each of opts.
func newEnv(t *testing.T, secret string, opts ...func(*mcp.Server)) (*routetest.Env, *upstream) {
	up := &upstream{}
	ts := httptest.NewServer(up)
	t.Cleanup(ts.Close)
	u, _ := url.Parse(ts.URL + "/mcp")
	t.Setenv("MCP_DOCS_TOKEN", secret)
	live, err := (&secrets.Loader{}).Live("mcp.docs", secrets.Source("env:MCP_DOCS_TOKEN"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := routetest.New(t, routetest.WithPolicy(t, testPolicy), func(o *routetest.Options) {
		o.MCP = []mcp.Server{{Name: "docs", URL: u, Header: "Authorization", Live: live, Value: func(s string) string { return "Bearer " + s }}}
		for _, f := range opts {
			f(&o.MCP[0])
		}
		o.Canaries = append(o.Canaries, canary)
	})
	return e, up
}

func TestAllowedCallsAreForwardedWithTheServersCredential(t *testing.T) {
	e, up := newEnv(t, canary)
	tok := e.Token("conv-1")
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_page","arguments":{"q":"x"}}}`,
		`{"jsonrpc":"2.0","id":"r","method":"resources/read","params":{"uri":"docs://public/a/b"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"summary"}}`,
	} {
		r := e.Do("POST", "/mcp/docs", routetest.With(routetest.Bearer(tok), "Content-Type", "application/json"), body)
		if r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
			t.Fatalf("%s = %d %s", body, r.Status, r.Body)
		}
	}
	if up.count() != 6 {
		t.Fatalf("the server heard %d requests", up.count())
	}
	for _, h := range up.heard {
		if strings.Contains(h, "cpx_") || !strings.HasSuffix(h, "auth=Bearer "+canary) {
			t.Errorf("the server heard %q", h)
		}
	}
}

func TestRefusedBeforeTheServerHearsOfIt(t *testing.T) {
	e, up := newEnv(t, canary)
	tok := e.Token("conv-1")
	h := routetest.With(routetest.Bearer(tok), "Content-Type", "application/json")
	for _, c := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_all"}}`, `"id":7,"error"`},
		{`{"jsonrpc":"2.0","id":8,"method":"resources/read","params":{"uri":"docs://private/x"}}`, `"id":8,"error"`},
		{`{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{"name":"other"}}`, `"id":9,"error"`},
		{`{"jsonrpc":"2.0","id":10,"method":"sampling/createMessage"}`, `"id":10,"error"`},
		{`[{"jsonrpc":"2.0","id":11,"method":"tools/list"}]`, `batches`},
		{`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"search","name":"delete_all"}}`, `twice`},
		{`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"search"},"Method":"x"}`, `cproxy:`},
		{`{"jsonrpc":"2.0","id":14,"method":"tools/call","method":"tools/list"}`, `twice`},
		{`not json`, `cproxy:`},
	} {
		r := e.Do("POST", "/mcp/docs", h, c.body)
		if !strings.Contains(r.Body, c.want) || !strings.Contains(r.Body, "cproxy:") {
			t.Errorf("%s = %d %s, want %s", c.body, r.Status, r.Body, c.want)
		}
	}
	// Another profile has no table for the server.
	r := e.Do("POST", "/mcp/docs", routetest.With(routetest.Bearer(e.Token("other-1")), "Content-Type", "application/json"), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	if r.Status != 200 || !strings.Contains(r.Body, "not allowed for sandbox other-1") {
		t.Errorf("other profile = %d %s", r.Status, r.Body)
	}
	for _, p := range []string{"/mcp/docs/.well-known/oauth-protected-resource", "/mcp/.well-known/oauth-authorization-server", "/mcp/nope"} {
		if r := e.Do("GET", p, routetest.Bearer(tok), ""); r.Status != 404 {
			t.Errorf("GET %s = %d %s", p, r.Status, r.Body)
		}
	}
	if r := e.Do("PUT", "/mcp/docs", routetest.Bearer(tok), ""); r.Status != 405 {
		t.Errorf("PUT = %d %s", r.Status, r.Body)
	}
	if up.count() != 0 {
		t.Errorf("the server heard %v", up.heard)
	}
}

// A server that refuses cproxy's credential: the agent is told the
// operator must fix mcp.NAME.credential, in a JSON-RPC error with its id,
// and never sees the server's WWW-Authenticate.
func TestARefusedCredentialIsNamedWithoutResourceMetadata(t *testing.T) {
	e, _ := newEnv(t, "mcp_wrong0123456789")
	tok := e.Token("conv-1")
	resp, err := http.DefaultClient.Do(func() *http.Request {
		req, _ := http.NewRequest("POST", e.Proxy.URL+"/mcp/docs", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		return req
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("WWW-Authenticate") != "" || !strings.Contains(string(b), `"id":1,`) ||
		!strings.Contains(string(b), "the MCP server docs refused cproxy's credential; the operator must fix mcp.docs.credential") {
		t.Errorf("= %d %v %s", resp.StatusCode, resp.Header, b)
	}
}

// sessionHeaders are the headers of a POST of sandbox in session (none
// when "").
func sessionHeaders(e *routetest.Env) func(sandbox, session string) map[string]string {
	return func(sandbox, session string) map[string]string {
		m := routetest.With(routetest.Bearer(e.Token(sandbox)), "Content-Type", "application/json")
		if session != "" {
			m["Mcp-Session-Id"] = session
		}
		return m
	}
}

// initialize opens a session of the stand-in for sandbox and returns its id.
func initialize(t *testing.T, e *routetest.Env, sandbox string) string {
	t.Helper()
	r := e.Do("POST", "/mcp/docs", sessionHeaders(e)(sandbox, ""), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	sid := r.Header.Get("Mcp-Session-Id")
	if r.Status != 200 || sid == "" {
		t.Fatalf("initialize = %d %v %s", r.Status, r.Header, r.Body)
	}
	return sid
}

func TestASessionBelongsToTheSandboxThatOpenedIt(t *testing.T) {
	e, up := newEnv(t, canary)
	h := sessionHeaders(e)
	sid := initialize(t, e, "conv-1")
	if r := e.Do("POST", "/mcp/docs", h("conv-1", sid), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
		t.Fatalf("own session = %d %s", r.Status, r.Body)
	}
	heard := up.count()
	if r := e.Do("POST", "/mcp/docs", h("conv-2", sid), `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); !strings.Contains(r.Body, `"id":3,"error"`) || !strings.Contains(r.Body, "belongs to another sandbox") {
		t.Errorf("another sandbox's session = %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/mcp/docs", h("conv-2", sid), ""); r.Status == 200 {
		t.Errorf("another sandbox's GET stream = %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/mcp/docs", h("conv-1", "made-up"), `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`); r.Status != 404 {
		t.Errorf("unknown session = %d %s", r.Status, r.Body)
	}
	if up.count() != heard {
		t.Fatalf("the server heard %v", up.heard[heard:])
	}
	e.Revoke("conv-1")
	up.mu.Lock()
	last := up.heard[len(up.heard)-1]
	up.mu.Unlock()
	if !strings.HasPrefix(last, "DELETE  session="+sid+" auth=Bearer "+canary) {
		t.Errorf("after revocation the server last heard %q", last)
	}
	// The session is forgotten: the new token of the sandbox cannot use it.
	if r := e.Do("POST", "/mcp/docs", h("conv-1", sid), `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`); r.Status != 404 {
		t.Errorf("a revoked sandbox's session = %d %s", r.Status, r.Body)
	}
}

func TestListsShowOnlyWhatTheProfileAllows(t *testing.T) {
	e, _ := newEnv(t, canary)
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Content-Type", "application/json")
	r := e.Do("POST", "/mcp/docs", h, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if r.Status != 200 || strings.Contains(r.Body, "delete_all") || !strings.Contains(r.Body, `{"name":"search","inputSchema":{"type":"object"}}`) ||
		!strings.Contains(r.Body, `{"name":"get_page","description":"a\\nb"}`) || !strings.Contains(r.Body, `"nextCursor":"c2"`) ||
		!strings.Contains(r.Body, `"cacheScope":"private"`) {
		t.Errorf("JSON list = %d %s", r.Status, r.Body)
	}
	r = e.Do("POST", "/mcp/docs", routetest.With(h, "X-Test-Sse", "1"), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if r.Status != 200 || strings.Contains(r.Body, "delete_all") || !strings.Contains(r.Body, `"name":"search"`) ||
		!strings.HasPrefix(r.Body, "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\nid: 2\ndata: {") {
		t.Errorf("SSE list = %d %q", r.Status, r.Body)
	}
}

// A tool's argument rules are asked of every call of it: an argument
// outside its rule, or one the call does not send, is refused with what the
// rule allows, and the server never hears of it; a call within them is
// forwarded as sent. An argument or a params member spelt in another letter
// case, which a case-folding decoder would read as the decided one, is
// refused too.
func TestArgumentRules(t *testing.T) {
	e, up := newEnv(t, canary)
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Content-Type", "application/json")
	call := func(args string) string {
		return `{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"create_issue","arguments":` + args + `}}`
	}
	for _, body := range []string{
		call(`{"repo":"acme/app","priority":2,"title":"x"}`),
		`{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"search","arguments":{"query":"wiki","n":1}}}`,
	} {
		if r := e.Do("POST", "/mcp/docs", h, body); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
			t.Fatalf("%s = %d %s", body, r.Status, r.Body)
		}
	}
	if up.count() != 2 {
		t.Fatalf("the server heard %d calls, want 2", up.count())
	}
	for _, c := range []struct{ body, want string }{
		{call(`{"repo":"other/app","priority":2}`), `argument repo must match \"acme/*\"`},
		{call(`{"repo":"acme/app/x","priority":2}`), `argument repo must match`},
		{call(`{"repo":"acme/app","priority":9}`), `argument priority must be at most 3`},
		{call(`{"repo":"acme/app","priority":"2"}`), `argument priority must be a number`},
		{call(`{"repo":"acme/app"}`), `argument priority is required by the policy and the call does not send it`},
		{call(`{}`), `argument repo is required`},
		{call(`null`), `argument repo is required`},
		{call(`[1]`), `arguments must be an object`},
		{call(`{"repo":"acme/app","Repo":"other/app","priority":2}`), `different letter cases`},
		{call(`{"repo":"acme/app","priority":2,"priority":1}`), `twice`},
		{`{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"search","arguments":{"query":"../private"}}}`, `argument query must match \"*\"`},
		{`{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"search","Name":"delete_all","arguments":{"query":"wiki"}}}`, `params has a member \"Name\"`},
		{`{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"search","ARGUMENTS":{},"arguments":{"query":"wiki"}}}`, `params has a member \"ARGUMENTS\"`},
	} {
		r := e.Do("POST", "/mcp/docs", h, c.body)
		if !strings.Contains(r.Body, c.want) || !strings.Contains(r.Body, "cproxy:") {
			t.Errorf("%s = %d %s, want %s", c.body, r.Status, r.Body, c.want)
		}
	}
	if up.count() != 2 {
		t.Errorf("the server heard refused calls: %v", up.heard[2:])
	}
}

// The client capabilities a server could use back (sampling, elicitation,
// roots) reach it only where the profile gives them; the rest of the
// initialize goes as sent. A capability spelt in another case, which a
// case-folding decoder would take for one, is refused.
func TestClientCapabilitiesStripped(t *testing.T) {
	e, up := newEnv(t, canary)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"roots":{"listChanged":true},"elicitation":{},"experimental":{"x":1}},"clientInfo":{"name":"c","version":"1"}}}`
	for _, c := range []struct{ sandbox, want string }{
		{"conv-1", `POST {"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"experimental":{"x":1}},"clientInfo":{"name":"c","version":"1"},"protocolVersion":"2025-11-25"}}`},
		{"roots-1", `POST {"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"experimental":{"x":1},"roots":{"listChanged":true}},"clientInfo":{"name":"c","version":"1"},"protocolVersion":"2025-11-25"}}`},
	} {
		n := up.count()
		r := e.Do("POST", "/mcp/docs", routetest.With(routetest.Bearer(e.Token(c.sandbox)), "Content-Type", "application/json"), init)
		if r.Status != 200 || strings.Contains(r.Body, "cproxy:") || up.count() != n+1 {
			t.Fatalf("%s: %d %s", c.sandbox, r.Status, r.Body)
		}
		if got := up.heard[n]; !strings.HasPrefix(got, c.want+" session=") {
			t.Errorf("%s: the server heard\n%s\nwant\n%s", c.sandbox, got, c.want)
		}
	}
	// Nothing to take out: the bytes as sent.
	plain := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"experimental":{}}}}`
	n := up.count()
	e.Do("POST", "/mcp/docs", routetest.With(routetest.Bearer(e.Token("conv-2")), "Content-Type", "application/json"), plain)
	if got := up.heard[n]; !strings.HasPrefix(got, "POST "+plain+" session=") {
		t.Errorf("the server heard %s", got)
	}
	n = up.count()
	r := e.Do("POST", "/mcp/docs", routetest.With(routetest.Bearer(e.Token("conv-3")), "Content-Type", "application/json"),
		`{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"capabilities":{"Sampling":{}}}}`)
	if !strings.Contains(r.Body, `capabilities have a member \"Sampling\"`) || up.count() != n {
		t.Errorf("Sampling: %d %s", r.Status, r.Body)
	}
}

// A request of the stateless 2026-07-28 revision declares its client's
// capabilities in its _meta: they are taken out as initialize's are,
// whatever the method, and the rest goes as sent. A _meta or capabilities
// cproxy cannot read as the server could, and a continuation of a
// multi-round-trip request whose answers the profile does not give the
// server or cproxy cannot tell the kind of, are refused before the server
// hears of them.
func TestStatelessClientCapabilitiesStripped(t *testing.T) {
	e, up := newEnv(t, canary)
	h := func(sandbox string) map[string]string {
		return routetest.With(routetest.Bearer(e.Token(sandbox)), "Content-Type", "application/json")
	}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"roots":{},"elicitation":{"form":{}},"experimental":{"x":1}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}`
	for _, c := range []struct{ sandbox, body, want string }{
		{"conv-1", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + meta + `}}`,
			`POST {"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"experimental":{"x":1}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`},
		{"roots-1", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"query":"a"},` + meta + `}}`,
			`POST {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"experimental":{"x":1},"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"arguments":{"query":"a"},"name":"search"}}`},
		// Nothing to take out: the bytes as sent.
		{"conv-2", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"experimental":{}}}}}`,
			`POST {"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"experimental":{}}}}}`},
		// A continuation: the server's state goes as sent (the server
		// checks it), and the client's answers when the profile gives the
		// server what they answer with.
		{"conv-2", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search","arguments":{"query":"a"},"requestState":"opaque"}}`,
			`POST {"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search","arguments":{"query":"a"},"requestState":"opaque"}}`},
		{"roots-2", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"search","arguments":{"query":"a"},"inputResponses":{"r1":{"roots":[]}},"requestState":"s"}}`,
			`POST {"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"search","arguments":{"query":"a"},"inputResponses":{"r1":{"roots":[]}},"requestState":"s"}}`},
	} {
		n := up.count()
		r := e.Do("POST", "/mcp/docs", h(c.sandbox), c.body)
		if r.Status != 200 || strings.Contains(r.Body, "cproxy:") || up.count() != n+1 {
			t.Fatalf("%s: %d %s", c.sandbox, r.Status, r.Body)
		}
		if got := up.heard[n]; !strings.HasPrefix(got, c.want+" session=") {
			t.Errorf("%s: the server heard\n%s\nwant\n%s", c.sandbox, got, c.want)
		}
	}
	n := up.count()
	for _, c := range []struct{ params, want string }{
		{`{"_meta":"x"}`, `tools/list's params, their _meta and the client capabilities must be objects`},
		{`{"_meta":{"a":1,"a":2}}`, `the body names a member twice`},
		{`{"_meta":{"io.modelcontextprotocol/clientCapabilities":[]}}`, `must be objects`},
		{`{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"Sampling":{}}}}`, `the client capabilities in tools/list's _meta have a member \"Sampling\"`},
		{`{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{},"ROOTS":{}}}}`, `have a member \"ROOTS\"`},
		{`{"_meta":{"io.modelcontextprotocol/ClientCapabilities":{"sampling":{}}}}`, `_meta has a member \"io.modelcontextprotocol/ClientCapabilities\"`},
		{`{"_Meta":{}}`, `params have a member \"_Meta\"`},
		{`{"name":"search","arguments":{"query":"a"},"inputResponses":{"r1":{"roots":[]}}}`, `tools/call's inputResponses[\"r1\"] answers with the client's roots, which the sandbox's profile does not give the server`},
		{`{"name":"search","arguments":{"query":"a"},"inputResponses":{"r1":{"action":"accept"}}}`, `answers with the client's elicitation`},
		{`{"name":"search","arguments":{"query":"a"},"inputResponses":{"r1":{"roots":[],"action":"accept"}}}`, `tools/call's inputResponses must be an object of the client's answers`},
		{`{"name":"search","arguments":{"query":"a"},"inputResponses":{"r1":{"Action":"accept"}}}`, `inputResponses must be an object`},
		{`{"name":"search","arguments":{"query":"a"},"inputResponses":{"r1":{"content":[]}}}`, `inputResponses must be an object`},
		{`{"name":"search","arguments":{"query":"a"},"inputResponses":[]}`, `inputResponses must be an object`},
		{`{"name":"search","arguments":{"query":"a"},"RequestState":"opaque"}`, `params have a member \"RequestState\"`},
	} {
		method := "tools/list"
		if strings.Contains(c.params, `"name"`) {
			method = "tools/call"
		}
		r := e.Do("POST", "/mcp/docs", h("conv-1"), `{"jsonrpc":"2.0","id":7,"method":"`+method+`","params":`+c.params+`}`)
		if !strings.Contains(r.Body, c.want) || !strings.Contains(r.Body, `"error"`) {
			t.Errorf("%s: %d %s, want %s", c.params, r.Status, r.Body, c.want)
		}
	}
	if up.count() != n {
		t.Errorf("the server heard %v", up.heard[n:])
	}
}

// subscriptions/listen, the 2026-07-28 revision's stream of the server's
// notifications, is allowed whenever the server is, as the GET stream of a
// session is; each resource it subscribes to is decided as a
// resources/subscribe of it, and params cproxy cannot read are refused.
func TestSubscriptionsListen(t *testing.T) {
	e, up := newEnv(t, canary)
	listen := func(subs string) string {
		return `{"jsonrpc":"2.0","id":8,"method":"subscriptions/listen","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"notifications":{"toolsListChanged":true` + subs + `}}}`
	}
	for _, c := range []struct{ sandbox, subs string }{
		{"conv-1", ``},
		{"conv-1", `,"resourceSubscriptions":[]`},
		{"subs-1", `,"resourceSubscriptions":["docs://public/readme"]`},
	} {
		n := up.count()
		r := e.Do("POST", "/mcp/docs", routetest.With(routetest.Bearer(e.Token(c.sandbox)), "Content-Type", "application/json"), listen(c.subs))
		if r.Status != 200 || strings.Contains(r.Body, "cproxy:") || up.count() != n+1 {
			t.Errorf("%s %s: %d %s", c.sandbox, c.subs, r.Status, r.Body)
		}
	}
	n := up.count()
	for _, c := range []struct{ sandbox, body, want string }{
		{"conv-1", listen(`,"resourceSubscriptions":["docs://public/readme"]`), `subscriptions/listen subscribes to resources, and resources/subscribe is not allowed for sandbox conv-1`},
		{"subs-1", listen(`,"resourceSubscriptions":["docs://public/readme","docs://private/secret"]`), `subscriptions/listen subscribes to resource \"docs://private/secret\", which is not allowed for sandbox subs-1 (profile.subs.mcp.docs: no resources entry matches)`},
		{"subs-1", listen(`,"resourceSubscriptions":"docs://private/secret"`), `subscriptions/listen's params need notifications`},
		{"subs-1", listen(`,"ResourceSubscriptions":["docs://private/secret"]`), `subscriptions/listen's params need notifications`},
		{"subs-1", `{"jsonrpc":"2.0","id":8,"method":"subscriptions/listen","params":{}}`, `subscriptions/listen's params need notifications`},
		{"subs-1", `{"jsonrpc":"2.0","id":8,"method":"subscriptions/listen","params":{"notifications":{},"Notifications":{"resourceSubscriptions":["docs://private/secret"]}}}`, `which a server could read as \"notifications\"`},
	} {
		r := e.Do("POST", "/mcp/docs", routetest.With(routetest.Bearer(e.Token(c.sandbox)), "Content-Type", "application/json"), c.body)
		if !strings.Contains(r.Body, `"id":8,"error"`) || !strings.Contains(r.Body, c.want) {
			t.Errorf("%s: %d %s, want %s", c.body, r.Status, r.Body, c.want)
		}
	}
	if up.count() != n {
		t.Errorf("the server heard %v", up.heard[n:])
	}
}

// A stateless request carries no Mcp-Session-Id, and the session check
// lets it through; one that carries an id is checked as every other.
func TestStatelessRequestsAndSessions(t *testing.T) {
	e, up := newEnv(t, canary)
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Content-Type", "application/json")
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	if r := e.Do("POST", "/mcp/docs", h, list); r.Status != 200 || strings.Contains(r.Body, "cproxy:") || up.count() != 1 {
		t.Fatalf("without a session: %d %s", r.Status, r.Body)
	}
	r := e.Do("POST", "/mcp/docs", routetest.With(h, "Mcp-Session-Id", "session-z"), list)
	if r.Status != 404 || !strings.Contains(r.Body, `no session \"session-z\"`) || up.count() != 1 {
		t.Errorf("with a session cproxy does not know: %d %s", r.Status, r.Body)
	}
}

// The headers of the 2026-07-28 transport that name what a message does
// (Mcp-Method, Mcp-Name, Mcp-Param-*) must say what its body says: a
// request where they do not is refused before the server hears of it, and
// one where they do goes as sent.
func TestTransportHeadersAgreeWithTheBody(t *testing.T) {
	e, up := newEnv(t, canary)
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Content-Type", "application/json")
	call := `{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"create_issue","arguments":{"repo":"acme/app","priority":2}}}`
	ok := routetest.With(h, "Mcp-Method", "tools/call", "Mcp-Name", "create_issue", "Mcp-Param-Repo", "acme/app", "Mcp-Param-Priority", "2")
	if r := e.Do("POST", "/mcp/docs", ok, call); r.Status != 200 || strings.Contains(r.Body, "cproxy:") || up.count() != 1 {
		t.Fatalf("headers that agree: %d %s", r.Status, r.Body)
	}
	for _, c := range []struct {
		header []string
		want   string
	}{
		{[]string{"Mcp-Method", "tools/list"}, `the Mcp-Method header says \"tools/list\" and the body \"tools/call\"`},
		{[]string{"Mcp-Name", "search"}, `the Mcp-Name header says \"search\" and the body \"create_issue\"`},
		{[]string{"Mcp-Param-Repo", "other/app"}, `the Mcp-Param-Repo header says \"other/app\"`},
		{[]string{"Mcp-Param-Title", "x"}, `the Mcp-Param-Title header says \"x\" and the body \"\"`},
		{[]string{"Mcp-Param-Priority", "\"2\""}, `the Mcp-Param-Priority header`},
	} {
		r := e.Do("POST", "/mcp/docs", routetest.With(h, c.header...), call)
		if !strings.Contains(r.Body, c.want) || !strings.Contains(r.Body, `"id":31`) {
			t.Errorf("%v: %d %s, want %s", c.header, r.Status, r.Body, c.want)
		}
	}
	if up.count() != 1 {
		t.Errorf("the server heard %v", up.heard[1:])
	}
}

// Each server has per-token limits of its own, [mcp.NAME]'s concurrent
// and requests_per_minute: a token over one server's rate is refused 429
// with Retry-After, naming that server's key, before the server hears of it, and another
// server's requests are counted apart.
func TestEachServerHasItsOwnLimits(t *testing.T) {
	e, up := twoServers(t, testPolicy+"\n[profile.default.mcp.wiki]\ntools = [\"search\"]\n", routes.Limits{RequestsPerMinute: 2})
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Content-Type", "application/json")
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	for i := range 2 {
		if r := e.Do("POST", "/mcp/docs", h, ping); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
			t.Fatalf("ping %d = %d %s", i, r.Status, r.Body)
		}
	}
	r := e.Do("POST", "/mcp/docs", h, ping)
	// Refused on admission, before the body (and its id) is read: 429.
	if r.Status != 429 || !strings.Contains(r.Body, "mcp.docs.requests_per_minute = 2") || r.Header.Get("Retry-After") == "" {
		t.Errorf("a third ping = %d %s", r.Status, r.Body)
	}
	for i := range 3 {
		if r := e.Do("POST", "/mcp/wiki", h, ping); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
			t.Errorf("wiki ping %d = %d %s", i, r.Status, r.Body)
		}
	}
	if up.count() != 5 {
		t.Errorf("the servers heard %d requests, want 5", up.count())
	}
}

// budgetEnv serves the stand-in as servers docs and wiki under pol.
func budgetEnv(t *testing.T, pol string) (*routetest.Env, *upstream) {
	return twoServers(t, pol+`
[profile.default.mcp.docs]
tools = ["search"]

[profile.default.mcp.wiki]
tools = ["search"]
`, routes.Limits{})
}

// twoServers serves the stand-in as servers docs (with docsLimits) and
// wiki under the policy pol.
func twoServers(t *testing.T, pol string, docsLimits routes.Limits) (*routetest.Env, *upstream) {
	up := &upstream{}
	ts := httptest.NewServer(up)
	t.Cleanup(ts.Close)
	u, _ := url.Parse(ts.URL + "/mcp")
	t.Setenv("MCP_DOCS_TOKEN", canary)
	live, err := (&secrets.Loader{}).Live("mcp.docs", secrets.Source("env:MCP_DOCS_TOKEN"), nil)
	if err != nil {
		t.Fatal(err)
	}
	bearer := func(s string) string { return "Bearer " + s }
	e := routetest.New(t, routetest.WithPolicy(t, pol), func(o *routetest.Options) {
		o.MCP = []mcp.Server{
			{Name: "docs", URL: u, Header: "Authorization", Live: live, Value: bearer, Limits: docsLimits},
			{Name: "wiki", URL: u, Header: "Authorization", Live: live, Value: bearer},
		}
		o.Canaries = append(o.Canaries, canary)
	})
	return e, up
}

// toolCall is a tools/call of tool with id.
func toolCall(id int, tool string) string {
	return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"` + tool + `"}}`
}

// A token's budget caps its tool calls (mcp_calls), every server together:
// the calls within it are forwarded and counted, the next is refused with
// a JSON-RPC error carrying its id, before the server hears of it. A
// call the policy refuses, and a method other than tools/call, cost
// nothing, and the model's limits of the budget do not hold calls back.
func TestToolCallsCountAgainstTheBudget(t *testing.T) {
	e, up := budgetEnv(t, "[profile.default.budget]\nmcp_calls = 2\nrequests = 1\n")
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Content-Type", "application/json")
	if r := e.Do("POST", "/mcp/docs", h, toolCall(1, "search")); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
		t.Fatalf("first call = %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/mcp/docs", h, toolCall(2, "delete_all")); !strings.Contains(r.Body, "is not allowed") {
		t.Fatalf("a refused call = %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/mcp/docs", h, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
		t.Fatalf("a list = %d %s", r.Status, r.Body)
	}
	if got := e.Usage("conv-1"); got != (tokens.Usage{MCPCalls: 1}) {
		t.Errorf("after one call, a refused one and a list: usage %+v", got)
	}
	if r := e.Do("POST", "/mcp/wiki", h, toolCall(4, "search")); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
		t.Fatalf("a call to another server = %d %s", r.Status, r.Body)
	}
	heard := up.count()
	r := e.Do("POST", "/mcp/docs", h, toolCall(5, "search"))
	want := `{"jsonrpc":"2.0","id":5,"error":{"code":-32001,"message":"cproxy: sandbox conv-1's token is over its budget: mcp_calls: 2 of 2 used or held by requests in flight, and this request may use 1 (MCP tool calls, every server together); they are spent for the token's lifetime: the sandbox needs a new token, or the operator a higher budget mcp_calls","data":{"code":"cproxy-budget-limit"}}}`
	if r.Status != 200 || strings.TrimSpace(r.Body) != want {
		t.Errorf("a third call = %d %s\nwant 200 %s", r.Status, r.Body, want)
	}
	if up.count() != heard {
		t.Errorf("the server heard the refused call")
	}
	if got := e.Usage("conv-1"); got != (tokens.Usage{MCPCalls: 2}) {
		t.Errorf("usage %+v, want 2 calls", got)
	}
	if m := e.Metrics(); !strings.Contains(m, `cproxy_budget_remaining{kind="mcp_calls",sandbox="conv-1"} 0`) {
		t.Errorf("no budget gauge of mcp_calls at 0 in:\n%s", m)
	}
}

// budget.mcp_calls_per_minute is a rate of tool calls, every server
// together: the call past it is refused with Retry-After and a message
// naming the key, before the server hears of it; other methods pass.
func TestToolCallsHaveARate(t *testing.T) {
	e, up := budgetEnv(t, "[profile.default.budget]\nmcp_calls_per_minute = 2\n")
	h := routetest.With(routetest.Bearer(e.Token("conv-1")), "Content-Type", "application/json")
	for i, server := range []string{"docs", "wiki"} {
		if r := e.Do("POST", "/mcp/"+server, h, toolCall(i+1, "search")); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
			t.Fatalf("call %d = %d %s", i+1, r.Status, r.Body)
		}
	}
	heard := up.count()
	r := e.Do("POST", "/mcp/docs", h, toolCall(3, "search"))
	if r.Status != 200 || !strings.Contains(r.Body, `"id":3`) ||
		!strings.Contains(r.Body, "cproxy: sandbox conv-1's token is over its rate of MCP tool calls (budget mcp_calls_per_minute = 2); retry after 30s") ||
		r.Header.Get("Retry-After") != "30" {
		t.Errorf("a third call in the minute = %d %v %s", r.Status, r.Header, r.Body)
	}
	if up.count() != heard {
		t.Errorf("the server heard the refused call")
	}
	if r := e.Do("POST", "/mcp/docs", h, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
		t.Errorf("a ping = %d %s", r.Status, r.Body)
	}
}

// A client's JSON-RPC response goes to the server only when it answers a
// request the server sent that sandbox's session, whose capability the
// profile gives, once; a request whose capability it does not give never
// reaches the client, and cproxy answers it with an error.
func TestAClientAnswersOnlyWhatTheServerAskedOfIt(t *testing.T) {
	e, up := newEnv(t, canary)
	h := sessionHeaders(e)
	sid := initialize(t, e, "roots-1")
	r := e.Do("GET", "/mcp/docs", routetest.With(h("roots-1", sid), "X-Test-Asks", "1"), "")
	for _, want := range []string{`"id":7,"method":"roots/list"`, `"id":"p1","method":"ping"`, `"method":"notifications/message"`} {
		if !strings.Contains(r.Body, want) {
			t.Errorf("the stream has no %s: %s", want, r.Body)
		}
	}
	if strings.Contains(r.Body, "sampling") || strings.Contains(r.Body, "tasks/get") {
		t.Errorf("the stream passes on what the profile does not give: %s", r.Body)
	}
	up.mu.Lock()
	declined := strings.Join(up.heard, "\n")
	up.mu.Unlock()
	for _, want := range []string{`{"jsonrpc":"2.0","id":"s1","error":{"code":-32601,"message":"cproxy's policy does not give this server the client's sampling`, `{"jsonrpc":"2.0","id":"x1","error":{"code":-32601,`} {
		if !strings.Contains(declined, want) {
			t.Errorf("the server was not answered %s:\n%s", want, declined)
		}
	}

	heard := up.count()
	for _, c := range []struct{ sandbox, session, body, want string }{
		{"roots-1", sid, `{"jsonrpc":"2.0","id":7,"result":{"roots":[]}}`, ""},
		{"roots-1", sid, `{"jsonrpc":"2.0","id":"p1","result":{}}`, ""},
	} {
		if r := e.Do("POST", "/mcp/docs", h(c.sandbox, c.session), c.body); r.Status != 202 && r.Status != 200 || strings.Contains(r.Body, "cproxy:") {
			t.Errorf("%s = %d %s", c.body, r.Status, r.Body)
		}
	}
	if up.count() != heard+2 {
		t.Errorf("the server heard %d of the 2 answers", up.count()-heard)
	}
	heard = up.count()
	for _, c := range []struct{ sandbox, session, body, want string }{
		{"roots-1", sid, `{"jsonrpc":"2.0","id":7.0,"result":{"roots":[]}}`, "did not ask this session anything with the id 7.0"},
		{"roots-1", sid, `{"jsonrpc":"2.0","id":"s1","result":{}}`, `did not ask this session anything with the id \"s1\"`},
		{"roots-1", sid, `{"jsonrpc":"2.0","id":99,"error":{"code":1,"message":"x"}}`, "did not ask this session anything with the id 99"},
		{"roots-1", "", `{"jsonrpc":"2.0","id":7,"result":{}}`, "a JSON-RPC response answers a request of the server, in the session"},
		{"conv-1", sid, `{"jsonrpc":"2.0","id":7,"result":{}}`, "belongs to another sandbox"},
		{"roots-1", sid, `[{"jsonrpc":"2.0","id":7,"result":{}}]`, "batches are not forwarded"},
		{"roots-1", sid, `{"jsonrpc":"2.0","id":7,"method":"roots/list","result":{}}`, "not a JSON-RPC 2.0 response"},
		{"roots-1", sid, `{"jsonrpc":"2.0","id":7,"result":{},"error":{}}`, "not a JSON-RPC 2.0 response"},
		{"roots-1", sid, `{"jsonrpc":"2.0","result":{}}`, "not a JSON-RPC 2.0 response"},
	} {
		r := e.Do("POST", "/mcp/docs", h(c.sandbox, c.session), c.body)
		if r.Status < 400 || !strings.Contains(r.Body, `"id":null,"error"`) || !strings.Contains(r.Body, c.want) {
			t.Errorf("%s from %s = %d %s", c.body, c.sandbox, r.Status, r.Body)
		}
	}
	if up.count() != heard {
		t.Errorf("the server heard %v", up.heard[heard:])
	}
}
