package githubapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// TestResolverCacheBounds: the resolutions kept are at most maxCached,
// the oldest dropped first, and one older than cacheTTL is asked again.
func TestResolverCacheBounds(t *testing.T) {
	now := time.Unix(1e9, 0)
	r := newResolver(nil, func() time.Time { return now })
	for i := range maxCached + 1 {
		r.put(fmt.Sprint("node:", i), node{typ: "Repository", repo: "acme/app"})
	}
	if _, ok := r.get("node:0"); ok {
		t.Error("the oldest resolution is kept past maxCached")
	}
	if n, ok := r.get(fmt.Sprint("node:", maxCached)); !ok || n.repo != "acme/app" {
		t.Error("the newest resolution is not kept")
	}
	if len(r.cache) != maxCached || len(r.order) != maxCached {
		t.Errorf("%d resolutions kept (%d in order), want %d", len(r.cache), len(r.order), maxCached)
	}
	now = now.Add(cacheTTL + time.Second)
	if _, ok := r.get(fmt.Sprint("node:", maxCached)); ok {
		t.Error("a resolution older than cacheTTL is used")
	}
}

// TestGraphQLMutationLookupRefused: GitHub refusing cproxy's token for the
// look-up of a mutation's target is a 502 naming the credential to fix,
// and the mutation is not sent.
func TestGraphQLMutationLookupRefused(t *testing.T) {
	e, fake := apiEnv(t, routes.Upstream{Credential: secrets.New("github_pat_wrong")})
	r := e.Do("POST", "/api/graphql", routetest.Bearer(e.Token("conv-42")),
		gqlBody(t, ghCreatePull, pullInput(fakes.GitHubNodeID("Repository", "acme/app", 0), "agent/x", "main")))
	if r.Status != 502 || !strings.Contains(r.Body, `{"errors":[{"message":"cproxy: the upstream `) || !strings.Contains(r.Body, "upstream.githubapi.credential") || strings.Contains(r.Body, "wrong") {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	if n := len(fake.Requests()); n != 1 || len(fake.GraphQLMutations()) != 0 {
		t.Errorf("GitHub got %d requests and ran %v, want the look-up alone", n, fake.GraphQLMutations())
	}
}
