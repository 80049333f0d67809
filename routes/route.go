package routes

import (
	"github.com/cproxy/cproxy/secrets"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// A Route serves the requests under one prefix of the proxy listener: it
// reads what its client sends, asks the policy, and forwards or refuses.
// The Server authenticates a request before its Route sees it, and writes
// the request's audit line and metrics after; a Route only fills in what it
// learned (Call.SetTarget, Call.Decide).
type Route interface {
	// Name labels the route's audit lines and metrics: "model",
	// "relay.mod".
	Name() string
	// Prefix is the path the route serves, with "/" at both ends: "/v1/".
	Prefix() string
	// Serve serves an authenticated request: it refuses it with c.Fail,
	// or sends it with a Forwarder.
	Serve(c *Call)
	// WriteError writes a refusal the way the route's client reads one,
	// and returns the status it wrote.
	WriteError(w http.ResponseWriter, err error) int
	// Close releases what the route holds: its idle upstream connections.
	Close()
}

// Valued is a Route whose requests use per-token values (a relay's
// headers): POST /tokens accepts the names it gives.
type Valued interface {
	ValueNames() []string
}

// Sublimited is a Route that serves several upstreams under its prefix
// (the MCP route's servers), each with per-token limits of its own:
// SubLimits are their limits by name (Options.Limits, if it names one,
// over them), and a request is counted against LimitName(r)'s ("" or a
// name not listed: the route's own). The request is not read yet: the name
// comes from its path.
type Sublimited interface {
	SubLimits() map[string]RouteLimits
	LimitName(r *http.Request) string
}

// Limited is a Route that declares per-token limits of its own (its
// Kind.Limits): a server not given the route's limits (Options.Limits)
// counts these, else DefaultLimits.
type Limited interface {
	Limits() Limits
}

// Sourced is a Route whose credentials come from sources that can fail to
// be read (file:, keyring:, claude-code): GET /readyz checks each.
type Sourced interface {
	Sources() []Source
}

// Ender is a Route that keeps something per sandbox (an upstream
// credential minted for it, as the github route's GitHub App installation
// tokens): the Server calls EndSandbox when the sandbox's tokens are
// revoked, through this replica's admin API or another's, and the route
// drops what it kept for it, so the sandbox's next life starts afresh.
type Ender interface {
	EndSandbox(sandbox string)
}

// Source is a credential source, with the config key that names it.
type Source struct {
	Name string // "upstream.anthropic.credential"
	Live *secrets.Live
}

// Kind is a route as it is registered: what New needs to build it from
// the config.
type Kind struct {
	Name   string // the route's name, as Route.Name
	Prefix string // as Route.Prefix
	// Upstream names the config's [upstream.NAME] the route forwards to.
	Upstream string
	// Limits are the route's per-token limits where the config sets none:
	// zero fields are DefaultLimits'. A route whose clients rightly ask
	// for more at once (npm installs) declares more here.
	Limits Limits
	// New builds the route for an upstream that has a URL. A kind whose
	// upstream has none is not built: its prefix is refused (Unserved).
	New func(Env) Route
}

// Env is what a route is built with.
type Env struct {
	// Upstream is the route's upstream, its credential loaded.
	Upstream Upstream
	// PublicURL is cproxy's proxy URL as the sandboxes reach it, for
	// what the route rewrites to point back at cproxy (npm's tarball
	// URLs, an upstream's redirects); empty means each request's Host.
	PublicURL string
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// AppTokens mints the upstream's GitHub App installation tokens per
	// sandbox and scope: set by Build when the upstream has an App
	// (Upstream.App), shared by every route of that App; nil otherwise,
	// when the upstream's credential is sent.
	AppTokens *AppTokens
}

// Build builds the kind's route with env, or, when env's upstream has no
// URL, the route that refuses every request under its prefix (Unserved).
func (k Kind) Build(env Env) Route {
	if env.Upstream.URL == nil {
		return Unserved(k.Name, k.Prefix, k.Upstream)
	}
	if env.Log == nil {
		env.Log = slog.New(slog.DiscardHandler)
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	env.AppTokens = nil
	if env.Upstream.App != nil {
		env.AppTokens = env.Upstream.App.tokens(env.Now, env.Log)
	}
	return k.New(env)
}

// NewForwarder is NewForwarder for env's upstream, its errors logged to
// env.Log and its redirects kept on cproxy under prefix (Redirects); name
// is the route as a refused redirect's message names it ("model",
// "relay mod").
func (env Env) NewForwarder(name, prefix string, setCredential func(http.Header, secrets.Secret), checkResponse func(*http.Response) error) *Forwarder {
	f := NewForwarder(env.Upstream, setCredential, checkResponse)
	f.proxy.ErrorLog = slog.NewLogLogger(env.Log.Handler(), slog.LevelWarn)
	f.redirects = &Redirects{route: name, base: env.Upstream.URL, prefix: strings.TrimSuffix(prefix, "/"), public: env.PublicURL}
	return f
}

// FilesForwarder is NewForwarder for the upstream's files host
// (Upstream.Files), with the same credential when the files host is on the
// upstream's own scheme, host and port, and none otherwise: an index's
// credential never goes to another host. Its redirects are refused, not
// mapped: a file's place on the route names its project, which a redirect
// of the files host does not. Nil when the upstream has no files host.
func (env Env) FilesForwarder(setCredential func(http.Header, secrets.Secret), checkResponse func(*http.Response) error) *Forwarder {
	files := env.Upstream
	if files.Files == nil {
		return nil
	}
	files.URL, files.Files = env.Upstream.Files, nil
	if !sameOrigin(env.Upstream.URL, files.URL) {
		files.Credential, files.Live, files.Missing, files.App = secrets.Secret{}, nil, "", nil
	}
	f := NewForwarder(files, setCredential, func(resp *http.Response) error {
		if resp.StatusCode >= 300 && resp.StatusCode <= 399 && resp.Header.Get("Location") != "" {
			return Refuse(ErrUpstream, "the files host %s answered with a redirect (%d), which cproxy does not follow or pass", files.URL.Host, resp.StatusCode)
		}
		if checkResponse != nil {
			return checkResponse(resp)
		}
		return nil
	})
	f.proxy.ErrorLog = slog.NewLogLogger(env.Log.Handler(), slog.LevelWarn)
	return f
}

// unserved is a registered route whose upstream the config gives no URL.
type unserved struct{ name, prefix, upstream string }

// Unserved is the route of a kind with no upstream: every request under
// prefix is refused, before authentication, with what the operator must
// set.
func Unserved(name, prefix, upstream string) Route { return unserved{name, prefix, upstream} }

func (u unserved) Name() string   { return u.name }
func (u unserved) Prefix() string { return u.prefix }
func (u unserved) Close()         {}
func (u unserved) WriteError(w http.ResponseWriter, err error) int {
	return WritePlainError(w, err)
}

func (u unserved) Serve(c *Call) { c.Fail(u.refusal()) }

func (u unserved) refusal() error {
	return Refuse(ErrForbidden, "the %s route has no upstream: the operator must set upstream.%s.url (and upstream.%s.credential) in cproxy's config; do not retry", u.name, u.upstream, u.upstream)
}
