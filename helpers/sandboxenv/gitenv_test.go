package sandboxenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSandboxGit(t *testing.T) {
	helper := GitConfigs{
		{"url.http://10.0.0.1:8080/github/.insteadOf", "https://github.com/"},
		{"url.http://10.0.0.1:8080/github/.insteadOf", "git@github.com:"},
		{"url.http://10.0.0.1:8080/github/.insteadOf", "ssh://git@github.com/"},
		{"credential.http://10.0.0.1:8080.helper", ""},
		{"credential.http://10.0.0.1:8080.helper", "cproxy"},
		{"credential.http://10.0.0.1:8080.useHttpPath", "true"},
	}
	header := GitConfigs{
		{"url.http://10.0.0.1:8080/github/.insteadOf", "https://github.com/"},
		{"url.http://10.0.0.1:8080/github/.insteadOf", "git@github.com:"},
		{"url.http://10.0.0.1:8080/github/.insteadOf", "ssh://git@github.com/"},
		{"http.http://10.0.0.1:8080/github/.extraHeader", ""},
		{"http.http://10.0.0.1:8080/github/.extraHeader", "Authorization: Bearer cpx_x"},
	}
	for _, tc := range []struct {
		auth string
		want GitConfigs
	}{{"", helper}, {GitAuthHelper, helper}, {GitAuthHeader, header}} {
		_, git, err := Build(Options{ProxyURL: "http://10.0.0.1:8080/", Token: "cpx_x", GitAuth: tc.auth})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(git, tc.want) {
			t.Errorf("%q: got\n%q\nwant\n%q", tc.auth, git, tc.want)
		}
	}
	_, git, err := Build(Options{ProxyURL: "https://gw/cproxy", Token: "cpx_x"})
	if err != nil || git[0].Key != "url.https://gw/cproxy/github/.insteadOf" || git[4].Key != "credential.https://gw/cproxy.helper" {
		t.Errorf("under a path: %q, %v", git, err)
	}
	if _, git, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_x", NoGit: true}); err != nil || git != nil {
		t.Errorf("NoGit: %q, %v", git, err)
	}
	if _, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_x", GitAuth: "ssh"}); err == nil || err.Error() != `unknown git auth "ssh": use "helper" or "header"` {
		t.Errorf("unknown git auth: %v", err)
	}
	if _, _, err := Build(Options{ProxyURL: "http://h:1", Token: "cpx_x\r\nX-Evil: 1", GitAuth: GitAuthHeader}); err == nil {
		t.Error("a token with a line break went into a header")
	}
}

func TestGitConfigsEnv(t *testing.T) {
	g := GitConfigs{{"a.b", "1"}, {"a.b", "2"}}
	got := strings.Join(g.Env(3).Environ(), "\n")
	want := "GIT_CONFIG_COUNT=5\nGIT_CONFIG_KEY_3=a.b\nGIT_CONFIG_VALUE_3=1\nGIT_CONFIG_KEY_4=a.b\nGIT_CONFIG_VALUE_4=2"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if e := GitConfigs(nil).Env(7); e != nil {
		t.Errorf("no settings: got %q", e)
	}
	if s, err := GitConfigs(nil).Shell(); s != "" || err != nil {
		t.Errorf("no settings: got %q, %v", s, err)
	}
	if _, err := (GitConfigs{{"a.b", "x\x00y"}}).Shell(); err == nil {
		t.Error("NUL accepted")
	}
}

func TestParseGitConfigCount(t *testing.T) {
	for _, tc := range []struct {
		s    string
		set  bool
		want int
		err  string
	}{
		{"", false, 0, ""},
		{"", true, 0, ""}, // git reads an empty count as 0
		{"0", true, 0, ""},
		{"3", true, 3, ""},
		{"007", true, 7, ""}, // decimal, as git reads it
		{"999999999", true, 999999999, ""},
		{"1000000000", true, 0, "GIT_CONFIG_COUNT in the environment is too large"},
		{"99999999999999999999999", true, 0, "GIT_CONFIG_COUNT in the environment is too large"},
		{"-1", true, 0, "GIT_CONFIG_COUNT in the environment is not a count"},
		{"+1", true, 0, "GIT_CONFIG_COUNT in the environment is not a count"},
		{" 1", true, 0, "GIT_CONFIG_COUNT in the environment is not a count"},
		{"1x", true, 0, "GIT_CONFIG_COUNT in the environment is not a count"},
		{"a[$(touch pwned)]", true, 0, "GIT_CONFIG_COUNT in the environment is not a count"},
	} {
		n, err := ParseGitConfigCount(tc.s, tc.set)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if n != tc.want || gotErr != tc.err {
			t.Errorf("%q (set %v): got %d, %q; want %d, %q", tc.s, tc.set, n, gotErr, tc.want, tc.err)
		}
	}
}

// TestGitShellMerges evaluates the sh rendering in each shell there is,
// after an existing GIT_CONFIG_COUNT, hostile ones included: the new
// settings are numbered after the existing ones, an existing setting
// survives, no count runs a command, and a count git would refuse leaves
// git's settings out with a message and a non-zero status.
func TestGitShellMerges(t *testing.T) {
	// Keys and values hold hostile bytes too: they must come back as they are.
	g := GitConfigs{{"url.http://h:1/it's $(touch pwned)/github/.insteadOf", "https://github.com/"}, {"k.`touch pwned`", "\"$HOME\" \\ \n;"}}
	script, err := g.Shell()
	if err != nil {
		t.Fatal(err)
	}
	// After eval: the status, the count, the scratch variable (gone), entry
	// 0, and the last two entries, which must be cproxy's.
	show := `rc=$?; printf '%s|' "$rc" "${GIT_CONFIG_COUNT-unset}" "${cproxy_git_n-unset}" "$GIT_CONFIG_KEY_0=$GIT_CONFIG_VALUE_0"; ` +
		`case ${GIT_CONFIG_COUNT:-0} in *[!0-9]*) ;; *) i=$((GIT_CONFIG_COUNT - 2)); j=$((i + 1)); ` +
		`eval "printf '%s|' \"\$GIT_CONFIG_KEY_$i=\$GIT_CONFIG_VALUE_$i\" \"\$GIT_CONFIG_KEY_$j=\$GIT_CONFIG_VALUE_$j\"" ;; esac`
	ours := g[0].Key + "=" + g[0].Value + "|" + g[1].Key + "=" + g[1].Value + "|"
	refused := "cproxy: GIT_CONFIG_COUNT is not a count: git settings left out\n"
	tests := []struct {
		name, count string // count "unset" leaves GIT_CONFIG_COUNT out
		out, stderr string
	}{
		{"no count", "unset", "0|2|unset|" + g[0].Key + "=" + g[0].Value + "|" + ours, ""},
		{"empty count", "", "0|2|unset|" + g[0].Key + "=" + g[0].Value + "|" + ours, ""},
		{"one existing", "1", "0|3|unset|user.name=kept|" + ours, ""},
		{"leading zeros", "0001", "0|3|unset|user.name=kept|" + ours, ""},
		// Decimal, as git reads it, not octal as $((010)) would: cproxy's
		// entries are 10 and 11.
		{"octal-looking", "010", "0|12|unset|user.name=kept|" + ours, ""},
		{"command in a subscript", "a[$(touch pwned)]", "1|a[$(touch pwned)]|unset|user.name=kept|", refused},
		{"command substitution", "$(touch pwned)", "1|$(touch pwned)|unset|user.name=kept|", refused},
		{"backquotes", "`touch pwned`", "1|`touch pwned`|unset|user.name=kept|", refused},
		{"glob", "*", "1|*|unset|user.name=kept|", refused},
		{"negative", "-1", "1|-1|unset|user.name=kept|", refused},
		{"spaces", "1 2", "1|1 2|unset|user.name=kept|", refused},
		{"too many digits", "1000000000", "1|1000000000|unset|user.name=kept|=|=|", refused},
	}
	ran := 0
	for _, sh := range []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			continue
		}
		ran++
		for _, tc := range tests {
			dir := t.TempDir()
			args := []string{"-c", script + show}
			if sh == "busybox" {
				args = append([]string{"sh"}, args...)
			}
			cmd := exec.Command(path, args...)
			cmd.Dir = dir
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=kept"}
			if tc.count != "unset" {
				cmd.Env = append(cmd.Env, "GIT_CONFIG_COUNT="+tc.count)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("%s, %s: %v, stderr %q", sh, tc.name, err, stderr.String())
				continue
			}
			if string(out) != tc.out {
				t.Errorf("%s, %s:\ngot  %q\nwant %q", sh, tc.name, out, tc.out)
			}
			if stderr.String() != tc.stderr {
				t.Errorf("%s, %s: stderr %q, want %q", sh, tc.name, stderr.String(), tc.stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
				t.Errorf("%s, %s: a command ran", sh, tc.name)
			}
		}
	}
	if ran == 0 {
		t.Skip("no shell")
	}
}

// TestGitShellUnderSetEU: a script with set -eu can eval the output.
func TestGitShellUnderSetEU(t *testing.T) {
	g := GitConfigs{{"a.b", "c"}}
	script, _ := g.Shell()
	for _, sh := range []string{"sh", "bash", "dash"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			continue
		}
		cmd := exec.Command(path, "-c", "set -eu; eval \"$1\"; echo \"$GIT_CONFIG_COUNT $GIT_CONFIG_KEY_0\"", "sh", script)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		if out, err := cmd.Output(); err != nil || string(out) != "1 a.b\n" {
			t.Errorf("%s: %q, %v", sh, out, err)
		}
	}
}
