package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Problem is one thing wrong with a config or policy file, and where it is.
type Problem struct {
	File    string `json:"file"`    // the file as it was named to LoadPolicy or the config package, or as a config names it
	Line    int    `json:"line"`    // 1-based; 0 when the problem is about the whole file (it cannot be read)
	Col     int    `json:"col"`     // 1-based, counted in characters; 0 when Line is 0
	Message string `json:"message"` // lower-case, no trailing period; names the fix where there is one
}

// String formats the problem as "file:line:col: message"; as "file: message" when it
// has no line, and as the bare message when it has no file either (config.Config.Validate).
func (p Problem) String() string {
	switch {
	case p.Line > 0:
		return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Col, p.Message)
	case p.File != "":
		return p.File + ": " + p.Message
	}
	return p.Message
}

// Problems is every problem found in a file (and, for a config, in the policy it
// names). LoadPolicy, config.LoadConfig and config.Config.Validate return it as a *Problems error;
// errors.As fills either a Problems or a *Problems from it.
type Problems []Problem

// Error gives one "file:line:col: message" per line.
func (ps Problems) Error() string {
	if len(ps) == 0 {
		return "no problems"
	}
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// As lets errors.As fill a Problems target from a *Problems error.
func (ps *Problems) As(target any) bool {
	t, ok := target.(*Problems)
	if ok && ps != nil {
		*t = *ps
	}
	return ok && ps != nil
}

// sortProblems orders one file's problems by position, so output does not depend on
// map iteration order.
func sortProblems(ps Problems) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col), strings.Compare(a.Message, b.Message))
	})
}
