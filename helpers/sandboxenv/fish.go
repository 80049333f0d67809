package sandboxenv

import (
	"fmt"
	"regexp"
	"strings"
)

// fishQuote single-quotes s for fish, where a single-quoted string holds
// every byte as it is but \ and ', which a backslash escapes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// fishCredential is LooksLikeCredential as a regular expression, for fish's
// string match -ri (PCRE2) over a variable's name.
func fishCredential() string {
	var parts []string
	for _, p := range credentialParts {
		parts = append(parts, regexp.QuoteMeta(p))
	}
	return "^" + gitParameters + "$|" + credentialSuffix + "$|(^|_)(" + strings.Join(credentialWords, "|") + ")(_|$)|" + strings.Join(parts, "|")
}

// fishNotShown matches a byte the message about names fish cannot erase
// does not show as it is (see shownChars).
func fishNotShown() string {
	var b strings.Builder
	b.WriteString("[^")
	for _, c := range []byte(shownChars) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteString("]")
	return b.String()
}

// fishNPMOwned is npmOwned for the names a fish variable can have.
const fishNPMOwned = "^npm_config_(registry|userconfig|_auth)|^yarn_npm_|^yarn_unsafe_http_whitelist$"

// fishGitCredential is gitEntryCarriesCredential for a git key and value:
// an extra header or a helper (the key), a word that looks like a
// credential, or a URL with a password.
const (
	fishGitKey   = "(extraheader|helper)$"
	fishGitWords = "token|secret|password|authorization|bearer|://[^/@]*:[^/@]*@"
)

// Fish renders the environment and git's settings for fish, to be read
// with `cproxy env --format fish | source`: first the scrub of Scrub, in
// fish (which lists its exported variables itself, so no awk is needed),
// then `set -gx NAME 'value'` for each variable, then git's settings,
// numbered after the GIT_CONFIG_COUNT entries fish already has.
func (e Env) Fish(g GitConfigs) (string, error) {
	var b strings.Builder
	match := fishCredential()
	if e.setsNPM() {
		match += "|" + fishNPMOwned
	}
	// Erased from the global scope only: erasing a universal variable
	// would change the user's fish for good. One that is still exported
	// then (a universal one) is shadowed by an unexported global. One
	// whose name fish cannot erase (MY-TOKEN, which fish passes on to the
	// commands it starts) is named on standard error, as the sh output's
	// awk names it.
	fmt.Fprintf(&b, "set -l cproxy_bad\nfor cproxy_n in (set --names -x)\n"+
		"\tif string match -qri %s -- $cproxy_n\n"+
		"\t\tif not string match -qr '^[A-Za-z_][A-Za-z0-9_]*$' -- $cproxy_n\n\t\t\tset -a cproxy_bad $cproxy_n\n\t\t\tcontinue\n\t\tend\n"+
		"\t\tset -e -g $cproxy_n\n\t\tset -qx $cproxy_n; and set -g -u $cproxy_n\n\tend\nend\n", fishQuote(match))
	fmt.Fprintf(&b, "if set -q cproxy_bad[1]\n\tset -l cproxy_s\n\tfor cproxy_n in $cproxy_bad[1..%d]\n"+
		"\t\tset -l cproxy_t (string sub -l 64 -- $cproxy_n | string replace -ra %s '?')\n"+
		"\t\ttest (string length -- $cproxy_n) -gt 64; and set cproxy_t $cproxy_t...\n\t\tset -a cproxy_s $cproxy_t\n\tend\n"+
		"\tset -l cproxy_more ''\n\ttest (count $cproxy_bad) -gt %d; and set cproxy_more ' and '(math (count $cproxy_bad) - %d)' more'\n"+
		"\techo %s(string join ', ' -- $cproxy_s)$cproxy_more%s >&2\n\techo %s >&2\nend\n",
		maxUnsetNamed, fishQuote(fishNotShown()), maxUnsetNamed, maxUnsetNamed, fishQuote(unsetMessage[0]), fishQuote(unsetMessage[1]), fishQuote(unsetMessage[2]))
	// The inherited git settings that carry a credential become inert,
	// their numbering kept, as in Scrub.
	fmt.Fprintf(&b, "if string match -qr '^[0-9]{1,9}$' -- \"$GIT_CONFIG_COUNT\"\n"+
		"\tfor cproxy_i in (seq 0 (math \"min($GIT_CONFIG_COUNT, %d) - 1\"))\n"+
		"\t\tset -l cproxy_k GIT_CONFIG_KEY_$cproxy_i\n\t\tset -l cproxy_v GIT_CONFIG_VALUE_$cproxy_i\n"+
		"\t\tif string match -qri %s -- \"$$cproxy_k\"; or string match -qri %s -- \"$$cproxy_k\" \"$$cproxy_v\"\n"+
		"\t\t\tset -gx $cproxy_k %s\n\t\t\tset -gx $cproxy_v ''\n\t\tend\n\tend\nend\n",
		maxScrubbedGitEntries, fishQuote(fishGitKey), fishQuote(fishGitWords), gitScrubbedKey)
	for _, v := range e {
		if isNPMAuthName(v.Name) {
			continue // no fish variable has that name; npm reads the file NPMRC prints
		}
		if err := v.check(); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "set -gx %s %s\n", v.Name, fishQuote(v.Value))
	}
	if len(g) == 0 {
		return b.String(), nil
	}
	b.WriteString("set -l cproxy_git_n \"$GIT_CONFIG_COUNT\"\n")
	b.WriteString("test -n \"$cproxy_git_n\"; or set cproxy_git_n 0\n")
	b.WriteString("if not string match -qr '^[0-9]{1,9}$' -- \"$cproxy_git_n\"\n")
	b.WriteString("\techo 'cproxy: GIT_CONFIG_COUNT is not a count: git settings left out' >&2\n\tfalse\nelse\n")
	for i, c := range g {
		if strings.IndexByte(c.Key+c.Value, 0) >= 0 {
			return "", fmt.Errorf("a git setting cannot hold a NUL byte")
		}
		fmt.Fprintf(&b, "\tset -gx GIT_CONFIG_KEY_(math $cproxy_git_n + %d) %s\n", i, fishQuote(c.Key))
		fmt.Fprintf(&b, "\tset -gx GIT_CONFIG_VALUE_(math $cproxy_git_n + %d) %s\n", i, fishQuote(c.Value))
	}
	fmt.Fprintf(&b, "\tset -gx GIT_CONFIG_COUNT (math $cproxy_git_n + %d)\nend\n", len(g))
	return b.String(), nil
}
