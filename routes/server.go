// Package routes is cproxy's HTTP surface: the proxy listener's mux and
// routes (authenticate, decide, forward, audit) and the admin API.
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
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// Limits. A model request carries the whole conversation, so the body limit
// is large; it matches the Anthropic API's own request size limit.
const (
	maxModelBody = 32 << 20
	// DefaultTokenTTL is how long a token lives when the harness names no ttl.
	DefaultTokenTTL = 24 * time.Hour
	// maxTokenTTL bounds ttl=: a token is meant to die with its sandbox.
	maxTokenTTL = 366 * 24 * time.Hour
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
}

// configured reports whether up has a credential to send.
func (up Upstream) configured() bool { return up.Live != nil || !up.Credential.IsZero() }

// Options configure a Server. Store, Policy and Anthropic are required.
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

	Policy    *policy.Policy
	Anthropic Upstream
	// GitHub is the github route's upstream (github.com's git smart HTTP).
	// A nil URL means the route has none: github requests are refused.
	GitHub Upstream
	// NPM is the npm route's upstream registry. A nil URL means the route
	// has none: npm requests are refused.
	NPM Upstream
	// PublicURL is cproxy's proxy URL as the sandboxes reach it; rewritten
	// packuments point their tarballs at it. Empty means the request's Host.
	PublicURL string
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Audit receives one line per proxied request; nil means Logger. It is
	// separate so an operator can quiet diagnostics without losing the
	// audit trail.
	Audit *slog.Logger
	// AuditLog, if not nil, receives the audit records instead of Audit:
	// one AuditRecord per request as a line of JSON, each line in one
	// Write. It must be safe for concurrent use and should not block: a
	// request's handler writes its own record. Nil: Audit gets them as log
	// lines.
	AuditLog io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SandboxSockets, if not nil, serves the per-sandbox Unix sockets that
	// tokens minted with bind=socket are valid on. Nil: such tokens cannot
	// be minted.
	SandboxSockets *SandboxSockets
	// Relays are the relay routes ([relay.NAME]), each under its prefix.
	Relays []Relay
	// Version is cproxy's version, for cproxy_build_info on GET /metrics;
	// empty means "unknown".
	Version string
	// BodyTimeout bounds reading a request body: it must arrive within
	// BodyTimeout of the request's authentication, plus a second for each
	// minBodyRate bytes received. Zero means no deadline.
	BodyTimeout time.Duration
	// BodyMemory bounds the bytes request bodies read whole may hold at
	// once, across every request; zero means defaultBodyMemory.
	BodyMemory int64
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
}

// Server holds what the listeners share.
type Server struct {
	store     tokens.Store
	pol       atomic.Pointer[policy.Policy]
	log       *slog.Logger
	audit     *slog.Logger
	auditLog  io.Writer // nil: audit lines go to audit
	now       func() time.Time
	model     *forwarder
	github    *forwarder // nil when Options.GitHub has no URL
	npm       *forwarder // nil when Options.NPM has no URL
	publicURL string
	sockets   *SandboxSockets // nil without Options.SandboxSockets
	relays    []*relayRoute
	budgets   *budgets
	// relayValues are the per-token value names the relays use, which
	// POST /tokens accepts.
	relayValues []string
	metrics     *metrics // GET /metrics on the admin listener
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
	conns                *connLimit // nil: no bound
	readiness            readiness  // GET /readyz's last answer, for the log
	retention            time.Duration
	pruneStop            func() // stops the pruner and waits for it; nil: none runs
}

// New builds a Server.
func New(o Options) *Server {
	s := &Server{store: o.Store, log: o.Logger, audit: o.Audit, auditLog: o.AuditLog, now: o.Now, publicURL: o.PublicURL, sockets: o.SandboxSockets,
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
	s.budgets = newBudgets(s.store, o.SharedLimits, s.log, s.now)
	if o.SharedLimits != nil {
		s.sweepStop, s.sweepDone = make(chan struct{}), make(chan struct{})
		go s.sweepFlights(s.sweepStop, s.sweepDone)
	}
	s.model = newForwarder(o.Anthropic, setAnthropicCredential(o.Anthropic), meterResponse)
	s.model.proxy.BufferPool = eventCopyBuffers
	// Streams still pass event by event: ReverseProxy flushes each write of
	// a text/event-stream answer, and of any answer of unknown length,
	// whatever FlushInterval says. What 0 changes is a JSON answer of known
	// length (a non-streaming message, a token count, the model list): it is
	// written with its headers as it is copied, instead of the headers being
	// flushed first by a timer's goroutine and the body flushed after each
	// write: a goroutine, a flush and a write(2) less per request, about a
	// tenth of cproxy's CPU for a non-streaming message (docs/benchmarks.md),
	// for an answer the client can only use whole.
	s.model.proxy.FlushInterval = 0
	if o.GitHub.URL != nil {
		s.github = newForwarder(o.GitHub, setGitHubCredential, gitHubResponse)
		s.github.redirects = &redirectMap{route: "github", base: o.GitHub.URL, prefix: "/github", public: o.PublicURL, within: gitHubMoved}
	}
	if o.NPM.URL != nil {
		s.npm = newForwarder(o.NPM, setNPMCredential, npmResponse(o.NPM.URL))
		s.npm.redirects = &redirectMap{route: "npm", base: o.NPM.URL, prefix: "/npm", public: o.PublicURL}
	}
	// ReverseProxy reports what it cannot tell a client (a response cut
	// mid-copy) to its ErrorLog, which by default is the standard logger.
	errLog := slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	fwds := []*forwarder{s.model, s.github, s.npm}
	for _, rl := range o.Relays {
		rr := newRelayRoute(rl, o.PublicURL)
		s.relays = append(s.relays, rr)
		fwds = append(fwds, rr.fwd)
		for _, h := range rl.Headers {
			if h.Value != "" && !slices.Contains(s.relayValues, h.Value) {
				s.relayValues = append(s.relayValues, h.Value)
			}
		}
	}
	slices.Sort(s.relayValues)
	for _, f := range fwds {
		if f != nil {
			f.proxy.ErrorLog = errLog
		}
	}
	s.metrics = newMetrics(o.Version, s.store, s.now, s.log, s.routeNames())
	if o.BodyMemory == 0 {
		o.BodyMemory = defaultBodyMemory
	}
	s.bodies = newBodyMemory(o.BodyMemory, s.metrics)
	if o.MaxConnections > 0 {
		s.conns = &connLimit{max: o.MaxConnections, log: s.log, metrics: s.metrics}
		s.metrics.connLimit.Set(float64(o.MaxConnections))
	}
	if s.sockets != nil {
		s.sockets.conns = s.conns
	}
	s.retention = o.Retention
	s.startPruning(o.Retention, o.PruneInterval)
	return s
}

// LimitConnections returns ln (the proxy listener) with the connections it
// accepts counted against Options.MaxConnections, with the per-sandbox
// sockets'; past it a new connection is closed at once.
func (s *Server) LimitConnections(ln net.Listener) net.Listener { return s.conns.limit(ln) }

// routeNames are the route labels of the configured routes.
func (s *Server) routeNames() []string {
	names := []string{"model"}
	if s.github != nil {
		names = append(names, "github")
	}
	if s.npm != nil {
		names = append(names, "npm")
	}
	for _, rr := range s.relays {
		names = append(names, "relay."+rr.Rules.Name)
	}
	return names
}

// SetPolicy replaces the policy. A request is decided again under the
// policy in force when it is forwarded, and when a body that streams to the
// upstream ends (recheck); an answer already streaming back finishes under
// the profile it was decided with.
func (s *Server) SetPolicy(p *policy.Policy) { s.pol.Store(p) }

func (s *Server) policy() *policy.Policy { return s.pol.Load() }

// Close releases idle upstream connections.
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

func (s *Server) Close() {
	if s.pruneStop != nil {
		s.pruneStop()
		s.pruneStop = nil
	}
	s.budgets.close()
	if s.sweepStop != nil {
		close(s.sweepStop)
		<-s.sweepDone
		s.sweepStop = nil
	}
	s.model.transport.CloseIdleConnections()
	if s.github != nil {
		s.github.transport.CloseIdleConnections()
	}
	if s.npm != nil {
		s.npm.transport.CloseIdleConnections()
	}
	for _, rr := range s.relays {
		rr.fwd.transport.CloseIdleConnections()
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
					rec.reason = message(cause) + "; its response was cut off"
				}
				rec.finish()
				panic(p)
			}
			rec.finish()
		}()
		// Only origin-form request targets: an absolute URI naming another
		// host, or "*", is not a request for one of cproxy's routes.
		if !strings.HasPrefix(r.RequestURI, "/") || r.URL.Host != "" {
			rec.route = "none"
			rec.fail(writePlainError, refuse(ErrForbidden, "only requests for cproxy's own routes are served"))
			return
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/"):
			rec.route = "model"
			s.serveModel(rec, r)
		case strings.HasPrefix(r.URL.Path, "/github/") && s.github != nil:
			rec.route = "github"
			s.serveGitHub(rec, r)
		case strings.HasPrefix(r.URL.Path, "/npm/") && s.npm != nil:
			rec.route = "npm"
			s.serveNPM(rec, r)
		case strings.HasPrefix(r.URL.Path, "/github/"), strings.HasPrefix(r.URL.Path, "/npm/"):
			rec.route = strings.Split(r.URL.Path, "/")[1]
			rec.fail(writePlainError, refuse(ErrForbidden, "the %s route has no upstream: the operator must set upstream.%s.url (and upstream.%s.credential) in cproxy's config; do not retry", rec.route, rec.route, rec.route))
		default:
			// Relays last: their prefixes never clash with the routes
			// above (the config refuses that), and the model route, the
			// hot one, need not look at them.
			if relay := s.relayFor(r.URL.Path); relay != nil {
				rec.route = "relay." + relay.Rules.Name
				s.serveRelay(relay, rec, r)
				return
			}
			rec.route = "none"
			rec.fail(writePlainError, refuse(ErrForbidden, "no such route: cproxy serves the model API under /v1/, git under /github/, npm under /npm/ and the relays its config names"))
		}
	})
}
