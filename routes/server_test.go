package routes

import (
	"strings"
	"testing"
)

// TestRouteWithoutUpstreamSaysWhatToSet: a server built without a GitHub or
// an npm upstream refuses those routes naming the config keys that would
// give it one, and forwards nothing.
func TestRouteWithoutUpstreamSaysWhatToSet(t *testing.T) {
	e := newEnv(t)
	h := bearer(e.token("conv-1"))
	for path, key := range map[string]string{
		"/github/acme/app/info/refs?service=git-upload-pack": "upstream.github.url (and upstream.github.credential)",
		"/npm/left-pad": "upstream.npm.url (and upstream.npm.credential)",
	} {
		r := e.do("GET", path, h, "")
		if r.status != 403 || !strings.Contains(r.body, "has no upstream: the operator must set "+key+" in cproxy's config; do not retry") {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
}
