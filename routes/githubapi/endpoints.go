package githubapi

import (
	"regexp"
	"strings"

	"github.com/cproxy/cproxy/policy"
)

// endpoint is one line of the table of GitHub REST API requests the route
// knows: a method and a path template under /api/v3, and either the
// policy permission it needs or why it is always refused.
type endpoint struct {
	method string // "*" is any method
	path   string // segments; {name} is one, {rest...} any number, possibly none
	perm   string // a policy.APIPermissions name; "" for never
	never  string // why the request is refused whatever the policy says
}

// endpoints is the route's whole knowledge of GitHub's REST API: a request
// is served as the first line that matches it says, and one that matches
// none is refused. docs/github-api.md lists the same lines.
var endpoints = []endpoint{
	{"GET", "/repos/{owner}/{repo}", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/readme", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/pulls", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/pulls/{number}", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/pulls/{number}/commits", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/pulls/{number}/files", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/pulls/{number}/comments", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/pulls/{number}/reviews", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/pulls/{number}/requested_reviewers", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/issues", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/issues/{number}", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/issues/{number}/comments", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/commits", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/commits/{ref}", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/commits/{ref}/status", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/commits/{ref}/statuses", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/check-runs/{id}", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/branches", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/branches/{ref}", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/actions/runs", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/actions/runs/{id}", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/actions/runs/{id}/jobs", policy.APIRead, ""},
	{"GET", "/repos/{owner}/{repo}/actions/jobs/{id}", policy.APIRead, ""},
	{"POST", "/repos/{owner}/{repo}/pulls", policy.APIPullsCreate, ""},
	{"POST", "/repos/{owner}/{repo}/pulls/{number}/requested_reviewers", policy.APIPullsRequestReviewers, ""},
	{"POST", "/repos/{owner}/{repo}/issues", policy.APIIssuesCreate, ""},
	{"POST", "/repos/{owner}/{repo}/issues/{number}/comments", policy.APIIssuesComment, ""},

	{"PUT", "/repos/{owner}/{repo}/pulls/{number}/merge", "", "merging a pull request is never allowed through cproxy (a person merges)"},
	{"*", "/repos/{owner}/{repo}/pulls/{number}/reviews/{rest...}", "", "submitting, approving or dismissing reviews is never allowed through cproxy (a person reviews)"},
	{"*", "/repos/{owner}/{repo}/merges", "", "merging is never allowed through cproxy (a person merges)"},
	{"PATCH", "/repos/{owner}/{repo}", "", "repository settings are never changed through cproxy"},
	{"DELETE", "/repos/{owner}/{repo}", "", "repository settings are never changed through cproxy"},
	{"*", "/repos/{owner}/{repo}/branches/{ref}/protection/{rest...}", "", "branch protection is never changed or read through cproxy"},
	{"*", "/repos/{owner}/{repo}/rulesets/{rest...}", "", "rulesets are never changed or read through cproxy"},
	{"*", "/repos/{owner}/{repo}/collaborators/{rest...}", "", "collaborators are never changed or read through cproxy"},
	{"*", "/repos/{owner}/{repo}/keys/{rest...}", "", "deploy keys are never changed or read through cproxy"},
	{"*", "/repos/{owner}/{repo}/hooks/{rest...}", "", "webhooks are never changed or read through cproxy"},
	{"*", "/repos/{owner}/{repo}/actions/secrets/{rest...}", "", "Actions secrets are never changed or read through cproxy"},
	{"*", "/repos/{owner}/{repo}/actions/variables/{rest...}", "", "Actions variables are never changed or read through cproxy"},
	{"*", "/repos/{owner}/{repo}/actions/workflows/{rest...}", "", "Actions workflows are never changed or run through cproxy"},
	{"*", "/repos/{owner}/{repo}/contents/.github/workflows/{rest...}", "", "Actions workflow files are never changed through cproxy"},
	{"*", "/repos/{owner}/{repo}/contents/{rest...}", "", "files are not read or changed through the contents API: fetch and push them with git"},
	{"*", "/repos/{owner}/{repo}/releases/{rest...}", "", "releases are never made or changed through cproxy"},
}

// parsed are the endpoints with their paths split, in table order.
var parsed = func() [][]string {
	segs := make([][]string, len(endpoints))
	for i, e := range endpoints {
		segs[i] = strings.Split(strings.TrimPrefix(e.path, "/"), "/")
	}
	return segs
}()

// What a template's variables accept. owner and repo have GitHub's name
// rules (as the github route checks them); a ref is a branch name or a
// commit, one segment.
var (
	ownerRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}$`)
	repoRE   = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	numberRE = regexp.MustCompile(`^[1-9][0-9]{0,18}$`)
	refRE    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,255}$`)
	varRE    = map[string]*regexp.Regexp{"{owner}": ownerRE, "{repo}": repoRE, "{number}": numberRE, "{id}": numberRE, "{ref}": refRE}
)

// match is the index of the first endpoint that method and segs (the
// path under /api/v3, split) match, or -1.
func match(method string, segs []string) int {
	for i, e := range endpoints {
		if (e.method == "*" || e.method == method) && matchSegments(parsed[i], segs) {
			return i
		}
	}
	return -1
}

func matchSegments(tmpl, segs []string) bool {
	for i, t := range tmpl {
		if t == "{rest...}" {
			return true
		}
		if i >= len(segs) {
			return false
		}
		if re, ok := varRE[t]; ok {
			if !re.MatchString(segs[i]) {
				return false
			}
		} else if t != segs[i] {
			return false
		}
	}
	return len(tmpl) == len(segs)
}
