package githubapi

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
)

// lookupPermissions are those of the App token cproxy's own look-ups
// (resolver) are sent with: what GitHub shows a node's type and its
// repository's nameWithOwner with, for a repository, a pull request and an
// issue. Their answers never reach the sandbox.
var lookupPermissions = map[string]string{"metadata": "read", "pull_requests": "read", "issues": "read"}

// queryPermissions are those of a GraphQL query's App token: the read of
// everything readPaths reach (a repository, its pull requests and issues,
// their checks and statuses).
var queryPermissions = map[string]string{"metadata": "read", "pull_requests": "read", "issues": "read", "checks": "read", "statuses": "read"}

// lookupTokens are the App tokens the node IDs and parents of p are
// looked up with, one per owner (lower case): for the repositories p names
// by name, or, with none, for those the sandbox's policy names without a
// glob in a repos entry with an api list (a node ID does not say its
// owner).
func (g *route) lookupTokens(ctx context.Context, sandbox string, prof *policy.Profile, p plan) (map[string]secrets.Secret, error) {
	repos := slices.Clone(p.repos)
	if len(repos) == 0 && prof != nil {
		for _, r := range prof.Repos {
			if len(r.API) > 0 && !strings.ContainsAny(r.Repo, "*?[{") {
				repos = addRepo(repos, r.Repo)
			}
		}
	}
	if len(repos) == 0 {
		return nil, gqlRefusal(sandbox, "with a GitHub App, cproxy looks node IDs up in the repositories its policy names without a glob, and it names none: name the repository (repository(owner:, name:))")
	}
	byOwner := map[string][]string{}
	for _, repo := range repos {
		owner, _, _ := strings.Cut(repo, "/")
		byOwner[strings.ToLower(owner)] = append(byOwner[strings.ToLower(owner)], repo)
	}
	out := map[string]secrets.Secret{}
	for _, owner := range slices.Sorted(maps.Keys(byOwner)) {
		t, err := g.appToken(ctx, sandbox, byOwner[owner], lookupPermissions)
		if err != nil {
			return nil, err
		}
		out[owner] = t
	}
	return out, nil
}

// graphQLToken is the App token a decided GraphQL request goes upstream
// with: for exactly the repositories it reaches (by name, by node ID, as a
// parent, as a mutation's target), with the read of queryPermissions when
// it reads a repository and the write each mutation needs. A request that
// reaches none (GitHub's schema alone) gets a look-up's token, of the
// first owner.
func (g *route) graphQLToken(ctx context.Context, sandbox string, prof *policy.Profile, p plan, nodes map[string]node, parents map[string]string) (secrets.Secret, error) {
	repos := slices.Clone(p.repos)
	perms := map[string]string{}
	read := len(p.repos) > 0 || len(p.nodes) > 0
	for _, repo := range p.parentsOf {
		if parents[repo] != "" {
			repos = addRepo(repos, parents[repo])
		}
	}
	for _, id := range p.nodes {
		repos = addRepo(repos, nodes[id].repo)
	}
	for _, m := range p.mutations {
		n := nodes[m.target]
		repos = addRepo(repos, n.repo)
		perm := "pull_requests"
		if m.name == "createIssue" || m.name == "addComment" && n.typ == "Issue" {
			perm = "issues"
		}
		perms[perm] = "write"
	}
	if len(repos) == 0 {
		looks, err := g.lookupTokens(ctx, sandbox, prof, p)
		if err != nil {
			return secrets.Secret{}, err
		}
		return looks[slices.Sorted(maps.Keys(looks))[0]], nil
	}
	if read {
		for k, v := range queryPermissions {
			if perms[k] == "" {
				perms[k] = v
			}
		}
	}
	return g.appToken(ctx, sandbox, repos, perms)
}

// appToken mints (or reuses) the sandbox's App token for repos, all of
// one owner: one installation token is for one owner's installation.
func (g *route) appToken(ctx context.Context, sandbox string, repos []string, perms map[string]string) (secrets.Secret, error) {
	owner, _, _ := strings.Cut(repos[0], "/")
	var names []string
	for _, repo := range repos {
		o, name, _ := strings.Cut(repo, "/")
		if !strings.EqualFold(o, owner) {
			return secrets.Secret{}, gqlRefusal(sandbox, "it reaches repositories of %s and of %s, and a GitHub App's token is for one owner: send one request per owner", owner, o)
		}
		names = append(names, name)
	}
	return g.app.Token(ctx, sandbox, routes.AppScope{Owner: owner, Names: names, Permissions: perms})
}
