package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/cproxy/cproxy/internal/fakes"
)

// mcpsearch DESCRIPTION: the fake MCP server lists its search tool with
// DESCRIPTION from now on, as a server that changes a tool under its
// clients does.
func cmdMCPSearch(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: mcpsearch DESCRIPTION")
	}
	ts.Value("mcp").(*fakes.MCPServer).SetSearchDescription(args[0])
}

// mcpclient TOKENFILE list | TOKENFILE call TOOL ARGUMENTS: open a session
// of the official Go SDK's client with cproxy's /mcp/docs ($PROXY) with
// the sandbox token in TOKENFILE, and print the tools it lists (one name a
// line, with its description), or the text of a tool call's result, or
// "error: " and the error it got.
func cmdMCPClient(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || (args[1] == "list") != (len(args) == 2) || (args[1] == "call" && len(args) != 4) {
		ts.Fatalf("usage: mcpclient TOKENFILE list | mcpclient TOKENFILE call TOOL ARGUMENTS")
	}
	token := strings.TrimSpace(ts.ReadFile(args[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "cproxy-script", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:   ts.Getenv("PROXY") + "/mcp/docs",
		HTTPClient: &http.Client{Transport: bearer(token)},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		fmt.Fprintf(ts.Stdout(), "error: %v\n", err)
		return
	}
	defer cs.Close()
	out := ts.Stdout()
	if args[1] == "list" {
		res, err := cs.ListTools(ctx, nil)
		ts.Check(err)
		for _, t := range res.Tools {
			fmt.Fprintf(out, "%s: %s\n", t.Name, t.Description)
		}
		return
	}
	var in map[string]any
	ts.Check(json.Unmarshal([]byte(args[3]), &in))
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: args[2], Arguments: in})
	if err != nil {
		fmt.Fprintf(out, "error: %v\n", err)
		return
	}
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			fmt.Fprintln(out, t.Text)
		}
	}
}

// bearer sends each request with a sandbox token.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
