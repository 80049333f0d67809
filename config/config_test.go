package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestDefault(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/state")
	t.Setenv("XDG_DATA_HOME", "/data")
	t.Setenv("HOME", "/home/u")
	c := Default()
	checks := []struct{ name, got, want string }{
		{"listen.proxy", c.Listen.Proxy, "127.0.0.1:8080"},
		{"listen.admin", c.Listen.Admin, "127.0.0.1:9001"},
		{"listen.public_url", c.Listen.PublicURL, ""},
		{"listen.ready_file", c.Listen.ReadyFile, ""},
		{"listen.drain", c.Listen.Drain.String(), "30s"},
		{"store.path", c.Store.Path, "/state/cproxy/cproxy.db"},
		{"anthropic.url", c.Upstream["anthropic"].URL, "https://api.anthropic.com"},
		{"anthropic.credential", c.Upstream["anthropic"].Credential, "env:ANTHROPIC_API_KEY"},
		{"anthropic.auth", c.Upstream["anthropic"].Auth, "api-key"},
		{"anthropic.header_timeout", c.Upstream["anthropic"].HeaderTimeout.String(), "10m0s"},
		{"github.url", c.Upstream["github"].URL, "https://github.com"},
		{"github.credential", c.Upstream["github"].Credential, "env:GITHUB_TOKEN"},
		{"github.header_timeout", c.Upstream["github"].HeaderTimeout.String(), "2m0s"},
		{"npm.url", c.Upstream["npm"].URL, "https://registry.npmjs.org"},
		{"npm.credential", c.Upstream["npm"].Credential, ""},
		{"npm.header_timeout", c.Upstream["npm"].HeaderTimeout.String(), "2m0s"},
		{"log.format", c.Log.Format, "text"},
		{"log.level", c.Log.Level, "info"},
		{"keyring.backend", c.Keyring.Backend, "auto"},
		{"keyring.service", c.Keyring.Service, "cproxy"},
		{"keyring.file_dir", c.Keyring.FileDir, "/data/cproxy/keyring"},
		{"policy", c.Policy, ""},
		{"path", c.Path, ""},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %q, want %q", ch.name, ch.got, ch.want)
		}
	}
	if c.Rules == nil || !c.Rules.HasProfile("default") || c.Explicit("upstream.anthropic.credential") {
		t.Errorf("Rules = %+v, Explicit = %v", c.Rules, c.Explicit("upstream.anthropic.credential"))
	}

	t.Setenv("XDG_STATE_HOME", "relative/is/ignored")
	if got, want := Default().Store.Path, "/home/u/.local/state/cproxy/cproxy.db"; got != want {
		t.Errorf("store.path without XDG_STATE_HOME = %q, want %q", got, want)
	}
	t.Setenv("XDG_DATA_HOME", "")
	if got, want := Default().Keyring.FileDir, "/home/u/.local/share/cproxy/keyring"; got != want {
		t.Errorf("keyring.file_dir without XDG_DATA_HOME = %q, want %q", got, want)
	}
}

func TestLoadConfigEmptyIsDefault(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/state")
	name := writeFile(t, filepath.Join(t.TempDir(), "cproxy.toml"), "# nothing to change\n")
	c, err := LoadConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Path = name
	if c.Listen != want.Listen || c.Store != want.Store || !reflect.DeepEqual(c.Upstream, want.Upstream) || c.Log != want.Log || c.Keyring != want.Keyring || c.Path != name {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
	if d := c.Rules.Profiles["default"].Model("claude-opus-4-1"); !d.Allow {
		t.Errorf("default policy: %+v", d)
	}
}

func TestLoadConfigResolvesPaths(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "etc", "policies", "policy.toml"), webPolicy)
	name := writeFile(t, filepath.Join(dir, "etc", "cproxy.toml"), `policy = "policies/policy.toml"

[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"
public_url = "https://cproxy.internal:8443/base"
ready_file = "run/ready.json"
drain = "5s"

[store]
path = "state/cproxy.db"

[upstream.anthropic]
credential = "file:keys/anthropic"
auth = "oauth"
header_timeout = "1m30s"

[upstream.github]
credential = "file:/abs/github"

[upstream.npm]
credential = "keyring:npm"

[log]
format = "json"
level = "debug"

[keyring]
backend = "file"
service = "cproxy-test"
file_dir = "keyring"
`)
	c, err := LoadConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(dir, "etc")
	checks := []struct{ name, got, want string }{
		{"policy", c.Policy, filepath.Join(etc, "policies", "policy.toml")},
		{"ready_file", c.Listen.ReadyFile, filepath.Join(etc, "run", "ready.json")},
		{"store.path", c.Store.Path, filepath.Join(etc, "state", "cproxy.db")},
		{"anthropic.credential", c.Upstream["anthropic"].Credential, "file:" + filepath.Join(etc, "keys", "anthropic")},
		{"github.credential", c.Upstream["github"].Credential, "file:/abs/github"},
		{"npm.credential", c.Upstream["npm"].Credential, "keyring:npm"},
		{"public_url", c.Listen.PublicURL, "https://cproxy.internal:8443/base"},
		{"auth", c.Upstream["anthropic"].Auth, "oauth"},
		{"log", c.Log.Format + " " + c.Log.Level, "json debug"},
		{"keyring", c.Keyring.Backend + " " + c.Keyring.Service, "file cproxy-test"},
		{"keyring.file_dir", c.Keyring.FileDir, filepath.Join(etc, "keyring")},
		{"rules path", c.Rules.Path, filepath.Join(etc, "policies", "policy.toml")},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %q, want %q", ch.name, ch.got, ch.want)
		}
	}
	if c.Listen.Drain.Duration != 5*time.Second || c.Upstream["anthropic"].HeaderTimeout.Duration != 90*time.Second {
		t.Errorf("durations: %v %v", c.Listen.Drain, c.Upstream["anthropic"].HeaderTimeout)
	}
	if !c.Rules.HasProfile("web") {
		t.Errorf("policy not loaded: %+v", c.Rules)
	}
}

func TestExplicit(t *testing.T) {
	name := writeFile(t, filepath.Join(t.TempDir(), "cproxy.toml"), `[upstream.anthropic]
credential = "env:ANTHROPIC_API_KEY"
[upstream.github]
url = "https://github.com"
`)
	c, err := LoadConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{
		"upstream.anthropic.credential": true, // set, even if to the default value
		"upstream.github.url":           true,
		"upstream.github.credential":    false,
		"upstream.npm.credential":       false,
		"listen.proxy":                  false,
	} {
		if got := c.Explicit(key); got != want {
			t.Errorf("Explicit(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestDurationText(t *testing.T) {
	var d Duration
	if err := d.UnmarshalText([]byte("1h2m")); err != nil || d.Duration != time.Hour+2*time.Minute {
		t.Fatalf("UnmarshalText: %v, %v", d, err)
	}
	if b, _ := d.MarshalText(); string(b) != "1h2m0s" {
		t.Errorf("MarshalText = %q", b)
	}
	if err := d.UnmarshalText([]byte("10")); err == nil || err.Error() != `"10" is not a duration (e.g. "30s", "10m", "1h30m")` {
		t.Errorf("UnmarshalText(10) = %v", err)
	}
}

func TestConfigProblems(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"not host:port", `# cproxy config

[listen]
proxy = "localhost"
`, []string{`cproxy.toml:4:9: listen.proxy: "localhost" is not host:port (e.g. "127.0.0.1:8080")`}},

		{"bad ports, same address", `[listen]
proxy = "127.0.0.1:http"
admin = "127.0.0.1:70000"
`, []string{
			`cproxy.toml:2:9: listen.proxy: port "http" is not a number from 0 to 65535 (e.g. "127.0.0.1:8080")`,
			`cproxy.toml:3:9: listen.admin: port "70000" is not a number from 0 to 65535 (e.g. "127.0.0.1:8080")`,
		}},

		{"admin on the proxy address", `listen.proxy = "0.0.0.0:8080"
listen.admin = "0.0.0.0:8080"
`, []string{`cproxy.toml:2:16: listen.admin: same address as listen.proxy (sandboxes must never reach the admin API; pick another port)`}},

		{"admin on the proxy's socket", `[listen]
proxy = "unix:/run/cproxy/cproxy.sock"
admin = "unix:/run/cproxy/cproxy.sock"
`, []string{
			`cproxy.toml:3:9: listen.admin: same socket as listen.proxy (sandboxes must never reach the admin API; pick another path, e.g. "unix:/run/cproxy/admin.sock")`,
		}},

		{"admin socket path", `listen.admin = "unix:"
listen.proxy = "unix:/run/cproxy/` + strings.Repeat("p", 90) + `.sock"
`, []string{
			`cproxy.toml:1:16: listen.admin: needs a path (e.g. "unix:/run/cproxy/admin.sock")`,
			`cproxy.toml:2:16: listen.proxy: "/run/cproxy/` + strings.Repeat("p", 90) + `.sock" is 107 bytes, too long for a Unix socket path: at most 103 bytes (as much as sun_path holds on every platform); use a shorter path, e.g. "unix:/run/cproxy/proxy.sock"`,
		}},

		{"tls keys without the TLS listener", `[listen]
tls_cert = "file:cert.pem"
tls_key = "file:key.pem"
`, []string{
			`cproxy.toml:2:12: listen.tls_cert: only with listen.proxy_tls, the TLS listener it is for (e.g. proxy_tls = "127.0.0.1:8443")`,
			`cproxy.toml:3:11: listen.tls_key: only with listen.proxy_tls, the TLS listener it is for (e.g. proxy_tls = "127.0.0.1:8443")`,
		}},

		{"tls listener problems", `[listen]
proxy = "127.0.0.1:8080"
proxy_tls = "127.0.0.1:8080"
tls_cert = "-----BEGIN CERTIFICATE-----"
`, []string{
			`cproxy.toml:3:13: listen.proxy_tls: same address as listen.proxy or listen.admin (pick another port, e.g. "127.0.0.1:8443")`,
			`cproxy.toml:4:12: listen.tls_cert: not a credential source (use "env:NAME", "file:PATH" or "keyring:NAME"; never the secret itself)`,
			`cproxy.toml:4:12: listen.tls_key: listen.tls_cert needs its private key's source too (e.g. "file:/etc/cproxy/tls/key.pem"), or leave both out for cproxy's local CA`,
		}},

		{"tls listener on a socket", `[listen]
proxy_tls = "unix:/run/cproxy/tls.sock"
`, []string{
			`cproxy.toml:2:13: listen.proxy_tls: a TLS listener is host:port, not a Unix socket (a socket needs no TLS: use listen.proxy = "unix:/run/cproxy/tls.sock")`,
		}},

		{"tls key without cert", `listen.proxy_tls = "127.0.0.1:0"
listen.tls_key = "keyring:tls-key"
`, []string{
			`cproxy.toml:2:18: listen.tls_cert: listen.tls_key needs the certificate's source too (e.g. "file:/etc/cproxy/tls/cert.pem"), or leave both out for cproxy's local CA`,
		}},

		{"wrong types", `[listen]
admin = 9001
drain = 30
[upstream]
npm = "https://registry.npmjs.org"
`, []string{
			`cproxy.toml:2:9: listen.admin: must be a string, not an integer`,
			`cproxy.toml:3:9: listen.drain: must be a duration string like "30s", not an integer`,
			`cproxy.toml:5:7: upstream.npm: must be a table, not a string`,
		}},

		{"claude", `[claude]
subscription_type = "ultra"
rate_limit_tier = "Max 20x"
oauth_scopes = ["user:inference", "user inference"]
assume_first_party = "yes"
`, []string{
			`cproxy.toml:2:21: claude.subscription_type: "ultra" is not a Claude plan (use "pro", "max", "team" or "enterprise")`,
			`cproxy.toml:3:19: claude.rate_limit_tier: "Max 20x" is not a tier name (lower-case letters, digits and '_', e.g. "default_claude_max_20x")`,
			`cproxy.toml:4:35: claude.oauth_scopes[1]: "user inference" is not an OAuth scope (e.g. "user:inference")`,
			`cproxy.toml:5:22: claude.assume_first_party: must be true or false, not a string`,
		}},

		{"durations", `[listen]
drain = "10"
[upstream.anthropic]
header_timeout = "0s"
[upstream.github]
header_timeout = "-1m"
`, []string{
			`cproxy.toml:2:9: listen.drain: "10" is not a duration (e.g. "30s", "10m", "1h30m")`,
			`cproxy.toml:4:18: upstream.anthropic.header_timeout: must be more than 0 (e.g. "10m")`,
			`cproxy.toml:6:18: upstream.github.header_timeout: must be more than 0 (e.g. "2m")`,
		}},

		{"urls", `listen.public_url = "cproxy.internal:8080"
[upstream.anthropic]
url = "https://api.anthropic.com/?key=1"
[upstream.github]
url = "https://github.com/#x"
[upstream.npm]
url = "http:///registry"
`, []string{
			`cproxy.toml:1:21: listen.public_url: "cproxy.internal:8080" is not an absolute http or https URL (e.g. "http://10.20.30.4:8080")`,
			`cproxy.toml:3:7: upstream.anthropic.url: "https://api.anthropic.com/?key=1" must not have a query`,
			`cproxy.toml:5:7: upstream.github.url: "https://github.com/#x" must not have a fragment`,
			`cproxy.toml:7:7: upstream.npm.url: "http:///registry" has no host (e.g. "https://registry.npmjs.org")`,
		}},

		{"user info is refused and not echoed", `[upstream.github]
url = "https://x-access-token:ghp_secret@github.com"
`, []string{`cproxy.toml:2:7: upstream.github.url: the URL must not carry user info (put the secret behind credential = …)`}},

		{"credentials", `[upstream.anthropic]
credential = ""
auth = "bearer"
[upstream.github]
credential = "claude-code"
[upstream.npm]
credential = "env:1NPM"
`, []string{
			`cproxy.toml:2:14: upstream.anthropic.credential: must not be empty: the model route needs a credential (e.g. "env:ANTHROPIC_API_KEY")`,
			`cproxy.toml:3:8: upstream.anthropic.auth: "bearer" is not an auth mode (use "api-key" or "oauth")`,
			`cproxy.toml:5:14: upstream.github.credential: claude-code is Claude Code's Anthropic login and serves upstream.anthropic only (use "env:NAME", "file:PATH" or "keyring:NAME")`,
			`cproxy.toml:7:14: upstream.npm.credential: env: needs an environment variable name: letters, digits and _, not starting with a digit (e.g. "env:GITHUB_TOKEN")`,
		}},

		{"a pasted secret is refused and not echoed", `[upstream.anthropic]
credential = "sk-ant-api03-SECRET"
[upstream.github]
credential = "ghp_SECRET"
[upstream.npm]
credential = "file:"
`, []string{
			`cproxy.toml:2:14: upstream.anthropic.credential: not a credential source (use "env:NAME", "file:PATH", "keyring:NAME" or "claude-code"; never the secret itself)`,
			`cproxy.toml:4:14: upstream.github.credential: not a credential source (use "env:NAME", "file:PATH", "keyring:NAME" or ""; never the secret itself)`,
			`cproxy.toml:6:14: upstream.npm.credential: file: needs a path (e.g. "file:/etc/cproxy/anthropic.key")`,
		}},

		{"keyring name", `upstream.anthropic.credential = "keyring:"
upstream.github.credential = "keyring:a b"
upstream.npm.credential = "keyring:../SECRET"
`, []string{
			`cproxy.toml:1:33: upstream.anthropic.credential: keyring: needs an entry name of 1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. "keyring:anthropic")`,
			`cproxy.toml:2:30: upstream.github.credential: keyring: needs an entry name of 1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. "keyring:anthropic")`,
			`cproxy.toml:3:27: upstream.npm.credential: keyring: needs an entry name of 1 to 128 letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. "keyring:anthropic")`,
		}},

		{"keyring table", `[keyring]
backend = "wallet"
service = "my/service"
file_dir = 7
`, []string{
			`cproxy.toml:2:11: keyring.backend: "wallet" is not a keyring backend (use "auto", "keychain", "secret-service", "kwallet", "pass" or "file")`,
			`cproxy.toml:3:11: keyring.service: must be 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. "cproxy")`,
			`cproxy.toml:4:12: keyring.file_dir: must be a string, not an integer`,
		}},

		{"keyring unknown key", `[keyring]
backnd = "file"
password = "SECRET"
`, []string{
			`cproxy.toml:2:1: unknown key "backnd" in [keyring] (did you mean "backend"?)`,
			`cproxy.toml:3:1: unknown key "password" in [keyring] (known keys: backend, file_dir, service)`,
		}},

		{"log enums", `[log]
format = "logfmt"
level = "verbose"
`, []string{
			`cproxy.toml:2:10: log.format: "logfmt" is not a log format (use "text" or "json")`,
			`cproxy.toml:3:9: log.level: "verbose" is not a log level (use "debug", "info", "warn" or "error")`,
		}},

		{"claude-code sent as an API key", `[upstream.anthropic]
credential = "claude-code"
auth = "api-key"
`, []string{`cproxy.toml:3:8: upstream.anthropic.auth: "api-key" cannot send credential = "claude-code": Claude Code's login is an OAuth token (use "oauth", or leave auth out: claude-code implies it)`}},

		{"unknown keys", `polcy = "policy.toml"
[listen]
addr = "127.0.0.1:8080"
[upstream.anthropic]
credentials = "env:X"
[upstream.gitlab]
[[sandbox]]
`, []string{
			`cproxy.toml:1:1: unknown key "polcy" (did you mean "policy"?)`,
			`cproxy.toml:3:1: unknown key "addr" in [listen] (known keys: admin, body_timeout, ca_dir, drain, proxy, proxy_tls, public_url, ready_file, sandbox_sockets, tls_cert, tls_key)`,
			`cproxy.toml:5:1: unknown key "credentials" in [upstream.anthropic] (did you mean "credential"?)`,
			`cproxy.toml:6:11: unknown key "gitlab" in [upstream] (known upstreams: anthropic, github, githubapi, gomod, npm, pypi; for another service, add a [relay.gitlab] table)`,
			`cproxy.toml:7:3: unknown key "sandbox" (profiles and [[sandbox]] rules go in the policy file that policy = "…" names)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, probs := loadConfig("cproxy.toml", []byte(tt.src), policy.ReadFile)
			got := make([]string, len(probs))
			for i, pr := range probs {
				got[i] = pr.String()
				if strings.Contains(got[i], "SECRET") || strings.Contains(got[i], "ghp_secret") {
					t.Errorf("a problem echoes a secret: %s", got[i])
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if c != nil {
				t.Errorf("a config with problems came back")
			}
		})
	}
}

func TestLoadConfigWithBrokenPolicy(t *testing.T) {
	dir := t.TempDir()
	policyFile := writeFile(t, filepath.Join(dir, "policy.toml"), `[profile.web]
models = ["claude-*"]
repos = [
  { repo = "acme/app", access = "push" },
]
`)
	name := writeFile(t, filepath.Join(dir, "cproxy.toml"), `policy = "policy.toml"
[log]
level = "loud"
`)
	_, err := LoadConfig(name)
	var probs *policy.Problems
	if !errors.As(err, &probs) {
		t.Fatalf("err = %v, want *policy.Problems", err)
	}
	want := name + `:3:9: log.level: "loud" is not a log level (use "debug", "info", "warn" or "error")` + "\n" +
		policyFile + `:4:33: profile.web.repos: access = "push" needs refs, the refs a push may update (e.g. refs = ["refs/heads/agent/*"], or ["refs/heads/**"] for every branch)`
	if err.Error() != want {
		t.Errorf("err:\n%s\nwant:\n%s", err, want)
	}
}

func TestLoadConfigMissingFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadConfig(filepath.Join(dir, "none.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing config: err = %v", err)
	}
	name := writeFile(t, filepath.Join(dir, "cproxy.toml"), `policy = "nope.toml"`+"\n")
	_, err := LoadConfig(name)
	want := name + `:1:10: policy: "` + filepath.Join(dir, "nope.toml") + `": cannot read: no such file or directory`
	if err == nil || err.Error() != want {
		t.Errorf("missing policy: err = %v, want %s", err, want)
	}
}

func TestValidateAfterOverrides(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c.Listen.Proxy = "localhost"
	c.Log.Level = "loud"
	err := c.Validate()
	var probs policy.Problems
	if !errors.As(err, &probs) {
		t.Fatalf("err = %v, want policy.Problems", err)
	}
	want := `listen.proxy: "localhost" is not host:port (e.g. "127.0.0.1:8080")` + "\n" +
		`log.level: "loud" is not a log level (use "debug", "info", "warn" or "error")`
	if err.Error() != want {
		t.Errorf("err:\n%s\nwant:\n%s", err, want)
	}
}

func TestPolicyPath(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "conf", "p.toml"), webPolicy)
	name := writeFile(t, filepath.Join(dir, "conf", "cproxy.toml"), `policy = "p.toml"`+"\n")
	c, err := LoadConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.PolicyPath(), filepath.Join(dir, "conf", "p.toml"); got != want {
		t.Errorf("PolicyPath = %q, want %q", got, want)
	}
	if _, err := policy.LoadPolicy(c.PolicyPath()); err != nil { // what a reload does
		t.Error(err)
	}
	if Default().PolicyPath() != "" {
		t.Error("Default().PolicyPath() is not empty")
	}
}

func TestKeyringFileDirWithoutDefault(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "")
	c := Default()
	if c.Keyring.FileDir != "" {
		t.Fatalf("file_dir = %q, want no default", c.Keyring.FileDir)
	}
	c.Store.Path = "/state/cproxy.db"
	if err := c.Validate(); err != nil {
		t.Errorf("auto backend without a file_dir: %v", err)
	}
	c.Keyring.Backend = "file"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "keyring.file_dir: no default without $XDG_DATA_HOME or $HOME (set keyring.file_dir)") {
		t.Errorf("file backend without a file_dir: %v", err)
	}
}

// TestClaudeCodeImpliesOAuth: claude-code's token is an OAuth token, so
// auth defaults to "oauth" with it, and stays "api-key" for other sources.
func TestClaudeCodeImpliesOAuth(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"[upstream.anthropic]\ncredential = \"claude-code\"\n", AuthOAuth},
		{"[upstream.anthropic]\ncredential = \"claude-code\"\nauth = \"oauth\"\n", AuthOAuth},
		{"[upstream.anthropic]\ncredential = \"env:X\"\n", AuthAPIKey},
	} {
		c, probs := loadConfig("cproxy.toml", []byte(tt.src), policy.ReadFile)
		if len(probs) > 0 {
			t.Fatalf("%q: %v", tt.src, probs)
		}
		if got := c.Upstream["anthropic"].Auth; got != tt.want {
			t.Errorf("%q: auth %q, want %q", tt.src, got, tt.want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%q: Validate: %v", tt.src, err)
		}
	}
}

// TestLogAudit: log.audit is "", "stdout" or a file relative to the config
// file, whose directory must exist; anything else is refused at its line.
func TestLogAudit(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ value, want, problem string }{
		{`""`, "", ""},
		{`"stdout"`, "stdout", ""},
		{`"audit.jsonl"`, filepath.Join(dir, "audit.jsonl"), ""},
		{`"logs/audit.jsonl"`, filepath.Join(dir, "logs", "audit.jsonl"), ""},
		{`"/abs/nowhere/audit.jsonl"`, "", `cproxy.toml:2:9: log.audit: the directory of "/abs/nowhere/audit.jsonl" does not exist (create /abs/nowhere, or point log.audit elsewhere)`},
		{`"missing/audit.jsonl"`, "", `cproxy.toml:2:9: log.audit: the directory of "` + filepath.Join(dir, "missing", "audit.jsonl") + `" does not exist (create ` + filepath.Join(dir, "missing") + `, or point log.audit elsewhere)`},
		{`"logs"`, "", `cproxy.toml:2:9: log.audit: "` + filepath.Join(dir, "logs") + `" is a directory (name a file in it, e.g. "` + filepath.Join(dir, "logs", "audit.jsonl") + `")`},
		{`"logs/"`, "", `cproxy.toml:2:9: log.audit: "logs/" is not a file path (e.g. "/var/log/cproxy/audit.jsonl")`},
		{`"stderr"`, "", `cproxy.toml:2:9: log.audit: "stderr" is not a destination: leave log.audit out to keep the audit lines with the diagnostic log on standard error, or use "stdout" or a file path (e.g. "audit.jsonl")`},
		{`7`, "", `cproxy.toml:2:9: log.audit: must be a string, not an integer`},
	} {
		name := writeFile(t, filepath.Join(dir, "cproxy.toml"), "[log]\naudit = "+tt.value+"\n")
		c, err := LoadConfig(name)
		if tt.problem != "" {
			var probs *policy.Problems
			if !errors.As(err, &probs) || len(*probs) != 1 || (*probs)[0].String() != strings.Replace(tt.problem, "cproxy.toml", name, 1) {
				t.Errorf("audit = %s: %v, want %s", tt.value, err, tt.problem)
			}
			continue
		}
		if err != nil {
			t.Errorf("audit = %s: %v", tt.value, err)
			continue
		}
		if c.Log.Audit != tt.want {
			t.Errorf("audit = %s: %q, want %q", tt.value, c.Log.Audit, tt.want)
		}
	}
	if got := Default().Log.Audit; got != "" {
		t.Errorf("default log.audit = %q, want \"\"", got)
	}
}

// The derived bound on sandbox connections keeps a reserve of open files
// for the admin listener, the store and the upstreams, and leaves each
// connection room for its upstream's.
func TestDefaultMaxConnections(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int64
	}{
		{0, 1}, {100, 1}, {130, 1}, {400, 136}, {1024, 384}, {524288, 196608}, {1 << 62, 1 << 30}, {^uint64(0), 1 << 30},
	} {
		got := DefaultMaxConnections(c.nofile)
		if got != c.want {
			t.Errorf("DefaultMaxConnections(%d) = %d, want %d", c.nofile, got, c.want)
		}
		if reserve := int64(c.nofile) - 2*got; c.nofile >= 400 && c.nofile < 1<<40 && reserve < reservedFiles {
			t.Errorf("DefaultMaxConnections(%d) = %d leaves %d files, want at least %d", c.nofile, got, reserve, reservedFiles)
		}
	}
}

// Every path a config sets is expanded before it is resolved: ~/, $NAME and
// ${NAME}, in a file: credential and a unix: listener too; other values
// are taken as written.
func TestLoadConfigExpandsPaths(t *testing.T) {
	t.Setenv("HOME", "/home/you")
	t.Setenv("CPX_A", "/srv/a")
	t.Setenv("CPX_B", "b")
	c, probs := loadConfig("/etc/cproxy/cproxy.toml", []byte(`
[listen]
proxy = "unix:$CPX_A/proxy.sock"
admin = "unix:~/$CPX_B.sock"
ready_file = "${CPX_A}x$CPX_B/ready.json"

[store]
path = "~/state/cproxy.db"

[upstream.anthropic]
credential = "file:~/keys/$CPX_B"

[upstream.github]
credential = "env:CPX_B"

[relay.mod]
prefix = "/mod/"
url = "https://hub.example.com/mod/"
methods = ["GET"]
paths = ["events"]
headers = { Authorization = { credential = "file:$CPX_B/hub.key" } }
`), policy.ReadFile)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	for _, tt := range []struct{ name, got, want string }{
		{"listen.proxy", c.Listen.Proxy, "unix:/srv/a/proxy.sock"},
		{"listen.admin", c.Listen.Admin, "unix:/home/you/b.sock"},
		{"listen.ready_file", c.Listen.ReadyFile, "/srv/axb/ready.json"},
		{"store.path", c.Store.Path, "/home/you/state/cproxy.db"},
		{"upstream.anthropic.credential", c.Upstream["anthropic"].Credential, "file:/home/you/keys/b"},
		{"upstream.github.credential", c.Upstream["github"].Credential, "env:CPX_B"},
		{"relay header", c.Relays["mod"].Headers["Authorization"].Credential, "file:/etc/cproxy/b/hub.key"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// webPolicy is a policy file for the configs here to name; the policy
// package's tests hold what a policy means.
const webPolicy = `[profile.web]
models = ["claude-sonnet-*"]

[[sandbox]]
match = "conv-*"
profile = "web"
`
