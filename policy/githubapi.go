package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// API permissions: what a RepoRule's api list may name, each a kind of
// request the githubapi route serves on the rule's repositories
// (docs/github-api.md lists the requests of each).
const (
	// APIRead reads the repository: its metadata, pull requests, issues,
	// comments, reviews, commits, branches, check runs, statuses, and
	// Actions workflow runs and jobs.
	APIRead = "read"
	// APIPullsCreate opens a pull request from a branch the rule's
	// repository's push rules let the sandbox push (refs) into a base the
	// rule's pr_bases name.
	APIPullsCreate = "pulls:create"
	// APIPullsRequestReviewers asks for reviews of a pull request.
	APIPullsRequestReviewers = "pulls:request-reviewers"
	// APIIssuesCreate opens an issue.
	APIIssuesCreate = "issues:create"
	// APIIssuesComment comments on an issue or a pull request's
	// conversation.
	APIIssuesComment = "issues:comment"
)

// APIPermissions are the names a RepoRule's api list may hold.
var APIPermissions = []string{APIRead, APIPullsCreate, APIPullsRequestReviewers, APIIssuesCreate, APIIssuesComment}

// checkAPI checks a repos entry's api, pr_bases and ask_pr_bases.
func checkAPI(d *decoder, ep path, r RepoRule) {
	checkGlobs(d, ep.key("api"), r.API, func(name string) error {
		if !slices.Contains(APIPermissions, name) {
			return fmt.Errorf("is not an API permission (use %s)", strings.Join(APIPermissions, ", "))
		}
		return nil
	})
	for k, globs := range map[string][]string{"pr_bases": r.PRBases, "ask_pr_bases": r.AskPRBases} {
		if len(globs) > 0 && !slices.Contains(r.API, APIPullsCreate) {
			d.atKey(ep.key(k), `%s.%s: only with "pulls:create" in api (add it, or drop %s)`, ep, k, k)
		}
	}
	checkGlobs(d, ep.key("pr_bases"), r.PRBases, checkBranchGlob)
	checkGlobs(d, ep.key("ask_pr_bases"), r.AskPRBases, checkBranchGlob)
}

// checkBranchGlob refuses a pr_bases glob written as a full ref name or
// that no branch name can match.
func checkBranchGlob(g string) error {
	if strings.HasPrefix(g, "refs/") {
		return fmt.Errorf("is a ref name: write the branch name, %q", strings.TrimPrefix(strings.TrimPrefix(g, "refs/"), "heads/"))
	}
	if strings.ContainsAny(g, "~^:\\") || strings.Contains(g, "..") || strings.Contains(g, "@{") {
		return errors.New("can never match: branch names cannot contain ~ ^ : \\ .. or @{")
	}
	return nil
}

// API decides whether the profile allows perm (one of APIPermissions)
// through GitHub's API on a repository ("owner/name"): a repos rule
// matching it whose api lists perm.
func (pr *Profile) API(ownerName, perm string) Decision {
	name, refused := pr.repoQuestion(ownerName)
	if refused != nil {
		return *refused
	}
	matched := ""
	for _, r := range pr.Repos {
		if !matchGlob(strings.ToLower(r.Repo), name) {
			continue
		}
		if slices.Contains(r.API, perm) {
			return Decision{Allow: true, Rule: pr.rule(".repos[%q].api[%q]", r.Repo, perm)}
		}
		if matched == "" {
			matched = r.Repo
		}
	}
	if matched != "" {
		return Decision{Rule: pr.rule(".repos[%q]: api does not list %q", matched, perm)}
	}
	return Decision{Rule: pr.rule(": no repos entry matches")}
}

// PRBase decides whether a pull request opened through the API on a
// repository may target base, a branch name: a pr_bases glob of a rule
// for the repository whose api lists pulls:create. It asks (Decision.Ask)
// when such a rule has an ask_pr_bases glob matching base, whatever
// pr_bases say.
func (pr *Profile) PRBase(ownerName, base string) Decision {
	name, refused := pr.repoQuestion(ownerName)
	if refused != nil {
		return *refused
	}
	matched := ""
	var allowed *Decision
	for _, r := range pr.Repos {
		if !matchGlob(strings.ToLower(r.Repo), name) || !slices.Contains(r.API, APIPullsCreate) {
			continue
		}
		for _, g := range r.AskPRBases {
			if matchGlob(g, base) {
				return Decision{Ask: true, Rule: pr.rule(".repos[%q].ask_pr_bases[%q]", r.Repo, g)}
			}
		}
		for _, g := range r.PRBases {
			if allowed == nil && matchGlob(g, base) {
				allowed = &Decision{Allow: true, Rule: pr.rule(".repos[%q].pr_bases[%q]", r.Repo, g)}
			}
		}
		if matched == "" {
			matched = r.Repo
		}
	}
	if allowed != nil {
		return *allowed
	}
	if matched != "" {
		return Decision{Rule: pr.rule(".repos[%q]: no pr_bases entry matches", matched)}
	}
	return Decision{Rule: pr.rule(`: no repos entry with "pulls:create" matches`)}
}

// repoQuestion starts a question about a repository: its name as rules
// match it, or the refusal of a nil profile or of a name that is no
// repository.
func (pr *Profile) repoQuestion(ownerName string) (string, *Decision) {
	if pr == nil {
		return "", &Decision{Rule: "no profile"}
	}
	name, ok := repoName(ownerName)
	if !ok {
		return "", &Decision{Rule: pr.rule(": %q is not an owner/name repository", ownerName)}
	}
	return name, nil
}

// APIQuestion is a request to GitHub's REST API on one repository, or one
// of a GraphQL request's questions (AskGraphQL).
type APIQuestion struct {
	// Repo is the repository, "owner/name".
	Repo string `json:"repo"`
	// Permission is what the request needs, one of APIPermissions.
	Permission string `json:"permission"`
	// Head and Base are, for APIPullsCreate, the pull request's head
	// branch (in Repo) and base branch, as its body names them; both
	// empty: not read yet, and their steps are deferred.
	Head string `json:"head,omitempty"`
	Base string `json:"base,omitempty"`
}

// AskGraphQL asks a GraphQL request's questions, qs (the repositories its
// queries read, the repositories of the nodes and forks' parents they
// read, and each mutation on its target's repository), in order, each as
// AskAPI asks it: the first that does not allow answers. A request that
// reads no repository (GitHub's public schema; only mutations, before
// their targets are known) asks none, and is allowed to a profile that
// may use the API on some repository: a repos entry with an api list.
func (pr *Profile) AskGraphQL(qs []APIQuestion) Answer {
	if len(qs) == 0 {
		d := Decision{Rule: "no repos entry with api"}
		if pr != nil {
			for _, r := range pr.Repos {
				if len(r.API) > 0 {
					d = Decision{Allow: true, Rule: pr.rule(".repos[%q].api", r.Repo)}
					break
				}
			}
		}
		return oneStep("GitHub's GraphQL API", "api", d)
	}
	var a Answer
	for _, q := range qs {
		a = pr.AskAPI(q)
		if !a.Allow {
			return a
		}
	}
	return a
}

// AskAPI asks whether the profile may make a request of GitHub's API:
// the repository's api, then for a pull request its head against the
// repository's push rules' refs (as refs/heads/HEAD) and its base against
// pr_bases (and ask_pr_bases). The answer's Rule is the api rule's unless
// a later step refuses or asks.
func (pr *Profile) AskAPI(q APIQuestion) Answer {
	a := newAnswer()
	d := pr.API(q.Repo, q.Permission)
	a.Rule = d.Rule
	if !a.ask("api "+q.Permission+" on "+q.Repo, "api", d, "") || q.Permission != APIPullsCreate {
		return a
	}
	if q.Head == "" && q.Base == "" {
		a.later("pull request head", "refs", pr.rule(".repos[%q].refs", q.Repo), "the head branch is read from the request's body and must be one the sandbox may push")
		a.later("pull request base", "pr_bases", pr.rule(".repos[%q].pr_bases", q.Repo), "the base branch is read from the request's body")
		return a
	}
	head := pr.Ref(q.Repo, "refs/heads/"+q.Head, false, false)
	if head.Ask {
		// A branch pushed only with an approval is no head a pull
		// request is opened from: that approval was of a push.
		head = Decision{Rule: head.Rule + ": pushed only with an approval"}
	}
	if !a.ask("head refs/heads/"+q.Head, "refs", head, "") {
		return a
	}
	a.ask("base "+q.Base, "pr_bases", pr.PRBase(q.Repo, q.Base), "")
	return a
}
