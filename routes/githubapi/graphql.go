package githubapi

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/githubapi/gqlpolicy"
)

// maxGraphQLBody bounds what is read of a GraphQL body: gqlpolicy refuses
// one past its own, smaller bound with words that name it.
const maxGraphQLBody = 1 << 20

// pullFields are the fields a query may read of a pull request, by their
// path from it: what gh 2.23 reads for gh pr view and gh pr list. Each
// leads only to the pull request's own data (its authors' logins, its
// checks' names), never to a user's, an organization's or another
// repository's lists; a path not here is refused (docs/github-api.md).
var pullFields = []string{
	"id", "url", "number", "title", "state", "body", "isDraft", "maintainerCanModify", "mergeable",
	"additions", "deletions", "baseRefName", "headRefName", "isCrossRepository", "createdAt",
	"author.login", "author.id", "author.name",
	"headRepositoryOwner.id", "headRepositoryOwner.login", "headRepositoryOwner.name",
	"headRepository.id", "headRepository.name",
	"commits.totalCount",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.context",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.state",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.targetUrl",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.createdAt",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.name",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.checkSuite.workflowRun.workflow.name",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.status",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.conclusion",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.startedAt",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.completedAt",
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.detailsUrl",
	"commits.nodes.commit.statusCheckRollup.contexts.pageInfo.hasNextPage",
	"commits.nodes.commit.statusCheckRollup.contexts.pageInfo.endCursor",
	"reviewRequests.nodes.requestedReviewer.login",
	"reviewRequests.nodes.requestedReviewer.name",
	"reviewRequests.nodes.requestedReviewer.slug",
	"reviewRequests.nodes.requestedReviewer.organization.login",
	"reviews.nodes.id", "reviews.nodes.author.login", "reviews.nodes.authorAssociation",
	"reviews.nodes.submittedAt", "reviews.nodes.body", "reviews.nodes.state", "reviews.nodes.commit.oid",
	"reviews.nodes.reactionGroups.content", "reviews.nodes.reactionGroups.users.totalCount",
	"reviews.pageInfo.hasNextPage", "reviews.pageInfo.endCursor", "reviews.totalCount",
	"assignees.nodes.id", "assignees.nodes.login", "assignees.nodes.name", "assignees.totalCount",
	"labels.nodes.id", "labels.nodes.name", "labels.nodes.description", "labels.nodes.color", "labels.totalCount",
	"projectCards.nodes.project.name", "projectCards.nodes.column.name", "projectCards.totalCount",
	"milestone.number", "milestone.title", "milestone.description", "milestone.dueOn",
	"comments.nodes.id", "comments.nodes.author.login", "comments.nodes.author.id", "comments.nodes.author.name",
	"comments.nodes.authorAssociation", "comments.nodes.body", "comments.nodes.createdAt",
	"comments.nodes.includesCreatedEdit", "comments.nodes.isMinimized", "comments.nodes.minimizedReason",
	"comments.nodes.reactionGroups.content", "comments.nodes.reactionGroups.users.totalCount",
	"comments.nodes.url", "comments.nodes.viewerDidAuthor",
	"comments.pageInfo.hasNextPage", "comments.pageInfo.endCursor", "comments.totalCount",
	"reactionGroups.content", "reactionGroups.users.totalCount",
}

// readPaths is every path a query may read: the repository's own fields,
// and a pull request's (pullFields) whether one is looked up by number or
// listed; a path leading to an allowed one (repository.pullRequest) is
// allowed too.
var readPaths = func() map[string]bool {
	paths := []string{
		"repository.id", "repository.name", "repository.nameWithOwner", "repository.url",
		"repository.isPrivate", "repository.viewerPermission", "repository.defaultBranchRef.name",
		"repository.owner.login", "repository.owner.id",
		"repository.pullRequests.totalCount",
		"repository.pullRequests.pageInfo.hasNextPage", "repository.pullRequests.pageInfo.endCursor",
	}
	for _, f := range pullFields {
		paths = append(paths, "repository.pullRequest."+f, "repository.pullRequests.nodes."+f)
	}
	m := map[string]bool{}
	for _, p := range paths {
		for i := range p {
			if p[i] == '.' {
				m[p[:i]] = true
			}
		}
		m[p] = true
	}
	return m
}()

// serveGraphQL serves a POST to /api/graphql: its body is read (bounded),
// analyzed, and forwarded when every operation is a query that reads only
// readPaths of repositories the sandbox may read.
func (g *route) serveGraphQL(a *routes.Call, r *http.Request, sandbox string) {
	fail := func(err error) { a.FailWith(writeGraphQLError, err) }
	a.SetTarget("graphql")
	if r.Method != http.MethodPost {
		fail(routes.Refuse(routes.ErrForbidden, "%s /api/graphql is refused for sandbox %s: send GraphQL as POST; do not retry", routes.Clip(r.Method, 16), sandbox))
		return
	}
	body, err := a.ReadBody(maxGraphQLBody)
	if err != nil {
		fail(err)
		return
	}
	ops, err := gqlpolicy.Analyze(body)
	if err != nil {
		kind := routes.ErrForbidden
		switch {
		case errors.Is(err, gqlpolicy.ErrInvalid):
			kind = routes.ErrBadRequest
		case errors.Is(err, gqlpolicy.ErrTooLarge):
			kind = routes.ErrTooLarge
		}
		fail(routes.Refuse(kind, "the GraphQL request is refused for sandbox %s: %v", sandbox, err))
		return
	}
	repos, err := checkOperations(ops, sandbox)
	if err != nil {
		fail(err)
		return
	}
	a.SetTarget("graphql " + strings.Join(repos, " "))
	if err := a.Decide(func(prof *policy.Profile) (string, error) { return decideRepos(prof, sandbox, repos) }); err != nil {
		fail(err)
		return
	}
	if up := g.fwd.Upstream(); !up.Configured() && up.Missing != "" {
		fail(routes.Refuse(routes.ErrUnavailable, "no GitHub API credential is configured: %s", up.Missing))
		return
	}
	// GitHub serves GraphQL at /graphql of the API's host (api.github.com)
	// and at /api/graphql of an Enterprise host, whose REST API is the
	// upstream's /api/v3: the path beside the REST API's root.
	g.fwd.Forward(a, r, routes.Target{Path: "/graphql"})
}

// checkOperations refuses, whatever the policy, an operation that is not
// a query, looks up a node, or reads a field outside readPaths, and
// returns the repositories the queries read, each once, for the policy.
func checkOperations(ops []gqlpolicy.Operation, sandbox string) ([]string, error) {
	refuse := func(format string, args ...any) ([]string, error) {
		return nil, routes.Refuse(routes.ErrForbidden, "the GraphQL request is refused for sandbox %s: "+format+"; do not retry", append([]any{sandbox}, args...)...)
	}
	var repos []string
	for _, op := range ops {
		if op.Kind != gqlpolicy.KindQuery {
			names := make([]string, len(op.Mutations))
			for i, m := range op.Mutations {
				names[i] = m.Name
			}
			return refuse("mutations (%s) are not served through cproxy yet; use the REST API (gh api repos/OWNER/REPO/…) for what the policy allows", routes.Clip(strings.Join(names, ", "), 128))
		}
		if len(op.Nodes) > 0 {
			return refuse("node and nodes look-ups by ID are not served: the repository an ID belongs to cannot be told before GitHub answers; query repository(owner:, name:) instead")
		}
		for _, f := range op.Fields {
			if f != "repository" {
				return refuse("the top-level field %s is not served: cproxy serves only repository(owner:, name:) of the repositories the policy allows", routes.Clip(f, 64))
			}
		}
		for _, p := range op.Paths {
			if !readPaths[p] {
				return refuse("the field %s is not one cproxy serves (docs/github-api.md lists them)", routes.Clip(p, 128))
			}
		}
		for _, rp := range op.Repos {
			if !ownerRE.MatchString(rp.Owner) || !repoRE.MatchString(rp.Name) || strings.HasSuffix(strings.ToLower(rp.Name), ".git") {
				return refuse("%q is not a GitHub repository (OWNER/REPO)", routes.Clip(rp.String(), 128))
			}
			if !slices.ContainsFunc(repos, func(s string) bool { return strings.EqualFold(s, rp.String()) }) {
				repos = append(repos, rp.String())
			}
		}
	}
	if len(repos) == 0 {
		return refuse("it reads no repository; cproxy serves queries of repository(owner:, name:) only")
	}
	return repos, nil
}

// decideRepos asks prof whether the sandbox may read every one of repos.
func decideRepos(prof *policy.Profile, sandbox string, repos []string) (string, error) {
	var rules []string
	for _, repo := range repos {
		rule, err := decide(prof, sandbox, policy.APIQuestion{Repo: repo, Permission: policy.APIRead})
		if err != nil {
			return rule, err
		}
		if !slices.Contains(rules, rule) {
			rules = append(rules, rule)
		}
	}
	return strings.Join(rules, " "), nil
}
