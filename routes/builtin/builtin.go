// Package builtin is cproxy's table of routes: a route is registered by
// its line in Kinds, and the proxy listener, metrics' route labels, the
// relays' reserved prefixes and start-up credential loading all follow
// from it (docs/adding-a-route.md).
package builtin

import (
	"log/slog"
	"time"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/github"
	"github.com/cproxy/cproxy/routes/githubapi"
	"github.com/cproxy/cproxy/routes/gomod"
	"github.com/cproxy/cproxy/routes/model"
	"github.com/cproxy/cproxy/routes/npm"
	"github.com/cproxy/cproxy/routes/pypi"
	"github.com/cproxy/cproxy/routes/relay"
)

// Table is a list of route kinds, in the order their prefixes are
// matched. The relays, which the config names, come after them.
type Table []routes.Kind

// Kinds are the registered routes: adding a route is adding its line here
// (a test adds one to a copy, as recipe_test.go does).
var Kinds = Table{
	model.Kind,
	github.Kind,
	githubapi.Kind,
	npm.Kind,
	gomod.Kind,
	pypi.Kind,
}

// Prefixes are the registered routes' prefixes, which no relay may take.
func Prefixes() []string {
	p := make([]string, len(Kinds))
	for i, k := range Kinds {
		p[i] = k.Prefix
	}
	return p
}

// Limits are the per-token limits of every route of t and of the relays,
// by route name: cproxy's defaults, the kind's over them, and the config's
// (in upstreams and relays) over those.
func (t Table) Limits(upstreams map[string]routes.Upstream, relays []relay.Relay) map[string]routes.RouteLimits {
	m := make(map[string]routes.RouteLimits, len(t)+len(relays))
	for _, k := range t {
		m[k.Name] = routes.RouteLimits{Limits: routes.DefaultLimits.Over(k.Limits).Over(upstreams[k.Upstream].Limits), Key: "upstream." + k.Upstream}
	}
	for _, rl := range relays {
		name := "relay." + rl.Rules.Name
		m[name] = routes.RouteLimits{Limits: routes.DefaultLimits.Over(rl.Limits), Key: name}
	}
	return m
}

// Routes builds every route of t with its upstream from upstreams (keyed
// by the config's [upstream.NAME]; a kind whose upstream is absent or has
// no URL is Unserved), then the relays, in order.
func (t Table) Routes(upstreams map[string]routes.Upstream, relays []relay.Relay, publicURL string, log *slog.Logger, now func() time.Time) []routes.Route {
	env := routes.Env{PublicURL: publicURL, Log: log, Now: now}
	var rts []routes.Route
	for _, k := range t {
		env.Upstream = upstreams[k.Upstream]
		rts = append(rts, k.Build(env))
	}
	env.Upstream = routes.Upstream{}
	for _, rl := range relays {
		rts = append(rts, relay.New(rl, env))
	}
	return rts
}
