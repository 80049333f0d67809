package fakes

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds a Bearer token to each request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestMCPServerAnswersTheSDKClientWithItsToken(t *testing.T) {
	s := NewMCPServer(MCPServerOptions{Token: "mcp-token"})
	defer s.Close()
	ctx := context.Background()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: &http.Client{Transport: bearer{"mcp-token"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"query": "q"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != MCPSearchAnswer+"q" {
		t.Fatalf("search = %+v, %v", res, err)
	}
	r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "docs://private/secret"})
	if err != nil || r.Contents[0].Text != MCPSecretText {
		t.Fatalf("read = %+v, %v", r, err)
	}
	cs.Close()
	var methods []string
	for _, c := range s.Calls() {
		methods = append(methods, c.HTTPMethod+" "+c.Method+" "+c.Name)
	}
	if got := strings.Join(methods, "\n"); !strings.Contains(got, "POST tools/call search\n") || !strings.Contains(got, "POST resources/read docs://private/secret") {
		t.Errorf("calls:\n%s", got)
	}

	_, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: &http.Client{Transport: bearer{"wrong"}}}, nil)
	if err == nil {
		t.Fatal("a wrong token connected")
	}
}

func TestMCPServerListsItsGeneratedTools(t *testing.T) {
	s := NewMCPServer(MCPServerOptions{Tools: 200})
	defer s.Close()
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 203 {
		t.Fatalf("tools/list: %d tools, %v; want 203", len(tools.Tools), err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tool_199", Arguments: map[string]any{"query": "q"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "tool_199: q" {
		t.Fatalf("tool_199 = %+v, %v", res, err)
	}
}
