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
