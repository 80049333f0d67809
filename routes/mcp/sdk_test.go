package mcp_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes/mcp"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// newSDKEnv serves the official SDK's server (fakes.MCPServer) as
// [mcp.docs], holding canary as its credential; opts change the server.
func newSDKEnv(t *testing.T, opts ...func(*fakes.MCPServerOptions)) (*routetest.Env, *fakes.MCPServer) {
	o := fakes.MCPServerOptions{Token: canary}
	for _, f := range opts {
		f(&o)
	}
	up := fakes.NewMCPServer(o)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	t.Setenv("MCP_DOCS_TOKEN", canary)
	live, err := (&secrets.Loader{}).Live("mcp.docs", secrets.Source("env:MCP_DOCS_TOKEN"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := routetest.New(t, routetest.WithPolicy(t, testPolicy), func(o *routetest.Options) {
		o.MCP = []mcp.Server{{Name: "docs", URL: u, Header: "Authorization", Live: live, Value: func(s string) string { return "Bearer " + s }, HeaderTimeout: 10 * time.Second}}
		o.Canaries = append(o.Canaries, canary)
	})
	return e, up
}

// sandboxAuth sends each request with a sandbox token, as a sandbox's
// MCP client configured with cproxy mcp-config does.
type sandboxAuth struct{ token string }

func (a sandboxAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens a session of the SDK's client through cproxy's /mcp/docs
// with tok.
func connect(t *testing.T, e *routetest.Env, tok string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "cproxy-test", Version: "1.0.0"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint:   e.Proxy.URL + "/mcp/docs",
		HTTPClient: &http.Client{Transport: sandboxAuth{tok}},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cs
}

// heard is what the server heard of a tool, prompt or resource: the
// JSON-RPC calls naming it.
func heard(up *fakes.MCPServer, name string) []fakes.MCPCall {
	var out []fakes.MCPCall
	for _, c := range up.Calls() {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

func TestTheSDKsClientAndServerThroughCproxy(t *testing.T) {
	e, up := newSDKEnv(t)
	ctx := t.Context()
	cs := connect(t, e, e.Token("conv-1"))
	defer cs.Close()
	if got := cs.InitializeResult(); got.ServerInfo.Name != "fake-docs" || got.ProtocolVersion != "2025-11-25" {
		t.Errorf("initialized with %s at %s", got.ServerInfo.Name, got.ProtocolVersion)
	}
	// The client asked for the newest revision's server/discover first,
	// which cproxy forwards; the server, which keeps sessions, answered
	// with the revisions before it, and the client fell back to
	// initialize.
	var methods []string
	for _, c := range up.Calls() {
		methods = append(methods, c.Method)
	}
	if len(methods) < 2 || methods[0] != "server/discover" || methods[1] != "initialize" {
		t.Errorf("the server heard %v, want server/discover, then initialize", methods)
	}

	// Lists show only what the profile allows.
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if slices.Sort(names); !slices.Equal(names, []string{"get_page", "search"}) {
		t.Errorf("tools/list = %v", names)
	}
	res, err := cs.ListResources(ctx, nil)
	if err != nil || len(res.Resources) != 1 || res.Resources[0].URI != "docs://public/readme" {
		t.Errorf("resources/list = %+v, %v", res, err)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil || len(prompts.Prompts) != 1 || prompts.Prompts[0].Name != "summary" {
		t.Errorf("prompts/list = %+v, %v", prompts, err)
	}

	// What is allowed gets the server's answer.
	call, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "search", Arguments: map[string]any{"query": "tokens"}})
	if err != nil || call.IsError || call.Content[0].(*sdk.TextContent).Text != fakes.MCPSearchAnswer+"tokens" {
		t.Fatalf("search = %+v, %v", call, err)
	}
	// An argument outside its rule (the policy's args) is refused with
	// what the rule allows, as the SDK's client shows it.
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "search", Arguments: map[string]any{"query": "../private"}}); err == nil ||
		!strings.Contains(err.Error(), `cproxy: MCP server docs: tool search is not allowed for sandbox conv-1 with these arguments: argument query must match "*"`) {
		t.Errorf("search outside its rule = %v", err)
	}
	read, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "docs://public/readme"})
	if err != nil || read.Contents[0].Text != fakes.MCPPublicText {
		t.Errorf("read public = %+v, %v", read, err)
	}
	if _, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "summary"}); err != nil {
		t.Errorf("get summary: %v", err)
	}

	// What is not is refused with cproxy's reason, and the server never
	// hears of it.
	for _, c := range []struct {
		name string
		do   func() error
		want string
	}{
		{"delete_repo", func() error {
			_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "delete_repo", Arguments: map[string]any{"repo": "acme/app"}})
			return err
		}, `cproxy: MCP server docs: tool "delete_repo" is not allowed for sandbox conv-1`},
		{"docs://private/secret", func() error {
			_, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "docs://private/secret"})
			return err
		}, `cproxy: MCP server docs: resource "docs://private/secret" is not allowed for sandbox conv-1`},
		{"leak", func() error {
			_, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "leak"})
			return err
		}, `cproxy: MCP server docs: prompt "leak" is not allowed for sandbox conv-1`},
	} {
		if err := c.do(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
		if h := heard(up, c.name); len(h) > 0 {
			t.Errorf("the server heard of %s: %+v", c.name, h)
		}
	}

	// Everything the server heard came with its credential, never a
	// sandbox token.
	for _, c := range up.Calls() {
		if c.Authorization != "Bearer "+canary {
			t.Errorf("the server heard %s %s with another credential", c.HTTPMethod, c.Method)
		}
	}
}

func TestAnSDKSessionIsTheSandboxsUntilItIsRevoked(t *testing.T) {
	e, up := newSDKEnv(t)
	ctx := t.Context()
	cs := connect(t, e, e.Token("conv-1"))
	defer cs.Close()
	sid := cs.ID()
	if sid == "" {
		t.Fatal("no session id")
	}
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "search", Arguments: map[string]any{"query": "a"}}); err != nil {
		t.Fatal(err)
	}

	// Another sandbox presenting the session's id is refused before the
	// server hears of it.
	before := len(up.Calls())
	r := e.Do("POST", "/mcp/docs", routetest.With(routetest.Bearer(e.Token("conv-2")), "Content-Type", "application/json",
		"Accept", "application/json, text/event-stream", "Mcp-Session-Id", sid, "Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion),
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"search","arguments":{"query":"b"}}}`)
	if !strings.Contains(r.Body, `"id":9,"error"`) || !strings.Contains(r.Body, "belongs to another sandbox") {
		t.Errorf("another sandbox = %d %s", r.Status, r.Body)
	}
	if calls := up.Calls(); len(calls) != before {
		t.Errorf("the server heard %+v", calls[before:])
	}

	// Revoking the sandbox ends its session at the server, and the
	// client's next call fails.
	e.Revoke("conv-1")
	var deleted bool
	for _, c := range up.Calls() {
		if c.HTTPMethod == "DELETE" && c.SessionID == sid && c.Authorization == "Bearer "+canary {
			deleted = true
		}
	}
	if !deleted {
		t.Errorf("the server got no DELETE of session %s", sid)
	}
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "search", Arguments: map[string]any{"query": "c"}}); err == nil {
		t.Error("a call after revocation succeeded")
	}
	if h := heard(up, "search"); len(h) != 1 {
		t.Errorf("the server heard search %d times", len(h))
	}
}

// A client asking for an older revision goes straight to initialize.
func TestTheSDKsClientAtThePreviousRevision(t *testing.T) {
	e, up := newSDKEnv(t)
	c := sdk.NewClient(&sdk.Implementation{Name: "cproxy-test", Version: "1.0.0"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint:   e.Proxy.URL + "/mcp/docs",
		HTTPClient: &http.Client{Transport: sandboxAuth{e.Token("conv-1")}},
		MaxRetries: -1,
	}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-06-18" {
		t.Errorf("protocol %s", v)
	}
	if _, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "get_page", Arguments: map[string]any{"path": "/x"}}); err != nil {
		t.Error(err)
	}
	if h := heard(up, "get_page"); len(h) != 1 {
		t.Errorf("the server heard get_page %d times", len(h))
	}
}
