package mcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
)

// maxAnswer bounds one JSON answer, or one SSE event, cproxy reads: a
// list's, or a call's that may ask for the client's input.
const maxAnswer = 16 << 20

// lists are the list methods whose answers are filtered: the result's
// member holding the array, the member of each element that names it, and
// the method whose policy decides it.
var lists = map[string]struct{ member, name, method string }{
	"tools/list":               {"tools", "name", "tools/call"},
	"resources/list":           {"resources", "uri", "resources/read"},
	"resources/templates/list": {"resourceTemplates", "uriTemplate", "resources/read"},
	"prompts/list":             {"prompts", "name", "prompts/get"},
}

// listFilter keeps of a list's answer what the profile allows.
type listFilter struct {
	server, member, name, method string
	prof                         *policy.Profile
	// pins, for a tools/list of a server whose tools are pinned, withholds
	// the tools whose definitions changed; ctx is the request's, for the
	// store. nil: none.
	pins *pinner
	ctx  context.Context
}

func (f *listFilter) allows(name string) bool {
	return f.prof.AskMCP(policy.MCPQuestion{Server: f.server, Method: f.method, Name: name, Listed: true}).Allow
}

// message filters one JSON-RPC message: a result holding the list's
// member has the elements the profile does not allow taken out; any other
// message is returned as it is. A message cproxy cannot read (not JSON,
// a name twice) is an error.
func (f *listFilter) message(data []byte) ([]byte, error) {
	var m map[string]jsontext.Value
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	res, ok := m["result"]
	if !ok {
		return data, nil
	}
	var r map[string]jsontext.Value
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, err
	}
	arr, ok := r[f.member]
	if !ok {
		return data, nil
	}
	var elems []jsontext.Value
	if err := json.Unmarshal(arr, &elems); err != nil {
		return nil, err
	}
	var names []string
	var named []map[string]jsontext.Value
	var listed []jsontext.Value
	for _, e := range elems {
		var members map[string]jsontext.Value
		if err := json.Unmarshal(e, &members); err != nil {
			return nil, err
		}
		var name string
		if v, ok := members[f.name]; !ok || json.Unmarshal(v, &name) != nil {
			continue
		}
		names, named, listed = append(names, name), append(named, members), append(listed, e)
	}
	withheld := make([]bool, len(listed))
	if f.pins != nil {
		var err error
		if withheld, err = f.pins.withheld(f.ctx, names, named); err != nil {
			return nil, err
		}
	}
	kept := elems[:0]
	for i, e := range listed {
		if !withheld[i] && f.allows(names[i]) {
			kept = append(kept, e)
		}
	}
	// What a list shows is this sandbox's view of the server: a result
	// the server marked public (or that lost an element here) is marked
	// private, so that no cache shared between clients serves it to
	// another (the 2026-07-28 revision's cacheScope).
	scope, hasScope := r["cacheScope"]
	public := hasScope && string(scope) != `"private"`
	if len(kept) == len(elems) && !public {
		return data, nil
	}
	r["cacheScope"] = jsontext.Value(`"private"`)
	if r[f.member], _ = json.Marshal(kept); r[f.member] == nil {
		r[f.member] = jsontext.Value("[]")
	}
	if m["result"], ok = marshal(r); !ok {
		return nil, io.ErrUnexpectedEOF
	}
	out, ok := marshal(m)
	if !ok {
		return nil, io.ErrUnexpectedEOF
	}
	return out, nil
}

// pinErr reports whether err is the pins' refusal of a list (the store
// did not answer, a tool cannot be read), rather than a JSON error.
func pinErr(err error) bool {
	return err != nil && (errors.Is(err, routes.ErrUnavailable) || errors.Is(err, routes.ErrUpstream))
}

func marshal(v any) (jsontext.Value, bool) {
	b, err := json.Marshal(v, json.Deterministic(true))
	return b, err == nil
}

// answerFilter rewrites each JSON-RPC message of an answer cproxy reads
// before the sandbox does: a list's (listFilter), a call's (inputFilter),
// the server's requests in a session's stream (requestWatcher). A message
// it cannot read is an error; one it does not pass on is nil.
type answerFilter interface {
	message(data []byte) ([]byte, error)
}

// filter rewrites the answer of server by f, a JSON body read whole or an
// SSE stream event by event; an answer cproxy cannot read is refused.
func filter(resp *http.Response, server string, f answerFilter) error {
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.Header.Get("Content-Encoding") != "" {
		return routes.Refuse(routes.ErrUpstream, "the MCP server %s sent its answer encoded (%s), which cproxy cannot read", server, routes.Clip(resp.Header.Get("Content-Encoding"), 32))
	}
	switch ct {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
		resp.Body.Close()
		if err != nil || len(body) > maxAnswer {
			return routes.Refuse(routes.ErrUpstream, "the MCP server %s's answer could not be read whole (at most %d MiB)", server, maxAnswer>>20)
		}
		out, err := f.message(body)
		if pinErr(err) {
			return err
		}
		if err != nil {
			return routes.Refuse(routes.ErrUpstream, "the MCP server %s's answer is not JSON cproxy can read (one object, no name twice), so it is not passed on", server)
		}
		resp.Body = io.NopCloser(bytes.NewReader(out))
		resp.ContentLength = int64(len(out))
		resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
		return nil
	case "text/event-stream":
		resp.Body = &sseFilter{f: f, in: bufio.NewReaderSize(resp.Body, 64<<10), body: resp.Body}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
		return nil
	}
	return routes.Refuse(routes.ErrUpstream, "the MCP server %s answered as %s, which cproxy cannot read", server, routes.Clip(ct, 64))
}

// sseFilter passes an SSE stream on one event at a time, each event's
// data filtered as one JSON-RPC message.
type sseFilter struct {
	f    answerFilter
	in   *bufio.Reader
	body io.Closer
	out  []byte // what is left of the event passed on
	err  error
}

func (s *sseFilter) Close() error { return s.body.Close() }

func (s *sseFilter) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.out, s.err = s.event()
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// event reads one event (up to its blank line) and returns it as it is
// passed on: its other fields as they were, its data lines, when they hold
// a message, filtered into one.
func (s *sseFilter) event() ([]byte, error) {
	var fields, data []byte
	hasData, size := false, 0
	for {
		line, err := s.in.ReadSlice('\n')
		size += len(line)
		if size > maxAnswer {
			return nil, errEvent
		}
		if err == bufio.ErrBufferFull {
			rest, err2 := s.readLong(line)
			if err2 != nil {
				return nil, err2
			}
			line, err = rest, nil
		}
		if err != nil {
			if len(line) == 0 && len(fields) == 0 && !hasData {
				return nil, err
			}
			if err != io.EOF {
				return nil, err
			}
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		if len(trimmed) == 0 {
			break
		}
		if v, ok := bytes.CutPrefix(trimmed, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if hasData {
				data = append(data, '\n')
			}
			data, hasData = append(data, v...), true
		} else {
			fields = append(append(fields, trimmed...), '\n')
		}
		if err == io.EOF {
			break
		}
	}
	out := fields
	if hasData {
		msg := data
		if len(bytes.TrimSpace(data)) > 0 {
			var err error
			if msg, err = s.f.message(data); pinErr(err) {
				return nil, err
			} else if err != nil {
				return nil, errEvent
			}
			if msg == nil {
				// A message not passed on (requestWatcher): the
				// event goes with it.
				return nil, nil
			}
		}
		for _, l := range bytes.Split(msg, []byte("\n")) {
			out = append(append(append(out, "data: "...), l...), '\n')
		}
	}
	return append(out, '\n'), nil
}

// readLong reads the rest of a line longer than the buffer.
func (s *sseFilter) readLong(start []byte) ([]byte, error) {
	line := append([]byte(nil), start...)
	for {
		more, err := s.in.ReadSlice('\n')
		line = append(line, more...)
		if len(line) > maxAnswer {
			return nil, errEvent
		}
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// errEvent ends a stream whose event cproxy cannot read or is too big:
// the stream is cut rather than passed on unfiltered.
var errEvent = routes.Refuse(routes.ErrUpstream, "an event of the MCP server's answer stream could not be read as one JSON-RPC message, so the stream ends")

// inputFilter passes on an answer that asks for the client's input to
// finish a call (the 2026-07-28 revision's multi-round-trip request: a
// result of type input_required, whose inputRequests ask for a completion
// of the client's model, the user's input or the client's folders) only
// when the profile gives the server every client capability it asks for;
// otherwise the answer becomes a JSON-RPC error. So the client never asks
// its model or its user for a server the profile may not give them, nor
// sends answers that cproxy would refuse (checkInputResponses).
type inputFilter struct {
	server, method string
	// allowed reports whether the profile, as it is when the answer
	// arrives, gives the server a client capability.
	allowed func(capability string) bool
}

func (f *inputFilter) message(data []byte) ([]byte, error) {
	var m map[string]jsontext.Value
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	var r map[string]jsontext.Value
	if res, ok := m["result"]; !ok || res.Kind() != '{' {
		return data, nil
	} else if err := json.Unmarshal(res, &r); err != nil {
		return nil, err
	}
	why := f.inputRequired(r)
	if why == "" {
		return data, nil
	}
	id := m["id"]
	if validID(id) == nil {
		id = jsontext.Value("null")
	}
	msg, _ := json.Marshal("cproxy: the MCP server " + f.server + " asked for the client's input to answer " + f.method + " (an input_required result), " + why)
	out := []byte(`{"jsonrpc":"2.0","id":`)
	out = append(out, id...)
	out = append(out, `,"error":{"code":-32001,"message":`...)
	out = append(out, msg...)
	return append(out, "}}"...), nil
}

// inputRequired says why a result, r, may not reach the client: it asks
// for input the profile does not give the server, or asks in a way
// cproxy cannot read as every client would. "" lets it pass: a complete
// result, or an input_required one whose every request the profile gives
// (one with no inputRequests only asks the client to send requestState
// back).
func (f *inputFilter) inputRequired(r map[string]jsontext.Value) string {
	const unreadable = "which cproxy cannot read as every client would (resultType input_required or complete, inputRequests spelt so, each a method and its params)"
	// Names are matched in any letter case, as a client whose decoder
	// folds case (Go's encoding/json) reads them.
	asks := false
	for k, v := range r {
		switch {
		case strings.EqualFold(k, "inputRequests") && k != "inputRequests",
			strings.EqualFold(k, "resultType") && k != "resultType":
			return unreadable
		case k == "inputRequests":
			asks = true
		case k == "resultType" && string(v) == `"input_required"`:
			asks = true
		case k == "resultType" && string(v) != `"complete"`:
			return unreadable
		}
	}
	if !asks {
		return ""
	}
	raw, ok := r["inputRequests"]
	if !ok {
		return ""
	}
	reqs, ok := objectOfObjects(raw)
	if !ok {
		return unreadable
	}
	for _, q := range reqs {
		if _, folds := foldsOnto(slices.Collect(maps.Keys(q)), []string{"method", "params"}); folds {
			return unreadable
		}
		var method string
		if json.Unmarshal(q["method"], &method) != nil {
			return unreadable
		}
		c, known := policy.MCPServerRequests[method]
		if !known || c == "" {
			return fmt.Sprintf("for %s, which is not a request a server may ask of the client's input", routes.Clip(method, 64))
		}
		if !f.allowed(c) {
			return fmt.Sprintf("for %s, and the sandbox's profile does not give the server the client's %s (its capabilities)", method, c)
		}
	}
	return ""
}

// objectOfObjects reads raw as a JSON object whose every member is an
// object, each read by its names; false when it is not.
func objectOfObjects(raw jsontext.Value) (map[string]map[string]jsontext.Value, bool) {
	var outer map[string]jsontext.Value
	if raw.Kind() != '{' || json.Unmarshal(raw, &outer) != nil {
		return nil, false
	}
	objs := make(map[string]map[string]jsontext.Value, len(outer))
	for k, v := range outer {
		var inner map[string]jsontext.Value
		if v.Kind() != '{' || json.Unmarshal(v, &inner) != nil {
			return nil, false
		}
		objs[k] = inner
	}
	return objs, true
}
