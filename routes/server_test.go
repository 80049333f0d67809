package routes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/secrets"
)

// TestRouteWithoutUpstreamSaysWhatToSet: a server whose config gives a
// registered route no upstream refuses the route naming the config keys
// that would give it one, and forwards nothing.
func TestRouteWithoutUpstreamSaysWhatToSet(t *testing.T) {
	pkg := Kind{Name: "pkg", Prefix: "/pkg/", Upstream: "pkg"}
	e := newEnv(t, func(o *testOptions) { o.Extra = append(o.Extra, pkg.Build(Env{})) })
	r := e.do("GET", "/pkg/left-pad", bearer(e.token("conv-1")), "")
	if r.status != 403 || !strings.Contains(r.body, "the pkg route has no upstream: the operator must set upstream.pkg.url (and upstream.pkg.credential) in cproxy's config; do not retry") {
		t.Errorf("got %d %s", r.status, r.body)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
}

// TestNoProfileNamesNoHostPath: a sandbox the policy gives no profile is
// told so and to ask the operator; the policy file's path on the host and
// the profiles it has go to the operator's log only.
func TestNoProfileNamesNoHostPath(t *testing.T) {
	e := newEnv(t, func(o *testOptions) {
		o.Policy = mustPolicy(t, "[profile.web]\nmodels = [\"claude-*\"]\n\n[[sandbox]]\nmatch = \"conv-*\"\nprofile = \"web\"\n")
	})
	r := e.do("POST", "/v1/messages", bearer(e.token("build-9")), hello)
	if r.status != 403 || !strings.Contains(r.body, "cproxy: no policy profile for sandbox build-9: no rule of the policy in force gives it one; ask the operator, do not retry") {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if path := e.srv.Policy().Path; path == "" || strings.Contains(r.body, path) || strings.Contains(r.body, "web") {
		t.Fatalf("the refusal shows the policy: %s", r.body)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"msg":"no policy profile for a sandbox's token","sandbox":"build-9"`) || !strings.Contains(logs, e.srv.Policy().Path) {
		t.Fatalf("the operator's log lacks the detail:\n%s", logs)
	}
}

// What the admin API reads of the routes: the per-token value names of
// every Valued route, once each and sorted (POST /tokens accepts them),
// and the credential sources of every Sourced route, checked by Readiness
// (GET /readyz) under the name the route gives each.
func TestServerGathersValuesAndSources(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := writeFile(key, canaryKey); err != nil {
		t.Fatal(err)
	}
	live, err := new(secrets.Loader).Live("values", secrets.Source("file:"+key), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *testOptions) {
		o.Extra = []Route{
			valuesRoute{values: []string{"mod_token", "hub_token"}},
			valuesRoute{values: []string{"mod_token"}, sources: []Source{{Name: "values.key", Live: live}}},
		}
	})
	if got := e.srv.TokenValues(); !slices.Equal(got, []string{"hub_token", "mod_token"}) {
		t.Errorf("TokenValues = %q; want hub_token, mod_token", got)
	}
	if failed := e.srv.Readiness(t.Context()); len(failed) != 0 {
		t.Fatalf("Readiness with every source readable = %+v", failed)
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	failed := e.srv.Readiness(t.Context())
	if len(failed) != 1 || failed[0].Check != "credential" || !strings.HasPrefix(failed[0].Reason, "the credential source of values.key (file) cannot be read") || failed[0].Err == nil {
		t.Errorf("Readiness with an unreadable source = %+v", failed)
	}
}
