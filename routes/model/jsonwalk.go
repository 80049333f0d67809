package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// The model route reads JSON on every request and every answer: the model
// and max_tokens of the request body (requestModel), and the usage in the
// answer (usageBody). Both walk only the members they need, in place, with
// jsonMembers, and skip every other value by its structure without
// decoding it. This walk is hand-written rather than a maintained
// tokenizer's because it is several times faster on the model route's hot
// path: BenchmarkModelScan runs it side by side with the same reads on
// jsontext's Decoder (docs/benchmarks.md, "JSON on the model route"), and
// FuzzRequestModel and FuzzUsageInto hold it against encoding/json.

// What jsonMembers finds wrong with JSON text.
var (
	// errNotObject says a JSON value is not an object.
	errNotObject = errors.New("not a JSON object")
	// errJSONTrailing says a JSON object is followed by more than whitespace.
	errJSONTrailing = errors.New("data after the JSON value")
	errJSONSyntax   = errors.New("invalid JSON")
)

// jsonMember returns the raw value of the member key of the JSON object
// obj (the last one, if it is named twice, as encoding/json reads it).
func jsonMember(obj []byte, key string) ([]byte, bool) {
	var found []byte
	err := jsonMembers(obj, func(k, v []byte) error {
		if string(k) == key {
			found = v
		}
		return nil
	})
	return found, err == nil && found != nil
}

// jsonMembers calls member with each key (unquoted; a key with an escape
// is passed decoded) and raw value of the JSON object obj, in order, and
// stops at the first error member returns, which it returns. Otherwise it
// returns errNotObject when obj is not an object, errJSONTrailing when the
// object is followed by more than whitespace, errJSONSyntax when it cannot
// walk it to its end. Values are skipped by their structure, not validated.
func jsonMembers(obj []byte, member func(key, val []byte) error) error {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errNotObject
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return endOfObject(obj, i)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return errJSONSyntax
		}
		end, escaped := scanString(obj, i)
		if end < 0 {
			return errJSONSyntax
		}
		// Compared as bytes by the caller: a key it does not look for
		// costs no allocation. Only a key with an escape is decoded.
		key := obj[i+1 : end-1]
		if escaped {
			var k string
			if json.Unmarshal(obj[i:end], &k) != nil {
				return errJSONSyntax
			}
			key = []byte(k)
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return errJSONSyntax
		}
		i = skipSpace(obj, i+1)
		start := i
		if i = skipJSONValue(obj, i); i < 0 {
			return errJSONSyntax
		}
		if err := member(key, obj[start:i]); err != nil {
			return err
		}
		i = skipSpace(obj, i)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
			continue
		}
		if i < len(obj) && obj[i] == '}' {
			return endOfObject(obj, i)
		}
		return errJSONSyntax
	}
}

// endOfObject checks that only whitespace follows the object that ends at
// obj[i].
func endOfObject(obj []byte, i int) error {
	if skipSpace(obj, i+1) != len(obj) {
		return errJSONTrailing
	}
	return nil
}

// plainString returns the JSON string s (quotes included) as Go text when
// it needs no decoding: no escape, no control character, valid UTF-8. Then
// it means exactly its bytes, as encoding/json would decode it; otherwise
// ok is false and the caller decodes it.
func plainString(s []byte) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	for _, c := range s {
		if c < 0x20 || c == '\\' || c == '"' || c >= utf8.RuneSelf {
			return "", false
		}
	}
	return string(s), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index just past the string that starts at b[i]
// (a '"'), and whether it holds an escape; -1 if it does not end.
func scanString(b []byte, i int) (end int, escaped bool) {
	end = skipString(b, i)
	if end < 0 {
		return -1, false
	}
	return end, bytes.IndexByte(b[i+1:end-1], '\\') >= 0
}

// skipString returns the index just past the string that starts at b[i]
// (a '"'), or -1 if it does not end.
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		// The quote is escaped if an odd number of backslashes precede it.
		n := 0
		for q-1-n > i && b[q-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// structural marks the bytes that matter while skipping an object or array.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// skipJSONValue returns the index just past the value at b[i], or -1.
func skipJSONValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			c := b[i]
			if !structural[c] {
				i++
				continue
			}
			switch c {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			default: // '}', ']'
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if i == start {
				return -1
			}
			return i
		}
		i++
	}
	return -1
}
