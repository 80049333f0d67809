package fakes

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP server contents: what MCPServer's tools, resources and prompts
// answer, so that a test can find them in what its client shows.
const (
	// MCPSearchAnswer begins the search tool's answer, followed by the query.
	MCPSearchAnswer = "fake docs search results for "
	// MCPPublicText is docs://public/readme's text, MCPSecretText
	// docs://private/secret's.
	MCPPublicText = "the public readme of the fake docs server"
	MCPSecretText = "the private secret of the fake docs server"
	// MCPConfirmedAnswer is get_confirmed's answer once the user confirmed.
	MCPConfirmedAnswer = "confirmed by the user"
)

// MCPServerOptions configures a fake MCP server.
type MCPServerOptions struct {
	// Token is the only Bearer token accepted; any other Authorization,
	// or none, gets 401 with a WWW-Authenticate naming the server's
	// resource metadata, as an OAuth-protected server answers. Zero means
	// every request is let in.
	Token string
	// Authorize, when not nil, decides instead of Token which Bearer
	// tokens are let in: an OAuth resource server asking its
	// authorization server (OAuthServer.Valid).
	Authorize func(token string) bool
	// Tools is how many generated tools the server has beside its own
	// three: tool_000, tool_001, …, each taking a query and answering
	// with it, so that a tools/list is as long as a large server's. Zero
	// means none.
	Tools int
	// Stateless serves the SDK's handler stateless, as a server of the
	// 2026-07-28 revision is: no sessions, no GET stream, and that
	// revision's requests (server/discover, each request's _meta) served,
	// which the SDK serves only stateless. False: the sessions of
	// 2025-11-25, a server/discover answered with the versions before
	// 2026-07-28, so that clients fall back to initialize.
	Stateless bool
	// Versions are the protocol versions the server speaks (the SDK's
	// SupportedProtocolVersions). Empty: every version the SDK knows.
	Versions []string
	// Confirms adds the tool get_confirmed, which asks the user to confirm
	// before it answers MCPConfirmedAnswer: in the 2026-07-28 revision, a
	// result of type input_required asking for an elicitation, and the
	// answer once the call is sent again with the user's acceptance and
	// the state it was asked with ("not confirmed", an error result, with
	// any other answer). False: no such tool.
	Confirms bool
	// AsksClient adds the tools ask_model, which asks the client's model
	// for a completion of its prompt (sampling) and answers with the
	// completion's text, and list_roots, which asks the client for its
	// roots and answers with their URIs, one a line: requests of the
	// server in the call's answer stream, in the sessions of 2025-11-25.
	// False: no such tools.
	AsksClient bool
}

// MCPCall is one HTTP request an MCPServer received, recorded before any
// check, so refused requests are there too.
type MCPCall struct {
	HTTPMethod    string // POST, GET or DELETE
	Authorization string // the Authorization header as it arrived
	SessionID     string // the Mcp-Session-Id header
	// Method is the JSON-RPC method of a POST's message, Name the tool or
	// prompt name (tools/call, prompts/get) or resource URI
	// (resources/read); both empty when the body is not one JSON object.
	Method, Name string
	Body         []byte // the whole body, at most 1 MiB
}

// MCPServer is a remote MCP server on a loopback port, built with the
// official Go SDK (github.com/modelcontextprotocol/go-sdk) and served
// over its Streamable HTTP handler at URL, so that cproxy's MCP route
// meets a real server's sessions, SSE answers and errors. It has the
// tools search (a query string), get_page (a path) and delete_repo (a
// repo), the resources docs://public/readme and docs://private/secret,
// and the prompts summary and leak (and MCPServerOptions.Tools more
// tools). Its methods are safe for concurrent use.
type MCPServer struct {
	// URL is the MCP endpoint, http://127.0.0.1:port/mcp.
	URL string

	opts   MCPServerOptions
	srv    *httptest.Server
	server *mcp.Server

	mu    sync.Mutex
	calls []MCPCall
}

// NewMCPServer starts a fake MCP server. Close it when done.
func NewMCPServer(o MCPServerOptions) *MCPServer {
	s := &MCPServer{opts: o, server: newDocsServer(&mcp.ServerOptions{SupportedProtocolVersions: o.Versions})}
	for i := range o.Tools {
		name := fmt.Sprintf("tool_%03d", i)
		mcp.AddTool(s.server, &mcp.Tool{Name: name, Description: "Generated tool " + name + " of the fake docs server"},
			func(_ context.Context, _ *mcp.CallToolRequest, in searchArgs) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + ": " + in.Query}}}, nil, nil
			})
	}
	if o.Confirms {
		mcp.AddTool(s.server, &mcp.Tool{Name: "get_confirmed", Description: "Answer once the user confirms"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if len(req.Params.InputResponses) == 0 {
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{Message: "Really?"}}, RequestState: "asked"}, nil, nil
			}
			if a, ok := req.Params.InputResponses["confirm"].(*mcp.ElicitResult); !ok || a.Action != "accept" || req.Params.RequestState != "asked" {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "not confirmed"}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: MCPConfirmedAnswer}}}, nil, nil
		})
	}
	if o.AsksClient {
		addAsks(s.server)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.server }, &mcp.StreamableHTTPOptions{Stateless: o.Stateless})
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.record(h))
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL + "/mcp"
	return s
}

// SetSearchDescription changes the description the search tool is listed
// with from the next tools/list on, as a server that changes a tool's
// definition under its clients does.
func (s *MCPServer) SetSearchDescription(d string) {
	addSearch(s.server, d)
}

// Close stops the server, ending its sessions.
func (s *MCPServer) Close() { s.srv.Close() }

// Calls returns every request received so far, in the order they arrived.
func (s *MCPServer) Calls() []MCPCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// record notes each request, then lets through only those with the
// server's token.
func (s *MCPServer) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		c := MCPCall{HTTPMethod: r.Method, Authorization: r.Header.Get("Authorization"), SessionID: r.Header.Get("Mcp-Session-Id"), Body: body}
		var m struct {
			Method string
			Params struct{ Name, URI string }
		}
		if json.Unmarshal(body, &m) == nil {
			c.Method, c.Name = m.Method, m.Params.Name
			if m.Params.URI != "" {
				c.Name = m.Params.URI
			}
		}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		s.mu.Unlock()
		if !s.authorized(c.Authorization) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata="http://%s/.well-known/oauth-protected-resource/mcp"`, r.Host))
			http.Error(w, "invalid_token", http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// authorized says whether a request with the Authorization header auth is
// let in.
func (s *MCPServer) authorized(auth string) bool {
	bearer, ok := strings.CutPrefix(auth, "Bearer ")
	switch {
	case s.opts.Authorize != nil:
		return ok && s.opts.Authorize(bearer)
	case s.opts.Token != "":
		return ok && subtle.ConstantTimeCompare([]byte(bearer), []byte(s.opts.Token)) == 1
	}
	return true
}

type searchArgs struct {
	Query string `json:"query" jsonschema:"what to look for"`
}

type pageArgs struct {
	Path string `json:"path" jsonschema:"the page's path"`
}

type repoArgs struct {
	Repo string `json:"repo" jsonschema:"owner/name of the repository"`
}

// addSearch adds the search tool to s, described as description, in place
// of the one s has.
func addSearch(s *mcp.Server, description string) {
	mcp.AddTool(s, &mcp.Tool{Name: "search", Description: description}, func(_ context.Context, _ *mcp.CallToolRequest, in searchArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: MCPSearchAnswer + in.Query}}}, nil, nil
	})
}

// newDocsServer is the SDK server behind every MCPServer.
func newDocsServer(opts *mcp.ServerOptions) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "fake-docs", Version: "1.0.0"}, opts)
	text := func(t string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t}}}
	}
	addSearch(s, "Search the docs")
	mcp.AddTool(s, &mcp.Tool{Name: "get_page", Description: "Get one page of the docs"}, func(_ context.Context, _ *mcp.CallToolRequest, in pageArgs) (*mcp.CallToolResult, any, error) {
		return text("the page " + in.Path), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "delete_repo", Description: "Delete a repository"}, func(_ context.Context, _ *mcp.CallToolRequest, in repoArgs) (*mcp.CallToolResult, any, error) {
		return text("deleted " + in.Repo), nil, nil
	})
	for uri, body := range map[string]string{"docs://public/readme": MCPPublicText, "docs://private/secret": MCPSecretText} {
		s.AddResource(&mcp.Resource{URI: uri, Name: uri[strings.LastIndexByte(uri, '/')+1:], MIMEType: "text/plain"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: body}}}, nil
		})
	}
	for _, name := range []string{"summary", "leak"} {
		s.AddPrompt(&mcp.Prompt{Name: name, Description: "The " + name + " prompt"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "the " + name + " prompt"}}}}, nil
		})
	}
	return s
}

type promptArgs struct {
	Prompt string `json:"prompt" jsonschema:"what to ask the client's model"`
}

// addAsks adds MCPServerOptions.AsksClient's tools to s.
func addAsks(s *mcp.Server) {
	fail := func(err error) *mcp.CallToolResult {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "ask_model", Description: "Ask the client's model"}, func(ctx context.Context, req *mcp.CallToolRequest, in promptArgs) (*mcp.CallToolResult, any, error) {
		//lint:ignore SA1019 sampling is deprecated in 2026-07-28, and servers of 2025-11-25 still ask for it
		msgs := []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Prompt}}}
		//lint:ignore SA1019 as above
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 100, Messages: msgs})
		if err != nil {
			return fail(err), nil, nil
		}
		text, _ := res.Content.(*mcp.TextContent)
		if text == nil {
			return fail(fmt.Errorf("the completion is not text")), nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "list_roots", Description: "List the client's roots"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		//lint:ignore SA1019 roots are deprecated in 2026-07-28, and servers of 2025-11-25 still ask for them
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return fail(err), nil, nil
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(uris, "\n")}}}, nil, nil
	})
}
