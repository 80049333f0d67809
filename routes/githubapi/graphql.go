package githubapi

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/githubapi/gqlpolicy"
	"github.com/cproxy/cproxy/secrets"
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
	"additions", "deletions", "baseRefName", "headRefName", "headRefOid", "isCrossRepository", "createdAt",
	"mergeStateStatus",
	"author.login", "author.id", "author.name",
	"headRepositoryOwner.id", "headRepositoryOwner.login", "headRepositoryOwner.name",
	"headRepository.id", "headRepository.name",
	"commits.totalCount", "commits.nodes.commit.oid",
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
	"commits.nodes.commit.statusCheckRollup.contexts.nodes.isRequired",
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

// issueFields are the fields a query may read of an issue: those of
// pullFields an issue has too, and updatedAt (gh issue list). What gh 2.23
// reads for gh issue view, gh issue list and gh issue comment.
var issueFields = func() []string {
	own := []string{"id", "url", "number", "title", "state", "body", "createdAt", "updatedAt"}
	lists := []string{"author", "milestone", "assignees", "labels", "projectCards", "reactionGroups", "comments"}
	out := slices.Clone(own)
	for _, f := range pullFields {
		if top, _, _ := strings.Cut(f, "."); slices.Contains(lists, top) {
			out = append(out, f)
		}
	}
	return out
}()

// repoFields are the fields a query may read of a repository, its own
// and, as gh's RepositoryInfo reads them, its parent's (a fork's): its
// name, owner and settings, none of its lists.
var repoFields = []string{
	"id", "name", "nameWithOwner", "url", "isPrivate", "viewerPermission", "defaultBranchRef.name",
	"owner.login", "owner.id", "description", "hasIssuesEnabled", "hasWikiEnabled",
	"mergeCommitAllowed", "rebaseMergeAllowed", "squashMergeAllowed",
}

// readPaths is every path a query may read: the repository's own fields
// and its parent's, a pull request's (pullFields) and an issue's
// (issueFields) whether one is looked up by number or listed, and those of
// a repository, pull request or issue looked up by node ID (node, nodes);
// a path leading to an allowed one (repository.pullRequest) is allowed too.
var readPaths = func() map[string]bool {
	var paths []string
	for _, list := range []string{"pullRequests", "issues"} {
		paths = append(paths, "repository."+list+".totalCount",
			"repository."+list+".pageInfo.hasNextPage", "repository."+list+".pageInfo.endCursor")
	}
	paths = append(paths, prefixed("repository.", repoFields)...)
	paths = append(paths, prefixed("repository.parent.", repoFields)...)
	paths = append(paths, prefixed("repository.pullRequest.", pullFields)...)
	paths = append(paths, prefixed("repository.pullRequests.nodes.", pullFields)...)
	paths = append(paths, prefixed("repository.issueOrPullRequest.", append(slices.Clone(pullFields), "updatedAt"))...)
	paths = append(paths, prefixed("repository.issue.", issueFields)...)
	paths = append(paths, prefixed("repository.issues.nodes.", issueFields)...)
	for _, top := range nodeFields {
		paths = append(paths, prefixed(top+".", repoFields)...)
		paths = append(paths, prefixed(top+".", pullFields)...)
		paths = append(paths, prefixed(top+".", issueFields)...)
	}
	return pathSet(paths)
}()

// nodeFields are the top-level fields that look objects up by node ID: a
// query's IDs are resolved through GitHub before it is decided.
var nodeFields = []string{"node", "nodes"}

// introspection are the top-level fields that read GitHub's schema, which
// is public (gh pr merge asks which fields a PullRequest has): everything
// under them reads the schema alone.
var introspection = []string{"__type", "__schema"}

// plan is what a GraphQL request reaches, once checked whatever the
// policy: the repositories its queries read by name, those of them whose
// parent a query reads, the node IDs its queries read, its mutations, and
// whether it asks the schema.
type plan struct {
	repos     []string
	parentsOf []string
	nodes     []string
	mutations []mutation
	schema    bool
}

// gqlRefusal is the refusal of a GraphQL request, whatever the policy.
func gqlRefusal(sandbox, format string, args ...any) error {
	return routes.Refuse(routes.ErrForbidden, "the GraphQL request is refused for sandbox %s: "+format+"; do not retry", append([]any{sandbox}, args...)...)
}

// serveGraphQL serves a POST to /api/graphql: its body is read (bounded)
// and analyzed; the node IDs its mutations name and the parents its
// queries read are resolved through GitHub; it is forwarded when every
// query reads only readPaths of repositories the sandbox may read and
// every mutation is one of mutationRules the policy allows on the
// repository its target belongs to.
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
	p, err := checkOperations(ops, sandbox)
	if err != nil {
		fail(err)
		return
	}
	a.SetTarget("graphql " + p.target())
	// The repositories named are decided first: cproxy asks GitHub about
	// nothing (a parent) of a repository the sandbox may not read.
	a.SetQuestion(graphQLQuestion(p, nil, nil))
	if err := a.Decide(func(prof *policy.Profile) (string, error) { return decidePlan(a, prof, sandbox, p, nil, nil) }); err != nil {
		fail(err)
		return
	}
	if up := g.fwd.Upstream(); !up.Configured() && up.Missing != "" {
		fail(routes.Refuse(routes.ErrUnavailable, "no GitHub API credential is configured: %s", up.Missing))
		return
	}
	prof := a.Session().Profile
	var lookup map[string]secrets.Secret
	if g.app != nil && (len(p.nodes) > 0 || len(p.mutations) > 0 || len(p.parentsOf) > 0) {
		// Only once the repositories named are allowed: tokens for
		// look-ups only, narrowed to what they read.
		if lookup, err = g.lookupTokens(r.Context(), sandbox, prof, p); err != nil {
			fail(err)
			return
		}
	}
	nodes, parents, err := g.resolve(a, p, sandbox, lookup)
	if err != nil {
		fail(err)
		return
	}
	if nodes != nil || parents != nil {
		a.SetTarget("graphql " + p.resolvedTarget(nodes, parents))
		if err := checkResolved(sandbox, p, nodes); err != nil {
			fail(err)
			return
		}
		a.SetQuestion(graphQLQuestion(p, nodes, parents))
		if err := a.Decide(func(prof *policy.Profile) (string, error) { return decidePlan(a, prof, sandbox, p, nodes, parents) }); err != nil {
			fail(err)
			return
		}
	}
	// GitHub serves GraphQL at /graphql of the API's host (api.github.com)
	// and at /api/graphql of an Enterprise host, whose REST API is the
	// upstream's /api/v3: the path beside the REST API's root.
	t := routes.Target{Path: "/graphql"}
	if g.app != nil {
		// Minted once the whole request is decided, for exactly what it
		// reaches.
		if t.Credential, err = g.graphQLToken(r.Context(), sandbox, prof, p, nodes, parents); err != nil {
			fail(err)
			return
		}
	}
	g.fwd.Forward(a, r, t)
}

// resolve looks up the nodes p's queries read, the targets of its
// mutations and the parents its queries read, with creds (an App's
// look-up token for each owner, lower case; nil: the upstream's
// credential); nil maps when there is nothing to look up.
func (g *route) resolve(a *routes.Call, p plan, sandbox string, creds map[string]secrets.Secret) (map[string]node, map[string]string, error) {
	ids := slices.Clone(p.nodes)
	for _, m := range p.mutations {
		if !slices.Contains(ids, m.target) {
			ids = append(ids, m.target)
		}
	}
	if len(ids) > maxLookups {
		return nil, nil, gqlRefusal(sandbox, "it names %d node IDs, more than the %d cproxy looks up for one request: send fewer at once", len(ids), maxLookups)
	}
	ctx := a.Request().Context()
	var nodes map[string]node
	var parents map[string]string
	var err error
	if len(ids) > 0 {
		var list []secrets.Secret
		for _, owner := range slices.Sorted(maps.Keys(creds)) {
			list = append(list, creds[owner])
		}
		if nodes, err = g.resolver.nodes(ctx, ids, sandbox, list); err != nil {
			return nil, nil, err
		}
	}
	if len(p.parentsOf) > 0 {
		parents = map[string]string{}
		byOwner := map[string][]string{}
		for _, repo := range p.parentsOf {
			owner, _, _ := strings.Cut(repo, "/")
			byOwner[strings.ToLower(owner)] = append(byOwner[strings.ToLower(owner)], repo)
		}
		for owner, repos := range byOwner {
			got, err := g.resolver.parents(ctx, repos, creds[owner])
			if err != nil {
				return nil, nil, err
			}
			maps.Copy(parents, got)
		}
	}
	return nodes, parents, nil
}

// checkOperations refuses, whatever the policy, a query that reads a
// field outside readPaths, a mutation outside
// mutationRules or past its rule, and returns what the request reaches.
func checkOperations(ops []gqlpolicy.Operation, sandbox string) (plan, error) {
	refuse := func(format string, args ...any) (plan, error) { return plan{}, gqlRefusal(sandbox, format, args...) }
	var p plan
	for _, op := range ops {
		if op.Kind == gqlpolicy.KindMutation {
			for _, m := range op.Mutations {
				mut, err := checkMutation(m, sandbox)
				if err != nil {
					return plan{}, err
				}
				p.mutations = append(p.mutations, mut)
			}
			for _, path := range op.Paths {
				if !mutationPaths[path] {
					return refuse("the field %s of a mutation's answer is not one cproxy serves (docs/github-api.md lists them)", routes.Clip(path, 128))
				}
			}
			continue
		}
		for _, id := range op.Nodes {
			if !slices.Contains(p.nodes, id) {
				p.nodes = append(p.nodes, id)
			}
		}
		for _, f := range op.Fields {
			switch {
			case slices.Contains(introspection, f):
				p.schema = true
			case f != "repository" && !slices.Contains(nodeFields, f):
				return refuse("the top-level field %s is not served: cproxy serves only repository(owner:, name:), node(id:) and nodes(ids:) of the repositories the policy allows", routes.Clip(f, 64))
			}
		}
		parent := false
		for _, path := range op.Paths {
			top, _, _ := strings.Cut(path, ".")
			if slices.Contains(introspection, top) {
				continue
			}
			if !readPaths[path] {
				return refuse("the field %s is not one cproxy serves (docs/github-api.md lists them)", routes.Clip(path, 128))
			}
			parent = parent || path == "repository.parent"
		}
		for _, rp := range op.Repos {
			if !validRepo(rp.String()) {
				return refuse("%q is not a GitHub repository (OWNER/REPO)", routes.Clip(rp.String(), 128))
			}
			p.repos = addRepo(p.repos, rp.String())
			if parent {
				p.parentsOf = addRepo(p.parentsOf, rp.String())
			}
		}
	}
	if len(p.repos) == 0 && len(p.nodes) == 0 && len(p.mutations) == 0 && !p.schema {
		return refuse("it reads no repository; cproxy serves queries of repository(owner:, name:), node(id:) and nodes(ids:) only")
	}
	return p, nil
}

// addRepo adds repo to list unless it holds it, in any letters' case.
func addRepo(list []string, repo string) []string {
	if slices.ContainsFunc(list, func(s string) bool { return strings.EqualFold(s, repo) }) {
		return list
	}
	return append(list, repo)
}

// target is the plan for the audit line, before anything is resolved.
func (p plan) target() string { return p.resolvedTarget(nil, nil) }

// resolvedTarget names what the request reaches for the audit line: the
// repositories read, each mutation with its target's repository once
// resolved (the operator's log may name it; the sandbox's refusal does
// not).
func (p plan) resolvedTarget(nodes map[string]node, parents map[string]string) string {
	parts := slices.Clone(p.repos)
	for _, repo := range p.parentsOf {
		if parent := parents[repo]; parent != "" {
			parts = append(parts, "parent:"+parent)
		}
	}
	for _, id := range p.nodes {
		s := "node " + id
		if n, ok := nodes[id]; ok && n.repo != "" {
			s += "=" + n.repo
		}
		parts = append(parts, s)
	}
	for _, m := range p.mutations {
		s := m.name + " " + m.target
		if n, ok := nodes[m.target]; ok && n.repo != "" {
			s += "=" + n.repo
		}
		if m.name == "createPullRequest" {
			s += " " + m.head + "->" + m.base
		}
		parts = append(parts, s)
	}
	if p.schema {
		parts = append(parts, "schema")
	}
	return strings.Join(parts, " ")
}

// decidePlan asks prof whether the sandbox may read every repository p's
// queries name (and, once resolved, their parents), and make each of its
// mutations on the repository its target belongs to. Before the look-ups
// (nodes nil), only the repositories named are asked. A refusal about a
// resolved target names its node ID, never its repository: the sandbox
// does not learn what an ID it may not reach belongs to.
func decidePlan(a *routes.Call, prof *policy.Profile, sandbox string, p plan, nodes map[string]node, parents map[string]string) (string, error) {
	var rules []string
	add := func(rule string) {
		if !slices.Contains(rules, rule) {
			rules = append(rules, rule)
		}
	}
	for _, repo := range p.repos {
		rule, err := decide(a, prof, sandbox, policy.APIQuestion{Repo: repo, Permission: policy.APIRead})
		if err != nil {
			return rule, err
		}
		add(rule)
	}
	if p.schema && len(p.repos) == 0 && len(p.mutations) == 0 {
		rule, err := decideSchema(prof, sandbox)
		if err != nil {
			return rule, err
		}
		add(rule)
	}
	for _, repo := range p.parentsOf {
		parent, ok := parents[repo]
		if !ok || parent == "" {
			continue
		}
		ans := prof.AskAPI(policy.APIQuestion{Repo: parent, Permission: policy.APIRead})
		if !ans.Allow {
			step, _ := ans.Refusal()
			return ans.Rule, gqlRefusal(sandbox, "%s is a fork, and the sandbox may not read the repository it was forked from (%s): leave parent out of the query", repo, step.Rule)
		}
		add(ans.Rule)
	}
	if nodes == nil {
		if len(rules) == 0 {
			// Only mutations, decided once their targets are resolved;
			// until then, the question is whether the profile uses the
			// API at all.
			return decideSchema(prof, sandbox)
		}
		return strings.Join(rules, " "), nil
	}
	for _, id := range p.nodes {
		rule, err := decideNode(prof, sandbox, id, nodes[id])
		if err != nil {
			return rule, err
		}
		add(rule)
	}
	for _, m := range p.mutations {
		rule, err := decideMutation(a, prof, sandbox, m, nodes[m.target])
		if err != nil {
			return rule, err
		}
		add(rule)
	}
	return strings.Join(rules, " "), nil
}

// checkResolved refuses, whatever the policy, what p's nodes resolved
// to (nodes) does not let it do: read a node that is not a repository, a
// pull request or an issue, whose repository cproxy cannot tell; make a
// mutation on a target of another type than its own; open a pull request
// from another owner's branch. The refusal names the ID, never the
// repository.
func checkResolved(sandbox string, p plan, nodes map[string]node) error {
	for _, id := range p.nodes {
		if nodes[id].typ == "" {
			return gqlRefusal(sandbox, "the node ID %q is not a repository, a pull request or an issue, the objects cproxy can tell the repository of", routes.Clip(id, 64))
		}
	}
	for _, m := range p.mutations {
		n := nodes[m.target]
		if !slices.Contains(m.types, n.typ) {
			what := "an object of another type"
			if n.typ != "" {
				what = "a " + n.typ
			}
			return gqlRefusal(sandbox, "the %s of %s, %q, is %s, not %s", m.key, m.name, routes.Clip(m.target, 64), what, strings.Join(m.types, " or "))
		}
		if owner, _, _ := strings.Cut(n.repo, "/"); m.headOwner != "" && !strings.EqualFold(m.headOwner, owner) {
			return gqlRefusal(sandbox, "the headRefName of createPullRequest, %q, is in another owner's repository", routes.Clip(m.headOwner+":"+m.head, 128))
		}
	}
	return nil
}

// graphQLQuestion is p's policy question as decidePlan asks it, for the
// audit record (policy.AskGraphQL asks it again): the repositories its
// queries read, then as resolved (nodes, parents; nil before) the
// parents of forks they read, the nodes they read and each mutation on
// its target's repository.
func graphQLQuestion(p plan, nodes map[string]node, parents map[string]string) policy.Question {
	var qs []policy.APIQuestion
	for _, repo := range p.repos {
		qs = append(qs, policy.APIQuestion{Repo: repo, Permission: policy.APIRead})
	}
	for _, repo := range p.parentsOf {
		if parent := parents[repo]; parent != "" {
			qs = append(qs, policy.APIQuestion{Repo: parent, Permission: policy.APIRead})
		}
	}
	if nodes != nil {
		for _, id := range p.nodes {
			qs = append(qs, policy.APIQuestion{Repo: nodes[id].repo, Permission: policy.APIRead})
		}
		for _, m := range p.mutations {
			qs = append(qs, policy.APIQuestion{Repo: nodes[m.target].repo, Permission: m.perm, Head: m.head, Base: m.base})
		}
	}
	return policy.Question{Route: "api", GraphQL: true, API: qs}
}

// decideNode asks prof whether the sandbox may read n, what the node ID id
// a query reads resolved to (checkResolved has checked its type). The
// refusal names the ID, never the repository, nor the policy's rule for
// it, which could name it.
func decideNode(prof *policy.Profile, sandbox, id string, n node) (string, error) {
	ans := prof.AskAPI(policy.APIQuestion{Repo: n.repo, Permission: policy.APIRead})
	if !ans.Allow {
		return ans.Rule, gqlRefusal(sandbox, "the node ID %q is in a repository on which GitHub API %q is not allowed", routes.Clip(id, 64), policy.APIRead)
	}
	return ans.Rule, nil
}

// decideMutation asks prof whether the sandbox may make m on n, what its
// target resolved to (checkResolved has checked its type and head).
func decideMutation(a *routes.Call, prof *policy.Profile, sandbox string, m mutation, n node) (string, error) {
	q := policy.APIQuestion{Repo: n.repo, Permission: m.perm, Head: m.head, Base: m.base}
	ans := prof.AskAPI(q)
	if !ans.Allow && !ans.Ask {
		step, _ := ans.Refusal()
		if step.Key == "api" {
			return ans.Rule, gqlRefusal(sandbox, "the %s of %s, %q, is in a repository on which GitHub API %q is not allowed (%s)", m.key, m.name, routes.Clip(m.target, 64), m.perm, step.Rule)
		}
		return decide(a, prof, sandbox, q)
	}
	if ans.Ask {
		return decide(a, prof, sandbox, q)
	}
	return ans.Rule, nil
}

// decideSchema allows what reads no repository (GitHub's public schema; a
// mutation before its target is known) to a profile that may read some
// repository through the API: deny by default for a profile without one.
func decideSchema(prof *policy.Profile, sandbox string) (string, error) {
	ans := prof.AskGraphQL(nil)
	if ans.Allow {
		return ans.Rule, nil
	}
	return ans.Rule, routes.Refuse(routes.ErrForbidden, "GitHub's GraphQL API is not allowed for sandbox %s: no repos entry of its policy has an api list; do not retry", sandbox)
}
