package mcp

import (
	"testing"

	"github.com/cproxy/cproxy/policy"
)

// A list the profile leaves whole passes as sent, unless the server marked
// it public: what a list shows is this sandbox's view, marked private
// (cacheScope) whenever cproxy re-encodes it.
func TestListCacheScope(t *testing.T) {
	p, err := policy.ParsePolicy("policy.toml", []byte("[profile.default.mcp.docs]\nprompts = [\"summary\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := &listFilter{server: "docs", member: "prompts", name: "name", method: "prompts/get", prof: p.Profiles["default"]}
	for _, c := range []struct{ list, want string }{
		{`{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"summary"}]}}`, `{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"summary"}]}}`},
		{`{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"summary"}],"cacheScope":"private"}}`, `{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"summary"}],"cacheScope":"private"}}`},
		{`{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"summary"}],"cacheScope":"public","ttlMs":60000}}`, `{"id":3,"jsonrpc":"2.0","result":{"cacheScope":"private","prompts":[{"name":"summary"}],"ttlMs":60000}}`},
		{`{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"summary"},{"name":"leak"}]}}`, `{"id":3,"jsonrpc":"2.0","result":{"cacheScope":"private","prompts":[{"name":"summary"}]}}`},
	} {
		if out, err := f.message([]byte(c.list)); err != nil || string(out) != c.want {
			t.Errorf("%s = %s, %v; want %s", c.list, out, err, c.want)
		}
	}
}

// An answer that asks for the client's input passes only when the profile
// gives the server every capability it asks for; otherwise, or spelt in a
// letter case a case-folding client would read otherwise, it becomes an
// error with its id. Any other answer passes as sent, and one cproxy
// cannot read is refused.
func TestInputRequestsPassOnlyWhenGiven(t *testing.T) {
	f := &inputFilter{server: "docs", method: "tools/call", allowed: func(c string) bool { return c == "elicitation" }}
	refused := func(why string) string {
		return `{"jsonrpc":"2.0","id":4,"error":{"code":-32001,"message":"cproxy: the MCP server docs asked for the client's input to answer tools/call (an input_required result), ` + why + `"}}`
	}
	const unreadable = "which cproxy cannot read as every client would (resultType input_required or complete, inputRequests spelt so, each a method and its params)"
	for _, c := range []struct{ answer, want string }{
		{`{"jsonrpc":"2.0","id":4,"result":{"content":[],"resultType":"complete"}}`, ""},
		{`{"jsonrpc":"2.0","id":4,"result":{"content":[]}}`, ""},
		{`{"jsonrpc":"2.0","id":4,"error":{"code":1,"message":"x"}}`, ""},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`, ""},
		{`{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","inputRequests":{"c":{"method":"elicitation/create","params":{"message":"Really?"}}},"requestState":"s"}}`, ""},
		{`{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","requestState":"s"}}`, ""},
		{`{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","inputRequests":{"c":{"method":"elicitation/create","params":{}},"r":{"method":"roots/list"}}}}`,
			refused("for roots/list, and the sandbox's profile does not give the server the client's roots (its capabilities)")},
		{`{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","inputRequests":{"s":{"method":"sampling/createMessage","params":{}}}}}`,
			refused("for sampling/createMessage, and the sandbox's profile does not give the server the client's sampling (its capabilities)")},
		{`{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","inputRequests":{"p":{"method":"ping"}}}}`,
			refused("for ping, which is not a request a server may ask of the client's input")},
		{`{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","inputRequests":{"c":{"Method":"roots/list","method":"elicitation/create"}}}}`, refused(unreadable)},
		{`{"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required","inputRequests":[]}}`, refused(unreadable)},
		{`{"jsonrpc":"2.0","id":4,"result":{"content":[],"InputRequests":{"c":{"method":"roots/list"}}}}`, refused(unreadable)},
		{`{"jsonrpc":"2.0","id":4,"result":{"content":[],"ResultType":"input_required"}}`, refused(unreadable)},
		{`{"jsonrpc":"2.0","id":4,"result":{"content":[],"resultType":"later"}}`, refused(unreadable)},
	} {
		want := c.want
		if want == "" {
			want = c.answer
		}
		if out, err := f.message([]byte(c.answer)); err != nil || string(out) != want {
			t.Errorf("%s = %s, %v; want %s", c.answer, out, err, want)
		}
	}
	if _, err := f.message([]byte(`{"jsonrpc":"2.0","id":4,"result":{"resultType":"complete","resultType":"input_required"}}`)); err == nil {
		t.Error("a result naming resultType twice was passed on")
	}
}
