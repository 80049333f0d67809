// Package admin is cproxy's admin API (docs/admin-api.md): the HTTP
// handler the harness calls, on the admin listener, to mint, list, revoke
// and prune tokens and to probe health, readiness and metrics. It reaches
// a routes.Server only through the Server's exported API (Store, Policy,
// EndSandbox, EndToken, Prune, Readiness, Metrics and the like); the core
// does not import it.
//
// It is part of cproxy's implementation, not an API for other programs:
// the harness's API is the HTTP one, which Go programs call with package
// client.
package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/tokens"
)

// Limits.
const (
	// DefaultTokenTTL is how long a token lives when the harness names no ttl.
	DefaultTokenTTL = 24 * time.Hour
	// maxTokenTTL bounds ttl=: a token is meant to die with its sandbox.
	maxTokenTTL = 366 * 24 * time.Hour
)

// TokenCreated is the answer to POST /tokens: the client package's Token,
// whose Secret writes itself as REDACTED, with the token itself in Value.
// It is the one place the token ever appears; the rest is safe to log.
type TokenCreated struct {
	// Value is the token; it is written first, as the answer's "token".
	Value string `json:"token"`
	client.Token
}

// Handler serves the admin API of srv (docs/admin-api.md): token creation,
// listing, revocation and pruning, health, readiness, and Prometheus
// metrics. cproxy serve serves it on the admin listener, and GET /healthz
// says what serving names: the config and the listeners of that serve, so
// that a client can tell which of several it reached.
// It must only ever be reachable by the harness; it has no authentication
// of its own, like the token contract of Hatchet's credential proxy
// cookbook, because a password on a port
// the sandboxes can reach would be one leak away from useless.
func Handler(srv *routes.Server, serving client.Serving) http.Handler {
	s := &server{Server: srv}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokens", s.createToken)
	mux.HandleFunc("DELETE /tokens", s.revokeTokens)
	mux.HandleFunc("DELETE /tokens/{id}", s.revokeToken)
	mux.HandleFunc("GET /tokens", s.listTokens)
	mux.HandleFunc("POST /tokens/prune", s.pruneTokens)
	mux.HandleFunc("GET /mcp/pins", s.listPins)
	mux.HandleFunc("POST /mcp/pins/accept", s.decidePin(true))
	mux.HandleFunc("POST /mcp/pins/reject", s.decidePin(false))
	mux.HandleFunc("GET /approvals", s.listApprovals)
	mux.HandleFunc("GET /approvals/{id}", s.getApproval)
	mux.HandleFunc("POST /approvals/{id}/approve", s.decideApproval(true))
	mux.HandleFunc("POST /approvals/{id}/deny", s.decideApproval(false))
	health := struct {
		Status string `json:"status"`
		client.Serving
	}{"ok", serving}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, health)
	})
	mux.HandleFunc("GET /readyz", s.ready)
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.RequestURI, "/") || r.URL.RawPath != "" {
			adminError(w, http.StatusBadRequest, "only plain paths are served")
			return
		}
		_, pattern := mux.Handler(r)
		if allow := allowedMethods(r.URL.Path); pattern == "" && allow != "" {
			methodNotAllowed(w, r, allow)
			return
		}
		if pattern == "" {
			// ServeMux would answer 404 or 405 in plain text; the harness
			// gets JSON like every other answer.
			adminError(w, http.StatusNotFound, fmt.Sprintf("no such admin endpoint: %s %s (see docs/admin-api.md)", r.Method, r.URL.Path))
			return
		}
		// ServeHTTP, not the handler Handler returned: it sets the
		// request's path values (DELETE /tokens/{id}).
		mux.ServeHTTP(w, r)
	})
}

// server is the admin API of one routes.Server.
type server struct {
	*routes.Server
	readiness readiness // GET /readyz's last answer, for the log
}

// adminMethods are the methods each admin endpoint answers, for a 405's
// Allow header.
var adminMethods = map[string]string{
	"/tokens": "GET, POST, DELETE", "/tokens/prune": "POST", "/healthz": "GET", "/readyz": "GET", "/metrics": "GET",
	"/mcp/pins": "GET", "/mcp/pins/accept": "POST", "/mcp/pins/reject": "POST", "/approvals": "GET",
}

// methodNotAllowed answers 405 with the methods path takes.
func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	adminError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not allowed (allowed: %s)", r.Method, r.URL.Path, allow))
}

// allowedMethods are the methods the admin endpoint at path answers: those
// of adminMethods, and DELETE for one token's path, /tokens/ID. "": no
// endpoint is there.
func allowedMethods(path string) string {
	if allow, ok := adminMethods[path]; ok {
		return allow
	}
	if id, ok := strings.CutPrefix(path, "/tokens/"); ok && id != "" && !strings.Contains(id, "/") {
		return "DELETE"
	}
	if rest, ok := strings.CutPrefix(path, "/approvals/"); ok && rest != "" {
		id, verb, _ := strings.Cut(rest, "/")
		switch {
		case id != "" && verb == "":
			return "GET"
		case id != "" && (verb == "approve" || verb == "deny"):
			return "POST"
		}
	}
	return ""
}

func (s *server) createToken(w http.ResponseWriter, r *http.Request) {
	q, ok := adminQuery(w, r, "sandbox", "profile", "ttl", "source", "bind")
	if !ok {
		return
	}
	sandbox, ok := sandboxParam(w, q)
	if !ok {
		return
	}
	profile := q.Get("profile")
	if profile != "" && !s.Policy().HasProfile(profile) {
		adminError(w, http.StatusBadRequest, fmt.Sprintf("profile %q is not defined in the policy", profile))
		return
	}
	ttl := DefaultTokenTTL
	if v := q.Get("ttl"); v != "" {
		d, err := ParseTTL(v)
		if err != nil {
			adminError(w, http.StatusBadRequest, err.Error())
			return
		}
		ttl = d
	}
	source, bind, msg := s.binding(sandbox, profile, q.Get("source"), q.Get("bind"))
	if msg != "" {
		adminError(w, http.StatusBadRequest, msg)
		return
	}
	values, budget, code, msg := s.tokenBody(r)
	if msg != "" {
		adminError(w, code, msg)
		return
	}
	socket := ""
	if bind == policy.BindSocket {
		// Before the token: a token whose socket could not be made would be
		// good for nothing.
		var err error
		if socket, err = s.Sockets().Open(sandbox); err != nil {
			s.Log().Error("opening a sandbox socket failed", "sandbox", sandbox, "err", err)
			adminError(w, http.StatusServiceUnavailable, "the sandbox's socket could not be created; no token was created")
			return
		}
	}
	tok, err := tokens.New()
	if err != nil {
		s.Log().Error("generating a token failed", "err", err)
		adminError(w, http.StatusInternalServerError, "generating a token failed")
		return
	}
	now := s.Now().UTC()
	h := tok.Hash()
	rec := tokens.Record{ID: h.ID(), Sandbox: sandbox, Profile: profile, Source: source, Bind: bind, CreatedAt: now, ExpiresAt: now.Add(ttl), Budget: budget}
	if rec.Values, err = tokens.SealValues(tok, values); err != nil {
		s.Log().Error("sealing a token's values failed", "err", err)
		adminError(w, http.StatusInternalServerError, "sealing the token's values failed; no token was created")
		return
	}
	if err := s.Store().Create(r.Context(), h, rec); err != nil {
		s.Log().Error("storing a token failed", "sandbox", sandbox, "err", err)
		adminError(w, http.StatusServiceUnavailable, "the token store failed; no token was created")
		return
	}
	attrs := []any{"sandbox", sandbox, "token_id", rec.ID, "profile", profile, "expires_at", rec.ExpiresAt}
	if source != "" {
		attrs = append(attrs, "source", source)
	}
	if bind != "" {
		attrs = append(attrs, "bind", bind, "socket", socket)
	}
	s.Log().Info("token created", attrs...)
	writeJSON(w, http.StatusCreated, TokenCreated{Value: tok.Reveal(), Token: client.Token{
		ID: rec.ID, Sandbox: sandbox, Profile: profile, ExpiresAt: rec.ExpiresAt,
		Source: source, Bind: bind, Socket: socket, Values: slices.Sorted(maps.Keys(values)),
	}})
}

// The most a token's values may hold.
const (
	maxValuesBody = 64 << 10
	maxValues     = 16
	maxValueLen   = 4 << 10
)

// tokenBody reads the JSON body of POST /tokens, {"values": {"NAME":
// "VALUE"}, "budget": {…}}, both optional: per-token values, with names the
// configured relays use and values that can go in a header, and a budget
// over the profile's (returned as JSON, checked). No body: neither. A
// refusal is its status and reason.
func (s *server) tokenBody(r *http.Request) (map[string]string, json.RawMessage, int, string) {
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil, nil, 0, ""
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return nil, nil, http.StatusUnsupportedMediaType, `a POST /tokens body must be JSON (Content-Type: application/json), such as {"values": {"mod_token": "…"}}`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxValuesBody+1))
	if err != nil {
		return nil, nil, http.StatusBadRequest, "reading the body failed"
	}
	if len(body) > maxValuesBody {
		return nil, nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d KiB", maxValuesBody>>10)
	}
	const shape = `{"values": {"NAME": "VALUE", …}, "budget": {…}} (string values, no other keys)`
	switch dup, err := DuplicateKey(body); {
	case errors.Is(err, errTooDeep):
		return nil, nil, http.StatusBadRequest, err.Error() + ": it must be " + shape
	case dup != "":
		return nil, nil, http.StatusBadRequest, fmt.Sprintf("the body has the key %q more than once (keys are matched without regard to case): send each key once", routes.Clip(dup, 64))
	}
	var req struct {
		Values map[string]string `json:"values"`
		Budget json.RawMessage   `json:"budget"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.More() {
		if k := unknownKey(err); k != "" {
			return nil, nil, http.StatusBadRequest, fmt.Sprintf("the body has the unknown key %s: it must be %s", routes.Clip(k, 64), shape)
		}
		return nil, nil, http.StatusBadRequest, "the body is not " + shape
	}
	if len(req.Values) > maxValues {
		return nil, nil, http.StatusBadRequest, fmt.Sprintf("%d values: at most %d", len(req.Values), maxValues)
	}
	for name, v := range req.Values {
		switch {
		case !slices.Contains(s.TokenValues(), name):
			known := "none"
			if len(s.TokenValues()) > 0 {
				known = strings.Join(s.TokenValues(), ", ")
			}
			return nil, nil, http.StatusBadRequest, fmt.Sprintf("no relay uses a value named %q (the config's relays use: %s)", routes.Clip(name, 64), known)
		case v == "" || len(v) > maxValueLen:
			return nil, nil, http.StatusBadRequest, fmt.Sprintf("value %s must be 1 to %d bytes", name, maxValueLen)
		case strings.IndexFunc(v, func(c rune) bool { return c < 0x20 && c != '\t' || c == 0x7f }) >= 0:
			return nil, nil, http.StatusBadRequest, fmt.Sprintf("value %s holds a control character, which cannot go in a header", name)
		}
	}
	if len(req.Budget) > 0 && string(req.Budget) != "null" {
		b, err := policy.ParseBudget(req.Budget)
		if err != nil {
			return nil, nil, http.StatusBadRequest, routes.Clip(err.Error(), 300)
		}
		req.Budget, _ = json.Marshal(b)
	} else {
		req.Budget = nil
	}
	return req.Values, req.Budget, 0, ""
}

// binding checks the source= and bind= of a token for sandbox and returns
// them as the token keeps them, or the reason they are refused. The
// token's profile is the one it names or, without one, the one the policy
// gives the sandbox now; a profile with bind = "socket" binds every token of
// it. A source must lie inside the profile's sources, or the token could
// never be used.
func (s *server) binding(sandbox, profile, source, bind string) (string, string, string) {
	prof, _ := s.Policy().ProfileFor(sandbox, profile) // nil: decided per request, as for any token
	if bind != "" && bind != policy.BindSocket {
		return "", "", fmt.Sprintf(`invalid bind %q: the only binding is "socket" (the sandbox's own Unix socket)`, routes.Clip(bind, 32))
	}
	if prof != nil && prof.Bind == policy.BindSocket {
		bind = policy.BindSocket
	}
	if source != "" {
		p, err := policy.ParseSource(source)
		if err != nil {
			return "", "", "invalid source: " + routes.Clip(err.Error(), 160)
		}
		if p.IsSingleIP() {
			source = p.Addr().String()
		} else {
			source = p.String()
		}
		switch {
		case bind == policy.BindSocket:
			return "", "", "source cannot be combined with bind=socket (or a profile with bind = \"socket\"): a Unix socket has no peer address"
		case !prof.CoversSource(p):
			return "", "", fmt.Sprintf("source %s is outside the sources of profile %s: a token bound to it could never be used", source, prof.Name)
		}
	}
	if bind == policy.BindSocket {
		switch {
		case s.Sockets() == nil:
			return "", "", "bind=socket needs listen.sandbox_sockets in cproxy's config: there is no directory for per-sandbox sockets"
		case prof.HasSources():
			return "", "", fmt.Sprintf("profile %s has sources, and a token bound to a socket has no peer address: it could never be used", prof.Name)
		}
	}
	return source, bind, ""
}

func (s *server) revokeTokens(w http.ResponseWriter, r *http.Request) {
	q, ok := adminQuery(w, r, "sandbox")
	if !ok {
		return
	}
	sandbox, ok := sandboxParam(w, q)
	if !ok {
		return
	}
	n, err := s.Store().RevokeSandbox(r.Context(), sandbox, s.Now().UTC())
	// Its requests in flight end now, even if the store failed: the
	// harness wants the sandbox stopped, and will retry the revocation.
	s.EndSandbox(sandbox)
	if err != nil {
		s.Log().Error("revoking tokens failed", "sandbox", sandbox, "err", err)
		adminError(w, http.StatusServiceUnavailable, "the token store failed; the revocation may not have been recorded: retry")
		return
	}
	s.Log().Info("tokens revoked", "sandbox", sandbox, "count", n)
	// Its approvals end too: a later sandbox of the same id starts
	// with none. The tokens are revoked already; a failure is logged.
	if ap, err := s.Store().WithdrawApprovals(r.Context(), sandbox, s.Now()); err != nil {
		s.Log().Error("withdrawing a revoked sandbox's approvals failed", "sandbox", sandbox, "err", err)
	} else if ap > 0 {
		s.Log().Info("approvals withdrawn", "sandbox", sandbox, "count", ap)
	}
	s.Metrics().DeleteBudget(sandbox)
	if s.Sockets() != nil {
		s.Sockets().Remove(sandbox)
	}
	w.WriteHeader(http.StatusNoContent)
}

// revokeToken serves DELETE /tokens/ID: it revokes that one token, for one
// that leaked, and leaves the sandbox's other tokens live. An id no token
// has (never minted, or pruned) is 404; a token already revoked is 204
// again, keeping its first revocation's time, as a repeated DELETE /tokens
// is harmless.
func (s *server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if allow := adminMethods[r.URL.Path]; allow != "" {
		// DELETE /tokens/prune: an endpoint of its own, not a token.
		methodNotAllowed(w, r, allow)
		return
	}
	if _, ok := adminQuery(w, r); !ok {
		return
	}
	id := r.PathValue("id")
	if !tokens.ValidID(id) {
		adminError(w, http.StatusBadRequest, fmt.Sprintf("invalid token id %q: an id is tok_ and 12 lower-case hex digits, as POST /tokens and GET /tokens give it", routes.Clip(id, 64)))
		return
	}
	at := s.Now().UTC()
	recs, err := s.Store().RevokeToken(r.Context(), id, at)
	// Its requests in flight end now, even if the store failed, as for a
	// sandbox's revocation.
	s.EndToken(id)
	switch {
	case errors.Is(err, tokens.ErrNotFound):
		adminError(w, http.StatusNotFound, fmt.Sprintf("no token has the id %s: it was never minted here, or was pruned (GET /tokens lists the tokens there are)", id))
		return
	case err != nil:
		s.Log().Error("revoking a token failed", "token_id", id, "err", err)
		adminError(w, http.StatusServiceUnavailable, "the token store failed; the revocation may not have been recorded: retry")
		return
	}
	for _, rec := range recs {
		if rec.RevokedAt.Equal(at) {
			s.Log().Info("token revoked", "sandbox", rec.Sandbox, "token_id", rec.ID)
		} else {
			s.Log().Info("token revoked already", "sandbox", rec.Sandbox, "token_id", rec.ID, "revoked_at", rec.RevokedAt)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// DefaultListLimit is the page size of GET /tokens without limit=. The
// most limit= may ask for is client.MaxListLimit: a page is held in
// memory, and its answer written, whole.
const DefaultListLimit = 100

// listTokens answers one page of tokens, in the store's order (by id),
// from where cursor= points, so that neither the store nor this answer
// holds more than limit= tokens however many the store keeps.
func (s *server) listTokens(w http.ResponseWriter, r *http.Request) {
	q, ok := adminQuery(w, r, "sandbox", "state", "limit", "cursor")
	if !ok {
		return
	}
	lq := tokens.ListQuery{After: q.Get("cursor"), Limit: DefaultListLimit, Sandbox: q.Get("sandbox"), State: tokens.State(q.Get("state")), Now: s.Now()}
	if lq.Sandbox != "" && !tokens.ValidSandboxID(lq.Sandbox) {
		adminError(w, http.StatusBadRequest, sandboxIDHint(lq.Sandbox))
		return
	}
	if v := q.Get("state"); v != "" && !slices.Contains(tokens.States, lq.State) {
		adminError(w, http.StatusBadRequest, fmt.Sprintf("invalid state %q: live, expired or revoked", routes.Clip(v, 32)))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > client.MaxListLimit {
			adminError(w, http.StatusBadRequest, fmt.Sprintf("invalid limit %q: a whole number from 1 to %d", routes.Clip(v, 32), client.MaxListLimit))
			return
		}
		lq.Limit = n
	}
	page, err := s.Store().List(r.Context(), lq)
	if errors.Is(err, tokens.ErrBadCursor) {
		adminError(w, http.StatusBadRequest, fmt.Sprintf("invalid cursor %q: pass the next of the page before, unchanged", routes.Clip(lq.After, 32)))
		return
	}
	if err != nil {
		s.Log().Error("listing tokens failed", "err", err)
		adminError(w, http.StatusServiceUnavailable, "the token store failed")
		return
	}
	out := client.TokenPage{Tokens: make([]client.TokenInfo, 0, len(page.Records)), Next: page.Next}
	for _, rec := range page.Records {
		info := tokenInfo(rec, lq.Now)
		if b := s.tokenBudget(rec); !b.IsZero() {
			cb := client.Budget(b)
			info.Budget = &cb
			if u, ok := s.Budgets().Usage(r.Context(), rec.ID, b); ok {
				info.Usage = &client.Usage{Requests: u.Requests, InputTokens: u.Input, OutputTokens: u.Output,
					CacheReadTokens: u.CacheRead, CacheWriteTokens: u.CacheWrite, MCPCalls: u.MCPCalls}
			}
		}
		out.Tokens = append(out.Tokens, info)
	}
	writeJSON(w, http.StatusOK, out)
}

// tokenInfo is rec as the admin API lists it at now: never its value, nor
// its sealed values.
func tokenInfo(rec tokens.Record, now time.Time) client.TokenInfo {
	return client.TokenInfo{
		ID: rec.ID, Sandbox: rec.Sandbox, Profile: rec.Profile, Source: rec.Source, Bind: rec.Bind,
		CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt, RevokedAt: rec.RevokedAt, State: string(rec.StateAt(now)),
	}
}

// tokenBudget is the budget that applies to rec now: its profile's, with
// the token's own over it.
func (s *server) tokenBudget(rec tokens.Record) policy.Budget {
	var b policy.Budget
	if prof, err := s.Policy().ProfileFor(rec.Sandbox, rec.Profile); err == nil {
		b = prof.Budget
	}
	if len(rec.Budget) > 0 {
		if own, err := policy.ParseBudget(rec.Budget); err == nil {
			b = b.Over(own)
		}
	}
	return b
}

// serveMetrics answers GET /metrics. Like every admin endpoint, it refuses
// parameters it does not take: it takes none.
func (s *server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if _, ok := adminQuery(w, r); !ok {
		return
	}
	s.Metrics().ServeHTTP(w, r)
}

// adminQuery parses the query and refuses parameters the endpoint does not
// take, so a typo (?sandbox_id=) is an error rather than ignored.
func adminQuery(w http.ResponseWriter, r *http.Request, allowed ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		adminError(w, http.StatusBadRequest, "malformed query string")
		return nil, false
	}
	for k, vs := range q {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			takes := "takes no query parameters"
			if len(allowed) > 0 {
				takes = "takes: " + strings.Join(allowed, ", ")
			}
			adminError(w, http.StatusBadRequest, fmt.Sprintf("unknown parameter %q (this endpoint %s)", routes.Clip(k, 64), takes))
			return nil, false
		}
		if len(vs) > 1 {
			adminError(w, http.StatusBadRequest, fmt.Sprintf("parameter %q given more than once", k))
			return nil, false
		}
	}
	return q, true
}

func sandboxParam(w http.ResponseWriter, q url.Values) (string, bool) {
	id := q.Get("sandbox")
	if !tokens.ValidSandboxID(id) {
		adminError(w, http.StatusBadRequest, sandboxIDHint(id))
		return "", false
	}
	return id, true
}

func sandboxIDHint(id string) string {
	if id == "" {
		return "missing sandbox: pass ?sandbox=ID"
	}
	return fmt.Sprintf("invalid sandbox id %q: ids are 1-63 characters of a-z, 0-9 and '-', starting with a letter or digit", routes.Clip(id, 80))
}

// ParseTTL reads a token lifetime: a Go duration ("90m", "24h") or a number
// of days ("7d"), between one second and 366 days.
func ParseTTL(v string) (time.Duration, error) {
	d, err := policy.ParseDays(v)
	if err != nil && !errors.Is(err, policy.ErrDurationTooLong) {
		return 0, fmt.Errorf("invalid ttl %q: use a duration such as 90m, 24h or 7d", routes.Clip(v, 32))
	}
	if err != nil || d < time.Second || d > maxTokenTTL {
		return 0, fmt.Errorf("ttl %s is out of range: give one between 1s and 366d (8784h)", routes.Clip(v, 32))
	}
	return d, nil
}

func adminError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": "cproxy: " + msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"cproxy: internal error"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
