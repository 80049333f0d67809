// Package routes is cproxy's proxy core: the Server behind the proxy
// listener and the admin API (routes/admin), authentication, forwarding,
// the mapping of errors to answers, and the Route interface every route
// implements (route.go, call.go). The routes themselves are registered in routes/builtin
// (docs/adding-a-route.md).
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package routes

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/routes/budget"
	"github.com/cproxy/cproxy/routes/metrics"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// Upstream is one real service cproxy forwards to.
type Upstream struct {
	// URL is the base URL; request paths are appended to its path.
	URL *url.URL
	// Credential is the real credential; zero means none is configured.
	// It is ignored when Live is set.
	Credential secrets.Secret
	// Live, when not nil, holds the credential instead of Credential: one
	// that can change while cproxy runs (SIGHUP, Claude Code refreshing its
	// login). It is read once per request; an error from it (an expired
	// claude-code token) refuses the request with 503 instead of forwarding
	// a dead credential. Nil means Credential is the credential for good.
	Live *secrets.Live
	// Missing, when there is no credential, says what to set; requests that
	// need the credential are answered with it instead of being forwarded.
	Missing string
	// Auth is how the credential is sent: "api-key" or "oauth" (Anthropic).
	Auth string
	// HeaderTimeout bounds the wait for response headers; zero means none.
	HeaderTimeout time.Duration
	// Limits are what the config sets of its routes' per-token limits
	// (upstream.NAME.concurrent, requests_per_minute); zero: the route's.
	Limits Limits
	// App, when not nil, is a GitHub App whose installation tokens are
	// minted for each request (Env.AppTokens), in place of Credential and
	// Live, which are then unset. Nil: no App.
	App *App
	// OAuth, when not nil, gets the credential from an OAuth token
	// endpoint and renews it (OAuth.Init must have been called), in
	// place of Credential and Live, which are then unset. Nil: none.
	OAuth *OAuth
	// Files, when not nil, is a second host of the upstream that its
	// answers point at (PyPI's index lists files on its files host), which
	// the route reaches through Env.FilesForwarder. The credential goes
	// there only when Files has URL's scheme, host and port. Nil: none.
	Files *url.URL
}

// App is a GitHub App as the config gives it ([upstream.github]'s app_id,
// private_key, installation_id and api_url).
type App struct {
	// ID is the App's id (the JWT's iss).
	ID int64
	// Installation is the id of the App's installation whose tokens are
	// minted.
	Installation int64
	// API is GitHub's REST API base URL (https://api.github.com, or
	// https://HOST/api/v3 for GitHub Enterprise Server).
	API *url.URL
	// Key holds the App's private key, PEM-encoded; SIGHUP rereads it.
	Key *secrets.Live

	once   sync.Once
	minter *AppTokens
}

// tokens is the App's one AppTokens, made on first use, so that the
// routes of one App (git and the API) share its tokens and its cache.
func (a *App) tokens(now func() time.Time, log *slog.Logger) *AppTokens {
	a.once.Do(func() { a.minter = NewAppTokens(a, now, log) })
	return a.minter
}

// Configured reports whether up has a credential to send.
func (up Upstream) Configured() bool {
	return up.Live != nil || !up.Credential.IsZero() || up.App != nil || up.OAuth != nil
}

// Options configure a Server. Store and Policy are required; a Server with
// no Routes refuses every request.
type Options struct {
	Store tokens.Store
	// SharedLimits are Store's shared limits when other cproxy processes use
	// Store at the same time (replicas on one PostgreSQL database): budgets,
	// rates and in-flight slots are then counted in the store, atomically,
	// on every request, so the replicas' spending adds up exactly. Nil: this
	// process is the store's only user; it counts them in memory and saves
	// budgets to Store ahead of use.
	//
	// The caller says so here, rather than New asking Store whether it has
	// shared limits (a type assertion): a wrapper around a shared store (a
	// look-up cache, a test's fault injector) that did not pass the methods
	// on would silently turn replicas into processes counting apart, each
	// spending the whole budget.
	SharedLimits tokens.SharedLimits

	Policy *policy.Policy
	// Routes are the proxy listener's routes (Kind.Build, and the relays),
	// each serving the paths under its prefix; no two prefixes may
	// overlap. A path under none is refused.
	Routes []Route
	// Limits are each route's per-token Limits, by route name (Kind.Limits
	// with the config's over them); a route not named has DefaultLimits.
	Limits map[string]RouteLimits
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Audit receives one line per proxied request; nil means Logger. It is
	// separate so an operator can quiet diagnostics without losing the
	// audit trail.
	Audit *slog.Logger
	// AuditLog, if not nil, receives the audit records instead of Audit:
	// one audit.Record per request as a line of JSON, each line in one
	// Write. It must be safe for concurrent use and should not block: a
	// request's handler writes its own record. Nil: Audit gets them as log
	// lines.
	AuditLog io.Writer
	// Watch, if not nil, is given every audit record as well, as its
	// request ends: the console's live list. It must not block. Nil:
	// nobody watches, and a request pays nothing for it.
	Watch func(*audit.Record)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SandboxSockets, if not nil, serves the per-sandbox Unix sockets that
	// tokens minted with bind=socket are valid on. Nil: such tokens cannot
	// be minted.
	SandboxSockets *SandboxSockets
	// Version is cproxy's version, for cproxy_build_info on GET /metrics;
	// empty means "unknown".
	Version string
	// BodyTimeout bounds reading a request body: it must arrive within
	// BodyTimeout of the request's authentication, plus a second for each
	// minBodyRate bytes received, and no read of it may wait longer than
	// BodyTimeout. Zero means no deadline.
	BodyTimeout time.Duration
	// BodyMemory bounds the bytes request bodies read whole may hold at
	// once, across every request; zero means defaultBodyMemory.
	BodyMemory int64
	// BodyMemorySandbox bounds what one sandbox's request bodies may hold
	// of BodyMemory; zero (or more than BodyMemory) means
	// BodyShare(BodyMemory).
	BodyMemorySandbox int64
	// MaxConnections bounds the connections open at once on the
	// listeners LimitConnections wraps and the per-sandbox sockets,
	// together; zero means no bound.
	MaxConnections int64
	// Retention is how long a token is kept after it expired or was
	// revoked: the Server prunes the store of older ones, with their usage,
	// every PruneInterval until Close, and POST /tokens/prune does by
	// default. Zero: every token is kept (POST /tokens/prune then needs
	// older_than).
	Retention time.Duration
	// PruneInterval is how often the store is pruned; zero means
	// DefaultPruneInterval.
	PruneInterval time.Duration
	// Approvals say how requests the policy answers with ask are filed
	// for an operator's approval, and how long a grant lasts.
	Approvals ApprovalOptions
}

// Server holds what the listeners share.
type Server struct {
	store    tokens.Store
	pol      atomic.Pointer[policy.Policy]
	log      *slog.Logger
	audit    *slog.Logger
	auditLog io.Writer // nil: audit lines go to audit
	watch    func(*audit.Record)
	now      func() time.Time
	routes   []Route
	sockets  *SandboxSockets // nil without Options.SandboxSockets
	budgets  *budget.Budgets
	// tokenValues are the per-token value names the routes use (a relay's
	// headers), which POST /tokens accepts.
	tokenValues []string
	metrics     *metrics.Metrics // GET /metrics on the admin listener
	decisions   decisions
	flights     inflight
	// requests counts the proxy handler's requests until each has
	// written its audit line, for WaitRequests.
	requests sync.WaitGroup
	// sweepStop stops sweepFlights, which runs when the store is shared;
	// nil when it does not.
	sweepStop, sweepDone chan struct{}
	bodyTimeout          time.Duration
	bodies               *bodyMemory
	conns                *budget.ConnLimit       // nil: no bound
	limits               map[string]*routeLimits // by route name; read only after New
	retention            time.Duration
	approvals            ApprovalOptions
	pruneStop            func() // stops the pruner and waits for it; nil: none runs
}

// New builds a Server.
func New(o Options) *Server {
	s := &Server{store: o.Store, log: o.Logger, audit: o.Audit, auditLog: o.AuditLog, watch: o.Watch, now: o.Now, sockets: o.SandboxSockets,
		bodyTimeout: o.BodyTimeout}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.audit == nil {
		s.audit = s.log
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.pol.Store(o.Policy)
	if s.sockets != nil {
		s.sockets.handler = s.ProxyHandler()
	}
	s.budgets = budget.New(s.store, o.SharedLimits, s.log, s.now)
	if o.SharedLimits != nil {
		s.sweepStop, s.sweepDone = make(chan struct{}), make(chan struct{})
		go s.sweepFlights(s.sweepStop, s.sweepDone)
	}
	s.routes = o.Routes
	s.limits = make(map[string]*routeLimits, len(o.Routes))
	for _, rt := range s.routes {
		l, ok := o.Limits[rt.Name()]
		if lr, declared := rt.(Limited); !ok && declared {
			l.Limits = lr.Limits()
		}
		s.limits[rt.Name()] = newRouteLimits(rt.Name(), l)
		if sl, ok := rt.(Sublimited); ok {
			for name, l := range sl.SubLimits() {
				if given, ok := o.Limits[name]; ok {
					l = given
				}
				s.limits[name] = newRouteLimits(name, l)
			}
		}
	}
	for _, rt := range s.routes {
		if v, ok := rt.(Valued); ok {
			for _, name := range v.ValueNames() {
				if !slices.Contains(s.tokenValues, name) {
					s.tokenValues = append(s.tokenValues, name)
				}
			}
		}
	}
	slices.Sort(s.tokenValues)
	s.metrics = metrics.New(o.Version, s.store, s.now, s.log, s.routeNames())
	if o.BodyMemory == 0 {
		o.BodyMemory = defaultBodyMemory
	}
	s.bodies = newBodyMemory(o.BodyMemory, o.BodyMemorySandbox, s.metrics)
	if o.MaxConnections > 0 {
		s.conns = budget.NewConnLimit(o.MaxConnections, s.log, s.metrics)
		s.metrics.SetConnectionLimit(o.MaxConnections)
	}
	if s.sockets != nil {
		s.sockets.conns = s.conns
	}
	s.retention = o.Retention
	s.approvals = o.Approvals
	if s.approvals.GrantLifetime <= 0 {
		s.approvals.GrantLifetime = DefaultGrantLifetime
	}
	if s.approvals.RequestLifetime <= 0 {
		s.approvals.RequestLifetime = DefaultRequestLifetime
	}
	s.startPruning(o.Retention, o.PruneInterval)
	return s
}

// servedPrefixes lists the routes' prefixes, for a request under none.
func (s *Server) servedPrefixes() string {
	prefixes := make([]string, len(s.routes))
	for i, rt := range s.routes {
		prefixes[i] = rt.Prefix()
	}
	return strings.Join(prefixes, ", ")
}

// ConnContext is the http.Server ConnContext of the proxy listener and
// the per-sandbox sockets: it lets a request's authentication tell its
// connection's bound (LimitConnections) that it has a token, and whose.
func ConnContext(ctx context.Context, c net.Conn) context.Context { return budget.ConnContext(ctx, c) }

// LimitConnections returns ln (the proxy listener) with the connections it
// accepts counted against Options.MaxConnections, with the per-sandbox
// sockets'; past it a new connection is closed at once.
func (s *Server) LimitConnections(ln net.Listener) net.Listener { return s.conns.Listener(ln) }

// routeNames are the route labels of the routes.
func (s *Server) routeNames() []string {
	names := make([]string, len(s.routes))
	for i, rt := range s.routes {
		names[i] = rt.Name()
	}
	return names
}

// routeFor is the route whose prefix path is under, or nil.
func (s *Server) routeFor(path string) Route {
	for _, rt := range s.routes {
		if strings.HasPrefix(path, rt.Prefix()) {
			return rt
		}
	}
	return nil
}

// SetPolicy replaces the policy, and decides again under it every request
// being forwarded (recheck): one it refuses is ended, as a revocation ends
// a token's, with the refusal, which says that the policy no longer allows
// it; one it allows runs on untouched. A request not sent yet is decided
// again when it is sent, and when a body that streams to the upstream
// ends.
func (s *Server) SetPolicy(p *policy.Policy) {
	s.pol.Store(p)
	if p == nil {
		return // none loaded (a test of GET /readyz): nothing to decide with
	}
	if cut := s.endRefused(); cut > 0 {
		s.log.Info("requests in flight cut by a policy reload", "count", cut)
	}
}

// Policy is the policy in force; nil when none is loaded. The admin API
// checks a token's profile, binding and budget against it, and GET /readyz
// is not ready without one.
func (s *Server) Policy() *policy.Policy { return s.pol.Load() }

// What the admin API (routes/admin) reads of a Server, beside Policy,
// EndSandbox, EndToken, Prune, Retention and Readiness. The admin API is a client of
// the Server like any other: it reaches nothing else of it.

// Store is Options.Store: the admin API mints, lists, revokes and prunes
// tokens in it.
func (s *Server) Store() tokens.Store { return s.store }

// Now is the Server's clock (Options.Now): the admin API dates the tokens
// it mints and revokes, and reads their state, by it.
func (s *Server) Now() time.Time { return s.now() }

// Log is the Server's diagnostics logger (Options.Logger; never nil): the
// admin API logs what it does to tokens there.
func (s *Server) Log() *slog.Logger { return s.log }

// Sockets are the per-sandbox Unix sockets (Options.SandboxSockets); nil
// when there are none, and bind=socket tokens cannot be minted. The admin
// API opens a sandbox's socket before it mints a token bound to it, and
// removes it when the sandbox's tokens are revoked.
func (s *Server) Sockets() *SandboxSockets { return s.sockets }

// TokenValues are the names of the per-token values the routes use (a
// relay's headers, Valued), sorted: POST /tokens accepts values with these
// names and refuses any other. The caller must not change the slice.
func (s *Server) TokenValues() []string { return s.tokenValues }

// Budgets are the tokens' budgets: GET /tokens lists a token's usage from
// them.
func (s *Server) Budgets() *budget.Budgets { return s.budgets }

// Metrics are the Server's metrics: the admin API serves them on GET
// /metrics, and drops a revoked sandbox's budget gauges.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// WaitRequests waits until every request the proxy handler took has
// ended and written its audit line, or ctx ends. http.Server.Close returns
// while the handlers of the requests it cut are still finishing: a process
// that exited then would lose their audit lines and what they spent.
func (s *Server) WaitRequests(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.requests.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the Server's background work and closes its routes.
func (s *Server) Close() {
	if s.pruneStop != nil {
		s.pruneStop()
		s.pruneStop = nil
	}
	s.budgets.Close()
	if s.sweepStop != nil {
		close(s.sweepStop)
		<-s.sweepDone
		s.sweepStop = nil
	}
	for _, rt := range s.routes {
		rt.Close()
	}
}

// rootAnswer is the body of the answer to a bare GET / or HEAD /: that
// this is cproxy, and nothing of its configuration.
const rootAnswer = "cproxy\n"

// isBareRoot reports a GET or HEAD of "/" with no query: what Claude Code
// sends when it starts, to see that its base URL answers.
func isBareRoot(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.RequestURI == "/"
}

// answerRoot answers a bare GET / or HEAD / with a 200 and no audit record:
// it reaches no upstream and reads no token, and Claude Code sends one at
// every session start, so a refusal line there would be noise in the audit.
func (s *Server) answerRoot(w http.ResponseWriter, r *http.Request) {
	s.log.Debug("answered a bare request for /", "method", r.Method)
	if r.Body != http.NoBody {
		closeUnread(w) // a body nothing reads
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(rootAnswer)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		io.WriteString(w, rootAnswer)
	}
}

// ProxyHandler serves the sandboxes. It knows a fixed set of route prefixes;
// anything else is refused without being forwarded.
func (s *Server) ProxyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		defer s.requests.Done()
		if r.Body != http.NoBody {
			// Nothing reads the body before the request is
			// authenticated; until then the client gets no more time
			// to send it (authentication gives it body_timeout).
			setReadDeadline(w, time.Now().Add(unauthenticatedBodyTimeout))
		}
		if isBareRoot(r) {
			s.answerRoot(w, r)
			return
		}
		rec, r := s.startAudit(w, r)
		defer func() {
			// ReverseProxy aborts a response it cannot finish (the upstream
			// or the client broke off mid-stream) with a panic that tells
			// net/http to cut the connection; the audit line says so too.
			if p := recover(); p != nil {
				rec.reason = "response cut off before its end"
				if cause := rec.flight.ended(); cause != nil {
					rec.reason = Message(cause) + "; its response was cut off"
				}
				rec.finish()
				panic(p)
			}
			rec.sendAnswer()
			rec.finish()
		}()
		// Only origin-form request targets: an absolute URI naming another
		// host, or "*", is not a request for one of cproxy's routes.
		if !strings.HasPrefix(r.RequestURI, "/") || r.URL.Host != "" {
			rec.route = "none"
			rec.fail(WritePlainError, Refuse(ErrForbidden, "only requests for cproxy's own routes are served"))
			return
		}
		rt := s.routeFor(r.URL.Path)
		if rt == nil {
			rec.route = "none"
			rec.fail(WritePlainError, Refuse(ErrForbidden, "no such route: cproxy serves %s", s.servedPrefixes()))
			return
		}
		rec.route, rec.rt = rt.Name(), rt
		if u, ok := rt.(unserved); ok {
			// Refused before authentication: no token is worth
			// checking for a route that cannot forward.
			rec.Fail(u.refusal())
			return
		}
		if !s.admit(rec, r, rt.WriteError) {
			return
		}
		rt.Serve(rec)
	})
}
