package sandboxenv

import (
	"fmt"
	"strconv"
	"strings"
)

// GitConfig is one git setting.
type GitConfig struct{ Key, Value string }

// GitConfigs are git settings handed to git through the environment
// (GIT_CONFIG_COUNT, GIT_CONFIG_KEY_<n>, GIT_CONFIG_VALUE_<n>; see
// git-config(1)), so that nothing is written to the sandbox's disk where
// the agent could change it. A key may appear more than once: git adds each
// value, as it does for a key repeated in a config file.
type GitConfigs []GitConfig

// githubRemotes are the ways a GitHub repository is named; each is rewritten
// to cproxy's GitHub route.
var githubRemotes = []string{"https://github.com/", "git@github.com:", "ssh://git@github.com/"}

// maxGitConfigCount is the largest GIT_CONFIG_COUNT taken as a count: 9
// digits, so that adding cproxy's entries overflows neither git's int nor
// a 32-bit shell's arithmetic.
const maxGitConfigCount = 999_999_999

// sandboxGit returns the settings that send GitHub remotes through cproxy
// at base and give git the token for cproxy's URL only.
func sandboxGit(base, token, auth string) (GitConfigs, error) {
	route := base + "/github/"
	var g GitConfigs
	for _, r := range githubRemotes {
		g = append(g, GitConfig{"url." + route + ".insteadOf", r})
	}
	switch auth {
	case "", GitAuthHelper:
		g = append(g,
			// An empty helper clears the helpers git collected so far for
			// this URL (a credential.helper=cache in ~/.gitconfig, say), so
			// no other helper answers with, or keeps, a stale token.
			GitConfig{"credential." + base + ".helper", ""},
			GitConfig{"credential." + base + ".helper", "cproxy"},
			// git then tells the helper the path, which it checks against
			// cproxy's own when cproxy is served under one.
			GitConfig{"credential." + base + ".useHttpPath", "true"},
		)
	case GitAuthHeader:
		if strings.ContainsAny(token, "\r\n") {
			return nil, fmt.Errorf("the token cannot go in a header: it holds a line break")
		}
		g = append(g,
			// The empty value clears extra headers set for this URL
			// elsewhere, so only one Authorization header is sent.
			GitConfig{"http." + route + ".extraHeader", ""},
			GitConfig{"http." + route + ".extraHeader", "Authorization: Bearer " + token},
		)
	default:
		return nil, fmt.Errorf("unknown git auth %q: use %q or %q", auth, GitAuthHelper, GitAuthHeader)
	}
	return g, nil
}

// ParseGitConfigCount reads GIT_CONFIG_COUNT as git does, for numbering
// settings after the ones an environment already has. Unset or empty is 0,
// as for git; anything but decimal digits is an error (git refuses it too).
func ParseGitConfigCount(s string, set bool) (int, error) {
	if !set || s == "" {
		return 0, nil
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("GIT_CONFIG_COUNT in the environment is not a count")
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxGitConfigCount {
		return 0, fmt.Errorf("GIT_CONFIG_COUNT in the environment is too large")
	}
	return n, nil
}

// Env numbers the settings from base, after the base entries an
// environment already has, and sets GIT_CONFIG_COUNT to cover them all.
func (g GitConfigs) Env(base int) Env {
	if len(g) == 0 {
		return nil
	}
	e := Env{{"GIT_CONFIG_COUNT", strconv.Itoa(base + len(g))}}
	for i, c := range g {
		n := strconv.Itoa(base + i)
		e = append(e, Var{"GIT_CONFIG_KEY_" + n, c.Key}, Var{"GIT_CONFIG_VALUE_" + n, c.Value})
	}
	return e
}

// Shell renders the settings as POSIX shell that numbers them when it is
// evaluated, after the GIT_CONFIG_COUNT entries the evaluating shell
// already has, so eval "$(cproxy env)" adds to them instead of replacing
// them. Like Env.Shell, it means the same under eval $(cproxy env)
// unquoted (see shellScript): no case statement, whose patterns would need
// glob characters, and a statement or keyword ending every line.
//
// The existing count is checked to be 1 to 9 decimal digits before any
// arithmetic sees it: $((…)) would run a command hidden in an array
// subscript (GIT_CONFIG_COUNT='a[$(cmd)]') and read 010 as octal. The
// check strips leading digits, one of 0-9 at a time, and wants nothing
// left. A count that is not one leaves git's settings out with a message
// on stderr and a non-zero status, as git would refuse it anyway.
func (g GitConfigs) Shell() (string, error) {
	if len(g) == 0 {
		return "", nil
	}
	var s shellScript
	s.line("cproxy_git_n=${GIT_CONFIG_COUNT:-0};")
	s.line("cproxy_r=x;")
	s.line(fmt.Sprintf("if test \"${#cproxy_git_n}\" -le %d; then", len(strconv.Itoa(maxGitConfigCount))))
	s.line("\tcproxy_r=$cproxy_git_n; cproxy_s=;")
	s.line("\twhile test \"$cproxy_r\" != \"$cproxy_s\"; do")
	s.line("\t\tcproxy_s=$cproxy_r;")
	s.line("\t\tfor cproxy_d in 0 1 2 3 4 5 6 7 8 9; do cproxy_r=${cproxy_r#\"$cproxy_d\"}; done;")
	s.line("\tdone;")
	s.line("fi;")
	unset := "unset cproxy_git_n cproxy_r cproxy_s cproxy_d " + cproxyVar + ";"
	s.line("if test -n \"$cproxy_r\"; then")
	s.line("\techo 'cproxy: GIT_CONFIG_COUNT is not a count: git settings left out' >&2;")
	s.line("\t" + unset + " false;")
	s.line("else")
	s.indent = "\t"
	s.line("while test \"${cproxy_git_n#0}\" != \"$cproxy_git_n\"; do cproxy_git_n=${cproxy_git_n#0}; done;")
	s.line("cproxy_git_n=${cproxy_git_n:-0};")
	for i, c := range g {
		if err := s.export(fmt.Sprintf("\"GIT_CONFIG_KEY_$((cproxy_git_n+%d))\"", i), c.Key); err != nil {
			return "", fmt.Errorf("a git setting: %w", err)
		}
		if err := s.export(fmt.Sprintf("\"GIT_CONFIG_VALUE_$((cproxy_git_n+%d))\"", i), c.Value); err != nil {
			return "", fmt.Errorf("a git setting: %w", err)
		}
	}
	s.line(fmt.Sprintf("export GIT_CONFIG_COUNT=\"$((cproxy_git_n+%d))\";", len(g)))
	s.line(unset)
	s.indent = ""
	s.line("fi;")
	return s.String(), nil
}
