package sandboxenv

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// issueCredentials are variables that carry a credential under names a
// list of exact names missed, each as a harness could hold it.
var issueCredentials = map[string]string{
	"ANTHROPIC_API_KEY":        "sk-ant-real",
	"anthropic_api_key":        "sk-ant-lower",
	"GITHUB_TOKEN":             "ghp_real",
	"GH_ENTERPRISE_TOKEN":      "ghe_real",
	"GITHUB_PAT":               "github_pat_real",
	"AWS_BEARER_TOKEN_BEDROCK": "bedrock_real",
	"AWS_SECRET_ACCESS_KEY":    "aws_real",
	"npm_config__authToken":    "npm_real",
	"npm_config__auth":         "npm_real_auth",
	"GIT_ASKPASS":              "/usr/local/bin/give-the-real-token",
	"GIT_CONFIG_PARAMETERS":    "'http.extraheader'='Authorization: Bearer ghp_real'",
	"DB_PASSWORD":              "hunter2",
	"MY_SECRET_THING":          "s3cret",
	"OPENAI_APIKEY":            "sk-real",
}

func TestLooksLikeCredential(t *testing.T) {
	for name := range issueCredentials {
		if !LooksLikeCredential(name) {
			t.Errorf("%s: not taken for a credential", name)
		}
	}
	for _, name := range append(slices.Clone(CredentialVars), "NODE_AUTH_TOKEN", "YARN_NPM_AUTH_IDENT", "SSH_KEY", "GITHUB_PAT_2", "private_key_file") {
		if !LooksLikeCredential(name) {
			t.Errorf("%s: not taken for a credential", name)
		}
	}
	for _, name := range []string{"PATH", "HOME", "GIT_AUTHOR_NAME", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "MONKEY",
		"KEYBOARD", "PATTERN", "AUTHOR", "npm_config_cache", "LANG", "KEEP_ME", "COMPASS"} {
		if LooksLikeCredential(name) {
			t.Errorf("%s: taken for a credential", name)
		}
	}
}

// gitInherited are git settings a harness's environment carries: one
// harmless, then an extra header with a real token (as actions/checkout
// writes), a helper, and an insteadOf rule with a password in its URL.
var gitInherited = map[string]string{
	"GIT_CONFIG_COUNT":   "5",
	"GIT_CONFIG_KEY_0":   "user.name",
	"GIT_CONFIG_VALUE_0": "Kept",
	"GIT_CONFIG_KEY_1":   "http.https://github.com/.extraheader",
	"GIT_CONFIG_VALUE_1": "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX3JlYWw=",
	"GIT_CONFIG_KEY_2":   "credential.helper",
	"GIT_CONFIG_VALUE_2": "!f() { echo password=ghp_real; }; f",
	"GIT_CONFIG_KEY_3":   "url.https://x:ghp_real@github.com/.insteadOf",
	"GIT_CONFIG_VALUE_3": "https://github.com/",
	"GIT_CONFIG_KEY_4":   "core.autocrlf",
	"GIT_CONFIG_VALUE_4": "input",
}

// gitScrubbed is gitInherited after the scrub: the numbering kept, the
// entries that carried a credential made inert.
var gitScrubbed = map[string]string{
	"GIT_CONFIG_COUNT":   "5",
	"GIT_CONFIG_KEY_0":   "user.name",
	"GIT_CONFIG_VALUE_0": "Kept",
	"GIT_CONFIG_KEY_1":   gitScrubbedKey,
	"GIT_CONFIG_VALUE_1": "",
	"GIT_CONFIG_KEY_2":   gitScrubbedKey,
	"GIT_CONFIG_VALUE_2": "",
	"GIT_CONFIG_KEY_3":   gitScrubbedKey,
	"GIT_CONFIG_VALUE_3": "",
	"GIT_CONFIG_KEY_4":   "core.autocrlf",
	"GIT_CONFIG_VALUE_4": "input",
}

func environOf(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func TestScrub(t *testing.T) {
	e, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t"})
	if err != nil {
		t.Fatal(err)
	}
	in := merge(issueCredentials, gitInherited, map[string]string{"PATH": "/bin", "ANTHROPIC_AUTH_TOKEN": "old", "GIT_AUTHOR_NAME": "A"})
	got := e.Scrub(environOf(in))
	want := environOf(merge(gitScrubbed, map[string]string{"PATH": "/bin", "GIT_AUTHOR_NAME": "A"}))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// TestUnsetShell evaluates the whole sh output, both forms, in bash, dash
// and zsh, after an environment holding credentials under many names and
// git settings carrying some: none is left, the git settings that carried
// one are inert and the others kept, cproxy's come after them.
func TestUnsetShell(t *testing.T) {
	e, g, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t", ClaudeAuth: ClaudeAuthOAuth})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Shell()
	if err != nil {
		t.Fatal(err)
	}
	gs, err := g.Shell()
	if err != nil {
		t.Fatal(err)
	}
	script := e.UnsetShell() + s + gs
	dir := globFolder(t, script)
	environ := merge(issueCredentials, gitInherited, map[string]string{"HOME": dir, "KEEP_ME": "yes", "GIT_AUTHOR_NAME": "A"})
	want := merge(gitScrubbed, map[string]string{"HOME": dir, "KEEP_ME": "yes", "GIT_AUTHOR_NAME": "A"}, e.Exportable().asMap(), g.Env(5).asMap())
	for _, sh := range evalShells {
		t.Run(sh, func(t *testing.T) {
			path := shellPath(t, sh)
			for form, code := range evalForms {
				got, status, stderr := evalEnv(t, path, code, dir, script, environOf(environ))
				if status != 0 || stderr != "" {
					t.Errorf("%s: status %d, stderr %q", form, status, stderr)
				}
				if !maps.Equal(got, want) {
					for k, v := range want {
						if got[k] != v {
							t.Errorf("%s: %s=%q, want %q", form, k, got[k], v)
						}
					}
					for k, v := range got {
						if _, ok := want[k]; !ok {
							t.Errorf("%s: %s=%q is left", form, k, v)
						}
					}
				}
			}
		})
	}
}

// TestUnsetShellWithoutAwk: the named credentials go all the same, and a
// message says the rest could not be looked for.
func TestUnsetShellWithoutAwk(t *testing.T) {
	e, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t", NoGit: true})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := e.Shell()
	// A PATH with env, which evalEnv runs, and no awk.
	dir := t.TempDir()
	envPath, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(envPath, filepath.Join(dir, "env")); err != nil {
		t.Fatal(err)
	}
	got, status, stderr := evalEnv(t, shellPath(t, "dash"), evalForms["unquoted"], dir, "PATH="+dir+"; "+e.UnsetShell()+s,
		[]string{"GITHUB_TOKEN=ghp_real", "GITHUB_PAT=pat_real"})
	if status != 0 || !strings.Contains(stderr, "cproxy: no awk: only the credential variables named in the unset statement were removed") {
		t.Errorf("status %d, stderr %q", status, stderr)
	}
	if _, ok := got["GITHUB_TOKEN"]; ok || got["GITHUB_PAT"] != "pat_real" {
		t.Errorf("got %q", got)
	}
}

func TestExecEnviron(t *testing.T) {
	e, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t"})
	if err != nil {
		t.Fatal(err)
	}
	// Always passed: the base, and Claude Code's settings that are set.
	base := map[string]string{"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "TERM": "xterm", "IS_SANDBOX": "1", "MCP_TIMEOUT": "60000"}
	in := merge(issueCredentials, gitInherited, base, map[string]string{
		"KEEP_ME": "no", "MY_A": "a", "MY_TOKEN": "t", "NPM_CONFIG_REGISTRY": "https://elsewhere/", "EXACT_SECRET": "asked for",
		// Claude Code's settings that are not passed unless named: the
		// host's config folder (where its login is), another API, a
		// count whose name looks like a credential.
		"CLAUDE_CONFIG_DIR": "/root/.claude", "CLAUDE_CODE_USE_BEDROCK": "1", "ANTHROPIC_BASE_URL": "https://elsewhere/",
		"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "64000"})
	tests := []struct {
		pass []string
		want map[string]string
	}{
		{nil, base},
		// An exact name passes as it is; a pattern only what does not look
		// like a credential.
		{[]string{"MY_*", "EXACT_SECRET", "CLAUDE_CODE_MAX_OUTPUT_TOKENS"}, merge(base, map[string]string{"MY_A": "a", "EXACT_SECRET": "asked for", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "64000"})},
		{[]string{"CLAUDE_CODE_*"}, merge(base, map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1"})},
		{[]string{"GIT_CONFIG_*", "NPM_*"}, merge(gitScrubbed, base)},
	}
	for _, tc := range tests {
		if err := CheckPass(tc.pass); err != nil {
			t.Fatal(err)
		}
		got := e.ExecEnviron(environOf(in), tc.pass)
		slices.Sort(got)
		if want := environOf(tc.want); !slices.Equal(got, want) {
			t.Errorf("pass %q:\ngot  %q\nwant %q", tc.pass, got, want)
		}
	}
	for _, bad := range []string{"", "A=B", "[", "a\x00"} {
		if err := CheckPass([]string{bad}); err == nil {
			t.Errorf("--pass %q accepted", bad)
		}
	}
}

// TestExecClaudeNoCredentials: the Claude Code settings exec passes
// without being asked hold no name that looks like a credential, none of
// the real-credential variables, none that sends Claude Code to another
// API or another config folder, and none that cproxy env sets itself.
func TestExecClaudeNoCredentials(t *testing.T) {
	if !slices.Contains(execClaude, "IS_SANDBOX") {
		t.Errorf("IS_SANDBOX is not passed")
	}
	e, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t", ClaudeAuth: ClaudeAuthOAuth, ClaudeConfigDir: "/c",
		Subscription: ClaudeSubscription{Type: "max", RateLimitTier: "t", Scopes: []string{"user:inference"}, AssumeFirstParty: true}})
	if err != nil {
		t.Fatal(err)
	}
	e2, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, name := range execClaude {
		switch u := strings.ToUpper(name); {
		case LooksLikeCredential(name), slices.Contains(CredentialVars, name):
			t.Errorf("%s: looks like a credential", name)
		case strings.Contains(u, "URL"), strings.Contains(u, "HEADER"), strings.Contains(u, "HELPER"), strings.Contains(u, "PROXY"),
			strings.HasPrefix(u, "CLAUDE_CODE_USE_"), strings.HasPrefix(u, "OTEL_"), strings.Contains(u, "CONFIG_DIR"):
			t.Errorf("%s: sends Claude Code's requests or credentials elsewhere", name)
		case e.has(name), e2.has(name):
			t.Errorf("%s: set by cproxy env itself", name)
		case slices.Contains(execBase, name), seen[name]:
			t.Errorf("%s: listed twice", name)
		}
		seen[name] = true
	}
	if got := ExecClaude(); !strings.HasPrefix(got, "IS_SANDBOX, ") {
		t.Errorf("ExecClaude() = %q", got)
	}
}

// unsettable are variables that look like credentials under names no shell
// can unset: bash and zsh pass them on to the commands they start, dash
// drops them. Beside them, one that looks like none.
var unsettable = map[string]string{
	"MY-TOKEN":        "tok_real",
	"a.b_SECRET":      "s3cret",
	"c\x1b[31m_TOKEN": "tok_escape",
	"npm_config_//registry.npmjs.org/:_authToken": "npm_real",
	"KEEP-ME": "kept",
}

// unsetMessageFor is the message of the sh and fish outputs about names,
// as they show them.
func unsetMessageFor(names ...string) string {
	return unsetMessage[0] + strings.Join(names, ", ") + unsetMessage[1] + "\n" + unsetMessage[2] + "\n"
}

// TestUnsetShellNamesWhatItCannotUnset evaluates the sh output, both forms,
// in bash, dash and zsh, after an environment holding credentials under
// names no shell can unset: each that a command still inherits after eval
// is named on standard error, as the message shows it (a control character
// as ?), and nothing else; the eval still succeeds, and the names a shell
// can unset are gone.
func TestUnsetShellNamesWhatItCannotUnset(t *testing.T) {
	e, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_t", NoGit: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Shell()
	if err != nil {
		t.Fatal(err)
	}
	script := e.UnsetShell() + s
	dir := globFolder(t, script)
	environ := merge(unsettable, map[string]string{"HOME": dir, "GITHUB_PAT": "github_pat_real"})
	// The shells that pass such names on must be named here, so that the
	// test cannot pass by finding none left.
	passesOn := map[string]bool{"bash": true, "dash": false, "zsh": true}
	for _, sh := range evalShells {
		t.Run(sh, func(t *testing.T) {
			path := shellPath(t, sh)
			for form, code := range evalForms {
				got, status, stderr := evalEnv(t, path, code, dir, script, environOf(environ))
				var left []string
				for name := range unsettable {
					if _, ok := got[name]; ok && LooksLikeCredential(name) {
						left = append(left, strings.ReplaceAll(name, "\x1b", "?"))
					}
				}
				slices.Sort(left)
				want := ""
				if len(left) > 0 {
					want = unsetMessageFor(left...)
				}
				if status != 0 || stderr != want {
					t.Errorf("%s: status %d, stderr %q; want 0, %q", form, status, stderr, want)
				}
				if passesOn[sh] != (len(left) == 4) {
					t.Errorf("%s: %s left %q", form, sh, left)
				}
				if _, ok := got["GITHUB_PAT"]; ok {
					t.Errorf("%s: GITHUB_PAT is left", form)
				}
			}
		})
	}
}
