package policy

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// maxFileSize bounds what ReadFile reads of a config or policy file: real files are a few KiB.
const maxFileSize = 1 << 20

// Decoding onto the Go types is done here rather than by toml.Decode into the
// structs, because toml.Decode stops at the first mismatch and cannot say where a
// value inside an array of tables is. Parsing is still BurntSushi/toml's (into a
// plain map); this walks that map against the struct tags, collecting every
// problem with its position from the index.

type decoder struct {
	file    string
	ix      *index
	probs   Problems
	present map[string]bool // path ids of every key the file sets
	guessed map[string]bool // path ids of keys suggested for an unknown key ("did you mean")
	failed  map[string]bool // path ids of values that did not decode (wrong type, bad text)
	named   map[string]bool // dotted names (no indices) of every key the file sets

	// hint, if set, may add advice to an "unknown key" message when no known key is close.
	hint func(p path, key string) string
}

func newDecoder(file string, ix *index) *decoder {
	return &decoder{file: file, ix: ix, present: map[string]bool{}, guessed: map[string]bool{}, failed: map[string]bool{}, named: map[string]bool{}}
}

func (d *decoder) problemAt(line, col int, format string, args ...any) {
	d.probs = append(d.probs, Problem{File: d.file, Line: line, Col: col, Message: fmt.Sprintf(format, args...)})
}

// atKey reports a problem at the key of p.
func (d *decoder) atKey(p path, format string, args ...any) {
	line, col := d.ix.find(p, true)
	d.problemAt(line, col, format, args...)
}

// atValue reports a problem at the value of p. Once a value has failed to decode it
// has been reported, so atValue says nothing more about it or anything inside it:
// its Go value is a stand-in.
func (d *decoder) atValue(p path, format string, args ...any) {
	for n := len(p); n >= 0; n-- {
		if d.failed[p[:n].id()] {
			return
		}
	}
	line, col := d.ix.find(p, false)
	d.problemAt(line, col, format, args...)
}

// fail reports a value that cannot be decoded.
func (d *decoder) fail(p path, format string, args ...any) {
	d.atValue(p, format, args...)
	d.failed[p.id()] = true
}

func (d *decoder) has(p path) bool { return d.present[p.id()] }

// missing reports a required key that the file does not set, at the table that
// lacks it; unless an unknown key there was already taken for a misspelling of it,
// which says the same thing better.
func (d *decoder) missing(key, table path, format string, args ...any) {
	if !d.guessed[key.id()] {
		d.atValue(table, format, args...)
	}
}

var errTooLarge = fmt.Errorf("larger than %d KiB: too large for a cproxy config or policy", maxFileSize>>10)

// ReadFile reads a config or policy file, refusing one too large to be one
// and anything but a regular file: reading a FIFO waits for a writer, for
// ever if none comes, and a device or a directory is no policy. The file is
// opened without blocking (a FIFO's open would wait for a writer too) and
// its kind checked on the open file, so nothing put at the path in between
// is read.
func ReadFile(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: &notRegularError{st.Mode().Type()}}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errTooLarge}
	}
	return data, nil
}

// notRegularError is ReadFile's refusal of anything but a regular file.
type notRegularError struct{ mode fs.FileMode }

func (e *notRegularError) Error() string {
	kind := "not a regular file"
	switch {
	case e.mode&fs.ModeNamedPipe != 0:
		kind = "a FIFO, not a regular file"
	case e.mode&fs.ModeDevice != 0:
		kind = "a device, not a regular file"
	case e.mode&fs.ModeDir != 0:
		kind = "a directory, not a regular file"
	case e.mode&fs.ModeSocket != 0:
		kind = "a socket, not a regular file"
	}
	return kind + ": point at a regular file (write it elsewhere and rename it into place)"
}

// readProblem words a ReadFile error without repeating the file name.
func readProblem(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return "cannot read: " + pe.Err.Error()
	}
	return "cannot read: " + err.Error()
}

// parse turns TOML text into a plain tree and a position index, or reports the
// syntax error.
func parse(file string, data []byte) (map[string]any, *index, Problems) {
	// Drop a byte-order mark as the parser does, so its offsets and ours agree.
	for _, bom := range [][]byte{{0xef, 0xbb, 0xbf}, {0xff, 0xfe}, {0xfe, 0xff}} {
		if bytes.HasPrefix(data, bom) {
			data = data[len(bom):]
			break
		}
	}
	src := string(data)
	ix := newIndex(src)
	var tree map[string]any
	if _, err := toml.Decode(src, &tree); err != nil {
		var pe toml.ParseError
		if !errors.As(err, &pe) {
			return nil, ix, Problems{{File: file, Line: 1, Col: 1, Message: "invalid TOML: " + lowerFirst(err.Error())}}
		}
		line, col := ix.position(pe.Position.Start)
		if pe.Position.Start == 0 && pe.Position.Line > 1 { // no usable offset: trust the line
			line, col = pe.Position.Line, max(pe.Position.Col, 1)
		}
		msg := strings.TrimSuffix(lowerFirst(pe.Message), ".")
		return nil, ix, Problems{{File: file, Line: line, Col: col, Message: "invalid TOML: " + msg}}
	}
	return tree, ix, nil
}

func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 || !unicode.IsUpper(r) {
		return s
	}
	if n < len(s) && unicode.IsUpper(rune(s[n])) { // an acronym: leave it
		return s
	}
	return string(unicode.ToLower(r)) + s[n:]
}

var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

// decode sets v from data, which came from the parser, recording problems instead
// of stopping at the first. v keeps its value (a default) wherever data is wrong.
func (d *decoder) decode(v reflect.Value, data any, p path) {
	if v.CanAddr() && v.Addr().Type().Implements(textUnmarshalerType) {
		s, ok := data.(string)
		if !ok {
			d.wrongType(v.Type(), data, p)
			return
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			d.fail(p, "%s: %v", p, err)
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		s, ok := data.(string)
		if !ok {
			d.wrongType(v.Type(), data, p)
			return
		}
		v.SetString(s)
	case reflect.Bool:
		b, ok := data.(bool)
		if !ok {
			d.wrongType(v.Type(), data, p)
			return
		}
		v.SetBool(b)
	case reflect.Int64:
		n, ok := data.(int64)
		if !ok {
			d.wrongType(v.Type(), data, p)
			return
		}
		v.SetInt(n)
	case reflect.Float64:
		// A number written either way: 3 and 3.5 (an MCP argument's
		// bounds).
		switch n := data.(type) {
		case float64:
			v.SetFloat(n)
		case int64:
			v.SetFloat(float64(n))
		default:
			d.wrongType(v.Type(), data, p)
		}
	case reflect.Slice:
		var elems []any
		tables := false
		switch a := data.(type) {
		case []any:
			elems = a
		case []map[string]any:
			tables = true
			for _, m := range a {
				elems = append(elems, m)
			}
		default:
			d.wrongType(v.Type(), data, p)
			return
		}
		s := reflect.MakeSlice(v.Type(), len(elems), len(elems))
		for i, e := range elems {
			d.decode(s.Index(i), e, p.elem(i, tables))
		}
		v.Set(s)
	case reflect.Map:
		m, ok := data.(map[string]any)
		if !ok {
			d.wrongType(v.Type(), data, p)
			return
		}
		// The map keeps the entries it has, and an entry the file sets is
		// decoded over the one there: defaults held in a map's values
		// (the config's upstreams) stay, as a struct's fields do.
		if v.IsNil() {
			v.Set(reflect.MakeMapWithSize(v.Type(), len(m)))
		}
		for _, k := range sortedKeys(m) {
			d.mark(p.key(k))
			e := reflect.New(v.Type().Elem()).Elem()
			if old := v.MapIndex(reflect.ValueOf(k)); old.IsValid() {
				e.Set(old)
			}
			d.decode(e, m[k], p.key(k))
			v.SetMapIndex(reflect.ValueOf(k), e)
		}
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(v.Elem(), data, p)
	case reflect.Struct:
		m, ok := data.(map[string]any)
		if !ok {
			d.wrongType(v.Type(), data, p)
			return
		}
		fields := tomlFields(v.Type())
		for _, k := range sortedKeys(m) {
			i, ok := fields[k]
			if !ok {
				d.unknownKey(p, k, sortedKeys(fields))
				continue
			}
			d.mark(p.key(k))
			d.decode(v.FieldByIndex(i), m[k], p.key(k))
		}
	default:
		panic("policy: cannot decode into " + v.Type().String()) // a programming error in this package's types
	}
}

func (d *decoder) mark(p path) {
	d.present[p.id()] = true
	d.named[p.String()] = true
}

// tomlFields maps the toml tag names of t's exported fields to their indices.
// The fields of an embedded struct without a tag are t's own, as
// encoding/json has them: the config's Relay embeds policy.Relay.
func tomlFields(t reflect.Type) map[string][]int {
	fields := map[string][]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, sub := range tomlFields(f.Type) {
				fields[k] = append([]int{i}, sub...)
			}
			continue
		}
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fields[name] = []int{i}
	}
	return fields
}

func (d *decoder) unknownKey(p path, key string, known []string) {
	msg := fmt.Sprintf("unknown key %q%s", key, p.where())
	if s := suggest(key, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
		d.guessed[p.key(s).id()] = true
	} else if h := d.hintFor(p, key); h != "" {
		msg += " (" + h + ")"
	} else if len(known) > 0 {
		msg += " (known keys: " + strings.Join(known, ", ") + ")"
	}
	d.atKey(p.key(key), "%s", msg)
}

func (d *decoder) hintFor(p path, key string) string {
	if d.hint == nil {
		return ""
	}
	return d.hint(p, key)
}

// wrongType reports a value of the wrong TOML type, saying what was expected.
func (d *decoder) wrongType(want reflect.Type, got any, p path) {
	msg := "must be " + describeWant(want) + ", not " + describeGot(got)
	if len(p) > 0 && p[len(p)-1].index >= 0 {
		msg = "each entry " + msg
	}
	if s, ok := got.(string); ok && want.Kind() == reflect.Slice && want.Elem().Kind() == reflect.String {
		msg += fmt.Sprintf(" (write [%q])", s)
	}
	d.fail(p, "%s: %s", p, msg)
}

// wanter lets a TextUnmarshaler say what its TOML text looks like; exported
// so that the config package's types (Duration) can.
type wanter interface{ TOMLWant() string }

func describeWant(t reflect.Type) string {
	if w, ok := reflect.New(t).Interface().(wanter); ok {
		return w.TOMLWant()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int64:
		return "an integer"
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			return "an array of strings"
		case reflect.Struct, reflect.Map, reflect.Pointer:
			return "an array of tables"
		}
		return "an array"
	case reflect.Pointer:
		return describeWant(t.Elem())
	}
	return "a table"
}

func describeGot(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date or time"
	}
	return "a date or time" // toml.LocalDate and friends
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// suggest returns the known key closest to key, if it is close enough to be a typo:
// one edit away, or two for keys of seven or more characters.
func suggest(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if len(key) > len(k)+2 || len(k) > len(key)+2 { // too far apart; also keeps the table small
			continue
		}
		dist := editDistance(strings.ToLower(key), k)
		// On a tie, a key that is the unknown one and more ("model",
		// "models") over one that is less ("mode"): a key left short is
		// the likelier slip.
		tie := dist == bestDist && best != "" && strings.HasPrefix(k, strings.ToLower(key)) && !strings.HasPrefix(best, strings.ToLower(key))
		if (dist < bestDist || tie) && (dist <= 1 || dist == 2 && len(k) >= 7) {
			best, bestDist = k, dist
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and b, in bytes:
// insertions, deletions, substitutions and swaps of neighbours each count one.
func editDistance(a, b string) int {
	rows := make([][]int, len(a)+1)
	for i := range rows {
		rows[i] = make([]int, len(b)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			rows[i][j] = min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				rows[i][j] = min(rows[i][j], rows[i-2][j-2]+1)
			}
		}
	}
	return rows[len(a)][len(b)]
}
