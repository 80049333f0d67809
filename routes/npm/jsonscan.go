package npm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"iter"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// jsonScanner reads a packument's JSON text from r, a value at a time,
// checking it as jsontext's decoder (github.com/go-json-experiment/json,
// the API of the standard library's encoding/json/jsontext) does with
// AllowInvalidUTF8: RFC 8259's grammar, at most 10,000 levels deep, and no
// object, anywhere in the packument, that gives a name twice (names
// compared decoded, invalid UTF-8 read as U+FFFD, as npm and encoding/json
// read it). npm keeps the last of a name given twice, another reader the
// first, and cproxy must decide on what its client reads.
//
// It is written by hand because jsontext's decoder, checking names, reads
// a packument at 90 to 150 MB/s on one CPU (280 without the check, before
// anything is rewritten), and the rewrite must go at 250 or more
// (docs/benchmarks/npm-packument.md). FuzzJSONScanner holds it to jsontext:
// the same texts accepted, the same compacted bytes out, the same
// duplicate reported.
//
// What it holds (the value being read and what is read ahead) is bounded
// by room; past it a read fails with errHeldFull.
type jsonScanner struct {
	r    io.Reader
	room func() int
	buf  []byte // buf[pos:] is read and not yet consumed
	pos  int
	eof  bool // r has no more
	rerr error

	// levels are the open objects and arrays, the outermost first: those
	// entered with enterObject, then those of the value being scanned.
	levels []scanLevel
	st     int // scan's state, where a value was cut off
	// names holds the decoded names of the open objects, one after the
	// other; ends[k] is where name k ends.
	names   []byte
	ends    []int
	hashes  []uint32              // hashes[k] is name k's, to compare names quickly
	sets    []map[uint32]struct{} // spare name sets
	scratch []byte
}

// scanLevel is an open object or array.
type scanLevel struct {
	obj   bool
	first int // the object's first name, in ends
	n     int // names or elements begun
	// set holds the hashes of the object's names once it has manyNames:
	// only a name whose hash is in it is compared with the others.
	set map[uint32]struct{}
}

const (
	maxScanDepth = 10000    // jsontext's
	manyNames    = 32       // past this an object's names are looked up by hash
	scanRead     = 64 << 10 // the least read at a time
)

var (
	// errShort: the value goes on past what is buffered.
	errShort = errors.New("short buffer")
	// errMaxDepth is jsontext's limit.
	errMaxDepth = errors.New("exceeded max depth")
)

func newJSONScanner(r io.Reader, room func() int) *jsonScanner {
	return &jsonScanner{r: r, room: room}
}

// more reads as much again as is buffered, at least scanRead (so that
// scanning a token cut off again from its start costs as much as reading
// it, at most), within room. At the end of r it sets eof, or returns r's error.
func (s *jsonScanner) more() error {
	if s.eof {
		return io.ErrUnexpectedEOF
	}
	if s.rerr != nil {
		return s.rerr
	}
	held := len(s.buf) - s.pos
	want := max(held, scanRead)
	if left := s.room() - held; left <= 0 {
		return errHeldFull
	} else if want > left {
		want = left
	}
	if s.pos > 0 {
		s.buf = s.buf[:copy(s.buf, s.buf[s.pos:])]
		s.pos = 0
	}
	if cap(s.buf)-len(s.buf) < want {
		nb := make([]byte, len(s.buf), len(s.buf)+want)
		copy(nb, s.buf)
		s.buf = nb
	}
	// Read all of want, or to the end: reading less, a long token would be
	// scanned from its start again for every read. A reader that keeps
	// returning nothing is an error.
	got, empty := 0, 0
	for got < want {
		n, err := s.r.Read(s.buf[len(s.buf) : len(s.buf)+want-got])
		s.buf = s.buf[:len(s.buf)+n]
		got += n
		switch {
		case err == io.EOF:
			s.eof = true
			return nil
		case err != nil:
			s.rerr = &readError{err}
			if got > 0 {
				return nil
			}
			return s.rerr
		case n > 0:
			empty = 0
		case empty == 100:
			s.rerr = &readError{io.ErrNoProgress}
			return s.rerr
		default:
			empty++
		}
	}
	return nil
}

// peek skips whitespace and returns the next byte, 0 at the end.
func (s *jsonScanner) peek() (byte, error) {
	for {
		for s.pos < len(s.buf) && isSpace(s.buf[s.pos]) {
			s.pos++
		}
		if s.pos < len(s.buf) {
			return s.buf[s.pos], nil
		}
		if s.eof {
			return 0, nil
		}
		if err := s.more(); err != nil {
			return 0, err
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// syntaxError is jsontext's error for invalid JSON text.
func syntaxError() error { return &jsontext.SyntacticError{Err: errJSONSyntax} }

// enterObject reads the '{' that peek saw.
func (s *jsonScanner) enterObject() error {
	if c, err := s.peek(); err != nil || c != '{' {
		return errOr(err)
	}
	if len(s.levels) == maxScanDepth {
		return &jsontext.SyntacticError{Err: errMaxDepth}
	}
	s.pos++
	s.levels = append(s.levels, scanLevel{obj: true, first: len(s.ends)})
	return nil
}

func errOr(err error) error {
	if err != nil {
		return err
	}
	return syntaxError()
}

// next says whether the object entered last has another member, whose
// name follows; at its end it reads the '}' and leaves it.
func (s *jsonScanner) next() (bool, error) {
	c, err := s.peek()
	if err != nil {
		return false, err
	}
	lv := &s.levels[len(s.levels)-1]
	switch {
	case c == '}':
		s.pos++
		s.pop()
		return false, nil
	case lv.n == 0:
		return true, nil
	case c == ',':
		s.pos++
		return true, nil
	}
	return false, syntaxError()
}

// name reads the next member's name and its ':': the name as sent, and
// decoded.
func (s *jsonScanner) name() ([]byte, string, error) {
	var end int
	for {
		c, err := s.peek()
		if err != nil {
			return nil, "", err
		}
		if c != '"' {
			return nil, "", syntaxError()
		}
		if end, err = scanString(s.buf[s.pos:], 0); err == nil {
			break
		}
		if err != errShort {
			return nil, "", err
		}
		if s.eof {
			return nil, "", syntaxError()
		}
		if err := s.more(); err != nil {
			return nil, "", err
		}
	}
	raw := bytes.Clone(s.buf[s.pos : s.pos+end])
	lv := &s.levels[len(s.levels)-1]
	name, err := s.addName(lv, raw)
	if err != nil {
		return nil, "", err
	}
	lv.n++
	s.pos += end
	if c, err := s.peek(); err != nil || c != ':' {
		return nil, "", errOr(err)
	}
	s.pos++
	return raw, string(name), nil
}

// finish checks that nothing but whitespace follows the packument.
func (s *jsonScanner) finish() error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	if s.pos < len(s.buf) || c != 0 {
		return syntaxError()
	}
	return nil
}

// value reads the next value, appending it to dst without whitespace
// (every string and number as sent); with skip it appends nothing. It
// scans each byte once, reading on where a token is cut off; what it
// appends counts against room, like what is buffered.
func (s *jsonScanner) value(dst []byte, skip bool) ([]byte, error) {
	base, depth := len(dst), len(s.levels)
	s.st = scanValue
	for {
		out, n, err := s.scan(dst, s.buf[s.pos:], skip, depth)
		s.pos += n
		dst = out
		switch {
		case err == nil:
			return dst, nil
		case err != errShort:
		case s.eof:
			err = syntaxError()
		case len(dst)-base+len(s.buf)-s.pos >= s.room():
			err = errHeldFull
		default:
			err = s.more()
		}
		if err != nil {
			for len(s.levels) > depth {
				s.pop()
			}
			return dst, err
		}
	}
}

// The states of scan.
const (
	scanValue    = iota // a value is next
	scanAfter           // a value has ended
	scanName            // a name is next
	scanColon           // a name has been read: ':' is next
	scanObjStart        // after '{': a name or '}'
	scanArrStart        // after '[': a value or ']'
)

// scan goes on scanning the value begun at level depth, from the start of
// b in state s.st, appending it to dst without whitespace unless skip: the
// new dst and how much of b it took. errShort says that b ends before the
// value does: scan has taken b up to the token cut off, and goes on from
// it when called again with the rest.
func (s *jsonScanner) scan(dst, b []byte, skip bool, depth int) ([]byte, int, error) {
	i, seg, st := 0, 0, s.st
	var err error
	for {
		if st == scanAfter && len(s.levels) == depth {
			if !skip {
				dst = append(dst, b[seg:i]...)
			}
			return dst, i, nil
		}
		if i < len(b) && isSpace(b[i]) {
			if !skip {
				dst = append(dst, b[seg:i]...)
			}
			for i < len(b) && isSpace(b[i]) {
				i++
			}
			seg = i
		}
		tok := i
		if i == len(b) {
			break // errShort
		}
		c := b[i]
		switch st {
		case scanObjStart:
			if c == '}' {
				i++
				s.pop()
				st = scanAfter
				continue
			}
			st = scanName
			fallthrough
		case scanName:
			if c != '"' {
				return dst, 0, syntaxError()
			}
			var end int
			if end, err = scanString(b, i); err != nil {
				break
			}
			lv := &s.levels[len(s.levels)-1]
			if _, err := s.addName(lv, b[i:end]); err != nil {
				return dst, 0, err
			}
			lv.n++
			i, st = end, scanColon
		case scanColon:
			if c != ':' {
				return dst, 0, syntaxError()
			}
			i++
			st = scanValue
		case scanArrStart:
			if c == ']' {
				i++
				s.pop()
				st = scanAfter
				continue
			}
			s.levels[len(s.levels)-1].n = 1
			st = scanValue
			fallthrough
		case scanValue:
			switch {
			case c == '"':
				i, err = scanString(b, i)
				st = scanAfter
			case c == '{' || c == '[':
				if len(s.levels) == maxScanDepth {
					return dst, 0, &jsontext.SyntacticError{Err: errMaxDepth}
				}
				s.levels = append(s.levels, scanLevel{obj: c == '{', first: len(s.ends)})
				i++
				st = scanObjStart
				if c == '[' {
					st = scanArrStart
				}
			case c == 't' || c == 'f' || c == 'n':
				i, err = scanLiteral(b, i)
				st = scanAfter
			case c == '-' || '0' <= c && c <= '9':
				i, err = scanNumber(b, i)
				st = scanAfter
			default:
				return dst, 0, syntaxError()
			}
		case scanAfter:
			lv := &s.levels[len(s.levels)-1]
			switch {
			case c == ',' && lv.obj:
				i++
				st = scanName
			case c == ',':
				i++
				lv.n++
				st = scanValue
			case c == '}' && lv.obj || c == ']' && !lv.obj:
				i++
				s.pop()
			default:
				return dst, 0, syntaxError()
			}
		}
		if err != nil {
			if err != errShort {
				return dst, 0, err
			}
			// The token at tok is cut off: go on from it.
			if st == scanAfter {
				st = scanValue // a string, number or literal
			}
			i = tok
			break
		}
	}
	if !skip {
		dst = append(dst, b[seg:i]...)
	}
	s.st = st
	return dst, i, errShort
}

// scanLiteral checks the true, false or null at b[i] and returns the
// index after it.
func scanLiteral(b []byte, i int) (int, error) {
	lit := "null"
	switch b[i] {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	}
	if len(b)-i < len(lit) {
		if string(b[i:]) == lit[:len(b)-i] {
			return 0, errShort
		}
		return 0, syntaxError()
	}
	if string(b[i:i+len(lit)]) != lit {
		return 0, syntaxError()
	}
	return i + len(lit), nil
}

// strPlain marks the bytes a string holds as they are: not '"', '\\' or
// a control character.
var strPlain = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// scanString checks the string at b[i] (its opening quote) and returns
// the index after its closing quote. Invalid UTF-8 passes.
func scanString(b []byte, i int) (int, error) {
	i++
	for {
		// Eight bytes at a time while none is '"', '\\' or a control
		// character (a word that may hold one is read byte by byte).
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			borrows := (w - ones*0x20) | ((w ^ ones*'"') - ones) | ((w ^ ones*'\\') - ones)
			if borrows&^w&highs != 0 {
				break
			}
			i += 8
		}
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i == len(b) {
			return 0, errShort
		}
		switch b[i] {
		case '"':
			return i + 1, nil
		case '\\':
			if i+1 == len(b) {
				return 0, errShort
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k == len(b) {
						return 0, errShort
					}
					if !isHex(b[k]) {
						return 0, syntaxError()
					}
				}
				i += 6
			default:
				return 0, syntaxError()
			}
		default:
			return 0, syntaxError() // a control character
		}
	}
}

// For scanString's test of eight bytes at once: a byte below 0x80 that is
// below 0x20, or 0 once xored with '"' or '\\', borrows into its high bit.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber checks the number at b[i] and returns the index after it;
// errShort when b ends where it could go on.
func scanNumber(b []byte, i int) (int, error) {
	digits := func() (bool, error) {
		if i == len(b) {
			return false, errShort
		}
		if !isDigit(b[i]) {
			return false, syntaxError()
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
		if i == len(b) {
			return false, errShort
		}
		return true, nil
	}
	if b[i] == '-' {
		i++
	}
	if i == len(b) {
		return 0, errShort
	}
	switch {
	case b[i] == '0':
		if i++; i == len(b) {
			return 0, errShort
		}
	default:
		if _, err := digits(); err != nil {
			return 0, err
		}
	}
	if b[i] == '.' {
		i++
		if _, err := digits(); err != nil {
			return 0, err
		}
	}
	if b[i] == 'e' || b[i] == 'E' {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if _, err := digits(); err != nil {
			return 0, err
		}
	}
	return i, nil
}

// addName adds the name (quoted, as sent) to the object lv, decoded;
// a name it already has is jsontext's ErrDuplicateName, at its path.
func (s *jsonScanner) addName(lv *scanLevel, quoted []byte) ([]byte, error) {
	name := quoted[1 : len(quoted)-1]
	for _, c := range name {
		if c == '\\' || c >= 0x80 {
			// Invalid UTF-8 becomes U+FFFD, as npm and encoding/json read it.
			s.scratch, _ = jsontext.AppendUnquote(s.scratch[:0], quoted)
			name = s.scratch
			break
		}
	}
	h := uint32(2166136261) // FNV-1a
	for _, c := range name {
		h = (h ^ uint32(c)) * 16777619
	}
	dup := false
	if _, seen := lv.set[h]; seen || lv.set == nil {
		for k := lv.first; k < len(s.ends) && !dup; k++ {
			dup = s.hashes[k] == h && bytes.Equal(s.nameAt(k), name)
		}
	}
	if dup {
		return nil, &jsontext.SyntacticError{JSONPointer: s.pointer().AppendToken(string(name)), Err: jsontext.ErrDuplicateName}
	}
	if lv.set != nil {
		lv.set[h] = struct{}{}
	} else if len(s.ends)-lv.first == manyNames {
		if n := len(s.sets); n > 0 {
			lv.set, s.sets = s.sets[n-1], s.sets[:n-1]
		} else {
			lv.set = make(map[uint32]struct{}, 4*manyNames)
		}
		for _, h := range s.hashes[lv.first:] {
			lv.set[h] = struct{}{}
		}
		lv.set[h] = struct{}{}
	}
	s.names = append(s.names, name...)
	s.ends = append(s.ends, len(s.names))
	s.hashes = append(s.hashes, h)
	return s.names[len(s.names)-len(name):], nil
}

// pop closes the innermost level.
func (s *jsonScanner) pop() {
	lv := s.levels[len(s.levels)-1]
	s.levels = s.levels[:len(s.levels)-1]
	if lv.set != nil {
		clear(lv.set)
		s.sets = append(s.sets, lv.set)
	}
	s.names = s.names[:s.endBefore(lv.first)]
	s.ends = s.ends[:lv.first]
	s.hashes = s.hashes[:lv.first]
}

func (s *jsonScanner) nameAt(k int) []byte { return s.names[s.endBefore(k):s.ends[k]] }

func (s *jsonScanner) endBefore(k int) int {
	if k == 0 {
		return 0
	}
	return s.ends[k-1]
}

// pointer is the JSON pointer of the innermost open level: each object's
// last name and each array's index, as jsontext reports them.
func (s *jsonScanner) pointer() jsontext.Pointer {
	var p jsontext.Pointer
	for i, lv := range s.levels[:len(s.levels)-1] {
		switch {
		case lv.obj:
			// Its last name is the one before the next level's first.
			p = p.AppendToken(string(s.nameAt(s.levels[i+1].first - 1)))
		default:
			p = p.AppendToken(strconv.Itoa(lv.n - 1))
		}
	}
	return p
}

// The functions below read JSON text that jsonScanner has checked and
// compacted, so they check nothing.

// checkedMembers yields each member of the object at obj[0]: its name,
// decoded, and where its value starts in obj.
func checkedMembers(obj []byte) iter.Seq2[[]byte, int] {
	return func(yield func([]byte, int) bool) {
		i := 1
		for obj[i] != '}' {
			end := skipString(obj, i)
			name := obj[i+1 : end-1]
			if needsUnquote(name) {
				name, _ = jsontext.AppendUnquote(nil, obj[i:end])
			}
			i = end + 1 // past ':'
			if !yield(name, i) {
				return
			}
			i = skipChecked(obj, i)
			if obj[i] == ',' {
				i++
			}
		}
	}
}

// needsUnquote says whether a string's bytes (between its quotes) differ
// from what it decodes to.
func needsUnquote(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= 0x80 {
			return true
		}
	}
	return false
}

// checkedString decodes the string quoted; invalid UTF-8 becomes U+FFFD,
// as encoding/json decodes it.
func checkedString(quoted []byte) string {
	if b := quoted[1 : len(quoted)-1]; !needsUnquote(b) {
		return string(b)
	}
	b, _ := jsontext.AppendUnquote(nil, quoted)
	return string(b)
}

// skipString returns the index after the string at b[i].
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		q := j + bytes.IndexByte(b[j:], '"')
		// The quote ends the string unless an odd number of backslashes
		// escapes it.
		k := q
		for b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// skipChecked returns the index after the value at b[i].
func skipChecked(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; ; j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	return j
}
