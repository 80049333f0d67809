package sandboxenv

import (
	"fmt"
	"strings"
)

// shellScript builds the sh output of cproxy env so that it means the same
// under eval "$(cproxy env)" and under eval $(cproxy env), the unquoted
// form harness authors copy from eval $(ssh-agent). Unquoted, the shell
// splits the output into words at every run of spaces, tabs and newlines,
// expands each word that holds *, ? or [ against the files in the current
// folder, and joins the words with single spaces before eval parses them:
// quotes in the output protect nothing at that stage. So the output
//   - ends every statement with ";" (a line break becomes a space), and has
//     no comment (it would run to the end of the joined line);
//   - holds no *, ?, [ or \, nor a ( that bash's extglob could read as a
//     pattern, nor two blanks in a row, nor a tab or line break inside a
//     value: a value holding any of them is written by printf from octal
//     escapes, in a scratch variable (cproxyVar). Those escapes are the
//     only backslashes; bash 5.2, dash and zsh expand no word for one
//     (helpers/shell_test.go checks it in a folder of look-alike names);
//   - uses no case statement, whose patterns need glob characters.
type shellScript struct {
	b         strings.Builder
	usedValue bool   // cproxyVar was set: the script must unset it
	indent    string // written before each line
}

// cproxyVar is the scratch variable a value printf writes passes through.
const cproxyVar = "cproxy_v"

// line adds statements, which must end with ";" or a keyword such as then.
func (s *shellScript) line(text string) {
	s.b.WriteString(s.indent)
	s.b.WriteString(text)
	s.b.WriteByte('\n')
}

// export adds `export LHS=value;`. lhs is a variable name, or a quoted
// word that makes one.
func (s *shellScript) export(lhs, value string) error {
	if strings.IndexByte(value, 0) >= 0 {
		return fmt.Errorf("a value cannot hold a NUL byte")
	}
	if plainShell(value) {
		s.line("export " + lhs + "=" + shellQuote(value) + ";")
		return nil
	}
	// $(…) drops trailing line breaks: printf writes a "." after the
	// value, and the expansion takes it off.
	s.usedValue = true
	s.line(cproxyVar + "=\"$(printf " + shellQuote(printfFormat(value)+".") + ")\";")
	s.line("export " + lhs + "=\"${" + cproxyVar + "%.}\";")
	return nil
}

// String returns the script. The caller unsets cproxyVar after it when
// usedValue.
func (s *shellScript) String() string { return s.b.String() }

// shellQuote single-quotes v, which plainShell accepted (or a printf
// format), writing a single quote as '"'"' (no backslash: see shellScript).
func shellQuote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", `'"'"'`) + "'"
}

// plainShell says whether v can be written single-quoted as it is: no byte
// that word splitting or pathname expansion would change (see shellScript).
func plainShell(v string) bool {
	for i := range len(v) {
		if !plainShellAt(v, i) {
			return false
		}
	}
	return true
}

// plainShellAt says whether v[i] can be written as it is: printable ASCII
// or the bytes of UTF-8 text beyond it, but no *, ?, [ or \, no blank
// after a blank, and no ( after one of bash's extglob marks +, @ and !.
func plainShellAt(v string, i int) bool {
	c := v[i]
	switch {
	case c == '*', c == '?', c == '[', c == '\\':
		return false
	case c == ' ':
		return i == 0 || v[i-1] != ' '
	case c == '(':
		return i == 0 || !strings.ContainsRune("+@!", rune(v[i-1]))
	}
	return c > ' ' && c != 0x7f
}

// printfFormat is a printf format that writes v: plain bytes as they are
// (% doubled), the others as 3-digit octal escapes, which bash, dash, zsh
// and busybox's printf all read.
func printfFormat(v string) string {
	var b strings.Builder
	for i := range len(v) {
		switch c := v[i]; {
		case c == '%':
			b.WriteString("%%")
		case plainShellAt(v, i):
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\%03o`, c)
		}
	}
	return b.String()
}
