package policy

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// BurntSushi/toml reports positions for syntax errors only; its MetaData keeps key
// positions private and has none for keys inside arrays of inline tables. So after a
// file has parsed, an index walks the same text once more and records, for every key
// path (with array indices), where its key and its value start. Validation looks
// problems up there, falling back to the nearest enclosing table, then to 1:1.
//
// The walk trusts the text to be valid TOML (the parser said so) and is lenient
// otherwise: it always makes progress and never panics, whatever the input.

// seg is one step of a key path: a key, or an element of an array.
type seg struct {
	key   string
	index int  // >= 0: an array element; -1: a key
	table bool // an element of an array of tables ([[name]]); only changes how messages read
}

// path names a value in a TOML document, e.g. profile.web.repos[1].access.
type path []seg

func (p path) key(k string) path {
	return append(slices.Clip(p), seg{key: k, index: -1})
}

func (p path) elem(i int, table bool) path {
	return append(slices.Clip(p), seg{index: i, table: table})
}

// id is the index's lookup key: exact, with array indices, every key quoted.
func (p path) id() string {
	var b strings.Builder
	for _, s := range p {
		if s.index >= 0 {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		} else {
			b.WriteString("." + strconv.Quote(s.key))
		}
	}
	return b.String()
}

// String is the path as messages show it: dotted keys, quoted only where TOML needs
// quotes, without array indices (the position says which element).
func (p path) String() string {
	var parts []string
	for _, s := range p {
		if s.index < 0 {
			parts = append(parts, tomlKey(s.key))
		}
	}
	return strings.Join(parts, ".")
}

// where names the table a key sits in, for "unknown key" messages.
func (p path) where() string {
	if len(p) == 0 {
		return ""
	}
	if last := p[len(p)-1]; last.index >= 0 {
		if last.table {
			return " in [[" + p[:len(p)-1].String() + "]]"
		}
		return " in a " + p[:len(p)-1].String() + " entry"
	}
	return " in [" + p.String() + "]"
}

func tomlKey(k string) string {
	if k == "" {
		return `""`
	}
	for _, r := range k {
		if !isBareKeyRune(r) {
			return strconv.Quote(k)
		}
	}
	return k
}

func isBareKeyRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// loc holds byte offsets into the source; -1 when unknown.
type loc struct{ key, val int }

type index struct {
	src        string
	lineStarts []int
	locs       map[string]*loc
}

func newIndex(src string) *index {
	ix := &index{src: src, lineStarts: []int{0}, locs: map[string]*loc{}}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			ix.lineStarts = append(ix.lineStarts, i+1)
		}
	}
	w := walker{src: src, ix: ix, tables: map[string]int{}}
	w.document()
	return ix
}

// position turns a byte offset into a 1-based line and a 1-based column in characters.
func (ix *index) position(off int) (line, col int) {
	off = max(0, min(off, len(ix.src)))
	n, _ := slices.BinarySearch(ix.lineStarts, off+1) // lineStarts[n-1] <= off
	start := ix.lineStarts[n-1]
	return n, utf8.RuneCountInString(ix.src[start:off]) + 1
}

// find locates p: its key if wantKey (its value otherwise), falling back to the other
// one, then to the nearest enclosing path the file names, then to 1:1.
func (ix *index) find(p path, wantKey bool) (line, col int) {
	for q := p; ; q = q[:len(q)-1] {
		if l := ix.locs[q.id()]; l != nil {
			first, second := l.val, l.key
			if wantKey {
				first, second = second, first
			}
			if first >= 0 {
				return ix.position(first)
			}
			if second >= 0 {
				return ix.position(second)
			}
		}
		if len(q) == 0 {
			return 1, 1
		}
	}
}

func (ix *index) at(p path) *loc {
	id := p.id()
	l := ix.locs[id]
	if l == nil {
		l = &loc{key: -1, val: -1}
		ix.locs[id] = l
	}
	return l
}

// setKey and setVal keep the first position seen: a table named by several headers
// or dotted keys points at where it first appears.
func (ix *index) setKey(p path, off int) {
	if l := ix.at(p); l.key < 0 {
		l.key = off
	}
}

func (ix *index) setVal(p path, off int) {
	if l := ix.at(p); l.val < 0 {
		l.val = off
	}
}

type walker struct {
	src    string
	i      int
	ix     *index
	tables map[string]int // array-of-tables path id → how many [[headers]] so far
}

func (w *walker) eof() bool  { return w.i >= len(w.src) }
func (w *walker) peek() byte { return w.src[w.i] }

func (w *walker) skipSpace() {
	for !w.eof() && (w.peek() == ' ' || w.peek() == '\t') {
		w.i++
	}
}

// skipBlank skips whitespace, newlines and comments.
func (w *walker) skipBlank() {
	for !w.eof() {
		switch w.peek() {
		case ' ', '\t', '\r', '\n':
			w.i++
		case '#':
			for !w.eof() && w.peek() != '\n' {
				w.i++
			}
		default:
			return
		}
	}
}

func (w *walker) document() {
	var table path
	for {
		w.skipBlank()
		if w.eof() {
			return
		}
		start := w.i
		if w.peek() == '[' {
			table = w.header()
		} else {
			w.keyValue(table)
		}
		if w.i == start {
			w.i++
		}
	}
}

type keyTok struct {
	name string
	off  int
}

// header reads [a.b] or [[a.b]] and returns the table path it opens.
func (w *walker) header() path {
	start := w.i
	array := strings.HasPrefix(w.src[w.i:], "[[")
	w.i++
	if array {
		w.i++
	}
	keys := w.keys()
	var p path
	for n, k := range keys {
		p = p.key(k.name)
		w.ix.setKey(p, k.off)
		count, isArray := w.tables[p.id()]
		switch {
		case array && n == len(keys)-1:
			w.tables[p.id()] = count + 1
			w.ix.setVal(p, start)
			p = p.elem(count, true)
			w.ix.setKey(p, start)
		case isArray && count > 0:
			p = p.elem(count-1, true)
		}
	}
	w.ix.setVal(p, start)
	for !w.eof() && w.peek() != ']' && w.peek() != '\n' {
		w.i++
	}
	for !w.eof() && w.peek() == ']' {
		w.i++
	}
	return p
}

// keys reads a dotted key: a.b, "quoted key".'literal key'.
func (w *walker) keys() []keyTok {
	var keys []keyTok
	for {
		w.skipSpace()
		if w.eof() {
			return keys
		}
		off := w.i
		switch w.peek() {
		case '"', '\'':
			keys = append(keys, keyTok{name: w.str(), off: off})
		default:
			for !w.eof() && !strings.ContainsRune(" \t.=[]{},#\r\n\"'", rune(w.peek())) {
				w.i++
			}
			if w.i == off {
				return keys
			}
			keys = append(keys, keyTok{name: w.src[off:w.i], off: off})
		}
		w.skipSpace()
		if w.eof() || w.peek() != '.' {
			return keys
		}
		w.i++
	}
}

func (w *walker) keyValue(base path) {
	p := base
	for _, k := range w.keys() {
		p = p.key(k.name)
		w.ix.setKey(p, k.off)
	}
	w.skipSpace()
	if !w.eof() && w.peek() == '=' {
		w.i++
	}
	w.skipSpace()
	w.value(p)
}

func (w *walker) value(p path) {
	if w.eof() {
		return
	}
	w.ix.setVal(p, w.i)
	switch w.peek() {
	case '"', '\'':
		w.str()
	case '[':
		w.i++
		for n := 0; ; n++ {
			w.skipBlank()
			if w.eof() || w.peek() == ']' {
				break
			}
			start := w.i
			w.value(p.elem(n, false))
			w.skipBlank()
			if !w.eof() && w.peek() == ',' {
				w.i++
			}
			if w.i == start {
				w.i++
			}
		}
		w.i++
	case '{':
		w.i++
		for {
			w.skipBlank()
			if w.eof() || w.peek() == '}' {
				break
			}
			start := w.i
			w.keyValue(p)
			w.skipBlank()
			if !w.eof() && w.peek() == ',' {
				w.i++
			}
			if w.i == start {
				w.i++
			}
		}
		w.i++
	default: // number, boolean, date or time
		for !w.eof() && !strings.ContainsRune(",]}#\r\n", rune(w.peek())) {
			w.i++
		}
	}
}

// str reads a string of any of TOML's four kinds and returns its value; escapes are
// decoded well enough for keys to match what the parser produced.
func (w *walker) str() string {
	q := w.src[w.i : w.i+1]
	if strings.HasPrefix(w.src[w.i:], q+q+q) { // multi-line; only values, so the text is not needed
		w.i += 3
		for !w.eof() {
			switch {
			case q == `"` && w.peek() == '\\':
				w.i += 2
			case strings.HasPrefix(w.src[w.i:], q+q+q):
				w.i += 3
				for n := 0; n < 2 && !w.eof() && w.src[w.i:w.i+1] == q; n++ { // up to two quotes may end the content
					w.i++
				}
				return ""
			default:
				w.i++
			}
		}
		w.i = min(w.i, len(w.src))
		return ""
	}
	w.i++
	start := w.i
	for !w.eof() && w.src[w.i:w.i+1] != q && w.peek() != '\n' {
		if q == `"` && w.peek() == '\\' {
			w.i++
		}
		w.i++
	}
	w.i = min(w.i, len(w.src))
	raw := w.src[start:w.i]
	if !w.eof() && w.src[w.i:w.i+1] == q {
		w.i++
	}
	if q == "'" {
		return raw
	}
	return unescape(raw)
}

// unescape decodes TOML's basic-string escapes; one it does not know stays as written.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	const simple, decoded = `btnfre"\`, "\b\t\n\f\r\x1b\"\\"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		c := s[i]
		if k := strings.IndexByte(simple, c); k >= 0 {
			b.WriteByte(decoded[k])
			continue
		}
		digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if digits > 0 && i+digits < len(s) {
			if r, err := strconv.ParseUint(s[i+1:i+1+digits], 16, 32); err == nil {
				b.WriteRune(rune(r))
				i += digits
				continue
			}
		}
		b.WriteByte('\\')
		b.WriteByte(c)
	}
	return b.String()
}
