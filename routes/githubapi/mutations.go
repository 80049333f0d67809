package githubapi

import (
	"maps"
	"slices"
	"strings"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/githubapi/gqlpolicy"
)

// mutationRule is a GraphQL mutation the route serves: the permission it
// needs, the input key naming its target (a node ID, resolved through
// GitHub before deciding) and the types that target may be, the input
// keys GitHub's input type has that it forwards (any other is refused),
// and what of its answer a mutation may select, as paths from its field.
type mutationRule struct {
	perm    string
	target  string
	types   []string
	keys    []string
	selects []string
}

// mutationRules are the mutations served (docs/github-api.md), each the
// GraphQL twin of a REST request the endpoint table serves.
var mutationRules = map[string]mutationRule{
	"createPullRequest": {
		perm: policy.APIPullsCreate, target: "repositoryId", types: []string{"Repository"},
		keys:    []string{"repositoryId", "baseRefName", "headRefName", "headRepositoryId", "title", "body", "draft", "maintainerCanModify", "clientMutationId"},
		selects: append([]string{"clientMutationId"}, prefixed("pullRequest.", pullFields)...),
	},
	"addComment": {
		perm: policy.APIIssuesComment, target: "subjectId", types: []string{"PullRequest", "Issue"},
		keys:    []string{"subjectId", "body", "clientMutationId"},
		selects: []string{"clientMutationId", "commentEdge.node.id", "commentEdge.node.url", "commentEdge.node.body", "commentEdge.node.createdAt"},
	},
	"createIssue": {
		perm: policy.APIIssuesCreate, target: "repositoryId", types: []string{"Repository"},
		keys:    []string{"repositoryId", "title", "body", "assigneeIds", "labelIds", "milestoneId", "issueTemplate", "clientMutationId"},
		selects: []string{"clientMutationId", "issue.id", "issue.url", "issue.number", "issue.title"},
	},
	"requestReviews": {
		perm: policy.APIPullsRequestReviewers, target: "pullRequestId", types: []string{"PullRequest"},
		keys:    []string{"pullRequestId", "userIds", "teamIds", "union", "clientMutationId"},
		selects: []string{"clientMutationId", "pullRequest.id", "pullRequest.url", "pullRequest.number"},
	},
}

// neverMutations are mutations refused whatever the policy, with why: the
// same reasons as the REST requests the endpoint table never serves. Any
// other mutation not in mutationRules is refused as not served.
var neverMutations = map[string]string{
	"mergePullRequest":           "merging a pull request is never allowed through cproxy (a person merges)",
	"mergeBranch":                "merging is never allowed through cproxy (a person merges)",
	"enablePullRequestAutoMerge": "auto-merge merges without a person, so it is never allowed through cproxy",
	"enqueuePullRequest":         "the merge queue merges without a person, so it is never allowed through cproxy",
	"addPullRequestReview":       "reviews are never submitted through cproxy (a person reviews)",
	"submitPullRequestReview":    "reviews are never submitted through cproxy (a person reviews)",
	"dismissPullRequestReview":   "reviews are never dismissed through cproxy (a person reviews)",
	"updatePullRequestReview":    "reviews are never changed through cproxy (a person reviews)",
	"deletePullRequestReview":    "reviews are never changed through cproxy (a person reviews)",
	"createRef":                  "branches and tags go through git, under the push policy",
	"updateRef":                  "branches and tags go through git, under the push policy",
	"updateRefs":                 "branches and tags go through git, under the push policy",
	"deleteRef":                  "branches and tags go through git, under the push policy",
	"createCommitOnBranch":       "commits go through git, under the push policy",
	"updateRepository":           "repository settings are never changed through cproxy",
	"createBranchProtectionRule": "branch protection is never changed through cproxy",
	"updateBranchProtectionRule": "branch protection is never changed through cproxy",
	"deleteBranchProtectionRule": "branch protection is never changed through cproxy",
	"createRepositoryRuleset":    "rulesets are never changed through cproxy",
	"updateRepositoryRuleset":    "rulesets are never changed through cproxy",
	"deleteRepositoryRuleset":    "rulesets are never changed through cproxy",
	"updatePullRequestBranch":    "a pull request's branch is moved through git, under the push policy",
}

// mutation is one mutation of a request, checked against its rule: what
// it needs of the policy once its target is resolved.
type mutation struct {
	name       string
	perm       string
	target     string // the target's node ID
	key        string // the input key that names it
	types      []string
	head, base string // createPullRequest's branches
	headOwner  string // the owner a head written OWNER:BRANCH names, "" for none
}

// checkMutation checks m against its rule, whatever the policy: a mutation
// not served, an input key its rule does not list, a target that is not
// one string ID, a pull request from another repository or a branch name
// git would not take is refused, as is a selection of its answer outside
// the rule's paths (checked by checkPaths, with paths).
func checkMutation(m gqlpolicy.Mutation, sandbox string) (mutation, error) {
	refusal := func(format string, args ...any) error { return gqlRefusal(sandbox, format, args...) }
	if why, ok := neverMutations[m.Name]; ok {
		return mutation{}, refusal("the mutation %s is refused: %s", m.Name, why)
	}
	rule, ok := mutationRules[m.Name]
	if !ok {
		return mutation{}, refusal("the mutation %s is not one cproxy serves (%s)", routes.Clip(m.Name, 64), servedMutations())
	}
	for _, k := range slices.Sorted(maps.Keys(m.Input)) {
		if !slices.Contains(rule.keys, k) {
			return mutation{}, refusal("the input of %s has %s, not a key cproxy forwards (%s)", m.Name, routes.Clip(k, 64), strings.Join(rule.keys, ", "))
		}
	}
	id, ok := m.Input[rule.target].(string)
	if !ok || id == "" {
		return mutation{}, refusal("%s needs %s, the node ID of what it changes, as a string", m.Name, rule.target)
	}
	out := mutation{name: m.Name, perm: rule.perm, target: id, key: rule.target, types: rule.types}
	if m.Name == "createPullRequest" {
		if h, ok := m.Input["headRepositoryId"]; ok && h != nil && h != id {
			return mutation{}, refusal("a pull request from another repository (headRepositoryId) is not served")
		}
		head, _ := m.Input["headRefName"].(string)
		base, _ := m.Input["baseRefName"].(string)
		if o, branch, ok := strings.Cut(head, ":"); ok {
			out.headOwner, head = o, branch
		}
		if !branchName(head) || !branchName(base) {
			return mutation{}, refusal("createPullRequest needs headRefName and baseRefName, each a branch name")
		}
		out.head, out.base = head, base
	}
	return out, nil
}

// mutationPaths is every path a mutation's answer may be selected by:
// each rule's selects under its name, and the paths leading to them.
var mutationPaths = func() map[string]bool {
	var paths []string
	for name, rule := range mutationRules {
		paths = append(paths, prefixed(name+".", rule.selects)...)
	}
	return pathSet(paths)
}()

func servedMutations() string {
	return "those served: " + strings.Join(slices.Sorted(maps.Keys(mutationRules)), ", ")
}

func prefixed(prefix string, list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = prefix + s
	}
	return out
}

// pathSet is paths and every path leading to one of them.
func pathSet(paths []string) map[string]bool {
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
}
