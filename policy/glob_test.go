package policy

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"claude-*", "claude-sonnet-4-5", true},
		{"claude-*", "claude-", true},
		{"claude-*", "claude", false},
		{"claude-*", "xclaude-a", false},
		{"claude-*", "claude-a/b", false},
		{"*", "", true},
		{"*", "anything", true},
		{"*", "a/b", false},
		{"**", "a/b/c", true},
		{"**", "", true},
		{"refs/heads/agent/*", "refs/heads/agent/x", true},
		{"refs/heads/agent/*", "refs/heads/agent/", true},
		{"refs/heads/agent/*", "refs/heads/agent/x/y", false},
		{"refs/heads/agent/**", "refs/heads/agent/x/y", true},
		{"refs/heads/agent/**", "refs/heads/agentx", false},
		{"refs/**/main", "refs/heads/main", true},
		{"refs/**/main", "refs/a/b/c/main", true},
		{"refs/**/main", "refs//main", true},
		{"refs/**/main", "refs/main", false},
		{"acme/*-docs", "acme/api-docs", true},
		{"acme/*-docs", "acme/-docs", true},
		{"acme/*-docs", "acme/docs", false},
		{"acme/*-docs", "other/api-docs", false},
		{"@types/*", "@types/node", true},
		{"@types/*", "@types/node/x", false},
		{"?", "a", true},
		{"?", "é", true}, // one character, not one byte
		{"?", "/", false},
		{"?", "", false},
		{"?", "ab", false},
		{"a?c", "abc", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"*a*a*a*a*a*a*a*b", strings.Repeat("a", 200), false}, // no backtracking blow-up
		{"react", "react", true},
		{"react", "React", false},
		{"react", "react-dom", false},
		{"a.b", "aXb", false},  // dots are literal
		{"[ab]", "[ab]", true}, // no classes: literal (checkGlob refuses it at load)
		{"a\\*", "a\\x", true}, // no escapes: the backslash is literal
	}
	for _, tt := range tests {
		if got := matchGlob(tt.pattern, tt.name); got != tt.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestCheckGlob(t *testing.T) {
	tests := []struct {
		pattern string
		want    string // "" = valid
	}{
		{"claude-*", ""},
		{"refs/heads/**", ""},
		{"a?b", ""},
		{"**/x", ""},
		{"", "is empty"},
		{"a***", `has "***" (use * within a path segment or ** across "/")`},
		{"a b", "contains whitespace or a control character"},
		{"a\tb", "contains whitespace or a control character"},
		{"a\x00", "contains whitespace or a control character"},
		{"a\u00a0b", "contains whitespace or a control character"},
		{"claude-[35]", `has "[": globs have only *, ** and ? (no classes, braces or escapes)`},
		{"{a,b}", `has "{": globs have only *, ** and ? (no classes, braces or escapes)`},
		{`a\*`, `has "\": globs have only *, ** and ? (no classes, braces or escapes)`},
		{"\xff", "is not valid UTF-8"},
		{strings.Repeat("a", maxGlobLen+1), "is too long (at most 512 bytes)"},
	}
	for _, tt := range tests {
		got := ""
		if err := checkGlob(tt.pattern); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("checkGlob(%q) = %q, want %q", tt.pattern, got, tt.want)
		}
	}
}

// globRegexp is the glob syntax said the other way, as an oracle for FuzzGlob.
func globRegexp(pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^`)
	for _, t := range compileGlob(pattern) {
		switch t.op {
		case opAny:
			b.WriteString(`(?s:.*)`)
		case opStar:
			b.WriteString(`[^/]*`)
		case opOne:
			b.WriteString(`[^/]`)
		default:
			b.WriteString(regexp.QuoteMeta(string(t.r)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"claude-*", "claude-sonnet"},
		{"refs/heads/**", "refs/heads/a/b"},
		{"a?c", "abc"},
		{"*/*", "a/b"},
		{"**a**", "xxaxx/y"},
		{"***", "a/b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		got := matchGlob(pattern, name) // never panics, whatever the input
		if !utf8.ValidString(pattern) || !utf8.ValidString(name) || len(pattern) > maxGlobLen {
			return
		}
		if want := globRegexp(pattern).MatchString(name); got != want {
			t.Fatalf("matchGlob(%q, %q) = %v, regexp says %v", pattern, name, got, want)
		}
		if !strings.ContainsAny(pattern, "*?") && got != (pattern == name) {
			t.Fatalf("literal pattern %q vs %q: %v", pattern, name, got)
		}
	})
}
