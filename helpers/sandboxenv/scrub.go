package sandboxenv

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// CredentialVars are the variables that hold the real upstream credentials
// cproxy itself stands in for. The sh output unsets them by name, which
// needs nothing of the evaluating shell, before the pattern-based scrub
// (LooksLikeCredential), which needs awk. Claude Code given
// ANTHROPIC_API_KEY as well as the token would also send both, which
// cproxy refuses.
var CredentialVars = []string{
	"ANTHROPIC_API_KEY",
	"ANTHROPIC_AUTH_TOKEN",
	"CLAUDE_CODE_OAUTH_TOKEN",
	"GITHUB_TOKEN",
	"GH_TOKEN",
	"NPM_TOKEN",
	"NODE_AUTH_TOKEN",
}

// credentialParts are what a variable's name (in upper case) holds when it
// looks like it carries a credential, anywhere in the name.
var credentialParts = []string{
	"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "ASKPASS", "CREDENTIAL",
	"API_KEY", "APIKEY", "ACCESS_KEY", "PRIVATE_KEY", "AUTHORIZATION", "BEARER", "OAUTH",
}

// credentialWords are _-separated words of a name (in upper case) that
// mark it as a credential: npm_config__auth, YARN_NPM_AUTH_IDENT,
// GITHUB_PAT. As words only: GIT_AUTHOR_NAME is not one.
var credentialWords = []string{"AUTH", "PAT"}

// credentialSuffix ends a name that holds a key: ANTHROPIC_API_KEY,
// SSH_KEY, anthropic_api_key.
const credentialSuffix = "_KEY"

// gitParameters is where git -c puts its settings for the commands it
// runs; any of them can carry an extra header or a helper.
const gitParameters = "GIT_CONFIG_PARAMETERS"

// gitScrubbedKey replaces the key of an inherited GIT_CONFIG_KEY_n entry
// that carries a credential, and an empty value its value: git needs every
// entry up to GIT_CONFIG_COUNT, and a key no part of git reads is inert
// (an empty value alone is not: an empty url.<base>.insteadOf matches
// every URL).
const gitScrubbedKey = "cproxy.scrubbed"

// maxScrubbedGitEntries bounds the inherited git entries the scrub reads.
const maxScrubbedGitEntries = 10000

// LooksLikeCredential says whether a variable's name, in any case, looks
// like it holds a credential: it holds TOKEN, SECRET, PASSWORD, PASSWD,
// PASSPHRASE, ASKPASS, CREDENTIAL, API_KEY, APIKEY, ACCESS_KEY,
// PRIVATE_KEY, AUTHORIZATION, BEARER or OAUTH, has the word AUTH or PAT, ends in
// _KEY, or is GIT_CONFIG_PARAMETERS. A list of names cannot be complete:
// it catches the common spellings, nothing more.
func LooksLikeCredential(name string) bool {
	u := strings.ToUpper(name)
	if u == gitParameters || strings.HasSuffix(u, credentialSuffix) {
		return true
	}
	for _, p := range credentialParts {
		if strings.Contains(u, p) {
			return true
		}
	}
	for _, w := range strings.Split(u, "_") {
		for _, cw := range credentialWords {
			if w == cw {
				return true
			}
		}
	}
	return false
}

// gitEntryCarriesCredential says whether an inherited git setting can hand
// git a credential: an extra header or a credential helper, any setting
// whose key or value looks like one (Authorization, Bearer, a token), or a
// URL with a password in it (an insteadOf rule, say).
func gitEntryCarriesCredential(key, value string) bool {
	k, v := strings.ToUpper(key), strings.ToUpper(value)
	if strings.HasSuffix(k, "EXTRAHEADER") || strings.HasSuffix(k, "HELPER") {
		return true
	}
	for _, s := range []string{k, v} {
		for _, p := range []string{"TOKEN", "SECRET", "PASSWORD", "AUTHORIZATION", "BEARER"} {
			if strings.Contains(s, p) {
				return true
			}
		}
		if urlHasPassword(s) {
			return true
		}
	}
	return false
}

// urlHasPassword says whether s holds scheme://user:password@.
func urlHasPassword(s string) bool {
	i := strings.Index(s, "://")
	if i < 0 {
		return false
	}
	rest := s[i+3:]
	at := strings.IndexByte(rest, '@')
	slash := strings.IndexByte(rest, '/')
	return at >= 0 && (slash < 0 || at < slash) && strings.Contains(rest[:at], ":")
}

// Scrub returns environ (NAME=value strings) without the variables that
// look like credentials (LooksLikeCredential); with every inherited git
// setting that carries one made inert (its key gitScrubbedKey, its value
// empty, so the numbering git needs holds); and, when e sets npm's
// registry, without inherited npm and yarn settings (in any case) for the
// registry, the userconfig file, per-registry or scope registries and
// tokens, which could otherwise send npm elsewhere or beside cproxy's own.
// e's own variables come after it and win.
func (e Env) Scrub(environ []string) []string {
	npm := e.setsNPM()
	vals := map[string]string{}
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		vals[name] = val
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, val, _ := strings.Cut(kv, "=")
		if LooksLikeCredential(name) || (npm && npmOwned(name)) {
			continue
		}
		if n, ok := gitEntryIndex(name); ok {
			k, v := "GIT_CONFIG_KEY_"+n, "GIT_CONFIG_VALUE_"+n
			if gitEntryCarriesCredential(vals[k], vals[v]) {
				if name == k {
					val = gitScrubbedKey
				} else {
					val = ""
				}
			}
		}
		out = append(out, name+"="+val)
	}
	return out
}

// gitEntryIndex returns n for GIT_CONFIG_KEY_n and GIT_CONFIG_VALUE_n.
func gitEntryIndex(name string) (string, bool) {
	for _, p := range []string{"GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"} {
		if n, ok := strings.CutPrefix(name, p); ok {
			if _, err := strconv.ParseUint(n, 10, 32); err == nil {
				return n, true
			}
		}
	}
	return "", false
}

// UnsetShell is the sh that removes inherited credentials from the shell
// that evaluates it, before e's own exports: an unset statement for the
// CredentialVars (and, when e sets npm's registry, the npm and yarn
// settings of Scrub) that e does not set, then the same scrub as Scrub,
// run by awk over the shell's exported variables, whose names cproxy
// cannot know when it prints the output. The awk program goes through
// printf like any value that holds glob characters (see shellScript).
// Without awk, a message says that only the named variables were unset.
func (e Env) UnsetShell() string {
	var names []string
	for _, n := range CredentialVars {
		if !e.has(n) {
			names = append(names, n)
		}
	}
	if e.setsNPM() {
		// A shell cannot unset npm_config_//… names, but can these,
		// which npm reads in any case beside cproxy's lower-case ones.
		// Likewise yarn's that would send it elsewhere or with another
		// credential.
		for _, n := range []string{"NPM_CONFIG_REGISTRY", "NPM_CONFIG_USERCONFIG", "NPM_CONFIG__AUTH", "NPM_CONFIG__AUTHTOKEN",
			"YARN_NPM_SCOPES", "YARN_NPM_PUBLISH_REGISTRY", "YARN_NPM_AUTH_IDENT"} {
			if !e.has(n) {
				names = append(names, n)
			}
		}
	}
	var s shellScript
	if len(names) > 0 {
		s.line("unset " + strings.Join(names, " ") + ";")
	}
	s.line("if command -v awk >/dev/null 2>&1; then")
	s.indent = "\t"
	s.line(cproxyVar + "=\"$(printf " + shellQuote(printfFormat(scrubAwk(e.setsNPM()))) + ")\";")
	s.line("eval \"$(awk \"$" + cproxyVar + "\")\";")
	s.line("unset " + cproxyVar + ";")
	s.indent = ""
	s.line("else")
	s.line("\techo 'cproxy: no awk: only the credential variables named in the unset statement were removed' >&2;")
	s.line("fi;")
	return s.String()
}

// scrubAwk is the awk program of UnsetShell: for each exported variable
// with a name the shell can unset, `unset NAME;` when Scrub would drop it,
// and, for each inherited git setting that carries a credential, the two
// exports that make it inert. It prints nothing but names it checked. A
// variable Scrub would drop whose name no shell can unset (MY-TOKEN,
// npm_config_//host/:_authToken: bash and zsh pass such names on to the
// commands they start, dash drops them) is named on awk's standard error,
// the shell's, with unsetMessage: the credential stays.
func scrubAwk(npm bool) string {
	var cred []string
	for _, p := range credentialParts {
		cred = append(cred, fmt.Sprintf("index(u, %q)", p))
	}
	var b strings.Builder
	b.WriteString(`function ident(k, i) { if (k=="" || index("0123456789", substr(k, 1, 1))) return 0; ` +
		`for (i = 1; i <= length(k); i++) if (!index("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_", substr(k, i, 1))) return 0; return 1 } `)
	fmt.Fprintf(&b, `function cred(u) { return u==%q || u~/%s$/ || u~/(^|_)(%s)(_|$)/ || %s } `,
		gitParameters, credentialSuffix, strings.Join(credentialWords, "|"), strings.Join(cred, " || "))
	b.WriteString(`function npmowned(u) { `)
	if npm {
		b.WriteString(`return u=="NPM_CONFIG_REGISTRY" || u=="NPM_CONFIG_USERCONFIG" || u~/^NPM_CONFIG__AUTH/ || u~/^YARN_NPM_/ || u=="YARN_UNSAFE_HTTP_WHITELIST" } `)
	} else {
		b.WriteString(`return 0 } `)
	}
	b.WriteString(`function haspw(s, i, r, a, sl) { i = index(s, "://"); if (!i) return 0; r = substr(s, i + 3); a = index(r, "@"); sl = index(r, "/"); ` +
		`return a && (!sl || a < sl) && index(substr(r, 1, a), ":") } `)
	b.WriteString(`function gitcred(k, v) { k = toupper(k); v = toupper(v); ` +
		`return k~/(EXTRAHEADER|HELPER)$/ || k~/TOKEN|SECRET|PASSWORD|AUTHORIZATION|BEARER/ || v~/TOKEN|SECRET|PASSWORD|AUTHORIZATION|BEARER/ || haspw(k) || haspw(v) } `)
	// shown is a name as the message shows it: printable ASCII, at most 64
	// bytes. report sorts the names it cannot unset and names at most 20.
	fmt.Fprintf(&b, `function shown(k, i, c, s) { s = ""; for (i = 1; i <= length(k) && i <= 64; i++) { c = substr(k, i, 1); s = s (index(%q, c) ? c : "?") } `+
		`return length(k) > 64 ? s "..." : s } `, shownChars)
	fmt.Fprintf(&b, `function report(n, i, j, t, s) { for (i = 2; i <= n; i++) { t = bad[i]; for (j = i - 1; j >= 1 && bad[j] "" > t ""; j--) bad[j + 1] = bad[j]; bad[j + 1] = t } `+
		`s = shown(bad[1]); for (i = 2; i <= n && i <= %d; i++) s = s ", " shown(bad[i]); if (n > %d) s = s " and " (n - %d) " more"; `+
		`printf "%%s\n", %q s %q > "/dev/stderr"; printf "%%s\n", %q > "/dev/stderr" } `,
		maxUnsetNamed, maxUnsetNamed, maxUnsetNamed, unsetMessage[0], unsetMessage[1], unsetMessage[2])
	b.WriteString(`BEGIN { nbad = 0; for (k in ENVIRON) if (cred(toupper(k)) || npmowned(toupper(k))) { if (ident(k)) print "unset " k ";"; else bad[++nbad] = k } `)
	b.WriteString(`if (nbad) report(nbad); `)
	fmt.Fprintf(&b, `n = ENVIRON["GIT_CONFIG_COUNT"]; if (n!~/^[0-9]+$/) n = 0; n = n + 0; if (n > %d) n = %d; `, maxScrubbedGitEntries, maxScrubbedGitEntries)
	fmt.Fprintf(&b, `for (i = 0; i < n; i++) if (gitcred(ENVIRON["GIT_CONFIG_KEY_" i], ENVIRON["GIT_CONFIG_VALUE_" i])) `+
		`print "export GIT_CONFIG_KEY_" i "=%s GIT_CONFIG_VALUE_" i "=;" }`, gitScrubbedKey)
	return b.String()
}

// unsetMessage is what the sh and fish outputs print on standard error
// about the variables that look like credentials but have names no shell
// can unset: the first line around their names, then a hint.
var unsetMessage = [3]string{
	"cproxy: cannot unset ",
	": no shell can unset a variable of such a name, so every command this shell starts inherits what looks like a credential",
	"cproxy: hint: start the sandbox's commands with cproxy exec, which passes none of these, or remove them from the environment this shell was started with",
}

// maxUnsetNamed bounds the names the message about them gives.
const maxUnsetNamed = 20

// shownChars are the bytes of a name the message shows as they are; any
// other is shown as ?, so that a name cannot write to the terminal.
const shownChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.:/@%+=,~^#!$&*()[]{}<>;|' "

// execBase are the variables cproxy exec passes from its own environment
// whatever --pass says: what a command needs to find programs, its home,
// its user, language, terminal, time zone and temporary folder. Every LC_*
// variable passes too (execBasePrefix).
var execBase = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "COLORTERM", "TZ", "TMPDIR", "PWD"}

// execBasePrefix starts the names of the locale variables exec passes.
const execBasePrefix = "LC_"

// execClaude are Claude Code's own settings that cproxy exec passes from
// its environment when they are set, as a harness sets them for the Claude
// Code it starts: none carries a credential, points Claude Code at another
// API or file of credentials, or has a name that looks like a credential
// (LooksLikeCredential; a test holds it). docs/cli.md says why each.
var execClaude = []string{
	// Claude Code is in a sandbox on purpose: it lets
	// --dangerously-skip-permissions run as root, as a harness running it in a VM needs.
	"IS_SANDBOX", "CLAUDE_CODE_BUBBLEWRAP",
	// Which models and effort it asks for; cproxy's policy still decides.
	"ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
	"ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL", "CLAUDE_CODE_EFFORT_LEVEL",
	// Its Bash tool and MCP servers: timeouts, output, working folder.
	"BASH_DEFAULT_TIMEOUT_MS", "BASH_MAX_TIMEOUT_MS", "BASH_MAX_OUTPUT_LENGTH", "CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR",
	"MCP_TIMEOUT", "MCP_TOOL_TIMEOUT",
	// The image's ripgrep, and no terminal title (tmux).
	"USE_BUILTIN_RIPGREP", "CLAUDE_CODE_DISABLE_TERMINAL_TITLE",
}

// ExecBase is the documented base of cproxy exec's environment, for help
// texts and docs.
func ExecBase() string { return strings.Join(execBase, ", ") + ", " + execBasePrefix + "*" }

// ExecClaude lists Claude Code's settings cproxy exec passes when they are
// set, for help texts and docs.
func ExecClaude() string { return strings.Join(execClaude, ", ") }

// CheckPass checks --pass values: a variable name, or a path.Match
// pattern of one.
func CheckPass(pass []string) error {
	for _, p := range pass {
		if p == "" || strings.ContainsAny(p, "=\x00") {
			return fmt.Errorf("--pass %q: not a variable name or pattern", p)
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("--pass %q: %w", p, err)
		}
	}
	return nil
}

// ExecEnviron is the environment cproxy exec starts its command from,
// before e's variables: from environ, the base variables (execBase and
// LC_*), Claude Code's settings (execClaude), the names pass lists
// exactly, as they are, and the names a pass pattern matches, scrubbed by
// e.Scrub (so a pattern never passes what looks like a credential). pass
// is checked by CheckPass.
func (e Env) ExecEnviron(environ, pass []string) []string {
	var exact, matched []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case slices.Contains(execBase, name) || strings.HasPrefix(name, execBasePrefix) || slices.Contains(execClaude, name) || slices.Contains(pass, name):
			exact = append(exact, kv)
		case matchesAny(pass, name):
			matched = append(matched, kv)
		}
	}
	return append(exact, e.Scrub(matched)...)
}

func matchesAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
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
