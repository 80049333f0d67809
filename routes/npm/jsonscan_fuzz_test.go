package npm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzJSONScanner holds jsonScanner to jsontext's decoder, which the
// rewrite used before it: for any text, as an object at the top or as a
// member's value, both accept it or both refuse it; accepted, the scanner
// gives jsontext's compacted bytes; refused for a name given twice, both
// say so, at the same path. Reading one byte at a time changes nothing.
func FuzzJSONScanner(f *testing.F) {
	for _, s := range []string{
		`{"a":[1.5e+3,-0,true,false,null,{"b":"\"\\\/\b\f\n\r\t\u00e9"}],"c":{}}`,
		` { "a" : [ 1 , 2 ] , "b" : { "c" : "d" } } `,
		`{"a":1,"\u0061":2}`, `{"a":{"b":[{"c":1,"c":2}]}}`, `{"\xff":1,"\xfe":2}`, `{"\ud800":1,"\ufffd":2}`,
		`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"` + "\x01" + `"}`,
		`{"a":1}x`, `{"a":1,}`, `{,}`, `[1]`, `"x"`, ``, `{"a":[1,]}`, `{"a" 1}`,
		`{"1":0,"2":0,"3":0,"4":0,"5":0,"6":0,"7":0,"8":0,"9":0,"10":0,"11":0,"12":0,"13":0,"14":0,"15":0,"16":0,"17":0,"1\u0037":0}`,
		`{"a~/b":{"x":1,"x":1}}`,
	} {
		f.Add([]byte(s))
	}
	var many []string
	for i := range manyNames + 2 {
		many = append(many, fmt.Sprintf(`"%d":%d`, i, i))
	}
	f.Add([]byte(`{` + strings.Join(many, ",") + `,"1":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("{")) {
			compareScanner(t, raw)
		}
		compareScanner(t, append(append([]byte(`{"v":`), raw...), '}'))
	})
}

func compareScanner(t *testing.T, raw []byte) {
	want, werr := jsontextCompact(raw)
	for _, r := range []io.Reader{bytes.NewReader(raw), iotest.OneByteReader(bytes.NewReader(raw))} {
		got, err := scanDocument(r)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%.200q: scanner %.200q, %v; jsontext %.200q, %v", raw, got, err, want, werr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%.200q: scanner %.200q; jsontext %.200q", raw, got, want)
		}
		if p, wp := duplicateAt(err), duplicateAt(werr); p != wp {
			t.Fatalf("%.200q: scanner %v (%q); jsontext %v (%q)", raw, err, p, werr, wp)
		}
	}
}

// duplicateAt is the path of a name given twice, "" for any other error.
func duplicateAt(err error) string {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return "dup " + string(se.JSONPointer)
	}
	return ""
}

// jsontextCompact reads one object as the rewrite did before the scanner.
func jsontextCompact(raw []byte) ([]byte, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowInvalidUTF8(true))
	if dec.PeekKind() != '{' {
		return nil, errNotObject
	}
	v, err := dec.ReadValue()
	if err != nil {
		return nil, err
	}
	v = bytes.Clone(v) // the decoder reuses its buffer
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, errJSONSyntax
	}
	return jsontext.AppendFormat(nil, v, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true), jsontext.PreserveRawStrings(true))
}

// scanDocument reads one object with the scanner's calls, as the rewrite
// makes them, and writes it compacted.
func scanDocument(r io.Reader) ([]byte, error) {
	sc := newJSONScanner(r, func() int { return maxPackument })
	if c, err := sc.peek(); err != nil || c != '{' {
		return nil, errNotObject
	}
	if err := sc.enterObject(); err != nil {
		return nil, err
	}
	out := []byte{'{'}
	for {
		more, err := sc.next()
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		raw, _, err := sc.name()
		if err != nil {
			return nil, err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(out, raw...), ':')
		if out, err = sc.value(out, false); err != nil {
			return nil, err
		}
	}
	return append(out, '}'), sc.finish()
}

// TestJSONScannerDepth: the scanner allows the depth jsontext allows, and
// no more.
func TestJSONScannerDepth(t *testing.T) {
	for _, depth := range []int{maxScanDepth - 1, maxScanDepth} {
		raw := []byte(`{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
		compareScanner(t, raw)
		if _, err := scanDocument(bytes.NewReader(raw)); (err == nil) != (depth <= maxScanDepth) {
			t.Errorf("depth %d: %v", depth, err)
		}
		raw = []byte(`{"a":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
		compareScanner(t, raw)
	}
}

// TestJSONScannerManyNames: an object of more names than manyNames, whose
// names the scanner looks up by hash, still refuses a name given twice,
// however it is written, and takes a long object without one.
func TestJSONScannerManyNames(t *testing.T) {
	var names []string
	for i := range 3 * manyNames {
		names = append(names, fmt.Sprintf(`"n%d":%d`, i, i))
	}
	obj := `{` + strings.Join(names, ",")
	for _, raw := range []string{
		`{"v":` + obj + `}}`,
		`{"v":` + obj + `,"n\u0031":0}}`,
		`{"v":` + obj + `,"n` + fmt.Sprint(3*manyNames-1) + `":0}}`,
		obj + `,"n0":0}`,
	} {
		compareScanner(t, []byte(raw))
	}
}
