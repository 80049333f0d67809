// Package echoroute is a route that only tests build: the worked example of
// docs/adding-a-route.md. It forwards GET and POST requests under /echo/ to
// an upstream that echoes them (internal/fakes.Echo), to the sandboxes whose
// profile allows the relay named "echo", one budgeted request at a time. It
// uses nothing of package routes that another route package could not: a
// route that needs more shows a defect of the core, to be fixed there.
package echoroute

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
	"github.com/cproxy/cproxy/tokens"
)

// Kind registers the route: a table of routes (routes/builtin's Table)
// with this line serves it.
var Kind = routes.Kind{Name: name, Prefix: prefix, Upstream: "echo", New: New}

const (
	name   = "echo"
	prefix = "/echo/"
)

// maxBody bounds a POST's body, which is read whole to be checked.
const maxBody = 64 << 10

// pathRE is a path under the prefix the route understands: segments of
// letters, digits, '.', '_' and '-', none starting with '.' (so none is
// "." or ".."). Anything else is refused, not cleaned up.
var pathRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$`)

// question is the route's policy question. A route of its own would add
// its own section to package policy (a question answered with steps,
// policy/answer.go); this one borrows the relays' list, so a profile
// allows it with relays = ["echo"].
var question = policy.RelayQuestion{Relay: &policy.Relay{Name: "echo"}}

type route struct{ fwd *routes.Forwarder }

// New builds the route for env's upstream.
func New(env routes.Env) routes.Route {
	return &route{fwd: env.NewForwarder(name, prefix, setCredential, settle)}
}

func (e *route) Name() string   { return name }
func (e *route) Prefix() string { return prefix }
func (e *route) Close()         { e.fwd.Close() }

// Sources is the upstream credential's source, for GET /readyz.
func (e *route) Sources() []routes.Source { return e.fwd.Sources("upstream.echo.credential") }

// setCredential sends the upstream's credential, after the Forwarder has
// deleted every header that could carry the sandbox's token.
func setCredential(h http.Header, cred secrets.Secret) {
	h.Set("Authorization", "Bearer "+cred.Reveal())
}

// settle charges a request the upstream answered: one request, whatever
// the answer.
func settle(resp *http.Response) error {
	routes.CallOf(resp).Settle(tokens.Usage{Requests: 1}, true, true)
	return nil
}

// Serve meters, decides, checks and forwards a request, in that order:
// its slot and rate are taken before its body is read, the policy is asked
// before anything else is looked at, and the body checked is the body sent.
func (e *route) Serve(c *routes.Call) {
	if err := c.Acquire(); err != nil {
		c.Fail(err)
		return
	}
	sandbox := c.Session().Sandbox
	if err := c.Decide(func(prof *policy.Profile) (string, error) {
		ans := prof.AskRelay(question)
		if !ans.Allow {
			return ans.Rule, routes.Refuse(routes.ErrForbidden, "the echo route is not allowed for sandbox %s", sandbox)
		}
		return ans.Rule, nil
	}); err != nil {
		c.Fail(err)
		return
	}
	t, err := e.check(c)
	if err != nil {
		c.Fail(err)
		return
	}
	if !e.fwd.Upstream().Configured() {
		c.Fail(routes.Refuse(routes.ErrUnavailable, "no echo credential is configured: the operator must set upstream.echo.credential"))
		return
	}
	if err := c.Reserve(tokens.Usage{Requests: 1}, true); err != nil {
		c.Fail(err)
		return
	}
	e.fwd.Forward(c, c.Request(), t)
}

// check refuses what the route does not understand and returns where the
// request goes: a GET without a body, or a POST of JSON; a plain path, sent
// without the prefix; no query.
func (e *route) check(c *routes.Call) (routes.Target, error) {
	r := c.Request()
	path := strings.TrimPrefix(r.URL.Path, prefix)
	if r.URL.RawPath != "" || !pathRE.MatchString(path) {
		return routes.Target{}, routes.Refuse(routes.ErrForbidden, "%q is not an echo path (segments of letters, digits, '.', '_' and '-')", routes.Clip(r.URL.EscapedPath(), 128))
	}
	c.SetTarget(path)
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		return routes.Target{}, routes.Refuse(routes.ErrForbidden, "the echo route forwards no query string")
	}
	switch r.Method {
	case http.MethodGet:
		if r.ContentLength > 0 || len(r.TransferEncoding) > 0 {
			return routes.Target{}, routes.Refuse(routes.ErrBadRequest, "GET takes no body")
		}
		r.Body, r.ContentLength = http.NoBody, 0
	case http.MethodPost:
		body, err := c.ReadBody(maxBody)
		if err != nil {
			return routes.Target{}, err
		}
		if !json.Valid(body) {
			return routes.Target{}, routes.Refuse(routes.ErrBadRequest, "the body must be JSON")
		}
	default:
		return routes.Target{}, routes.Refuse(routes.ErrForbidden, "the echo route forwards GET and POST, not %s", routes.Clip(r.Method, 32))
	}
	return routes.Target{Path: "/" + path}, nil
}

// WriteError writes a refusal as {"error": "cproxy: …"}, which the
// route's clients read.
func (e *route) WriteError(w http.ResponseWriter, err error) int {
	return routes.WriteJSONError(w, err)
}
