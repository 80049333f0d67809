package helpers

import "strings"

// CredentialVars are variables that hold real upstream credentials on the
// harness's side. A sandbox command must never inherit them: the sandbox's
// token is all it gets. Claude Code given ANTHROPIC_API_KEY as well as the
// token would also send both, which cproxy refuses.
var CredentialVars = []string{
	"ANTHROPIC_API_KEY",
	"ANTHROPIC_AUTH_TOKEN",
	"CLAUDE_CODE_OAUTH_TOKEN",
	"GITHUB_TOKEN",
	"GH_TOKEN",
	"NPM_TOKEN",
	"NODE_AUTH_TOKEN",
}

// Scrub returns environ (NAME=value strings) without the credential
// variables that e does not itself set.
func (e Env) Scrub(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if e.scrubs(name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// UnsetShell is the shell line that unsets the credential variables e does
// not set, for eval before e's own exports.
func (e Env) UnsetShell() string {
	var names []string
	for _, n := range CredentialVars {
		if e.scrubs(n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "unset " + strings.Join(names, " ") + "\n"
}

func (e Env) scrubs(name string) bool {
	isCred := false
	for _, n := range CredentialVars {
		isCred = isCred || n == name
	}
	if !isCred {
		return false
	}
	for _, v := range e {
		if v.Name == name {
			return false
		}
	}
	return true
}
