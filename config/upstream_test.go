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
	src := `[upstream.pypi]
url = "not a url"
credential = "SECRET"

[upstream.githb]
credential = "env:GITHUB_TOKEN"
`
	_, probs := loadConfig("cproxy.toml", []byte(src), policy.ReadFile)
	got := probs.Error()
	want := strings.Join([]string{
		`cproxy.toml:1:11: unknown key "pypi" in [upstream] (known upstreams: anthropic, github, npm; for another service, add a [relay.pypi] table)`,
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
	want := `cproxy.toml:2:1: upstream.github.auth: upstream.github has no auth modes (auth is for upstream.anthropic): remove it`
	if got := probs.Error(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
