package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/cproxy/cproxy/routes"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/internal/memo"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// modelEndpoints are the only model API calls a sandbox may make: messages,
// token counting, and the model list Claude Code reads. Batches, files and
// everything else would escape the policy (and later the budget).
var modelEndpoints = map[string]struct {
	method string
	query  []string // query parameters that pass; any other is refused
	body   bool     // a JSON body naming a model, checked against the policy
}{
	"/v1/messages":              {http.MethodPost, []string{"beta"}, true},
	"/v1/messages/count_tokens": {http.MethodPost, []string{"beta"}, true},
	"/v1/models":                {http.MethodGet, []string{"beta", "limit", "before_id", "after_id"}, false},
}

// maxBody bounds a model request's body: it carries the whole
// conversation, so the bound is large; it matches the Anthropic API's own
// request size limit.
const maxBody = 32 << 20

// oauthBeta is the beta flag the Anthropic API requires on requests
// authenticated with a Claude OAuth (setup-token) credential.
const oauthBeta = "oauth-2025-04-20"

// Kind registers the model route: the Anthropic API under /v1/.
// Its token's budget (concurrent, requests_per_minute) is what bounds a
// model request; the core's limits are only above any budget's default.
var Kind = routes.Kind{Name: "model", Prefix: "/v1/", Upstream: "anthropic", New: newModelRoute,
	Limits: routes.Limits{Concurrent: 4096, RequestsPerMinute: 100000}}

// modelRoute forwards the model API calls a sandbox may make to the
// Anthropic API, each metered against its token's budget.
type modelRoute struct {
	fwd *routes.Forwarder
	up  routes.Upstream
	// models remembers the policy's answers to AskModel: every request
	// asks it, and each formats the rule that decided, which on the hot
	// path cost more than the rest of the decision.
	models memo.Memo[modelKey, policy.Answer]
}

func newModelRoute(env routes.Env) routes.Route {
	m := &modelRoute{up: env.Upstream}
	m.fwd = env.NewForwarder("model", "/v1/", setAnthropicCredential(env.Upstream), meterResponse)
	m.fwd.PassRedirects() // the API does not redirect; its answers pass as sent
	// Streams still pass event by event: ReverseProxy flushes each write of
	// a text/event-stream answer, and of any answer of unknown length,
	// whatever FlushInterval says. What 0 changes is a JSON answer of known
	// length (a non-streaming message, a token count, the model list): it is
	// written with its headers as it is copied, instead of the headers being
	// flushed first by a timer's goroutine and the body flushed after each
	// write: a goroutine, a flush and a write(2) less per request, about a
	// tenth of cproxy's CPU for a non-streaming message (docs/benchmarks.md),
	// for an answer the client can only use whole.
	m.fwd.SetCopy(eventCopyBuffers, 0)
	return m
}

func (m *modelRoute) Name() string          { return "model" }
func (m *modelRoute) Limits() routes.Limits { return Kind.Limits }
func (m *modelRoute) Prefix() string        { return "/v1/" }
func (m *modelRoute) Close()                { m.fwd.Close() }
func (m *modelRoute) WriteError(w http.ResponseWriter, err error) int {
	if errors.Is(err, routes.ErrTwoCredentials) {
		err = twoCredentials
	}
	return writeAnthropicError(w, err)
}

// twoCredentials is the core's refusal of two credentials in one request
// as the model route words it: the second is Claude Code's
// ANTHROPIC_API_KEY, sent as x-api-key next to the sandbox token.
var twoCredentials = routes.Refuse(routes.ErrTwoCredentials, "two different credentials in one request: Claude Code sends ANTHROPIC_API_KEY and the sandbox token together; unset ANTHROPIC_API_KEY in the sandbox")

// Sources is the Anthropic credential's source, when it has one.
func (m *modelRoute) Sources() []routes.Source { return m.fwd.Sources("upstream.anthropic.credential") }

func (m *modelRoute) Serve(a *routes.Call) {
	// Every model call counts against the rate and concurrency limits,
	// from its authentication: its slot is taken before its body is read.
	if err := a.Acquire(); err != nil {
		a.Fail(err)
		return
	}
	r := a.Request()
	t, maxTokens, err := m.check(a, r)
	if err != nil {
		a.Fail(err)
		return
	}
	// Only messages are charged.
	charged := r.URL.Path == "/v1/messages"
	want := tokens.Usage{}
	if charged {
		n := r.ContentLength
		want = tokens.Usage{Requests: 1, Input: n, Output: maxTokens, CacheRead: n, CacheWrite: n}
	}
	if err := a.Reserve(want, charged); err != nil {
		a.Fail(err)
		return
	}
	m.fwd.Forward(a, r, t)
}

// meterResponse reads the usage of a model response as it streams to the
// client, and settles the request's budget when it ends. An error answer
// is charged the request alone: the upstream bills no tokens for it.
func meterResponse(resp *http.Response) error {
	a := routes.CallOf(resp)
	if !a.Charged() || resp.StatusCode < 200 || resp.StatusCode > 299 {
		a.Settle(tokens.Usage{}, true, true)
		return nil
	}
	resp.Body = newUsageBody(resp.Body, resp.Header.Get("Content-Type"), a.InputReported, a.Settle)
	return nil
}

// check decides a model request and returns where it goes, and its
// max_tokens. It reads (and replaces) the body of a POST to learn the
// model.
func (m *modelRoute) check(a *routes.Call, r *http.Request) (routes.Target, int64, error) {
	// Paths are checked as sent: an encoded byte anywhere (%2F, %2e) means
	// the client means something other than the plain path, so refuse it.
	if r.URL.RawPath != "" {
		return routes.Target{}, 0, routes.Refuse(routes.ErrForbidden, "non-canonical path %q", r.URL.EscapedPath())
	}
	ep, ok := modelEndpoints[r.URL.Path]
	if !ok || r.Method != ep.method {
		return routes.Target{}, 0, routes.Refuse(routes.ErrForbidden, "%s %s is not a model API call cproxy forwards (allowed: POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models); do not retry", r.Method, r.URL.Path)
	}
	query, err := allowQuery(r.URL.RawQuery, ep.query)
	if err != nil {
		return routes.Target{}, 0, err
	}
	if !m.up.Configured() {
		return routes.Target{}, 0, routes.Refuse(routes.ErrUnavailable, "no Anthropic credential is configured: %s", m.up.Missing)
	}
	t := routes.Target{Path: r.URL.Path, Query: query}
	if !ep.body {
		if r.ContentLength > 0 {
			return routes.Target{}, 0, routes.Refuse(routes.ErrBadRequest, "%s %s takes no body", r.Method, r.URL.Path)
		}
		r.Body = http.NoBody
		r.ContentLength = 0
		return t, 0, a.Decide(routes.AnyProfile) // the model list is every profile's
	}
	body, err := a.ReadBody(maxBody)
	if err != nil {
		return routes.Target{}, 0, err
	}
	model, maxTokens, err := requestModel(body)
	if err != nil {
		return routes.Target{}, 0, err
	}
	a.SetTarget(model)
	a.SetQuestion(policy.Question{Route: "model", Model: model})
	return t, maxTokens, a.Decide(func(prof *policy.Profile) (string, error) { return m.decide(a, prof, model) })
}

// decide asks prof whether a's sandbox may use model; a model the profile
// asks about (ask_models) goes on only with an operator's approval.
func (m *modelRoute) decide(a *routes.Call, prof *policy.Profile, model string) (string, error) {
	d := m.ask(prof, model)
	if d.Ask {
		return d.Rule, a.AskApproval(prof, modelApproval(a.Request().URL.Path, model))
	}
	if !d.Allow {
		sandbox := a.Session().Sandbox
		return d.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeModelNotAllowed, "model %s is not allowed for sandbox %s (allowed: %s); use an allowed model", routes.Clip(model, 128), sandbox, routes.Listed(prof.Models))
	}
	return d.Rule, nil
}

// modelDetail is a model request's account in its approval request.
type modelDetail struct {
	Model    string `json:"model"`
	Endpoint string `json:"endpoint"`
}

// modelApproval is the approval request of a model request the policy
// answered with ask: the model, for one message. A token count is asked
// about apart ("MODEL token count"), so that it never uses the grant of
// the message it precedes.
func modelApproval(path, model string) routes.ApprovalRequest {
	req := routes.ApprovalRequest{Subject: model, Detail: modelDetail{Model: model, Endpoint: path}, What: "model " + model}
	if path == "/v1/messages/count_tokens" {
		req.Subject, req.What = model+" token count", "a token count of model "+model
	}
	return req
}

// allowQuery keeps the named parameters, in a canonical encoding, and
// refuses any other: a parameter cproxy does not know is not forwarded.
func allowQuery(raw string, allowed []string) (string, error) {
	if raw == "" {
		return "", nil
	}
	if raw == "beta=true" && slices.Contains(allowed, "beta") {
		// What Claude Code sends on every request, already canonical.
		return raw, nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", routes.Refuse(routes.ErrBadRequest, "malformed query string")
	}
	for k, vs := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return "", routes.Refuse(routes.ErrForbidden, "query parameter %q is not allowed", routes.Clip(k, 64))
		}
		if len(vs) != 1 {
			return "", routes.Refuse(routes.ErrBadRequest, "query parameter %q given more than once", k)
		}
	}
	return q.Encode(), nil
}

// requestModel finds the top-level "model" (and "max_tokens", zero when
// absent) of a JSON request body, as the upstream will read it. It refuses
// a body that names either twice, or under another casing as well ("MODEL",
// "Max_Tokens"; encoding/json matches keys without regard to case, and
// other parsers may too), since the upstream's parser, not ours, would
// choose which one counts.
//
// It walks the top-level object with jsonMembers, which skips every other
// value by its structure: a 50 KB Claude Code request costs microseconds,
// not the hundreds a full decode does. On valid JSON it finds exactly what a
// full parser finds (FuzzRequestModel checks this against encoding/json).
// Invalid JSON that the walk does not notice is refused whole by the
// upstream, so its model is never used.
func requestModel(body []byte) (string, int64, error) {
	var model string
	var maxTokens int64
	seen, seenMax := false, false
	err := jsonMembers(body, func(key, val []byte) error {
		switch string(key) {
		case "model":
			if seen {
				return routes.Refuse(routes.ErrBadRequest, "the request body names \"model\" twice")
			}
			seen = true
			if val[0] != '"' {
				return routes.Refuse(routes.ErrBadRequest, "\"model\" must be a string")
			}
			if m, ok := plainString(val); ok {
				model = m
			} else if json.Unmarshal(val, &model) != nil {
				return routes.Refuse(routes.ErrBadRequest, "\"model\" must be a string")
			}
		case "max_tokens":
			// What the budget reserves for the answer.
			if seenMax {
				return routes.Refuse(routes.ErrBadRequest, "the request body names \"max_tokens\" twice")
			}
			seenMax = true
			n, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil || n < 0 {
				return routes.Refuse(routes.ErrBadRequest, "\"max_tokens\" must be a non-negative integer")
			}
			maxTokens = n
		default:
			if name, ok := casingOf(key); ok {
				return routes.Refuse(routes.ErrBadRequest, "the request body has the key %q, another casing of %q: send %q once, in lower case", routes.Clip(string(key), 64), name, name)
			}
		}
		return nil
	})
	switch {
	case err == errNotObject:
		return "", 0, routes.Refuse(routes.ErrBadRequest, "the request body is not a JSON object")
	case err == errJSONTrailing:
		return "", 0, routes.Refuse(routes.ErrBadRequest, "the request body has data after its JSON object")
	case err == errJSONSyntax:
		return "", 0, errNotJSON
	case err != nil:
		return "", 0, err
	}
	if model == "" {
		return "", 0, routes.Refuse(routes.ErrBadRequest, "the request body names no model")
	}
	return model, maxTokens, nil
}

// checkedKeys are the top-level keys requestModel reads.
var checkedKeys = [...]string{"model", "max_tokens"}

// casingOf reports which key cproxy reads key is another casing of, with
// the folding encoding/json matches keys with (bytes.EqualFold's: "K", the
// Kelvin sign, is a "k"). An exact key is not another casing.
func casingOf(key []byte) (string, bool) {
	for _, name := range checkedKeys {
		if string(key) != name && bytes.EqualFold(key, []byte(name)) {
			return name, true
		}
	}
	return "", false
}

// errNotJSON is requestModel's refusal of a body it cannot walk; made once,
// since requestModel runs on every model request.
var errNotJSON = routes.Refuse(routes.ErrBadRequest, "the request body is not valid JSON")

// setAnthropicCredential returns the function that puts the real credential
// on a forwarded request, per the upstream's auth mode.
func setAnthropicCredential(up routes.Upstream) func(http.Header, secrets.Secret) {
	if up.Auth == "oauth" {
		return func(h http.Header, cred secrets.Secret) {
			h.Set("Authorization", "Bearer "+cred.Reveal())
			h.Set("Anthropic-Beta", mergeBeta(h.Values("Anthropic-Beta"), oauthBeta))
		}
	}
	return func(h http.Header, cred secrets.Secret) {
		h.Set("X-Api-Key", cred.Reveal())
		// A client set up for a subscription sends the OAuth beta flag;
		// with an API key upstream it would be a lie about the credential.
		if vs := h.Values("Anthropic-Beta"); len(vs) > 0 && slices.ContainsFunc(vs, func(v string) bool { return strings.Contains(v, oauthBeta) }) {
			if rest := withoutBeta(vs, oauthBeta); rest == "" {
				h.Del("Anthropic-Beta")
			} else {
				h.Set("Anthropic-Beta", rest)
			}
		}
	}
}

// withoutBeta drops flag from the comma-separated anthropic-beta values.
func withoutBeta(values []string, flag string) string {
	var keep []string
	for _, f := range betaFlags(values) {
		if f != flag {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, ",")
}

func betaFlags(values []string) []string {
	var flags []string
	for _, v := range values {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				flags = append(flags, f)
			}
		}
	}
	return flags
}

// mergeBeta adds flag to the comma-separated anthropic-beta values unless it
// is there already, keeping the client's flags and their order.
func mergeBeta(values []string, flag string) string {
	flags := betaFlags(values)
	for _, f := range flags {
		if f == flag {
			return strings.Join(flags, ",")
		}
	}
	return strings.Join(append(flags, flag), ",")
}

type modelKey struct {
	prof  *policy.Profile
	model string
}

// ask is prof.AskModel(model), remembered. A profile is never changed
// once loaded, so its answer holds for as long as the profile is used.
func (m *modelRoute) ask(prof *policy.Profile, model string) policy.Answer {
	k := modelKey{prof, model}
	if dec, ok := m.models.Get(k); ok {
		return dec
	}
	dec := prof.AskModel(model)
	m.models.Put(k, dec)
	return dec
}

// anthropicError is the Anthropic API's error shape, fields in its order.
type anthropicError struct {
	Type  string             `json:"type"`
	Error anthropicErrorBody `json:"error"`
}

type anthropicErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// writeAnthropicError renders err the way api.anthropic.com renders errors,
// which Claude Code and the SDKs parse and show.
func writeAnthropicError(w http.ResponseWriter, err error) int {
	code, typ := routes.Status(err)
	body, _ := json.Marshal(anthropicError{Type: "error", Error: anthropicErrorBody{Type: typ, Message: routes.Message(err)}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	// Claude Code and the SDKs retry 5xx answers up to ten times unless
	// told not to. cproxy's refusals and time-outs do not get better by
	// retrying; an upstream that could not be reached may, and so may a
	// limit that says when (retry-after, as the API sends it).
	switch {
	case routes.SetRetryAfter(h, err):
		h.Set("X-Should-Retry", "true")
	case code != http.StatusBadGateway:
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(code)
	w.Write(body)
	return code
}

// eventCopyBuffers are the model route's: its answers are server-sent
// events of a few hundred bytes each, or JSON messages of a few KB, each
// written (and flushed) as it comes, so a larger buffer would only be held,
// mostly unused, by every open stream. They are kept as arrays, so giving
// one back allocates nothing (bufferPool's Put boxes a slice).
var eventCopyBuffers = &eventBufferPool{}

type eventBuffer = [8 << 10]byte

type eventBufferPool struct{ pool sync.Pool }

func (p *eventBufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*eventBuffer); ok {
		return b[:]
	}
	return new(eventBuffer)[:]
}

func (p *eventBufferPool) Put(b []byte) {
	if len(b) == len(eventBuffer{}) {
		p.pool.Put((*eventBuffer)(b))
	}
}
