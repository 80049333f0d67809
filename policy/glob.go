package policy

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxGlobLen bounds a glob so a hostile or mistaken policy cannot make matching slow.
const maxGlobLen = 512

// Glob syntax, the same for every glob in a policy:
//
//	*    any run of characters, possibly empty, except "/"
//	**   any run of characters, possibly empty, including "/"
//	?    exactly one character except "/"
//
// Every other character stands for itself; there are no classes, braces or escapes.
// Matching walks pattern and name once, side by side (a set of pattern positions, as
// an NFA would), so it takes time proportional to len(pattern) × len(name) whatever
// the input: no backtracking blow-up.

type globOp uint8

const (
	opLit  globOp = iota // one literal rune
	opOne                // ?
	opStar               // *
	opAny                // **
)

type globTok struct {
	op globOp
	r  rune
}

// compileGlob splits a pattern into tokens. A run of three or more stars compiles
// as ** followed by *, which matches the same as **; checkGlob refuses such runs.
func compileGlob(pattern string) []globTok {
	toks := make([]globTok, 0, len(pattern))
	for i := 0; i < len(pattern); {
		switch {
		case strings.HasPrefix(pattern[i:], "**"):
			toks = append(toks, globTok{op: opAny})
			i += 2
		case pattern[i] == '*':
			toks = append(toks, globTok{op: opStar})
			i++
		case pattern[i] == '?':
			toks = append(toks, globTok{op: opOne})
			i++
		default:
			r, n := utf8.DecodeRuneInString(pattern[i:])
			toks = append(toks, globTok{op: opLit, r: r})
			i += n
		}
	}
	return toks
}

// matchGlob reports whether name matches pattern (see the syntax above).
func matchGlob(pattern, name string) bool {
	toks := compileGlob(pattern)
	cur := make([]bool, len(toks)+1)
	next := make([]bool, len(toks)+1)
	cur[0] = true
	closeStars(toks, cur)
	for _, c := range name {
		clear(next)
		alive := false
		for i, t := range toks {
			if !cur[i] {
				continue
			}
			switch t.op {
			case opLit:
				if t.r == c {
					next[i+1], alive = true, true
				}
			case opOne:
				if c != '/' {
					next[i+1], alive = true, true
				}
			case opStar:
				if c != '/' {
					next[i], alive = true, true
				}
			case opAny:
				next[i], alive = true, true
			}
		}
		if !alive {
			return false
		}
		closeStars(toks, next)
		cur, next = next, cur
	}
	return cur[len(toks)]
}

// closeStars adds the positions reachable without consuming input: a star may match
// nothing, so being before it means also being after it.
func closeStars(toks []globTok, set []bool) {
	for i, t := range toks {
		if set[i] && (t.op == opStar || t.op == opAny) {
			set[i+1] = true
		}
	}
}

// checkGlob says what is wrong with a pattern, or returns nil. The messages complete
// a sentence that starts with the quoted pattern.
func checkGlob(pattern string) error {
	switch {
	case pattern == "":
		return errors.New("is empty")
	case len(pattern) > maxGlobLen:
		return errors.New("is too long (at most 512 bytes)")
	case !utf8.ValidString(pattern):
		return errors.New("is not valid UTF-8")
	case strings.Contains(pattern, "***"):
		return errors.New(`has "***" (use * within a path segment or ** across "/")`)
	}
	for _, r := range pattern {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return errors.New("contains whitespace or a control character")
		}
		if strings.ContainsRune(`[]{}\`, r) {
			return errors.New(`has "` + string(r) + `": globs have only *, ** and ? (no classes, braces or escapes)`)
		}
	}
	return nil
}
