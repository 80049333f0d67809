package sandboxenv

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// evalShells are the shells the sh output is evaluated in. CI installs
// them (.ci/run); elsewhere a missing one is skipped.
var evalShells = []string{"bash", "dash", "zsh"}

// evalForms are the two ways harnesses evaluate cproxy env: quoted, and
// unquoted as in eval $(ssh-agent), where the shell splits the output into
// words, expands globs against the current folder and joins the words
// with spaces before eval parses them.
var evalForms = map[string]string{
	"quoted":   `eval "$(cat "$CPROXY_SCRIPT")"`,
	"unquoted": `eval $(cat "$CPROXY_SCRIPT")`,
	// Globbing at its strictest: bash fails on a glob that matches nothing
	// and reads extglob patterns; zsh emulating sh globs the words of an
	// expansion (GLOB_SUBST) and fails on a glob that matches nothing.
	"unquoted, strict globs": `command -v shopt >/dev/null && shopt -s extglob failglob; ` +
		`test -n "$ZSH_VERSION" && emulate sh; eval $(cat "$CPROXY_SCRIPT")`,
}

// globFolder makes a folder holding files whose names glob patterns in
// script would match: every word of the script, each with its *, ? and
// [...] replaced by a plain letter, and files named *, ?, [a] and a.
func globFolder(t *testing.T, script string) string {
	dir := t.TempDir()
	names := []string{"*", "?", "[a]", "a", "ab", "-"}
	for _, w := range strings.Fields(script) {
		names = append(names, w, strings.NewReplacer("*", "Q", "?", "Q", "[", "", "]", "").Replace(w))
	}
	for _, n := range names {
		if n == "" || n == "." || n == ".." || strings.ContainsRune(n, '/') || len(n) > 255 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// shellPath finds sh, or skips the test for it outside CI.
func shellPath(t *testing.T, sh string) string {
	path, err := exec.LookPath(sh)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s is not installed (.ci/run installs it)", sh)
		}
		t.Skipf("%s is not installed: install the %s package to run this test (under CI=true it fails)", sh, sh)
	}
	return path
}

// evalEnv evaluates script with form in sh, in dir, with environ, and
// returns the environment a command then inherits (read with env -0),
// the status and stderr.
func evalEnv(t *testing.T, sh, form, dir, script string, environ []string) (map[string]string, int, string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// The status of eval, then the environment after it.
	cmd := exec.Command(sh, "-c", form+`; echo $? >"$CPROXY_SCRIPT.rc"; exec env -0`)
	cmd.Dir = dir
	cmd.Env = append(environ, "CPROXY_SCRIPT="+f, "PATH="+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s, %s: %v, stderr %q", sh, form, err, stderr.String())
	}
	rc, err := os.ReadFile(f + ".rc")
	if err != nil {
		t.Fatal(err)
	}
	status, _ := strconv.Atoi(strings.TrimSpace(string(rc)))
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	// What the shell itself sets, and the test's own.
	for _, k := range []string{"PWD", "OLDPWD", "SHLVL", "_", "LOGNAME", "CPROXY_SCRIPT", "PATH"} {
		delete(env, k)
	}
	return env, status, stderr.String()
}

// TestShellEvalForms evaluates a whole sh output, values and git settings
// holding every kind of hostile byte, quoted and unquoted, in bash, dash
// and zsh, in a folder of files its words would match as globs, and
// checks the environment variable by variable: the same either way, and
// what was asked for.
func TestShellEvalForms(t *testing.T) {
	var e Env
	for i, v := range append(hostile, "two  spaces", "trailing newlines\n\n", "\ttab first", "back\\slash*", "100%", "%s %d \\n", "(paren) @(x) +(y) !(z)", "'") {
		e = append(e, Var{"CPROXY_TEST_" + strconv.Itoa(i), v})
	}
	g := GitConfigs{
		{"url.http://h:1/github/.insteadOf", "https://github.com/"},
		{"http.http://h:1/it's *[a]?/.extraHeader", "Authorization: Bearer  cpx_*?[a]\n"},
	}
	envScript, err := e.Shell()
	if err != nil {
		t.Fatal(err)
	}
	gitScript, err := g.Shell()
	if err != nil {
		t.Fatal(err)
	}
	script := envScript + gitScript
	for _, c := range []byte("*?[\\") {
		for _, line := range strings.Split(script, "\n") {
			if strings.IndexByte(line, c) >= 0 && !strings.HasPrefix(strings.TrimSpace(line), cproxyVar+`="$(printf '`) {
				t.Errorf("%q outside a printf format: %s", c, line)
			}
		}
	}
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			t.Errorf("a comment, which would run to the end of the joined line under unquoted eval: %s", line)
		}
	}
	dir := globFolder(t, script)

	base := map[string]string{"HOME": dir, "KEEP": "kept"}
	gitExisting := map[string]string{"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "Existing",
		"GIT_CONFIG_KEY_1": "user.email", "GIT_CONFIG_VALUE_1": "e@example.com"}
	tests := []struct {
		name    string
		environ map[string]string
		status  int
		stderr  string
		git     int // where cproxy's settings start, or -1 for none
	}{
		{"no count", base, 0, "", 0},
		{"count 2", merge(base, gitExisting), 0, "", 2},
		{"count 02", merge(base, gitExisting, map[string]string{"GIT_CONFIG_COUNT": "02"}), 0, "", 2},
		{"not a count", merge(base, gitExisting, map[string]string{"GIT_CONFIG_COUNT": "2x"}), 1, "cproxy: GIT_CONFIG_COUNT is not a count: git settings left out\n", -1},
		{"glob count", merge(base, gitExisting, map[string]string{"GIT_CONFIG_COUNT": "*"}), 1, "cproxy: GIT_CONFIG_COUNT is not a count: git settings left out\n", -1},
		{"hostile count", merge(base, gitExisting, map[string]string{"GIT_CONFIG_COUNT": "a[$(touch pwned)]"}), 1, "cproxy: GIT_CONFIG_COUNT is not a count: git settings left out\n", -1},
		{"too large", merge(base, gitExisting, map[string]string{"GIT_CONFIG_COUNT": "1000000000"}), 1, "cproxy: GIT_CONFIG_COUNT is not a count: git settings left out\n", -1},
	}
	for _, sh := range evalShells {
		t.Run(sh, func(t *testing.T) {
			path := shellPath(t, sh)
			for _, tc := range tests {
				want := maps.Clone(tc.environ)
				for _, v := range e {
					want[v.Name] = v.Value
				}
				if tc.git >= 0 {
					maps.Copy(want, g.Env(tc.git).asMap())
				}
				var environ []string
				for k, v := range tc.environ {
					environ = append(environ, k+"="+v)
				}
				for form, code := range evalForms {
					got, status, stderr := evalEnv(t, path, code, dir, script, environ)
					if status != tc.status || stderr != tc.stderr {
						t.Errorf("%s, %s: status %d, stderr %q; want %d, %q", tc.name, form, status, stderr, tc.status, tc.stderr)
					}
					for k, v := range want {
						if got[k] != v {
							t.Errorf("%s, %s: %s=%q, want %q", tc.name, form, k, got[k], v)
						}
					}
					for k := range got {
						if _, ok := want[k]; !ok {
							t.Errorf("%s, %s: %s=%q is set, and should not be", tc.name, form, k, got[k])
						}
					}
					if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
						t.Fatalf("%s, %s: a command ran", tc.name, form)
					}
				}
			}
		})
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

func (e Env) asMap() map[string]string {
	m := map[string]string{}
	for _, v := range e {
		m[v.Name] = v.Value
	}
	return m
}
