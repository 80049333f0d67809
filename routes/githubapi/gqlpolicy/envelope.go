package gqlpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// request is one GraphQL request of a body: GitHub's endpoint takes one such
// object, or an array of them.
type request struct {
	Query         string
	OperationName string
	Variables     map[string]any
}

// envelopeKeys are the keys a request object may have; any other is refused,
// since what it would ask of GitHub is not known here.
var envelopeKeys = map[string]bool{"query": true, "variables": true, "operationName": true}

// readBody splits body into its requests. The body is checked for
// duplicate keys at every depth first: encoding/json keeps the last of two,
// and GitHub might keep the first.
func readBody(body []byte) ([]request, error) {
	if len(body) > MaxBodyBytes {
		return nil, fmt.Errorf("%w: the body is larger than %d bytes: send a smaller document", ErrTooLarge, MaxBodyBytes)
	}
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not valid UTF-8", ErrInvalid)
	}
	if err := checkDuplicateKeys(body); err != nil {
		return nil, err
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, fmt.Errorf("%w: the body is not a JSON array of requests: %v", ErrInvalid, err)
		}
		if len(raws) == 0 {
			return nil, fmt.Errorf("%w: the batch is empty: send at least one request", ErrInvalid)
		}
		if len(raws) > MaxBatch {
			return nil, fmt.Errorf("%w: the batch has %d requests, more than %d: send fewer at once", ErrTooLarge, len(raws), MaxBatch)
		}
		reqs := make([]request, len(raws))
		for i, raw := range raws {
			r, err := readRequest(raw)
			if err != nil {
				return nil, fmt.Errorf("request %d of %d: %w", i+1, len(raws), err)
			}
			reqs[i] = r
		}
		return reqs, nil
	}
	r, err := readRequest(body)
	if err != nil {
		return nil, err
	}
	return []request{r}, nil
}

// readRequest reads one request object. Its keys are matched exactly (a
// map, not a struct, so "Query" is not taken for "query"), and its numbers
// are kept as json.Number, as sent.
func readRequest(raw []byte) (request, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return request{}, fmt.Errorf(`%w: a request is not a JSON object: send {"query": "…", "variables": {…}}`, ErrInvalid)
	}
	for k := range obj {
		if !envelopeKeys[k] {
			return request{}, fmt.Errorf("%w: unknown key %q in the request: only query, variables and operationName are read", ErrInvalid, clip(k))
		}
	}
	var r request
	q, ok := obj["query"]
	if !ok {
		return request{}, fmt.Errorf("%w: the request has no query", ErrInvalid)
	}
	if err := json.Unmarshal(q, &r.Query); err != nil || isNull(q) {
		return request{}, fmt.Errorf("%w: the query is not a string", ErrInvalid)
	}
	if name, ok := obj["operationName"]; ok && !isNull(name) {
		if err := json.Unmarshal(name, &r.OperationName); err != nil {
			return request{}, fmt.Errorf("%w: the operationName is not a string", ErrInvalid)
		}
	}
	if vars, ok := obj["variables"]; ok && !isNull(vars) {
		dec := json.NewDecoder(bytes.NewReader(vars))
		dec.UseNumber()
		if err := dec.Decode(&r.Variables); err != nil || r.Variables == nil {
			return request{}, fmt.Errorf("%w: the variables are not a JSON object", ErrInvalid)
		}
	}
	return r, nil
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// checkDuplicateKeys refuses a body with an object that has the same key
// twice, at any depth, names compared once their escapes are read, as
// encoding/json reads them. It reads with jsontext, which refuses such a
// name itself. A text that is not JSON is left to the decoder that reads it
// next, for its error; one that encoding/json reads but jsontext does not
// (a lone surrogate escape) is refused here, since in it a duplicate would
// go unseen and encoding/json would keep the last of two keys.
func checkDuplicateKeys(body []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		_, err := dec.ReadValue()
		if errors.Is(err, io.EOF) {
			return nil
		}
		var serr *jsontext.SyntacticError
		switch {
		case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &serr):
			return fmt.Errorf("%w: the key %q appears twice in one object: send each key once", ErrInvalid, clip(serr.JSONPointer.LastToken()))
		case err != nil && json.Valid(body):
			return fmt.Errorf("%w: the body is JSON only as a lenient reader takes it (%s): send valid escapes", ErrInvalid, clip(err.Error()))
		case err != nil:
			return nil
		}
	}
}
