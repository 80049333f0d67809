package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
)

func TestMCPConfig(t *testing.T) {
	dir := t.TempDir()
	src := `[mcp.docs]
url = "https://mcp.example.com/mcp"
credential = "env:DOCS_MCP_TOKEN"

[mcp.tracker]
url = "http://127.0.0.1:9200/mcp"
credential = "file:tracker.key"
header = "X-API-Key"
header_timeout = "10s"
pin_tools = false

[mcp.issues]
url = "https://issues.example.com/mcp"

[mcp.issues.oauth]
token_url = "https://auth.example.com/oauth/token"
client_id = "cproxy"
refresh_token = "file:issues.refresh"
`
	c, err := LoadConfig(writeFile(t, filepath.Join(dir, "cproxy.toml"), src))
	if err != nil {
		t.Fatal(err)
	}
	docs, tr := c.MCP["docs"], c.MCP["tracker"]
	if docs.Name != "docs" || docs.Header != "Authorization" || docs.HeaderTimeout.Duration != 2*time.Minute || !docs.PinTools {
		t.Errorf("docs = %+v", docs)
	}
	if got := docs.CredentialValue("s3"); got != "Bearer s3" {
		t.Errorf("docs sends %q, want the default Authorization: Bearer", got)
	}
	if tr.Header != "X-API-Key" || tr.CredentialValue("s3") != "s3" || tr.HeaderTimeout.Duration != 10*time.Second || tr.PinTools {
		t.Errorf("tracker = %+v", tr)
	}
	if o := c.MCP["issues"].OAuth; o == nil || o.RefreshToken != "file:"+filepath.Join(dir, "issues.refresh") || o.ClientAuth != "basic" || o.Resource != "https://issues.example.com/mcp" {
		t.Errorf("issues.oauth = %+v, want its refresh token file under the config's folder, basic auth and the server's url as resource", o)
	}
	if tr.Credential != "file:"+filepath.Join(dir, "tracker.key") {
		t.Errorf("a relative file: credential is %q, want it under the config's folder", tr.Credential)
	}
}

func TestMCPConfigProblems(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"no url", "[mcp.docs]\ncredential = \"env:T\"\n", `cproxy.toml:1:1: mcp.docs: missing url, the server's MCP endpoint`},
		{"pin_tools not a bool", "[mcp.docs]\nurl = \"https://h/mcp\"\npin_tools = \"no\"\n", `pin_tools`},
		{"bad name", "[mcp.Docs]\nurl = \"https://h/mcp\"\n", `mcp "Docs": an MCP server's name has lower-case letters`},
		{"inline secret", "[mcp.docs]\nurl = \"https://h/mcp\"\ncredential = \"mcp_SECRETVALUE\"\n", "mcp.docs.credential: not a credential source"},
		{"secret in url", "[mcp.docs]\nurl = \"https://u:p@h/mcp\"\n", "mcp.docs.url: the URL must not carry user info"},
		{"protocol header", "[mcp.docs]\nurl = \"https://h/mcp\"\nheader = \"mcp-session-id\"\n", "mcp.docs.header: Mcp-Session-Id is set by cproxy's forwarding or the MCP transport"},
		{"bad header", "[mcp.docs]\nurl = \"https://h/mcp\"\nheader = \"X Key\"\n", `mcp.docs.header: "X Key" is not an HTTP header name`},
		{"zero timeout", "[mcp.docs]\nurl = \"https://h/mcp\"\nheader_timeout = \"0s\"\n", "mcp.docs.header_timeout"},
		{"unknown key", "[mcp.docs]\nurl = \"https://h/mcp\"\nheaders = \"X\"\n", `unknown key "headers" in [mcp.docs] (did you mean "header"?)`},
		{"oauth and credential", "[mcp.docs]\nurl = \"https://h/mcp\"\ncredential = \"env:T\"\n[mcp.docs.oauth]\ntoken_url = \"https://a/token\"\nclient_id = \"c\"\nrefresh_token = \"env:R\"\n", "mcp.docs: credential and [mcp.docs.oauth] are two credentials; keep one"},
		{"oauth no token_url", "[mcp.docs]\nurl = \"https://h/mcp\"\n[mcp.docs.oauth]\nclient_id = \"c\"\nrefresh_token = \"env:R\"\n", "mcp.docs.oauth: missing token_url"},
		{"oauth no client_id", "[mcp.docs]\nurl = \"https://h/mcp\"\n[mcp.docs.oauth]\ntoken_url = \"https://a/token\"\nrefresh_token = \"env:R\"\n", "mcp.docs.oauth: missing client_id"},
		{"oauth no grant", "[mcp.docs]\nurl = \"https://h/mcp\"\n[mcp.docs.oauth]\ntoken_url = \"https://a/token\"\nclient_id = \"c\"\n", "mcp.docs.oauth: set refresh_token (a credential source of the refresh token), or client_secret for the client_credentials grant"},
		{"oauth inline refresh token", "[mcp.docs]\nurl = \"https://h/mcp\"\n[mcp.docs.oauth]\ntoken_url = \"https://a/token\"\nclient_id = \"c\"\nrefresh_token = \"rt_SECRETVALUE\"\n", "mcp.docs.oauth.refresh_token: not a credential source"},
		{"oauth client_auth", "[mcp.docs]\nurl = \"https://h/mcp\"\n[mcp.docs.oauth]\ntoken_url = \"https://a/token\"\nclient_id = \"c\"\nclient_secret = \"env:S\"\nclient_auth = \"jwt\"\n", `mcp.docs.oauth.client_auth: "jwt" is not "basic"`},
		{"oauth header", "[mcp.docs]\nurl = \"https://h/mcp\"\nheader = \"X-API-Key\"\n[mcp.docs.oauth]\ntoken_url = \"https://a/token\"\nclient_id = \"c\"\nclient_secret = \"env:S\"\n", "mcp.docs.header: an OAuth access token goes in Authorization as a Bearer token; leave header out"},
		{"relay on mcp", "[relay.x]\nprefix = \"/mcp/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\n", `relay.x.prefix: "/mcp/" is one of cproxy's own routes`},
	} {
		_, probs := loadConfig("cproxy.toml", []byte(tc.src), policy.ReadFile)
		if got := (&probs).Error(); !strings.Contains(got, tc.want) || strings.Contains(got, "SECRETVALUE") {
			t.Errorf("%s: got\n%s\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestMCPUnknownInPolicy(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "policy.toml"), "[profile.default.mcp.dcos]\ntools = [\"*\"]\n")
	_, err := LoadConfig(writeFile(t, filepath.Join(dir, "cproxy.toml"), "policy = \"policy.toml\"\n[mcp.docs]\nurl = \"https://mcp.example.com/mcp\"\n"))
	want := "profile.default.mcp.dcos names no [mcp.dcos] in " + filepath.Join(dir, "cproxy.toml") + " (MCP servers there: docs)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
