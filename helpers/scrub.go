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
// variables that e does not itself set and, when e sets npm's registry,
// without inherited npm settings (in any case) for the registry, the
// userconfig file, per-registry or scope registries and tokens, which could
// otherwise send npm elsewhere or beside cproxy's own.
func (e Env) Scrub(environ []string) []string {
	npm := e.setsNPM()
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if e.scrubs(name) || (npm && npmOwned(name)) {
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
	if e.setsNPM() {
		// A shell cannot unset npm_config_//… names, but can these,
		// which npm reads in any case beside cproxy's lower-case ones.
		// Likewise yarn's that would send it elsewhere or with another
		// credential (exec drops every YARN_NPM_* it inherits).
		for _, n := range []string{"NPM_CONFIG_REGISTRY", "NPM_CONFIG_USERCONFIG", "NPM_CONFIG__AUTH", "NPM_CONFIG__AUTHTOKEN",
			"YARN_NPM_SCOPES", "YARN_NPM_PUBLISH_REGISTRY", "YARN_NPM_AUTH_IDENT"} {
			if !e.has(n) {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "unset " + strings.Join(names, " ") + ";\n"
}

func (e Env) has(name string) bool {
	for _, v := range e {
		if v.Name == name {
			return true
		}
	}
	return false
}

func (e Env) setsNPM() bool { return e.has("npm_config_registry") }

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
