// Package mcp is the MCP route: the remote MCP servers of the config
// ([mcp.NAME]), each served at /mcp/NAME on the proxy listener over the
// Streamable HTTP transport. Each JSON-RPC message a sandbox sends is read
// whole, parsed strictly and asked of the profile's [profile.X.mcp.NAME]
// before it is forwarded with the server's own credential; answers stream
// back as the server sends them.
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy (docs/architecture.md).
package mcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// Prefix is the route's prefix: every server is under it, as /mcp/NAME.
const Prefix = "/mcp/"

// maxBody bounds a JSON-RPC message a sandbox sends.
const maxBody = 4 << 20

// Server is one [mcp.NAME] as the server runs it.
type Server struct {
	Name string
	URL  *url.URL
	// Header is the header the credential goes in; Live the credential
	// (nil: none is sent). Value turns the secret into the header's value.
	Header        string
	Live          *secrets.Live
	Value         func(string) string
	HeaderTimeout time.Duration
	// Limits are the server's per-token limits ([mcp.NAME] concurrent,
	// requests_per_minute); zero fields: the core's defaults.
	Limits routes.Limits
	// OAuth, when not nil, is the credential instead of Live: access
	// tokens cproxy gets from the server's token endpoint and renews
	// ([mcp.NAME.oauth]), sent as Authorization: Bearer.
	OAuth *routes.OAuth
	// AuditArgs puts each tools/call's arguments on its audit line
	// ([mcp.NAME] audit_arguments), bounded and with token-shaped parts
	// withheld as every client text is. False: never.
	AuditArgs bool
	// Unpinned leaves the server's tools unpinned (pin_tools = false):
	// a changed definition is listed and called as any other. Zero: each
	// tool is held to the definition first listed, or the one an operator
	// accepted since (tokens.MCPPin).
	Unpinned bool
}

type server struct {
	Server
	fwd *routes.Forwarder
	rt  *route
}

type route struct {
	servers map[string]*server

	mu sync.Mutex
	// sessions are the upstream sessions open through this replica, by
	// server and Mcp-Session-Id, with the sandbox that opened each.
	sessions map[sessionKey]string
	// asked are the requests each session's server sent the client and
	// waits for the answer of, by JSON-RPC id (idKey).
	asked map[sessionKey]map[string]asked
}

type sessionKey struct{ server, id string }

// sandboxKey carries a forwarded request's sandbox to its answer's check,
// which records the session the server opened for it.
type sandboxKey struct{}

// filterKey carries the filter of a request's answer (an answerFilter)
// to its answer's check.
type filterKey struct{}

// watchKey carries a request's requestWatcher, without its session, to
// its answer's check, which reads the answer's server requests.
type watchKey struct{}

// callKey carries a tools/call's count to its answer's check: a call is
// counted once the server has it.
type callKey struct{}

// New builds the route serving servers.
func New(servers []Server, env routes.Env) routes.Route {
	if env.Log == nil {
		env.Log = slog.New(slog.DiscardHandler)
	}
	rt := &route{servers: map[string]*server{}, sessions: map[sessionKey]string{}, asked: map[sessionKey]map[string]asked{}}
	for _, s := range servers {
		env.Upstream = routes.Upstream{URL: s.URL, HeaderTimeout: s.HeaderTimeout, Live: s.Live, OAuth: s.OAuth}
		srv := &server{Server: s, rt: rt}
		header, value := s.Header, s.Value
		srv.fwd = env.NewForwarder("mcp "+s.Name, Prefix+s.Name, func(h http.Header, sec secrets.Secret) {
			if !sec.IsZero() {
				h.Set(header, value(sec.Reveal()))
			}
		}, srv.check)
		rt.servers[s.Name] = srv
	}
	return rt
}

func (rt *route) Name() string   { return "mcp" }
func (rt *route) Prefix() string { return Prefix }
func (rt *route) Close() {
	for _, s := range rt.servers {
		s.fwd.Close()
	}
}

// SubLimits are each server's per-token limits, as "mcp.NAME": the
// config's [mcp.NAME] concurrent and requests_per_minute (zero: the
// core's defaults).
func (rt *route) SubLimits() map[string]routes.RouteLimits {
	m := make(map[string]routes.RouteLimits, len(rt.servers))
	for name, s := range rt.servers {
		m["mcp."+name] = routes.RouteLimits{Limits: s.Limits, Key: "mcp." + name}
	}
	return m
}

// LimitName is the server a request's path names, for its limits.
func (rt *route) LimitName(r *http.Request) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), Prefix), "/")
	if _, ok := rt.servers[name]; !ok {
		return ""
	}
	return "mcp." + name
}

// Sources are the servers' credentials, for /readyz.
func (rt *route) Sources() []routes.Source {
	var srcs []routes.Source
	for _, s := range rt.servers {
		if s.Live != nil {
			srcs = append(srcs, routes.Source{Name: "mcp." + s.Name + ".credential", Live: s.Live})
		}
		if s.OAuth != nil {
			srcs = append(srcs, s.OAuth.Sources()...)
		}
	}
	return srcs
}

// question is q as the audit record keeps it: a tool call's arguments
// only when the server's arguments are audited.
func (s *server) question(q policy.MCPQuestion) policy.Question {
	pq := policy.Question{Route: "mcp", Server: q.Server, Method: q.Method, Name: q.Name}
	if len(q.Args) > 0 {
		if s.AuditArgs {
			pq.Args = q.Args
		} else {
			pq.ArgsUnknown = true
		}
	}
	return pq
}

// auditArgs is what the audit line shows of a tool call's arguments:
// their JSON, names sorted, when the server's arguments are audited; else
// nothing.
func (s *server) auditArgs(args map[string]any) string {
	if !s.AuditArgs || args == nil {
		return ""
	}
	b, err := json.Marshal(args, json.Deterministic(true))
	if err != nil {
		return ""
	}
	return string(b)
}

// check refuses an answer that refuses cproxy's credential with a 502
// naming it, so neither the server's 401 nor its WWW-Authenticate (whose
// resource_metadata would start the client's own OAuth) reaches the
// sandbox.
func (s *server) check(resp *http.Response) error {
	resp.Header.Del("Www-Authenticate")
	if s.OAuth != nil {
		if err := s.OAuth.CheckResponse(resp, "the MCP server "+s.Name); err != nil {
			return err
		}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return routes.Refuse(routes.ErrUpstream, "the MCP server %s refused cproxy's credential; the operator must fix mcp.%s.credential", s.Name, s.Name)
	}
	if count, ok := resp.Request.Context().Value(callKey{}).(func()); ok {
		count()
	}
	f, _ := resp.Request.Context().Value(filterKey{}).(answerFilter)
	sandbox, _ := resp.Request.Context().Value(sandboxKey{}).(string)
	id := resp.Header.Get("Mcp-Session-Id")
	if w, ok := resp.Request.Context().Value(watchKey{}).(*requestWatcher); ok && sandbox != "" {
		// The server's requests to the client come in a session's SSE
		// streams: the GET's, or a POST's answer.
		sid := resp.Request.Header.Get("Mcp-Session-Id")
		if sid == "" {
			sid = id
		}
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if sid != "" && (f != nil || ct == "text/event-stream") {
			w.srv, w.id, w.sandbox, w.next = s, sid, sandbox, f
			f = w
		}
	}
	if f != nil {
		if err := filter(resp, s.Name, f); err != nil {
			return err
		}
	}
	if id == "" || sandbox == "" || resp.StatusCode >= 300 {
		return nil
	}
	k := sessionKey{s.Name, id}
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	if owner, ok := s.rt.sessions[k]; ok && owner != sandbox {
		// The server gave one sandbox another's session: nothing of it
		// reaches the sandbox.
		return routes.Refuse(routes.ErrUpstream, "the MCP server %s answered with a session of another sandbox; cproxy does not pass it on", s.Name)
	}
	s.rt.sessions[k] = sandbox
	return nil
}

// checkSession refuses a session id that this replica did not see the
// server open for sandbox: another sandbox's with 403, one it does not
// know with 404, which tells an MCP client to start a new session.
func (rt *route) checkSession(server, id, sandbox string) error {
	if id == "" {
		return nil
	}
	rt.mu.Lock()
	owner, ok := rt.sessions[sessionKey{server, id}]
	rt.mu.Unlock()
	switch {
	case !ok:
		return routes.Refuse(routes.ErrNotFound, "MCP server %s: no session %q was opened through cproxy for sandbox %s; start a new session (initialize without Mcp-Session-Id)", server, routes.Clip(id, 64), sandbox)
	case owner != sandbox:
		return routes.Refuse(routes.ErrForbidden, "MCP server %s: session %q belongs to another sandbox; start a new session (initialize without Mcp-Session-Id)", server, routes.Clip(id, 64))
	}
	return nil
}

// EndSandbox closes the upstream sessions sandbox opened, with DELETE as
// the transport asks, and forgets them: a revoked sandbox's sessions end
// with it.
func (rt *route) EndSandbox(sandbox string) {
	rt.mu.Lock()
	var ended []sessionKey
	for k, owner := range rt.sessions {
		if owner == sandbox {
			ended = append(ended, k)
			delete(rt.sessions, k)
			delete(rt.asked, k)
		}
	}
	rt.mu.Unlock()
	for _, k := range ended {
		s := rt.servers[k.server]
		if s == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
		resp, err := s.fwd.RoundTrip(ctx, http.MethodDelete, routes.Target{}, http.Header{"Mcp-Session-Id": {k.id}}, nil)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		cancel()
	}
}

// endTimeout bounds the DELETE of one session of a revoked sandbox.
const endTimeout = 10 * time.Second

// forget drops a session the sandbox closed.
func (rt *route) forget(server, id string) {
	rt.mu.Lock()
	delete(rt.sessions, sessionKey{server, id})
	delete(rt.asked, sessionKey{server, id})
	rt.mu.Unlock()
}

// rpcError is a refusal of a JSON-RPC request, answered with its id.
type rpcError struct {
	id   jsontext.Value
	code int
	err  error
}

// methodError is a refusal of the request's HTTP method: 405.
type methodError struct{ err error }

func (e *methodError) Error() string { return e.err.Error() }
func (e *methodError) Unwrap() error { return e.err }

func (e *rpcError) Error() string { return e.err.Error() }
func (e *rpcError) Unwrap() error { return e.err }

// WriteError answers a refusal as a JSON-RPC error: with the request's id
// and HTTP 200 when a request was read and refused by the policy (what MCP
// clients show the user), else with the refusal's HTTP status (429 with
// Retry-After for a limit or budget) and the request's id once it is
// known, null before.
// agentsToRead are the statuses of refusals the agent should read, and
// may act on: the policy's (403), a budget or limit (429), the server's
// credential or the server itself failing (502, 503, 504). With the
// request's id known, they are answered 200 with the JSON-RPC error, which
// MCP clients hand to the model; a client that fails an HTTP error shows
// only its status ("Too Many Requests"). Retry-After goes with them.
// 404 (a session gone: start another), 405 and 400 stay what they are:
// clients act on those themselves.
var agentsToRead = map[int]bool{http.StatusForbidden: true, http.StatusTooManyRequests: true,
	http.StatusBadGateway: true, http.StatusServiceUnavailable: true, http.StatusGatewayTimeout: true}

func (rt *route) WriteError(w http.ResponseWriter, err error) int {
	status, _ := routes.Status(err)
	var me *methodError
	if errors.As(err, &me) {
		status = http.StatusMethodNotAllowed
	}
	id, code := jsontext.Value("null"), -32600
	var re *rpcError
	if errors.As(err, &re) {
		code = re.code
		if len(re.id) > 0 {
			id = re.id
			if agentsToRead[status] {
				status = http.StatusOK
			}
		}
	}
	msg, _ := json.Marshal(routes.Message(err))
	body := []byte(`{"jsonrpc":"2.0","id":`)
	body = append(body, id...)
	body = append(body, `,"error":{"code":`...)
	body = append(body, []byte(jsonInt(code))...)
	body = append(body, `,"message":`...)
	body = append(body, msg...)
	// The refusal's stable code, in the error's data (a code is made of
	// letters and '-' only).
	body = append(body, `,"data":{"code":"`...)
	body = append(body, routes.Code(err)...)
	body = append(body, "\"}}}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	routes.SetRetryAfter(h, err)
	w.WriteHeader(status)
	w.Write(body)
	return status
}

// mcpServers are the MCP servers prof allows, by name.
func mcpServers(prof *policy.Profile) []string {
	if prof == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(prof.MCP))
}

// mcpAllowed are the globs of what (tool, resource, prompt) prof allows
// on the server name.
func mcpAllowed(prof *policy.Profile, name, what string) []string {
	if prof == nil || prof.MCP[name] == nil {
		return nil
	}
	sv := prof.MCP[name]
	switch what {
	case "tool":
		return sv.Tools
	case "resource":
		return sv.Resources
	case "prompt":
		return sv.Prompts
	}
	return nil
}

func jsonInt(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// message is a JSON-RPC message as cproxy reads it: every member known,
// no name twice, names matched case-sensitively.
type message struct {
	JSONRPC string         `json:"jsonrpc"`
	ID      jsontext.Value `json:"id,omitzero"`
	Method  string         `json:"method"`
	Params  jsontext.Value `json:"params,omitzero"`
	// Result or Error make the message a response: the client's answer
	// to a request of the server.
	Result jsontext.Value `json:"result,omitzero"`
	Error  jsontext.Value `json:"error,omitzero"`
}

// isResponse reports whether m is a JSON-RPC response.
func (m message) isResponse() bool { return len(m.Result) > 0 || len(m.Error) > 0 }

// params are the members of a message's params cproxy decides on.
type params struct {
	Name      string         `json:"name"`
	URI       string         `json:"uri"`
	Arguments jsontext.Value `json:"arguments,omitzero"`
}

// decided are the params members cproxy decides on: no other member of
// params may be one of them in another letter case, which a server whose
// JSON decoder folds case (Go's encoding/json does) could read instead.
var decided = []string{"name", "uri", "arguments"}

// foldsOnto reports the first name of names that is another's, or one of
// want's, in another letter case: two names a case-folding decoder reads as
// one.
func foldsOnto(names []string, want []string) (string, bool) {
	seen := map[string]string{}
	for _, w := range want {
		seen[strings.ToLower(w)] = w
	}
	for _, n := range names {
		l := strings.ToLower(n)
		if o, ok := seen[l]; ok && o != n {
			return n, true
		}
		if _, ok := seen[l]; !ok {
			seen[l] = n
		}
	}
	return "", false
}

// parse reads one JSON-RPC request, notification or response (the
// client's answer to a request of the server: an id, and a result or an
// error, no method). A batch, a message both request and response, a
// duplicate name or a body that is not JSON is refused.
func parse(body []byte) (message, string, map[string]any, error) {
	var m message
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return m, "", nil, &rpcError{code: -32600, err: routes.Refuse(routes.ErrBadRequest, "JSON-RPC batches are not forwarded; send one message per request")}
	}
	if err := json.Unmarshal(body, &m, json.RejectUnknownMembers(true)); err != nil {
		msg := "the body is not a JSON-RPC message cproxy can read (one JSON object with jsonrpc, id, method and params, no name twice)"
		if errors.Is(err, jsontext.ErrDuplicateName) {
			msg = "the body names a member twice; send each name once"
		}
		return m, "", nil, &rpcError{code: -32700, err: routes.Refuse(routes.ErrBadRequest, "%s", msg)}
	}
	if m.isResponse() {
		if m.JSONRPC != "2.0" || m.Method != "" || len(m.Params) > 0 || (len(m.Result) > 0 && len(m.Error) > 0) || validID(m.ID) == nil {
			return m, "", nil, &rpcError{code: -32600, err: routes.Refuse(routes.ErrBadRequest, `the body is not a JSON-RPC 2.0 response: it needs "jsonrpc": "2.0", the id of the server's request, and a result or an error, no method`)}
		}
		return m, "", nil, nil
	}
	if m.JSONRPC != "2.0" || m.Method == "" {
		return m, "", nil, &rpcError{id: validID(m.ID), code: -32600, err: routes.Refuse(routes.ErrBadRequest, `the body is not a JSON-RPC 2.0 request: it needs "jsonrpc": "2.0" and a method`)}
	}
	if len(m.ID) > 0 && validID(m.ID) == nil {
		return m, "", nil, &rpcError{code: -32600, err: routes.Refuse(routes.ErrBadRequest, "a JSON-RPC id is a string or a number")}
	}
	var name string
	var args map[string]any
	switch m.Method {
	case "tools/call", "prompts/get", "resources/read", "resources/subscribe", "resources/unsubscribe":
		var p params
		var members map[string]jsontext.Value
		if len(m.Params) == 0 || json.Unmarshal(m.Params, &p) != nil || json.Unmarshal(m.Params, &members) != nil {
			return m, "", nil, &rpcError{id: m.ID, code: -32602, err: routes.Refuse(routes.ErrBadRequest, "%s needs params, an object", m.Method)}
		}
		if n, ok := foldsOnto(slices.Collect(maps.Keys(members)), decided); ok {
			return m, "", nil, &rpcError{id: m.ID, code: -32602, err: routes.Refuse(routes.ErrBadRequest, "params has a member %q, which a server could read as %q: send each name once, in lower case", routes.Clip(n, 32), strings.ToLower(n))}
		}
		name = p.Name
		if strings.HasPrefix(m.Method, "resources/") {
			name = p.URI
		}
		if m.Method == "tools/call" && len(p.Arguments) > 0 && p.Arguments.Kind() != 'n' {
			if p.Arguments.Kind() != '{' || json.Unmarshal(p.Arguments, &args) != nil {
				return m, "", nil, &rpcError{id: m.ID, code: -32602, err: routes.Refuse(routes.ErrBadRequest, "tools/call's arguments must be an object, each name once")}
			}
			if n, ok := foldsOnto(slices.Collect(maps.Keys(args)), nil); ok {
				return m, "", nil, &rpcError{id: m.ID, code: -32602, err: routes.Refuse(routes.ErrBadRequest, "the arguments name %q twice in different letter cases, which a server could read as one; send each name once", routes.Clip(strings.ToLower(n), 32))}
			}
		}
	}
	return m, name, args, nil
}

// metaCapabilities is the member of a request's params._meta in which a
// client of the 2026-07-28 revision, which has no initialize, declares its
// capabilities on every request.
const metaCapabilities = "io.modelcontextprotocol/clientCapabilities"

// continuations are the params members by which a request of the
// 2026-07-28 revision continues a multi-round-trip request: the client's
// answers to what the server asked of it in an input_required result
// (checkInputResponses), and the server's opaque state, which the
// revision has the server check as it would anything the client sends.
var continuations = []string{"inputResponses", "requestState"}

// inputKinds are the members by which a server tells what a client's
// answer in inputResponses answers, as the official SDKs read it, with
// the client capability each answer needs: an elicitation's action, a
// completion's role, the client's roots.
var inputKinds = map[string]string{"action": "elicitation", "role": "sampling", "roots": "roots"}

// checkInputResponses refuses a continuation of a multi-round-trip
// request (method's params carry inputResponses, raw) unless each answer
// in it is, as any server would read it, of one kind, and of a kind whose
// client capability allowed gives the server: an answer with two kinds'
// members, or one spelt in another letter case, could be read as either.
// Stateless, so that it holds whichever replica the question went
// through.
func checkInputResponses(method string, raw jsontext.Value, allowed func(string) bool) error {
	bad := routes.Refuse(routes.ErrBadRequest, "%s's inputResponses must be an object of the client's answers, each an object with one of action (elicitation), role (sampling) or roots (roots), spelt so", routes.Clip(method, 64))
	answers, ok := objectOfObjects(raw)
	if !ok {
		return bad
	}
	for key, members := range answers {
		if _, folds := foldsOnto(slices.Collect(maps.Keys(members)), slices.Collect(maps.Keys(inputKinds))); folds {
			return bad
		}
		capability := ""
		for k := range members {
			c, ok := inputKinds[k]
			if !ok {
				continue
			}
			if capability != "" {
				return bad
			}
			capability = c
		}
		if capability == "" {
			return bad
		}
		if !allowed(capability) {
			return routes.Refuse(routes.ErrForbidden, "%s's inputResponses[%q] answers with the client's %s, which the sandbox's profile does not give the server (its capabilities)", routes.Clip(method, 64), routes.Clip(key, 64), capability)
		}
	}
	return nil
}

// stripCapabilities takes out of a request the client capabilities
// (policy.MCPCapabilities) that allowed does not give the server, so that
// it never asks the sandbox's client for them: those an initialize
// declares in params.capabilities, and those any request of the
// 2026-07-28 revision declares in params._meta's metaCapabilities. It
// returns the ones kept, and the message to send, re-encoded, when one was
// taken out (nil when the message goes as it is). A request that
// continues a multi-round-trip request, or whose params, _meta or
// capabilities cproxy cannot read as the server could (not an object, a
// name twice, a name the server could read as one of them), is refused.
func stripCapabilities(m message, allowed func(string) bool) ([]string, []byte, error) {
	if len(m.Params) == 0 || (m.Method != "initialize" && m.Params.Kind() != '{') {
		return nil, nil, nil
	}
	bad := routes.Refuse(routes.ErrBadRequest, "%s's params, their _meta and the client capabilities must be objects, each name once", routes.Clip(m.Method, 64))
	var p map[string]jsontext.Value
	if m.Params.Kind() != '{' || json.Unmarshal(m.Params, &p) != nil {
		return nil, nil, bad
	}
	decides := []string{"_meta"}
	if m.Method == "initialize" {
		decides = append(decides, "capabilities")
	}
	if n, ok := foldsOnto(slices.Collect(maps.Keys(p)), append(decides, continuations...)); ok {
		return nil, nil, routes.Refuse(routes.ErrBadRequest, "%s's params have a member %q, which a server could read as %q: send each name once, as the revision spells it", routes.Clip(m.Method, 64), routes.Clip(n, 32), strings.ToLower(n))
	}
	if raw, ok := p["inputResponses"]; ok {
		if err := checkInputResponses(m.Method, raw, allowed); err != nil {
			return nil, nil, err
		}
	}
	var kept []string
	// strip takes the capabilities allowed does not give out of the
	// object at *raw, where says which, and reports whether it took one.
	strip := func(raw *jsontext.Value, where string) (bool, error) {
		var caps map[string]jsontext.Value
		if raw.Kind() != '{' || json.Unmarshal(*raw, &caps) != nil {
			return false, bad
		}
		if n, ok := foldsOnto(slices.Collect(maps.Keys(caps)), policy.MCPCapabilities); ok {
			return false, routes.Refuse(routes.ErrBadRequest, "%s have a member %q, which a server could read as %q: send each name once, in lower case", where, routes.Clip(n, 32), strings.ToLower(n))
		}
		changed := false
		for _, c := range policy.MCPCapabilities {
			if _, ok := caps[c]; !ok {
				continue
			}
			if allowed(c) {
				if !slices.Contains(kept, c) {
					kept = append(kept, c)
				}
				continue
			}
			delete(caps, c)
			changed = true
		}
		if !changed {
			return false, nil
		}
		out, ok := marshal(caps)
		if !ok {
			return false, bad
		}
		*raw = out
		return true, nil
	}
	stripped := false
	if raw, ok := p["capabilities"]; ok && m.Method == "initialize" {
		changed, err := strip(&raw, "initialize's capabilities")
		if err != nil {
			return nil, nil, err
		}
		p["capabilities"], stripped = raw, changed
	}
	if raw, ok := p["_meta"]; ok {
		var meta map[string]jsontext.Value
		if raw.Kind() != '{' || json.Unmarshal(raw, &meta) != nil {
			return nil, nil, bad
		}
		if n, ok := foldsOnto(slices.Collect(maps.Keys(meta)), []string{metaCapabilities}); ok {
			return nil, nil, routes.Refuse(routes.ErrBadRequest, "%s's _meta has a member %q, which a server could read as %q: send each name once, as the revision spells it", routes.Clip(m.Method, 64), routes.Clip(n, 64), metaCapabilities)
		}
		if caps, ok := meta[metaCapabilities]; ok {
			changed, err := strip(&caps, "the client capabilities in "+routes.Clip(m.Method, 64)+"'s _meta")
			if err != nil {
				return nil, nil, err
			}
			if changed {
				meta[metaCapabilities] = caps
				if p["_meta"], ok = marshal(meta); !ok {
					return nil, nil, bad
				}
				stripped = true
			}
		}
	}
	if !stripped {
		return kept, nil, nil
	}
	params, ok := marshal(p)
	if !ok {
		return nil, nil, bad
	}
	m.Params = params
	out, ok := marshal(m)
	if !ok {
		return nil, nil, bad
	}
	return kept, out, nil
}

// listenSubscriptions are the resource URIs a subscriptions/listen asks
// to hear of (params.notifications.resourceSubscriptions), read as the
// server could read them: its params and notifications objects, no name
// twice nor one a case-folding decoder could read as one of them, the URIs
// a list of strings.
func listenSubscriptions(m message) ([]string, error) {
	bad := routes.Refuse(routes.ErrBadRequest, "subscriptions/listen's params need notifications, an object whose resourceSubscriptions, when sent, is a list of URIs; each name once")
	var p, n map[string]jsontext.Value
	if m.Params.Kind() != '{' || json.Unmarshal(m.Params, &p) != nil {
		return nil, bad
	}
	raw, ok := p["notifications"]
	if _, folds := foldsOnto(slices.Collect(maps.Keys(p)), []string{"notifications"}); folds || !ok || raw.Kind() != '{' || json.Unmarshal(raw, &n) != nil {
		return nil, bad
	}
	if _, folds := foldsOnto(slices.Collect(maps.Keys(n)), []string{"resourceSubscriptions"}); folds {
		return nil, bad
	}
	var uris []string
	if raw, ok := n["resourceSubscriptions"]; ok && raw.Kind() != 'n' {
		if raw.Kind() != '[' || json.Unmarshal(raw, &uris) != nil {
			return nil, bad
		}
	}
	return uris, nil
}

// headersAgree checks the headers by which a client of the 2026-07-28
// transport names what its message does, for the middleboxes that route on
// them: Mcp-Method the message's method, Mcp-Name its tool or prompt name
// or resource URI, and each Mcp-Param-NAME a tool call's argument. Each
// must say what the body says, as the transport requires, or a server
// that trusts the header would act on what cproxy did not decide.
func headersAgree(h http.Header, method, name string, args map[string]any) error {
	disagree := func(header, body string) error {
		return routes.Refuse(routes.ErrBadRequest, "the %s header says %q and the body %q: they must agree", header, routes.Clip(h.Get(header), 64), routes.Clip(body, 64))
	}
	for k, vs := range h {
		k = http.CanonicalHeaderKey(k)
		param, isParam := strings.CutPrefix(k, "Mcp-Param-")
		if k != "Mcp-Method" && k != "Mcp-Name" && !isParam {
			continue
		}
		if len(vs) != 1 {
			return routes.Refuse(routes.ErrBadRequest, "the %s header is sent %d times; send it once", k, len(vs))
		}
		switch {
		case k == "Mcp-Method" && vs[0] != method:
			return disagree(k, method)
		case k == "Mcp-Name" && (name == "" || vs[0] != name):
			return disagree(k, name)
		case isParam:
			body, ok := paramText(args, param)
			if !ok || body != vs[0] {
				return disagree(k, body)
			}
		}
	}
	return nil
}

// paramText is the argument named param, in any letter case (header names
// have none), as a header carries it: a string as it is, any other value
// as its JSON.
func paramText(args map[string]any, param string) (string, bool) {
	for k, v := range args {
		if !strings.EqualFold(k, param) {
			continue
		}
		if s, ok := v.(string); ok {
			return s, true
		}
		b, err := json.Marshal(v)
		return string(b), err == nil
	}
	return "", false
}

// validID is id when it is a string or a number, else nil.
func validID(id jsontext.Value) jsontext.Value {
	if len(id) == 0 {
		return nil
	}
	switch id.Kind() {
	case '"', '0':
		return id
	}
	return nil
}

// Serve refuses what it does not know, decides each message and
// forwards it to its server.
func (rt *route) Serve(c *routes.Call) {
	r := c.Request()
	if err := c.Acquire(); err != nil {
		c.Fail(err)
		return
	}
	rest := strings.TrimPrefix(r.URL.EscapedPath(), Prefix)
	name, sub, _ := strings.Cut(rest, "/")
	if sub != "" || strings.HasPrefix(rest, ".well-known") {
		c.Fail(routes.Refuse(routes.ErrNotFound, "%s is not an MCP endpoint; the server is at %s%s", routes.Clip(r.URL.EscapedPath(), 128), Prefix, routes.Clip(name, 32)))
		return
	}
	s, ok := rt.servers[name]
	if !ok {
		c.Fail(routes.Refuse(routes.ErrNotFound, "no MCP server %q is configured (the operator adds [mcp.%s])", routes.Clip(name, 32), routes.Clip(name, 32)))
		return
	}
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		c.Fail(routes.Refuse(routes.ErrBadRequest, "the MCP endpoint takes no query string"))
		return
	}
	sandbox := c.Session().Sandbox
	q := policy.MCPQuestion{Server: name}
	var id jsontext.Value
	switch r.Method {
	case http.MethodGet, http.MethodDelete:
		c.SetTarget(name + " " + r.Method)
	case http.MethodPost:
		body, err := c.ReadBody(maxBody)
		if err != nil {
			c.Fail(err)
			return
		}
		m, target, args, err := parse(body)
		if err != nil {
			c.Fail(err)
			return
		}
		if m.isResponse() {
			// The client's answer to a request of the server: let
			// through only when the server asked it of this session,
			// once. Its refusals carry no id: it answers none.
			sid := r.Header.Get("Mcp-Session-Id")
			if sid == "" {
				c.Fail(&rpcError{code: -32600, err: routes.Refuse(routes.ErrBadRequest, "MCP server %s: a JSON-RPC response answers a request of the server, in the session (Mcp-Session-Id) whose stream it came in", name)})
				return
			}
			if err := rt.checkSession(name, sid, sandbox); err != nil {
				c.Fail(&rpcError{code: -32001, err: err})
				return
			}
			method := rt.answer(name, sid, sandbox, m.ID, c.Now())
			if method == "" {
				c.Fail(&rpcError{code: -32600, err: routes.Refuse(routes.ErrForbidden, "MCP server %s did not ask this session anything with the id %s that waits for an answer (never asked, answered already, or asked too long ago); cproxy passes on only answers to the server's requests", name, routes.Clip(string(m.ID), 64))})
				return
			}
			q.Method, q.Name = policy.MCPResponse, method
			c.SetTarget(name + " response " + method)
			break
		}
		id = m.ID
		if len(id) > 0 {
			// What the core refuses from here on (the credential, a
			// limit, the decision asked again) answers this id.
			c.WriteErrorsWith(func(w http.ResponseWriter, err error) int {
				if !errors.As(err, new(*rpcError)) {
					err = &rpcError{id: id, code: -32000, err: err}
				}
				return rt.WriteError(w, err)
			})
		}
		q.Method, q.Name, q.Args = m.Method, target, args
		if m.Method == "tools/call" {
			c.SetMCPCall("", s.auditArgs(args))
		}
		if err := headersAgree(r.Header, m.Method, target, args); err != nil {
			c.Fail(&rpcError{id: id, code: -32600, err: err})
			return
		}
		kept, out, err := stripCapabilities(m, func(cp string) bool { return c.Session().Profile.MCPCapability(name, cp) })
		if err != nil {
			c.Fail(&rpcError{id: id, code: -32602, err: err})
			return
		}
		if out != nil && !c.ShrinkBody(out) {
			c.Fail(&rpcError{id: id, code: -32603, err: routes.Refuse(routes.ErrBadRequest, "the %s could not be sent without the client capabilities the policy does not give the server", routes.Clip(m.Method, 64))})
			return
		}
		q.Capabilities = kept
		if m.Method == "subscriptions/listen" {
			if q.Subscriptions, err = listenSubscriptions(m); err != nil {
				c.Fail(&rpcError{id: id, code: -32602, err: err})
				return
			}
		}
		c.SetTarget(strings.TrimSpace(name + " " + m.Method + " " + routes.Clip(target, 128)))
	default:
		c.ResponseWriter().Header().Set("Allow", "GET, POST, DELETE")
		c.Fail(&methodError{routes.Refuse(routes.ErrBadRequest, "the MCP endpoint takes POST, GET and DELETE, not %s", routes.Clip(r.Method, 16))})
		return
	}
	sid := r.Header.Get("Mcp-Session-Id")
	if err := rt.checkSession(name, sid, sandbox); err != nil {
		c.Fail(&rpcError{id: id, code: -32001, err: err})
		return
	}
	c.SetQuestion(s.question(q))
	if err := c.Decide(func(prof *policy.Profile) (string, error) {
		ans := prof.AskMCP(q)
		if step, refused := ans.Refusal(); refused {
			var err error
			uri, isResource := strings.CutPrefix(step.Check, "resource ")
			listen := q.Method == "subscriptions/listen"
			switch {
			case step.Key == "mcp":
				err = routes.RefuseCode(routes.ErrForbidden, routes.CodeMCPNotAllowed, "MCP server %s is not allowed for sandbox %s (allowed: %s; the policy needs a [profile.%s.mcp.%s] table)", name, sandbox, routes.Listed(mcpServers(prof)), prof.Name, name)
			case listen && step.Key == "mcp.methods":
				err = routes.Refuse(routes.ErrForbidden, "MCP server %s: subscriptions/listen subscribes to resources, and resources/subscribe is not allowed for sandbox %s (%s); listen without resourceSubscriptions", name, sandbox, step.Rule)
			case listen && isResource:
				err = routes.Refuse(routes.ErrForbidden, "MCP server %s: subscriptions/listen subscribes to resource %q, which is not allowed for sandbox %s (%s)", name, routes.Clip(uri, 128), sandbox, step.Rule)
			case step.Key == "mcp.methods":
				err = routes.RefuseCode(routes.ErrForbidden, routes.CodeMCPNotAllowed, "MCP server %s: method %s is not allowed for sandbox %s (%s)", name, routes.Clip(q.Method, 64), sandbox, step.Rule)
			case q.Method == policy.MCPResponse:
				err = routes.Refuse(routes.ErrForbidden, "MCP server %s: the answer to its %s is not allowed for sandbox %s (%s)", name, q.Name, sandbox, step.Rule)
			case step.Key == "mcp.capabilities":
				err = routes.Refuse(routes.ErrForbidden, "MCP server %s: the policy in force no longer gives the server a client capability this %s declares (%s); send it again", name, routes.Clip(q.Method, 64), step.Rule)
			case step.Key == "mcp.args":
				err = routes.RefuseCode(routes.ErrForbidden, routes.CodeMCPNotAllowed, "MCP server %s: tool %s is not allowed for sandbox %s with these arguments: %s (%s)", name, routes.Clip(q.Name, 128), sandbox, step.Reason, step.Rule)
			default:
				what := step.Check[:strings.IndexByte(step.Check, ' ')]
				err = routes.RefuseCode(routes.ErrForbidden, routes.CodeMCPNotAllowed, "MCP server %s: %s %q is not allowed for sandbox %s (allowed: %s)", name, what, routes.Clip(q.Name, 128), sandbox, routes.Listed(mcpAllowed(prof, name, what)))
			}
			return ans.Rule, &rpcError{id: id, code: -32001, err: err}
		}
		return ans.Rule, nil
	}); err != nil {
		c.Fail(err)
		return
	}
	var pins *pinner
	if !s.Unpinned {
		pins = &pinner{server: name, store: c.Store(), now: c.Now, log: c.Log(), changed: func() { c.Metrics().MCPPinChanged(name) }}
	}
	if pins != nil && q.Method == "tools/call" {
		digest, err := pins.checkCall(r.Context(), id, q.Name)
		c.SetMCPCall(digest, s.auditArgs(q.Args))
		if err != nil {
			c.Fail(err)
			return
		}
	}
	if q.Method == "tools/call" {
		// A tool call the policy allows is counted against the token's
		// budget (mcp_calls_per_minute, mcp_calls), and charged once the
		// server has it.
		if err := c.Reserve(tokens.Usage{MCPCalls: 1}, true); err != nil {
			c.Fail(&rpcError{id: id, code: -32001, err: err})
			return
		}
	}
	ctx := context.WithValue(r.Context(), sandboxKey{}, sandbox)
	// allowed asks the profile in force when an answer arrives.
	allowed := func(cp string) bool { return c.Session().Profile.MCPCapability(name, cp) }
	ctx = context.WithValue(ctx, watchKey{}, &requestWatcher{now: c.Now, allowed: allowed})
	if q.Method == "tools/call" {
		ctx = context.WithValue(ctx, callKey{}, func() { c.Metrics().MCPToolCall(name, q.Name) })
	}
	// Every answer may be read (a list's, a call's, the server's requests
	// in a stream), so none comes encoded.
	t := routes.Target{Header: http.Header{"Accept-Encoding": {"identity"}}}
	if l, ok := lists[q.Method]; ok {
		f := &listFilter{server: name, member: l.member, name: l.name, method: l.method, prof: c.Session().Profile, ctx: ctx}
		if q.Method == "tools/list" {
			f.pins = pins
		}
		ctx = context.WithValue(ctx, filterKey{}, answerFilter(f))
	}
	switch q.Method {
	case "tools/call", "prompts/get", "resources/read":
		ctx = context.WithValue(ctx, filterKey{}, answerFilter(&inputFilter{server: name, method: q.Method, allowed: allowed}))
	}
	s.fwd.Forward(c, r.WithContext(ctx), t)
	if r.Method == http.MethodDelete && sid != "" {
		rt.forget(name, sid)
	}
}
