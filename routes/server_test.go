package routes

import (
	"strings"
	"testing"
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
	if path := e.srv.policy().Path; path == "" || strings.Contains(r.body, path) || strings.Contains(r.body, "web") {
		t.Fatalf("the refusal shows the policy: %s", r.body)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"msg":"no policy profile for a sandbox's token","sandbox":"build-9"`) || !strings.Contains(logs, e.srv.policy().Path) {
		t.Fatalf("the operator's log lacks the detail:\n%s", logs)
	}
}
