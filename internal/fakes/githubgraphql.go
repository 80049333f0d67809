package fakes

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// gqlResolver is a field that takes arguments: it returns the field's
// value (an object is a map with its __typename) or GitHub's error.
type gqlResolver func(args map[string]any) (any, error)

// graphql answers POST /graphql as GitHub does for the queries gh 2.23
// sends for gh pr view and gh pr list: repository(owner:, name:) with its
// pull requests. A field it does not know is GitHub's "doesn't exist on
// type" error, a repository or pull request it does not have GitHub's
// NOT_FOUND; mutations are not served.
func (g *GitHubREST) graphql(w http.ResponseWriter, body []byte) {
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
	if op == nil || op.Operation != ast.Query {
		g.json(w, http.StatusOK, map[string]any{"errors": []any{map[string]any{"message": "the fake GitHub GraphQL API serves one query"}}})
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
	x := gqlExec{doc: doc, vars: vars}
	data := x.object(op.SelectionSet, map[string]any{"__typename": "Query", "repository": gqlResolver(g.gqlRepository)}, nil)
	out := map[string]any{"data": data}
	if len(x.errs) > 0 {
		out["errors"] = x.errs
	}
	g.json(w, http.StatusOK, out)
}

// gqlRepository is Query.repository.
func (g *GitHubREST) gqlRepository(args map[string]any) (any, error) {
	owner, _ := args["owner"].(string)
	name, _ := args["name"].(string)
	if !g.has(owner + "/" + name) {
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
	return map[string]any{
		"__typename": "Repository", "id": "R_kgDOacme", "name": name, "nameWithOwner": owner + "/" + name,
		"url": "https://github.com/" + owner + "/" + name, "isPrivate": true,
		"owner": map[string]any{"__typename": "Organization", "id": "O_kgDOacme", "login": owner},
		"pullRequest": gqlResolver(func(args map[string]any) (any, error) {
			n, _ := args["number"].(json.Number)
			for _, p := range nodes {
				if fmt.Sprint(p.(map[string]any)["number"]) == n.String() {
					return p, nil
				}
			}
			//lint:ignore ST1005 GitHub's own words, as gh prints them
			return nil, fmt.Errorf("Could not resolve to a PullRequest with the number of %s.", n)
		}),
		"pullRequests": map[string]any{
			"__typename": "PullRequestConnection", "totalCount": len(nodes), "nodes": nodes,
			"pageInfo": map[string]any{"__typename": "PageInfo", "hasNextPage": false, "endCursor": nil},
		},
	}, nil
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
	return map[string]any{
		"__typename": "PullRequest", "id": "PR_kwDOacme" + fmt.Sprint(p["number"]), "number": p["number"],
		"title": p["title"], "body": p["body"], "state": strings.ToUpper(fmt.Sprint(p["state"])), "url": p["html_url"],
		"isDraft": p["draft"], "maintainerCanModify": false, "mergeable": "MERGEABLE", "additions": 0, "deletions": 0,
		"baseRefName": base["ref"], "headRefName": head["ref"], "isCrossRepository": false, "createdAt": p["created_at"],
		"author":              map[string]any{"__typename": "Bot", "login": "cproxy-agent", "id": "BOT_kgDOagent"},
		"headRepositoryOwner": map[string]any{"__typename": "Organization", "id": "O_kgDOacme", "login": owner},
		"headRepository":      map[string]any{"__typename": "Repository", "id": "R_kgDOacme", "name": name},
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
