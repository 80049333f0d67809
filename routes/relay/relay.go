// Package relay is the relay route: a [relay.NAME] of the config forwards
// the methods and paths it lists, under its prefix, to its upstream, with
// the headers it sets (a credential of the operator's, or a per-token
// value the sandbox's token was minted with). It uses only what package
// routes gives every route.
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package relay

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
)

// Relay is one relay route as the server runs it: the config's [relay.NAME]
// with its URL parsed and its credential headers loaded.
type Relay struct {
	// Rules are the relay's name, methods and paths: what a profile's use
	// of it is checked against.
	Rules *policy.Relay
	// Prefix is the path on the proxy listener, e.g. "/mod/".
	Prefix string
	// Query forwards the request's query string (re-encoded); false: a
	// request with a query is refused.
	Query bool
	// HeaderTimeout bounds the wait for the upstream's response headers.
	HeaderTimeout time.Duration
	// Limits are the config's per-token limits of the relay
	// (relay.NAME.concurrent, requests_per_minute); zero: cproxy's default.
	Limits routes.Limits
	URL    *url.URL
	// Headers are set on every forwarded request, in this order.
	Headers []Header
}

// Header is one header a relay sets: Prefix then the value, from Live
// (a credential source) or, when Live is nil, the token's per-token Value.
type Header struct {
	Name   string // canonical
	Prefix string
	Live   *secrets.Live
	Value  string
}

// route is a Relay with its forwarder.
type route struct {
	Relay
	fwd *routes.Forwarder
}

// New builds rl's route. Its upstream is rl's URL, whatever env's.
func New(rl Relay, env routes.Env) routes.Route {
	env.Upstream = routes.Upstream{URL: rl.URL, HeaderTimeout: rl.HeaderTimeout}
	if env.Log == nil {
		env.Log = slog.New(slog.DiscardHandler)
	}
	// The relay's headers travel with each request's target: they may
	// differ per token. A refused redirect names the "relay NAME" route.
	return &route{Relay: rl, fwd: env.NewForwarder("relay "+rl.Rules.Name, rl.Prefix, func(http.Header, secrets.Secret) {}, nil)}
}

func (rr *route) Name() string   { return "relay." + rr.Rules.Name }
func (rr *route) Prefix() string { return rr.Relay.Prefix }
func (rr *route) Close()         { rr.fwd.Close() }

// WriteError renders a refusal as {"error": "cproxy: …"}, the shape the
// npm route uses: a relay's upstream has no error format cproxy knows.
func (rr *route) WriteError(w http.ResponseWriter, err error) int {
	return routes.WriteJSONError(w, err)
}

// ValueNames are the per-token values the relay's headers take.
func (rr *route) ValueNames() []string {
	var names []string
	for _, h := range rr.Headers {
		if h.Value != "" {
			names = append(names, h.Value)
		}
	}
	return names
}

// Sources are the sources of the relay's header credentials.
func (rr *route) Sources() []routes.Source {
	var srcs []routes.Source
	for _, h := range rr.Headers {
		if h.Live != nil {
			srcs = append(srcs, routes.Source{Name: fmt.Sprintf("relay.%s (header %s)", rr.Rules.Name, h.Name), Live: h.Live})
		}
	}
	return srcs
}

// Serve authenticates, decides (the profile's relays, the relay's
// methods, paths and query), sets the relay's headers and forwards, both
// ways streaming.
func (rr *route) Serve(a *routes.Call) {
	r := a.Request()
	cfg := rr.Rules
	sandbox := a.Session().Sandbox
	a.SetQuestion(policy.Question{Route: "relay", Relay: cfg.Name})
	if err := a.Decide(func(prof *policy.Profile) (string, error) { return decideRelay(prof, sandbox, cfg) }); err != nil {
		a.Fail(err)
		return
	}
	p, err := relayPath(r.URL.EscapedPath(), rr.Relay.Prefix)
	if err != nil {
		a.Fail(err)
		return
	}
	a.SetTarget(p.path)
	a.SetQuestion(policy.Question{Route: "relay", Relay: cfg.Name, Method: r.Method, Path: p.path})
	ans := a.Session().Profile.AskRelay(policy.RelayQuestion{Relay: cfg, Method: r.Method, Path: p.path})
	a.SetRule(ans.Rule)
	a.Answered(ans.Allow)
	if step, refused := ans.Refusal(); refused {
		err := routes.Refuse(routes.ErrForbidden, "relay %s does not forward %s", cfg.Name, routes.Clip(p.path, 128))
		if step.Key == "methods" {
			err = routes.Refuse(routes.ErrForbidden, "relay %s does not forward %s (it forwards %s)", cfg.Name, r.Method, strings.Join(cfg.Methods, ", "))
		}
		if err = a.Warned(err); err != nil {
			a.Fail(err)
			return
		}
	}
	t := routes.Target{Path: "/" + p.path, RawPath: "/" + p.raw}
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		if !rr.Query {
			a.Fail(routes.Refuse(routes.ErrForbidden, "relay %s forwards no query string", cfg.Name))
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			a.Fail(routes.Refuse(routes.ErrBadRequest, "the query string is malformed"))
			return
		}
		if err := checkMethodParam(cfg, r.Method, q); err != nil {
			a.Fail(err)
			return
		}
		t.Query = q.Encode()
	}
	h, err := rr.headers(a.Session())
	if err != nil {
		a.Fail(err)
		return
	}
	t.Header = h
	rr.fwd.Forward(a, r, t)
}

// checkMethodParam refuses a query parameter that asks the upstream for
// another method than the request's own: Laravel and Symfony (with
// HttpMethodParameterOverride), Spring's HiddenHttpMethodFilter and
// Express's method-override read a POST with ?_method=DELETE as a DELETE,
// which the relay's methods may not allow. cproxy checked the request
// line's method, so a _method may only repeat it (in any case); one that
// names any other, even one the relay forwards, is refused, as is one
// given twice with different values.
func checkMethodParam(cfg *policy.Relay, method string, q url.Values) error {
	for name, vs := range q {
		if !isMethodParam(name) {
			continue
		}
		for _, v := range vs {
			if !strings.EqualFold(v, method) {
				return routes.Refuse(routes.ErrForbidden, "relay %s does not forward a %s query parameter naming %q (it forwards %s; a %s may only repeat the request's own method, %s)",
					cfg.Name, methodParam, routes.Clip(v, 32), strings.Join(cfg.Methods, ", "), methodParam, method)
			}
		}
	}
	return nil
}

// methodParam is the query parameter frameworks read a method override
// from.
const methodParam = "_method"

// isMethodParam says whether a query parameter's name, decoded once (as
// url.ParseQuery and every framework do: %5Fmethod is _method), is read
// as _method by some framework: in any case (cproxy does not know how the
// upstream folds it); as PHP reads names, which drops leading spaces, turns
// spaces and dots into underscores (" method", ".method"), ends a name at
// a NUL byte, and takes _method[] and _method[x] as an array named _method
// (qs, which Express uses, does the same), and an unclosed [ as an
// underscore.
func isMethodParam(name string) bool {
	name, _, _ = strings.Cut(name, "\x00")
	name = strings.TrimLeft(name, " ")
	name = strings.NewReplacer(" ", "_", ".", "_").Replace(name)
	base, _, _ := strings.Cut(name, "[")
	return strings.EqualFold(base, methodParam) || strings.EqualFold(strings.ReplaceAll(name, "[", "_"), methodParam)
}

// decideRelay asks prof whether sandbox may use the relay. The relay's
// methods, paths and query are its config's, which a policy reload does
// not change.
func decideRelay(prof *policy.Profile, sandbox string, cfg *policy.Relay) (string, error) {
	ans := prof.AskRelay(policy.RelayQuestion{Relay: cfg})
	if !ans.Allow {
		var allowed []string
		if prof != nil {
			allowed = prof.Relays
		}
		return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeRelayNotAllowed, "relay %s is not allowed for sandbox %s (allowed: %s)", cfg.Name, sandbox, routes.Listed(allowed))
	}
	return ans.Rule, nil
}

// headers are the relay's headers for one session's request.
func (rr *route) headers(sess *routes.Session) (http.Header, error) {
	h := make(http.Header, len(rr.Headers))
	for _, rh := range rr.Headers {
		var v string
		if rh.Live != nil {
			sec, err := rh.Live.Current()
			if err != nil {
				return nil, routes.Refuse(routes.ErrUnavailable, "relay %s's credential for %s is not available; the operator must fix it", rr.Rules.Name, rh.Name)
			}
			v = sec.Reveal()
		} else {
			val, ok := sess.Values[rh.Value]
			if !ok {
				return nil, routes.Refuse(routes.ErrForbidden, `relay %s needs the per-token value %s, which this sandbox's token was minted without (POST /tokens with {"values": {"%s": "…"}})`, rr.Rules.Name, rh.Value, rh.Value)
			}
			v = val.Reveal()
		}
		h.Set(rh.Name, rh.Prefix+v)
	}
	return h, nil
}

// checkedPath is a relay request's path under its prefix: decoded, and as
// it is sent upstream (each segment escaped again).
type checkedPath struct {
	path string // "sessions/42/commands"
	raw  string // the same, escaped: what the upstream receives after its base path
}

// relayPath takes the path under prefix from the path as sent (still
// percent-encoded), decoding each segment once. A segment that is empty,
// "." or "..", or decodes to hold '/', '\', a control character or bytes
// that are not UTF-8, is refused: what cproxy checks must be what the
// upstream will see, and an upstream that decodes an overlong sequence
// (%c0%af is '/' to some) would see another path.
func relayPath(escaped, prefix string) (checkedPath, error) {
	rest, ok := strings.CutPrefix(escaped, prefix)
	if !ok || rest == "" {
		return checkedPath{}, routes.Refuse(routes.ErrForbidden, "no path under %s", prefix)
	}
	segs := strings.Split(rest, "/")
	dec := make([]string, len(segs))
	enc := make([]string, len(segs))
	for i, s := range segs {
		d, err := url.PathUnescape(s)
		if err != nil {
			return checkedPath{}, routes.Refuse(routes.ErrBadRequest, "malformed percent-encoding in %q", routes.Clip(escaped, 128))
		}
		if d == "" || d == "." || d == ".." || strings.ContainsAny(d, "/\\") || strings.IndexFunc(d, isControl) >= 0 || !utf8.ValidString(d) {
			return checkedPath{}, routes.Refuse(routes.ErrForbidden, "%q is not a path cproxy forwards (no empty, '.' or '..' segments, encoded slashes, backslashes, control characters or invalid UTF-8)", routes.Clip(escaped, 128))
		}
		dec[i], enc[i] = d, url.PathEscape(d)
	}
	return checkedPath{path: strings.Join(dec, "/"), raw: strings.Join(enc, "/")}, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
