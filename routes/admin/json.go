package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// maxAdminJSONDepth is how deeply an admin request body may nest: the
// deepest, POST /tokens's {"budget": {"requests": 5}}, nests two.
const maxAdminJSONDepth = 8

// DuplicateKey walks an admin request body with encoding/json's tokenizer
// and returns the first key an object holds twice, as a dotted path
// ("budget.requests"), or "". Keys are compared as encoding/json matches
// them to struct fields, without regard to case: json.Unmarshal keeps the
// last of two such keys where another reader may keep the first, so
// {"requests": 5, "REQUESTS": 999999} must not store either. The error is
// the body's own: not JSON, or nested too deeply. The CLI checks its
// --budget with it before it sends one.
func DuplicateKey(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	return duplicateIn(dec, "", 0)
}

var errTooDeep = fmt.Errorf("the body nests more than %d levels deep", maxAdminJSONDepth)

// duplicateIn reads one value from dec, at path at and depth depth.
func duplicateIn(dec *json.Decoder, at string, depth int) (string, error) {
	t, err := dec.Token()
	if err != nil {
		return "", err
	}
	if t != json.Delim('{') && t != json.Delim('[') {
		return "", nil
	}
	if depth == maxAdminJSONDepth {
		return "", errTooDeep
	}
	seen := map[string]bool{}
	for dec.More() {
		at := at
		if t == json.Delim('{') {
			k, err := dec.Token()
			if err != nil {
				return "", err
			}
			key, ok := k.(string)
			if !ok {
				return "", errors.New("an object key is not a string")
			}
			if at != "" {
				at += "."
			}
			at += key
			if seen[foldKey(key)] {
				return at, nil
			}
			seen[foldKey(key)] = true
		}
		if dup, err := duplicateIn(dec, at, depth+1); dup != "" || err != nil {
			return dup, err
		}
	}
	_, err = dec.Token() // the closing delimiter
	return "", err
}

// foldKey folds a key as encoding/json does when it matches a key to a
// struct field's name: ASCII letters to lower case, and any other rune r to
// unicode.ToLower(unicode.ToUpper(r)), so that "ſ" folds as "s" and the
// Kelvin sign as "k", both of which encoding/json would match.
func foldKey(k string) string {
	return strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, k)
}

// unknownKey is the key a decoder with DisallowUnknownFields refused, from
// its error, or "" for any other error and for none.
func unknownKey(err error) string {
	if err == nil {
		return ""
	}
	k, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return ""
	}
	return k
}
