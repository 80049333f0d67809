package sandboxenv

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// hostile values a token or URL could hold if a harness passed through
// something it should not have: each must come back byte for byte from eval.
var hostile = []string{
	`plain`,
	`it's`,
	`'; touch /tmp/pwned; echo '`,
	`$(touch /tmp/pwned)`,
	"`touch /tmp/pwned`",
	`"double" \back\slash $HOME ${HOME}`,
	"line\nbreak",
	"tab\there",
	`!event ~tilde *glob ?x [a] {a,b} # comment ; & | < >`,
	"unicode ✓ ü",
	"",
}

func TestShellOutputSurvivesEval(t *testing.T) {
	for _, sh := range []string{"sh", "bash", "dash"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			continue
		}
		for _, v := range hostile {
			e := Env{{"CPROXY_TEST_VALUE", v}}
			script, err := e.Shell()
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(path, "-c", script+`printf '%s' "$CPROXY_TEST_VALUE"`).Output()
			if err != nil {
				t.Fatalf("%s: eval of %q failed: %v", sh, script, err)
			}
			if string(out) != v {
				t.Errorf("%s: value %q came back as %q", sh, v, out)
			}
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	var e Env
	for i, v := range hostile {
		e = append(e, Var{"V" + string(rune('A'+i)), v})
	}
	b, err := e.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	for _, v := range e {
		if got[v.Name] != v.Value {
			t.Errorf("%s: got %q, want %q", v.Name, got[v.Name], v.Value)
		}
	}
}

func TestEnvFileRefusesLineBreaks(t *testing.T) {
	if _, err := (Env{{"A", "x\ny"}}).EnvFile(); err == nil || !strings.Contains(err.Error(), "line break") {
		t.Fatalf("got %v, want a line-break error", err)
	}
	out, err := Env{{"A", "a b='c'"}}.EnvFile()
	if err != nil || out != "A=a b='c'\n" {
		t.Fatalf("got %q, %v", out, err)
	}
}

func TestRefusesBadNamesAndNUL(t *testing.T) {
	for _, e := range []Env{{{"1A", "x"}}, {{"A-B", "x"}}, {{"", "x"}}, {{"A", "x\x00y"}}} {
		if _, err := e.Shell(); err == nil {
			t.Errorf("%q: Shell accepted it", e)
		}
		if _, err := e.JSON(); err == nil {
			t.Errorf("%q: JSON accepted it", e)
		}
	}
}

func TestBuild(t *testing.T) {
	e, _, err := Build(Options{ProxyURL: "http://10.0.0.1:8080/", Token: "cpx_x", ClaudeConfigDir: "/w/.claude"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(e.Environ(), "\n")
	want := strings.Join([]string{
		"ANTHROPIC_BASE_URL=http://10.0.0.1:8080",
		"ANTHROPIC_AUTH_TOKEN=cpx_x",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"CPROXY_URL=http://10.0.0.1:8080",
		"CPROXY_TOKEN=cpx_x",
		"CLAUDE_CONFIG_DIR=/w/.claude",
		"npm_config_registry=http://10.0.0.1:8080/npm/",
		"npm_config_update_notifier=false",
		"npm_config_//10.0.0.1:8080/npm/:_authToken=cpx_x",
		"YARN_NPM_REGISTRY_SERVER=http://10.0.0.1:8080/npm",
		"YARN_NPM_AUTH_TOKEN=cpx_x",
		"YARN_NPM_ALWAYS_AUTH=true",
		"YARN_UNSAFE_HTTP_WHITELIST=10.0.0.1",
	}, "\n")
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	e, _, _ = Build(Options{ProxyURL: "http://h:1", Token: "cpx_x", ClaudeAuth: ClaudeAuthOAuth})
	if e[1].Name != "CLAUDE_CODE_OAUTH_TOKEN" {
		t.Errorf("oauth: got %v", e[1])
	}
	sub := ClaudeSubscription{Type: "max", RateLimitTier: "default_claude_max_20x", Scopes: []string{"user:inference", "user:profile"}, AssumeFirstParty: true}
	e, _, _ = Build(Options{ProxyURL: "http://h:1", Token: "cpx_x", ClaudeAuth: ClaudeAuthOAuth, Subscription: sub, NoNPM: true})
	if got, want := strings.Join(e.Environ()[1:6], "\n"), strings.Join([]string{
		"CLAUDE_CODE_OAUTH_TOKEN=cpx_x",
		"_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL=1",
		"CLAUDE_CODE_SUBSCRIPTION_TYPE=max",
		"CLAUDE_CODE_RATE_LIMIT_TIER=default_claude_max_20x",
		"CLAUDE_CODE_OAUTH_SCOPES=user:inference user:profile",
	}, "\n"); got != want {
		t.Errorf("oauth with a subscription: got\n%s\nwant\n%s", got, want)
	}
	// The subscription describes an oauth upstream; the API-account mode
	// leaves it out.
	e, _, _ = Build(Options{ProxyURL: "http://h:1", Token: "cpx_x", Subscription: sub, NoNPM: true})
	for _, v := range e {
		if strings.Contains(v.Name, "SUBSCRIPTION") || strings.Contains(v.Name, "FIRST_PARTY") {
			t.Errorf("auth-token mode sets %s", v.Name)
		}
	}
	if _, _, err := Build(Options{ProxyURL: "http://h:1", Token: "t", ClaudeAuth: "bogus"}); err == nil {
		t.Error("unknown claude auth accepted")
	}
}

// With Pip, pip and uv get the PyPI route as their index, the token as
// the URL's password; a plain-http proxy is trusted by host and port, an
// https one is not listed.
func TestBuildPip(t *testing.T) {
	for _, c := range []struct{ proxy, want string }{
		{"http://10.0.0.1:8080/", "PIP_INDEX_URL=http://cproxy:cpx_x@10.0.0.1:8080/pypi/simple/\nPIP_DISABLE_PIP_VERSION_CHECK=1\nPIP_TRUSTED_HOST=10.0.0.1:8080\nUV_DEFAULT_INDEX=http://cproxy:cpx_x@10.0.0.1:8080/pypi/simple/"},
		{"https://cproxy.internal", "PIP_INDEX_URL=https://cproxy:cpx_x@cproxy.internal/pypi/simple/\nPIP_DISABLE_PIP_VERSION_CHECK=1\nUV_DEFAULT_INDEX=https://cproxy:cpx_x@cproxy.internal/pypi/simple/"},
	} {
		e, _, err := Build(Options{ProxyURL: c.proxy, Token: "cpx_x", NoNPM: true, NoGit: true, Pip: true})
		if err != nil {
			t.Fatal(err)
		}
		env := e.Environ()
		if got := strings.Join(env[len(env)-strings.Count(c.want, "\n")-1:], "\n"); got != c.want {
			t.Errorf("%s: got\n%s\nwant\n%s", c.proxy, got, c.want)
		}
	}
}
