package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
)

const relayConfig = `policy = "policy.toml"

[relay.mod]
prefix = "/mod/"
url = "https://hub.example.com/mod/"
methods = ["GET", "POST"]
paths = ["events", "sessions/*/commands", "files/**"]

[relay.mod.headers]
X-Mod-Token = { value = "mod_token" }
Authorization = { credential = "env:HUB_TOKEN", prefix = "Bearer " }

[relay.gateway]
prefix = "/gateway/"
url = "http://127.0.0.1:9100"
methods = ["GET"]
paths = ["**"]
query = true
header_timeout = "10s"
headers = { X-Gateway-Key = { credential = "file:gateway.key" } }
`

func TestRelayConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "policy.toml"), "[profile.default]\nrelays = [\"mod\", \"gate*\"]\n[profile.none]\n")
	c, err := LoadConfig(writeFile(t, filepath.Join(dir, "cproxy.toml"), relayConfig))
	if err != nil {
		t.Fatal(err)
	}
	mod, gw := c.Relays["mod"], c.Relays["gateway"]
	if mod.Name != "mod" || mod.HeaderTimeout.Duration != 2*time.Minute || gw.HeaderTimeout.Duration != 10*time.Second || !gw.Query || mod.Query {
		t.Errorf("relays = %+v %+v", mod, gw)
	}
	if h := mod.Headers["Authorization"]; h.Credential != "env:HUB_TOKEN" || h.Prefix != "Bearer " {
		t.Errorf("Authorization = %+v", h)
	}
	if h := gw.Headers["X-Gateway-Key"]; h.Credential != "file:"+filepath.Join(dir, "gateway.key") {
		t.Errorf("a relative file: credential is %q, want it under the config's folder", h.Credential)
	}
	if got := c.RelayValues(); strings.Join(got, ",") != "mod_token" {
		t.Errorf("RelayValues = %v", got)
	}
	def, none := c.Rules.Profiles["default"], c.Rules.Profiles["none"]
	for _, tc := range []struct {
		d     policy.Decision
		allow bool
		rule  string
	}{
		{def.Relay("mod"), true, `profile.default.relays["mod"]`},
		{def.Relay("gateway"), true, `profile.default.relays["gate*"]`},
		{def.Relay("other"), false, "profile.default: no relays entry matches"},
		{none.Relay("mod"), false, "profile.none: no relays entry matches"},
		{mod.AllowsPath("events"), true, `relay.mod.paths["events"]`},
		{mod.AllowsPath("sessions/42/commands"), true, `relay.mod.paths["sessions/*/commands"]`},
		{mod.AllowsPath("sessions/42/43/commands"), false, "relay.mod: no paths entry matches"},
		{mod.AllowsPath("files/a/b/c"), true, `relay.mod.paths["files/**"]`},
		{mod.AllowsPath("admin"), false, "relay.mod: no paths entry matches"},
	} {
		if tc.d.Allow != tc.allow || tc.d.Rule != tc.rule {
			t.Errorf("got %+v, want allow %v rule %q", tc.d, tc.allow, tc.rule)
		}
	}
	if !mod.AllowsMethod("POST") || mod.AllowsMethod("DELETE") || mod.AllowsMethod("post") {
		t.Error("methods")
	}
}

func TestRelayConfigProblems(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"no prefix", "[relay.mod]\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\n", `cproxy.toml:1:1: relay.mod: missing prefix, the path on the proxy listener (e.g. prefix = "/mod/")`},
		{"deep prefix", "[relay.mod]\nprefix = \"/a/b/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\n", `cproxy.toml:2:10: relay.mod.prefix: "/a/b/" is not one path segment between slashes`},
		{"own route", "[relay.x]\nprefix = \"/github/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\n", `cproxy.toml:2:10: relay.x.prefix: "/github/" is one of cproxy's own routes`},
		{"probe path", "[relay.x]\nprefix = \"/readyz/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\n", `cproxy.toml:2:10: relay.x.prefix: "/readyz/" is one of cproxy's own routes (/v1/, /github/, /api/, /gomod/, /npm/, /pypi/, /mcp/, /healthz/, /readyz/, /-/)`},
		{"same prefix", "[relay.a]\nprefix = \"/m/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\n[relay.b]\nprefix = \"/m/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\n", `cproxy.toml:7:10: relay.b.prefix: "/m/" is relay.a's prefix already`},
		{"no methods, no paths", "[relay.mod]\nprefix = \"/mod/\"\nurl = \"https://h/\"\n", "relay.mod: needs methods"},
		{"bad path", "[relay.mod]\nprefix = \"/mod/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a/../b\"]\n", `relay.mod.paths: "a/../b" has a ".." segment`},
		{"secret in url", "[relay.mod]\nprefix = \"/mod/\"\nurl = \"https://u:p@h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\n", "relay.mod.url: the URL must not carry user info"},
		{"header forbidden", "[relay.mod]\nprefix = \"/mod/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\nheaders = { host = { value = \"x\" } }\n", "relay.mod.headers.host: Host is set by cproxy's forwarding"},
		{"header secret inline", "[relay.mod]\nprefix = \"/mod/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\nheaders = { X-T = { credential = \"hub_SECRETVALUE\" } }\n", "relay.mod.headers.X-T.credential: not a credential source"},
		{"header prefix newline", "[relay.mod]\nprefix = \"/mod/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npaths = [\"a\"]\nheaders = { X-T = { value = \"t\", prefix = \"a\\nb\" } }\n", "relay.mod.headers.X-T.prefix: must not hold a line break"},
		{"unknown key", "[relay.mod]\nprefix = \"/mod/\"\nurl = \"https://h/\"\nmethods = [\"GET\"]\npath = [\"a\"]\n", `unknown key "path" in [relay.mod] (did you mean "paths"?)`},
	} {
		_, probs := loadConfig("cproxy.toml", []byte(tc.src), policy.ReadFile)
		if got := (&probs).Error(); !strings.Contains(got, tc.want) || strings.Contains(got, "SECRETVALUE") {
			t.Errorf("%s: got\n%s\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestRelayUnknownInPolicy(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "policy.toml"), "[profile.default]\nrelays = [\"mdo\"]\n")
	_, err := LoadConfig(writeFile(t, filepath.Join(dir, "cproxy.toml"), relayConfig))
	want := filepath.Join(dir, "policy.toml") + `:2:11: profile.default.relays: "mdo" names no [relay.mdo] in ` + filepath.Join(dir, "cproxy.toml") + " (relays there: gateway, mod)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// TestCheckPolicy: a policy loaded on its own (a reload) is checked against
// the config's relays as LoadConfig checks the one it loads.
func TestCheckPolicy(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "policy.toml"), "[profile.default]\nrelays = [\"mod\"]\n")
	cfg, err := LoadConfig(writeFile(t, filepath.Join(dir, "cproxy.toml"), relayConfig))
	if err != nil {
		t.Fatal(err)
	}
	if probs := cfg.CheckPolicy(cfg.Rules); len(probs) != 0 {
		t.Errorf("the policy loaded with the config: %v", probs)
	}
	bad := writeFile(t, filepath.Join(dir, "new.toml"), "[profile.default]\nrelays = [\"mod\", \"mdo\", \"m*\"]\n")
	p, err := policy.LoadPolicy(bad)
	if err != nil {
		t.Fatal(err)
	}
	want := bad + `:2:18: profile.default.relays: "mdo" names no [relay.mdo] in ` + filepath.Join(dir, "cproxy.toml") + " (relays there: gateway, mod)"
	if probs := cfg.CheckPolicy(p); probs.Error() != want {
		t.Errorf("got %v\nwant %s", probs, want)
	}
	// A policy built in code has no positions; the check does not need them.
	if probs := Default().CheckPolicy(&policy.Policy{Profiles: map[string]*policy.Profile{"x": {Name: "x", Relays: []string{"mod"}}}}); len(probs) != 1 || probs[0].Line != 1 {
		t.Errorf("built policy: %v", probs)
	}
}
