package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
)

// An [upstream.NAME] that is no kind is refused where the file names it,
// with the kinds there are and where another service goes; a near miss is
// taken for the kind it misspells. Nothing else is said about its keys.
func TestUnknownUpstream(t *testing.T) {
	src := `[upstream.gitlab]
url = "not a url"
credential = "SECRET"

[upstream.githb]
credential = "env:GITHUB_TOKEN"
`
	_, probs := loadConfig("cproxy.toml", []byte(src), policy.ReadFile)
	got := probs.Error()
	want := strings.Join([]string{
		`cproxy.toml:1:11: unknown key "gitlab" in [upstream] (known upstreams: anthropic, github, githubapi, gomod, npm, pypi; for another service, add a [relay.gitlab] table)`,
		`cproxy.toml:5:11: unknown key "githb" in [upstream] (did you mean "github"?)`,
	}, "\n")
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// A kind's table keeps the kind's defaults for every key it does not set.
func TestUpstreamKeepsDefaults(t *testing.T) {
	for _, k := range UpstreamKinds {
		t.Run(k.Name, func(t *testing.T) {
			c, probs := loadConfig("cproxy.toml", fmt.Appendf(nil, "[upstream.%s]\nheader_timeout = \"7s\"\n", k.Name), policy.ReadFile)
			if len(probs) > 0 {
				t.Fatal(probs)
			}
			want := *Default().Upstream[k.Name]
			want.HeaderTimeout = Duration{7 * time.Second}
			if got := *c.Upstream[k.Name]; got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
			if len(c.Upstream) != len(UpstreamKinds) {
				t.Errorf("upstreams: %v", c.Upstream)
			}
		})
	}
}

// Every kind's file: credential is relative to the config file's directory
// and may start with ~/ or hold $NAME, so that a new kind cannot be left out
// of the list of paths to resolve.
func TestUpstreamCredentialFilePaths(t *testing.T) {
	t.Setenv("HOME", "/home/you")
	t.Setenv("CPX_KEYS", "/keys")
	dir := filepath.Join(t.TempDir(), "etc")
	for _, src := range []struct{ path, want string }{
		{"keys/%s", filepath.Join(dir, "keys") + "/%s"},
		{"~/keys/%s", "/home/you/keys/%s"},
		{"$CPX_KEYS/%s", "/keys/%s"},
	} {
		var b strings.Builder
		for _, k := range UpstreamKinds {
			fmt.Fprintf(&b, "[upstream.%s]\ncredential = \"file:%s\"\n", k.Name, fmt.Sprintf(src.path, k.Name))
		}
		c, err := LoadConfig(writeFile(t, filepath.Join(dir, "cproxy.toml"), b.String()))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range UpstreamKinds {
			if got, want := c.Upstream[k.Name].Credential, "file:"+fmt.Sprintf(src.want, k.Name); got != want {
				t.Errorf("upstream.%s.credential = %q, want %q", k.Name, got, want)
			}
		}
	}
}

// Only a kind with auth modes takes auth.
func TestUpstreamAuthOnlyWhereItMeansSomething(t *testing.T) {
	_, probs := loadConfig("cproxy.toml", []byte("[upstream.github]\nauth = \"oauth\"\n"), policy.ReadFile)
	want := `cproxy.toml:2:1: upstream.github.auth: upstream.github has no auth modes (auth is for upstream.anthropic or upstream.pypi): remove it`
	if got := probs.Error(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// A GitHub App's keys: the App replaces the default credential; a
// credential beside it, a missing key, and App keys on an upstream that
// takes no App are each refused where the file sets them, with the fix.
func TestGitHubApp(t *testing.T) {
	c, probs := loadConfig("/etc/cproxy/cproxy.toml", []byte(`[upstream.github]
app_id = 12345
private_key = "file:app.pem"
installation_id = 678
`), policy.ReadFile)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	u := c.Upstream["github"]
	if u.Credential != "" || u.AppID != 12345 || u.InstallationID != 678 || u.PrivateKey != "file:/etc/cproxy/app.pem" || u.APIURL != "https://api.github.com" {
		t.Errorf("got %+v", *u)
	}
	for _, tc := range []struct{ src, want string }{
		{`[upstream.github]
credential = "env:GITHUB_TOKEN"
app_id = 1
private_key = "env:KEY"
installation_id = 2
`, `cproxy.toml:2:14: upstream.github.credential: cannot be combined with upstream.github.app_id: a GitHub App mints its own tokens; remove credential to use the App, or remove app_id, private_key and installation_id to send the token`},
		{`[upstream.github]
app_id = 1
`, `cproxy.toml:2:1: upstream.github.app_id: needs upstream.github.private_key, where the App's private key (PEM) comes from (e.g. "file:/etc/cproxy/github-app.pem")`},
		{`[upstream.github]
private_key = "env:KEY"
installation_id = 2
`, `cproxy.toml:2:1: upstream.github.private_key: needs upstream.github.app_id, the GitHub App's id (the App ID on its settings page): set it, or remove private_key to send credential
cproxy.toml:3:1: upstream.github.installation_id: needs upstream.github.app_id, the GitHub App's id (the App ID on its settings page): set it, or remove installation_id to send credential`},
		{`[upstream.github]
app_id = 1
private_key = "KEY"
installation_id = -3
api_url = "api.github.com"
`, `cproxy.toml:3:15: upstream.github.private_key: not a credential source (use "env:NAME", "file:PATH" or "keyring:NAME"; never the secret itself)
cproxy.toml:4:19: upstream.github.installation_id: -3 is not an installation id (a positive number: the end of the installation's settings URL; leave it out to look it up per repository owner)
cproxy.toml:5:11: upstream.github.api_url: `},
		{`[upstream.npm]
app_id = 1
`, `cproxy.toml:2:1: upstream.npm.app_id: upstream.npm takes no GitHub App (app_id is for upstream.github): remove it`},
	} {
		_, probs := loadConfig("cproxy.toml", []byte(tc.src), policy.ReadFile)
		if got := probs.Error(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s\ngot:\n%s\nwant:\n%s", tc.src, got, tc.want)
		}
	}
}
