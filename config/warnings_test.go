package config

import (
	"strings"
	"testing"

	"github.com/cproxy/cproxy/policy"
)

// Warnings name the admin listeners others may reach and the plain http
// upstreams and relays at hosts that are not loopback, and nothing else.
func TestWarnings(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // key=value of each warning
	}{
		{"the defaults", ``, nil},
		{"loopback admin listeners", `listen.admin = "localhost:9001"`, nil},
		{"an IPv6 loopback admin listener", `listen.admin = "[::1]:9001"`, nil},
		{"127/8 is loopback", `listen.admin = "127.0.0.2:9001"`, nil},
		{"a Unix socket", `listen.admin = "unix:/run/cproxy/admin.sock"`, nil},
		{"every interface", `listen.admin = ":9001"`, []string{"listen.admin=:9001"}},
		{"every IPv4 interface", `listen.admin = "0.0.0.0:9001"`, []string{"listen.admin=0.0.0.0:9001"}},
		{"a private address", `listen.admin = "10.20.30.4:9001"`, []string{"listen.admin=10.20.30.4:9001"}},
		{"a name", `listen.admin = "cproxy-admin.internal:9001"`, []string{"listen.admin=cproxy-admin.internal:9001"}},
		{"http on loopback", `[upstream.anthropic]
url = "http://127.0.0.1:4000"
[upstream.npm]
url = "http://localhost:4873"`, nil},
		{"https anywhere", `[upstream.anthropic]
url = "https://10.0.0.5:8443"`, nil},
		{"http across the network", `[upstream.anthropic]
url = "http://10.0.0.5:8000"
[upstream.npm]
url = "HTTP://registry.internal/"
[relay.gw]
prefix = "/gw/"
url = "http://gw.internal/"
methods = ["GET"]
paths = ["**"]`, []string{"upstream.anthropic.url=http://10.0.0.5:8000", "upstream.npm.url=HTTP://registry.internal/", "relay.gw.url=http://gw.internal/"}},
		{"a GitHub App's API over http across the network", `[upstream.github]
app_id = 1
private_key = "env:KEY"
api_url = "http://ghe.internal/api/v3"`, []string{"upstream.github.api_url=http://ghe.internal/api/v3"}},
		{"api_url unused without an App", `[upstream.npm]
url = "https://registry.npmjs.org"`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, probs := loadConfig("cproxy.toml", []byte(tt.src), policy.ReadFile)
			if len(probs) > 0 {
				t.Fatal(probs)
			}
			var got []string
			for _, w := range c.Warnings() {
				got = append(got, w.Key+"="+w.Value)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("Warnings = %v, want %v", got, tt.want)
			}
		})
	}
}

// What each warning says: the credential only where cproxy sends one.
func TestWarningMessages(t *testing.T) {
	c, probs := loadConfig("cproxy.toml", []byte(`[upstream.npm]
url = "http://registry.internal/"
[upstream.github]
url = "http://git.internal/"
credential = "env:GITHUB_TOKEN"
`), policy.ReadFile)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	got := c.WarningProblems()
	want := []string{
		`cproxy.toml:4:7: upstream.github.url: "http://git.internal/" is plain http to a host that is not loopback: the credential cproxy sends there, and every request and answer, would cross the network in clear text (use https://)`,
		`cproxy.toml:2:7: upstream.npm.url: "http://registry.internal/" is plain http to a host that is not loopback: every request and answer would cross the network in clear text (use https://)`,
	}
	if len(got) != len(want) {
		t.Fatalf("WarningProblems = %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("warning %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
