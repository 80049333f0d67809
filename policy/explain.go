package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// Choice is the profile a sandbox gets and what chose it, for `cproxy policy
// explain` and for anyone asking why a sandbox was decided as it was.
type Choice struct {
	// Profile is the chosen profile; nil when none applies.
	Profile *Profile
	// Rule says what chose it: `the token's profile "pinned"`,
	// `[[sandbox]] match = "conv-*"`, or `[profile.default]: no [[sandbox]]
	// rule matches`. Empty when no profile applies.
	Rule string
	// At is where Rule is in the policy file ("policy.toml:9:1"); empty for
	// the built-in policy and when no profile applies.
	At string
}

// ChooseProfile picks the profile for a sandbox as ProfileFor does (which
// calls it), and says which rule chose it.
func (p *Policy) ChooseProfile(sandbox, explicit string) (Choice, error) {
	if explicit != "" {
		if pr := p.Profiles[explicit]; pr != nil {
			return Choice{Profile: pr, Rule: fmt.Sprintf("the token's profile %q", explicit), At: p.at(keyPath("profile", explicit))}, nil
		}
		return Choice{}, fmt.Errorf("%w %q in %s (it has %s)", ErrNoProfile, explicit, p.name(), strings.Join(sortedKeys(p.Profiles), ", "))
	}
	for i, r := range p.Sandboxes {
		if matchGlob(r.Match, sandbox) {
			if pr := p.Profiles[r.Profile]; pr != nil {
				return Choice{Profile: pr, Rule: fmt.Sprintf("[[sandbox]] match = %q", r.Match), At: p.at(path{}.key("sandbox").elem(i, true).key("match"))}, nil
			}
		}
	}
	if pr := p.Profiles["default"]; pr != nil {
		rule := "[profile.default]: no [[sandbox]] rule matches"
		if len(p.Sandboxes) == 0 {
			rule = "[profile.default]: the policy has no [[sandbox]] rules"
		}
		return Choice{Profile: pr, Rule: rule, At: p.at(keyPath("profile", "default"))}, nil
	}
	return Choice{}, fmt.Errorf("%w applies to sandbox %q: no [[sandbox]] match in %s fits it and there is no [profile.default] (add one, or a [[sandbox]] rule, or name a profile when creating the token)",
		ErrNoProfile, sandbox, p.name())
}

// at is "file:line:col" of the key at k, or "" for a policy not loaded from a file.
func (p *Policy) at(k path) string {
	if p.ix == nil || p.Path == "" {
		return ""
	}
	line, col := p.ix.find(k, true)
	return fmt.Sprintf("%s:%d:%d", p.Path, line, col)
}

// SameText reports whether p and q were loaded from the same file with the
// same text, so that putting q in force instead of p would change nothing. A
// policy not loaded from a file (DefaultPolicy) has no text and is the same as
// none.
func (p *Policy) SameText(q *Policy) bool {
	if p == nil || q == nil || p.ix == nil || q.ix == nil {
		return false
	}
	return p.Path == q.Path && p.ix.src == q.ix.src
}

// Text is the policy file's text as it was loaded; "" for a policy not
// loaded from a file (DefaultPolicy). A policy holds no credential, so the
// console may show it.
func (p *Policy) Text() string {
	if p == nil || p.ix == nil {
		return ""
	}
	return p.ix.src
}

// Key is the profile's table as rules name it, e.g. "profile.web".
func (pr *Profile) Key() string { return pr.rule("") }

// RuleAt is the line and column in the policy file of the key a rule
// names ("profile.web.models[\"claude-*\"]", "profile.web.repos[2].refs",
// "profile.web.npm.min_release_age", with or without ": why" after it),
// or of the nearest table that holds it; 0, 0 for a policy not loaded from
// a file or a rule that names no key (a route's own words).
func (p *Policy) RuleAt(rule string) (line, col int) {
	if p.ix == nil || !strings.HasPrefix(rule, "profile.") && !strings.HasPrefix(rule, "[") {
		return 0, 0
	}
	rule, why, _ := strings.Cut(rule, ": ")
	if key, ok := strings.CutPrefix(why, "no "); ok {
		// "profile.web: no models entry matches": the list that did not.
		if key, _, ok = strings.Cut(key, " entry matches"); ok && !strings.ContainsAny(key, " .[\"") {
			rule += "." + key
		}
	}
	rule = strings.TrimSuffix(strings.TrimPrefix(rule, "["), "]")
	var k path
	for i := 0; i < len(rule); {
		switch c := rule[i]; {
		case c == '.':
			i++
		case c == '"':
			end := strings.IndexByte(rule[i+1:], '"')
			if end < 0 {
				return p.ix.find(k, true)
			}
			k = k.key(rule[i+1 : i+1+end])
			i += end + 2
		case c == '[':
			end := strings.IndexByte(rule[i:], ']')
			if end < 0 {
				return p.ix.find(k, true)
			}
			n, err := strconv.Atoi(rule[i+1 : i+end])
			if err != nil {
				// A value the rule matched (["claude-*"]): its list's key.
				return p.ix.find(k, true)
			}
			k = k.elem(n, false)
			i += end + 1
		case c == ' ':
			return p.ix.find(k, true)
		default:
			end := strings.IndexAny(rule[i:], ".[ ")
			if end < 0 {
				end = len(rule) - i
			}
			k = k.key(rule[i : i+end])
			i += end
		}
	}
	return p.ix.find(k, true)
}
