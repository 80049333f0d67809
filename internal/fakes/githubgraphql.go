package fakes

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// gqlResolver is a field that takes arguments: it returns the field's
// value (an object is a map with its __typename) or GitHub's error.
type gqlResolver func(args map[string]any) (any, error)

// graphql answers POST /graphql as GitHub does for what gh 2.23 sends
// for gh pr view, gh pr list, gh pr create, gh pr merge, gh pr checks and
// gh issue view, list and comment: repository(owner:, name:) with its pull
// requests (filtered by headRefName and states), issueOrPullRequest and an
// empty issues list, node(id:) and nodes(ids:) by the IDs it gives
// its repositories, pull requests and issues, __type for a type's fields,
// and the mutations createPullRequest, mergePullRequest and addComment,
// each recorded (GraphQLMutations). A field it does not know is GitHub's
// "doesn't exist on type" error, an object it does not have GitHub's
// NOT_FOUND; other mutations are GitHub's "doesn't exist on type
// 'Mutation'".
func (g *GitHubREST) graphql(w http.ResponseWriter, body []byte, can func(repo string) bool) {
	s := gqlScope{g, can}
	var in struct {
		Query         string         `json:"query"`
		Variables     map[string]any `json:"variables"`
		OperationName string         `json:"operationName"`
	}
	if json.Unmarshal(body, &in) != nil {
		g.json(w, http.StatusBadRequest, map[string]any{"message": "Problems parsing JSON", "documentation_url": "https://docs.github.com/graphql"})
		return
	}
	doc, perr := parser.ParseQuery(&ast.Source{Input: in.Query})
	if perr != nil {
		g.json(w, http.StatusOK, map[string]any{"errors": []any{map[string]any{"message": perr.Error()}}})
		return
	}
	op := doc.Operations.ForName(in.OperationName)
	if op == nil && len(doc.Operations) == 1 {
		op = doc.Operations[0]
	}
	if op == nil || op.Operation == ast.Subscription {
		g.json(w, http.StatusOK, map[string]any{"errors": []any{map[string]any{"message": "the fake GitHub GraphQL API serves one query or mutation"}}})
		return
	}
	vars := map[string]any{}
	for _, d := range op.VariableDefinitions {
		if d.DefaultValue != nil {
			vars[d.Variable], _ = d.DefaultValue.Value(nil)
		}
	}
	for k, v := range in.Variables {
		vars[k] = v
	}
	root := map[string]any{
		"__typename": "Query", "repository": gqlResolver(s.gqlRepository),
		"node": gqlResolver(func(args map[string]any) (any, error) {
			id, _ := args["id"].(string)
			return s.gqlNode(id)
		}),
		"nodes": gqlResolver(func(args map[string]any) (any, error) {
			ids, _ := args["ids"].([]any)
			list := make([]any, len(ids))
			for i, id := range ids {
				str, _ := id.(string)
				if n, err := s.gqlNode(str); err == nil {
					list[i] = n
				}
			}
			return list, nil
		}),
		"__type": gqlResolver(gqlType),
	}
	if op.Operation == ast.Mutation {
		root = map[string]any{"__typename": "Mutation",
			"createPullRequest": g.gqlMutation("createPullRequest", s.gqlCreatePull),
			"mergePullRequest":  g.gqlMutation("mergePullRequest", s.gqlMergePull),
			"addComment":        g.gqlMutation("addComment", s.gqlAddComment),
		}
	}
	x := gqlExec{doc: doc, vars: vars}
	data := x.object(op.SelectionSet, root, nil)
	out := map[string]any{"data": data}
	if len(x.errs) > 0 {
		out["errors"] = x.errs
	}
	g.json(w, http.StatusOK, out)
}

// gqlScope is the fake API as one GraphQL request sees it: can says
// whether its token reaches a repository ("owner/name") the API has.
type gqlScope struct {
	*GitHubREST
	can func(repo string) bool
}

// GitHubMutation is a GraphQL mutation the fake API ran: its name and
// input, as sent.
type GitHubMutation struct {
	Name  string
	Input map[string]any
}

// GraphQLMutations returns the mutations the API ran, in order.
func (g *GitHubREST) GraphQLMutations() []GitHubMutation {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]GitHubMutation(nil), g.mutations...)
}

// gqlMutation is a mutation field: it records its input, then runs.
func (g *GitHubREST) gqlMutation(name string, run func(input map[string]any) (any, error)) gqlResolver {
	return func(args map[string]any) (any, error) {
		input, _ := args["input"].(map[string]any)
		g.mu.Lock()
		g.mutations = append(g.mutations, GitHubMutation{Name: name, Input: input})
		g.mu.Unlock()
		return run(input)
	}
}

// The fake's node IDs: a prefix of GitHub's kind, then its repository
// ("owner/name") and number, encoded.
const (
	repoIDPrefix  = "R_kgDO"
	pullIDPrefix  = "PR_kwDO"
	issueIDPrefix = "I_kwDO"
)

// GitHubNodeID is the node ID the fake API gives a repository ("owner/name")
// or, with a number, its pull request (kind "PullRequest") or issue
// ("Issue").
func GitHubNodeID(kind, repo string, number int) string {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(strings.ToLower(s))) }
	switch kind {
	case "PullRequest":
		return pullIDPrefix + enc(repo+"#"+strconv.Itoa(number))
	case "Issue":
		return issueIDPrefix + enc(repo+"#"+strconv.Itoa(number))
	}
	return repoIDPrefix + enc(repo)
}

// gqlNode is the object id names, or GitHub's NOT_FOUND.
func (g gqlScope) gqlNode(id string) (any, error) {
	//lint:ignore ST1005 GitHub's own words, as gh prints them
	notFound := fmt.Errorf("Could not resolve to a node with the global id of '%s'", id)
	var kind, rest string
	for _, k := range []struct{ prefix, kind string }{{pullIDPrefix, "PullRequest"}, {issueIDPrefix, "Issue"}, {repoIDPrefix, "Repository"}} {
		if r, ok := strings.CutPrefix(id, k.prefix); ok {
			kind, rest = k.kind, r
			break
		}
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if kind == "" || err != nil {
		return nil, notFound
	}
	repo, num, _ := strings.Cut(string(b), "#")
	owner, name, _ := strings.Cut(repo, "/")
	if !g.can(repo) {
		return nil, notFound
	}
	r, _ := g.gqlRepository(map[string]any{"owner": owner, "name": name})
	rm := r.(map[string]any)
	n, _ := strconv.Atoi(num)
	switch kind {
	case "Repository":
		return rm, nil
	case "Issue":
		return map[string]any{"__typename": "Issue", "id": id, "number": n, "repository": rm}, nil
	}
	if p := g.pull(repo, n); p != nil {
		pr := gqlPull(owner, name, p)
		pr["repository"] = rm
		return pr, nil
	}
	return nil, notFound
}

// pull is the pull request numbered n of repo, nil for none.
func (g *GitHubREST) pull(repo string, n int) map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.pulls[strings.ToLower(repo)] {
		if p["number"] == n {
			return p
		}
	}
	return nil
}

// gqlCreatePull is Mutation.createPullRequest: the pull request is
// recorded as the REST API's are, and its GraphQL shape answered.
func (g gqlScope) gqlCreatePull(in map[string]any) (any, error) {
	id, _ := in["repositoryId"].(string)
	r, err := g.gqlNode(id)
	repo, _ := r.(map[string]any)
	if err != nil || repo["__typename"] != "Repository" {
		//lint:ignore ST1005 GitHub's own words, as gh prints them
		return nil, fmt.Errorf("Could not resolve to a Repository with the global id of '%s'", id)
	}
	str := func(k string) string { s, _ := in[k].(string); return s }
	if str("headRefName") == "" || str("baseRefName") == "" {
		//lint:ignore ST1005 GitHub's own words
		return nil, fmt.Errorf("Head sha can't be blank, Base sha can't be blank, No commits between %s and %s", str("baseRefName"), str("headRefName"))
	}
	draft, _ := in["draft"].(bool)
	owner := repo["owner"].(map[string]any)["login"].(string)
	name := repo["name"].(string)
	p := g.addPull(owner, name, str("title"), str("body"), str("headRefName"), str("baseRefName"), draft)
	return map[string]any{"__typename": "CreatePullRequestPayload", "clientMutationId": in["clientMutationId"], "pullRequest": gqlPull(owner, name, p)}, nil
}

// gqlMergePull is Mutation.mergePullRequest: the pull request's state
// becomes merged.
func (g gqlScope) gqlMergePull(in map[string]any) (any, error) {
	id, _ := in["pullRequestId"].(string)
	n, err := g.gqlNode(id)
	pr, _ := n.(map[string]any)
	if err != nil || pr["__typename"] != "PullRequest" {
		//lint:ignore ST1005 GitHub's own words
		return nil, fmt.Errorf("Could not resolve to a PullRequest with the global id of '%s'", id)
	}
	g.mu.Lock()
	for _, list := range g.pulls {
		for _, p := range list {
			if p["number"] == pr["number"] {
				p["state"] = "merged"
			}
		}
	}
	g.mu.Unlock()
	n, _ = g.gqlNode(id)
	return map[string]any{"__typename": "MergePullRequestPayload", "clientMutationId": in["clientMutationId"], "pullRequest": n}, nil
}

// gqlAddComment is Mutation.addComment on a pull request or issue.
func (g gqlScope) gqlAddComment(in map[string]any) (any, error) {
	id, _ := in["subjectId"].(string)
	n, err := g.gqlNode(id)
	subject, _ := n.(map[string]any)
	if err != nil || subject["__typename"] == "Repository" {
		//lint:ignore ST1005 GitHub's own words
		return nil, fmt.Errorf("Could not resolve to a node with the global id of '%s'", id)
	}
	g.mu.Lock()
	c := g.next
	g.next++
	g.mu.Unlock()
	url := fmt.Sprintf("https://github.com/%s/pull/%v#issuecomment-%d", subject["repository"].(map[string]any)["nameWithOwner"], subject["number"], c)
	node := map[string]any{"__typename": "IssueComment", "id": "IC_kwDO" + strconv.Itoa(c), "url": url, "body": in["body"]}
	return map[string]any{"__typename": "AddCommentPayload", "clientMutationId": in["clientMutationId"], "subject": subject,
		"commentEdge": map[string]any{"__typename": "IssueCommentEdge", "node": node}}, nil
}

// gqlType is Query.__type for the pull request's fields, which gh pr
// merge asks for; another type has none here.
func gqlType(args map[string]any) (any, error) {
	var fields []any
	if args["name"] == "PullRequest" {
		for k := range gqlPull("o", "r", map[string]any{}) {
			if k != "__typename" {
				fields = append(fields, map[string]any{"__typename": "__Field", "name": k})
			}
		}
	}
	return map[string]any{"__typename": "__Type", "name": args["name"], "fields": gqlResolver(func(map[string]any) (any, error) { return fields, nil })}, nil
}

// gqlRepository is Query.repository.
func (g gqlScope) gqlRepository(args map[string]any) (any, error) {
	owner, _ := args["owner"].(string)
	name, _ := args["name"].(string)
	if !g.can(owner + "/" + name) {
		//lint:ignore ST1005 GitHub's own words, as gh prints them
		return nil, fmt.Errorf("Could not resolve to a Repository with the name '%s/%s'.", owner, name)
	}
	g.mu.Lock()
	pulls := append([]map[string]any{}, g.pulls[strings.ToLower(owner+"/"+name)]...)
	g.mu.Unlock()
	var nodes []any
	for i := len(pulls) - 1; i >= 0; i-- { // newest first, as gh orders them
		nodes = append(nodes, gqlPull(owner, name, pulls[i]))
	}
	var parent any
	if p := g.opts.Parents[strings.ToLower(owner+"/"+name)]; p != "" {
		po, pn, _ := strings.Cut(p, "/")
		parent = map[string]any{"__typename": "Repository", "id": GitHubNodeID("Repository", p, 0), "name": pn, "nameWithOwner": p,
			"owner": map[string]any{"__typename": "Organization", "login": po}}
	}
	return map[string]any{
		"__typename": "Repository", "id": GitHubNodeID("Repository", owner+"/"+name, 0), "name": name, "nameWithOwner": owner + "/" + name,
		"url": "https://github.com/" + owner + "/" + name, "isPrivate": true,
		"description": "", "hasIssuesEnabled": true, "hasWikiEnabled": false, "viewerPermission": "WRITE",
		"mergeCommitAllowed": true, "rebaseMergeAllowed": true, "squashMergeAllowed": true,
		"defaultBranchRef": map[string]any{"__typename": "Ref", "name": "main"},
		"parent":           parent,
		"owner":            map[string]any{"__typename": "Organization", "id": "O_kgDO" + owner, "login": owner},
		"pullRequest":      byNumber(nodes, "a PullRequest"),
		// An issue's number and a pull request's are one sequence; the
		// fake keeps no issues, so a number is a pull request's or none.
		"issueOrPullRequest": byNumber(nodes, "an issue or pull request"),
		"issues": map[string]any{
			"__typename": "IssueConnection", "totalCount": 0, "nodes": []any{},
			"pageInfo": map[string]any{"__typename": "PageInfo", "hasNextPage": false, "endCursor": nil},
		},
		"pullRequests": gqlResolver(func(args map[string]any) (any, error) {
			var states []any
			switch s := args["states"].(type) {
			case []any:
				states = s
			case string:
				states = []any{s}
			}
			head, _ := args["headRefName"].(string)
			list := []any{}
			for _, p := range nodes {
				pm := p.(map[string]any)
				if head != "" && pm["headRefName"] != head || len(states) > 0 && !slices.Contains(states, pm["state"]) {
					continue
				}
				list = append(list, p)
			}
			return map[string]any{
				"__typename": "PullRequestConnection", "totalCount": len(list), "nodes": list,
				"pageInfo": map[string]any{"__typename": "PageInfo", "hasNextPage": false, "endCursor": nil},
			}, nil
		}),
	}, nil
}

// byNumber is a field that looks one of pulls up by its number, or
// GitHub's NOT_FOUND naming what.
func byNumber(pulls []any, what string) gqlResolver {
	return func(args map[string]any) (any, error) {
		n, _ := args["number"].(json.Number)
		for _, p := range pulls {
			if fmt.Sprint(p.(map[string]any)["number"]) == n.String() {
				return p, nil
			}
		}
		//lint:ignore ST1005 GitHub's own words, as gh prints them
		return nil, fmt.Errorf("Could not resolve to %s with the number of %s.", what, n)
	}
}

// gqlPull is a pull request the REST API created, as GraphQL's
// PullRequest: what it has of one, and empty lists for the rest.
func gqlPull(owner, name string, p map[string]any) map[string]any {
	empty := func(typ string) map[string]any {
		return map[string]any{"__typename": typ, "nodes": []any{}, "totalCount": 0,
			"pageInfo": map[string]any{"__typename": "PageInfo", "hasNextPage": false, "endCursor": nil}}
	}
	head, _ := p["head"].(map[string]any)
	base, _ := p["base"].(map[string]any)
	n, _ := p["number"].(int)
	return map[string]any{
		"__typename": "PullRequest", "id": GitHubNodeID("PullRequest", owner+"/"+name, n), "number": p["number"],
		"title": p["title"], "body": p["body"], "state": strings.ToUpper(fmt.Sprint(p["state"])), "url": p["html_url"],
		"isDraft": p["draft"], "maintainerCanModify": false, "mergeable": "MERGEABLE", "mergeStateStatus": "CLEAN", "additions": 0, "deletions": 0,
		"baseRefName": base["ref"], "headRefName": head["ref"], "headRefOid": "0000000000000000000000000000000000000000",
		"isCrossRepository": false, "createdAt": p["created_at"],
		"author":              map[string]any{"__typename": "Bot", "login": "cproxy-agent", "id": "BOT_kgDOagent"},
		"headRepositoryOwner": map[string]any{"__typename": "Organization", "id": "O_kgDO" + owner, "login": owner},
		"headRepository":      map[string]any{"__typename": "Repository", "id": GitHubNodeID("Repository", owner+"/"+name, 0), "name": name},
		"commits":             empty("PullRequestCommitConnection"),
		"reviewRequests":      empty("ReviewRequestConnection"),
		"reviews":             empty("PullRequestReviewConnection"),
		"assignees":           empty("UserConnection"),
		"labels":              empty("LabelConnection"),
		"projectCards":        empty("ProjectCardConnection"),
		"comments":            empty("IssueCommentConnection"),
		"milestone":           nil,
		"reactionGroups":      []any{},
	}
}

// gqlExec runs one query's selections over the fake's objects.
type gqlExec struct {
	doc  *ast.QueryDocument
	vars map[string]any
	errs []any
}

// object selects set of obj, GitHub's answer at path.
func (x *gqlExec) object(set ast.SelectionSet, obj map[string]any, path []any) map[string]any {
	out := map[string]any{}
	x.into(out, set, obj, path)
	return out
}

func (x *gqlExec) into(out map[string]any, set ast.SelectionSet, obj map[string]any, path []any) {
	typ, _ := obj["__typename"].(string)
	for _, s := range set {
		switch s := s.(type) {
		case *ast.InlineFragment:
			if s.TypeCondition == "" || s.TypeCondition == typ {
				x.into(out, s.SelectionSet, obj, path)
			}
		case *ast.FragmentSpread:
			if f := x.doc.Fragments.ForName(s.Name); f != nil && f.TypeCondition == typ {
				x.into(out, f.SelectionSet, obj, path)
			}
		case *ast.Field:
			at := append(append([]any{}, path...), s.Alias)
			v, ok := obj[s.Name]
			if !ok {
				x.errs = append(x.errs, map[string]any{"path": at, "extensions": map[string]any{"code": "undefinedField", "typeName": typ, "fieldName": s.Name},
					"message": fmt.Sprintf("Field '%s' doesn't exist on type '%s'", s.Name, typ)})
				continue
			}
			if r, ok := v.(gqlResolver); ok {
				args := map[string]any{}
				for _, a := range s.Arguments {
					args[a.Name], _ = a.Value.Value(x.vars)
					if i, ok := args[a.Name].(int64); ok {
						args[a.Name] = json.Number(strconv.FormatInt(i, 10))
					}
					if f, ok := args[a.Name].(float64); ok {
						args[a.Name] = json.Number(strconv.FormatFloat(f, 'f', -1, 64))
					}
				}
				var err error
				if v, err = r(args); err != nil {
					x.errs = append(x.errs, map[string]any{"type": "NOT_FOUND", "path": at, "message": err.Error()})
					out[s.Alias] = nil
					continue
				}
			}
			out[s.Alias] = x.value(s.SelectionSet, v, at)
		}
	}
}

func (x *gqlExec) value(set ast.SelectionSet, v any, path []any) any {
	switch v := v.(type) {
	case map[string]any:
		return x.object(set, v, path)
	case []any:
		list := make([]any, len(v))
		for i, e := range v {
			list[i] = x.value(set, e, append(append([]any{}, path...), i))
		}
		return list
	}
	return v
}
