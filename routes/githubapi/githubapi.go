// Package githubapi is cproxy's GitHub API route: GitHub's REST API under
// /api/v3/ (the path gh and Octokit use for a GitHub Enterprise host), for
// the requests a sandbox's policy allows on its repositories, forwarded
// with the real credential; and GitHub's GraphQL API (/api/graphql) for the
// queries of those repositories gh pr view and gh pr list send, decided with
// gqlpolicy (graphql.go).
package githubapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
)

const (
	prefix = "/api/"
	// rest is where GitHub Enterprise Server serves its REST API, and so
	// where gh sends it for any host but github.com.
	rest    = "/api/v3/"
	graphql = "/api/graphql"
	// maxPullBody bounds a pull request's body, read whole to decide it:
	// GitHub takes a description of 65536 characters, up to 4 bytes each.
	maxPullBody = 1 << 20
	// docsURL is the documentation_url of cproxy's refusals.
	docsURL = "https://github.com/cproxy/cproxy/blob/main/docs/github-api.md"
)

// queryParams are the query parameters the route forwards; any other is
// refused. They page, filter and sort the lists the table's GET requests
// answer (docs/github-api.md).
var queryParams = []string{
	"page", "per_page", "state", "sort", "direction", "head", "base", "since", "until",
	"sha", "path", "author", "committer", "ref", "status", "branch", "event", "actor",
	"created", "filter", "labels", "assignee", "creator", "mentioned", "milestone",
	"check_name", "app_id", "head_sha", "protected", "exclude_pull_requests",
}

// Kind registers the GitHub API route: /api/v3/ forwarded to the config's
// [upstream.githubapi].
var Kind = routes.Kind{Name: "githubapi", Prefix: prefix, Upstream: "githubapi", New: newRoute}

type route struct {
	fwd *routes.Forwarder
	// resolver looks up what GraphQL node IDs are, for mutations.
	resolver *resolver
	// app mints the GitHub App installation tokens REST and GraphQL
	// requests are sent with, one per sandbox, repositories and permissions (the core's,
	// Env.AppTokens, shared with the github route); nil: the upstream's
	// credential (a token) is sent.
	app *routes.AppTokens
}

func newRoute(env routes.Env) routes.Route {
	check := checkResponse
	if env.AppTokens != nil {
		check = env.AppTokens.CheckResponse("upstream.github.api_url names the GitHub API at upstream.githubapi.url", bearerToken)
	}
	// Redirects map the upstream's base onto /api/v3: a renamed
	// repository's /repositories/ID is then refused as not understood.
	fwd := env.NewForwarder("githubapi", rest, setCredential, check)
	fwd.RewriteLinks(linkPath)
	return &route{fwd: fwd, resolver: newResolver(fwd, env.Now), app: env.AppTokens}
}

// EndSandbox drops the App tokens minted for sandbox (routes.Ender).
func (g *route) EndSandbox(sandbox string) {
	if g.app != nil {
		g.app.EndSandbox(sandbox)
	}
}

func (g *route) Name() string                                    { return "githubapi" }
func (g *route) Prefix() string                                  { return prefix }
func (g *route) Close()                                          { g.fwd.Close() }
func (g *route) WriteError(w http.ResponseWriter, err error) int { return writeRESTError(w, err) }

// Sources is the API credential's source, when it has one, or the GitHub
// App's private key's.
func (g *route) Sources() []routes.Source {
	if g.app != nil {
		return []routes.Source{{Name: "upstream.github.private_key", Live: g.app.Key()}}
	}
	return g.fwd.Sources("upstream.githubapi.credential")
}

// request is a REST request as the route understood it.
type request struct {
	method      string
	owner, name string
	segs        []string // the path under /api/v3, split
	ep          endpoint
	query       url.Values
}

func (q request) repo() string { return q.owner + "/" + q.name }

func (g *route) Serve(a *routes.Call) {
	r := a.Request()
	sandbox := a.Session().Sandbox
	// Paths are checked as sent: any percent-encoding (%2F, %2e) means
	// the client means something other than the plain path.
	sent, _, _ := strings.Cut(r.RequestURI, "?")
	if r.URL.RawPath != "" || sent != r.URL.Path {
		a.Fail(routes.Refuse(routes.ErrForbidden, "non-canonical path %q for sandbox %s: send the path without percent-encoding; do not retry", routes.Clip(sent, 128), sandbox))
		return
	}
	if r.URL.Path == graphql {
		g.serveGraphQL(a, r, sandbox)
		return
	}
	q, err := parse(r, sandbox)
	if err != nil {
		a.Fail(err)
		return
	}
	a.SetTarget(q.repo() + " " + q.method + " " + q.ep.path)
	if q.ep.never != "" {
		a.Fail(routes.Refuse(routes.ErrForbidden, "%s %s is refused for sandbox %s: %s; do not retry", q.method, routes.Clip(r.URL.Path, 128), sandbox, q.ep.never))
		return
	}
	ask := policy.APIQuestion{Repo: q.repo(), Permission: q.ep.perm}
	a.SetQuestion(apiQuestion(ask))
	if err := a.Decide(func(prof *policy.Profile) (string, error) { return decide(a, prof, sandbox, ask) }); err != nil {
		a.Fail(err)
		return
	}
	// Only now, once the policy allows the request: a sandbox is told what
	// it may never do, not to wait for an operator.
	if up := g.fwd.Upstream(); !up.Configured() && up.Missing != "" {
		a.Fail(routes.Refuse(routes.ErrUnavailable, "no GitHub API credential is configured: %s", up.Missing))
		return
	}
	switch {
	case q.method == http.MethodGet:
		if r.ContentLength > 0 || len(r.TransferEncoding) > 0 {
			a.Fail(routes.Refuse(routes.ErrBadRequest, "GET %s takes no body", routes.Clip(r.URL.Path, 128)))
			return
		}
		r.Body, r.ContentLength = http.NoBody, 0
	case q.ep.perm == policy.APIPullsCreate:
		body, err := a.ReadBody(maxPullBody)
		if err != nil {
			a.Fail(err)
			return
		}
		if ask.Head, ask.Base, err = pullHeadBase(body, q.owner, sandbox); err != nil {
			a.Fail(err)
			return
		}
		a.SetTarget(q.repo() + " " + q.method + " " + q.ep.path + " " + ask.Head + "->" + ask.Base)
		a.SetQuestion(apiQuestion(ask))
		if err := a.Decide(func(prof *policy.Profile) (string, error) { return decide(a, prof, sandbox, ask) }); err != nil {
			a.Fail(err)
			return
		}
	}
	t := routes.Target{Path: "/" + strings.Join(q.segs, "/"), Query: q.query.Encode()}
	if g.app != nil {
		// Minted once the policy allows the request: the token reaches
		// this repository alone, with the one permission it needs.
		perms := appPermissions(q.ep)
		if perms == nil {
			a.Fail(routes.Refuse(routes.ErrForbidden, "%s %s is refused for sandbox %s: cproxy knows no GitHub App permission for it; do not retry", q.method, routes.Clip(r.URL.Path, 128), sandbox))
			return
		}
		cred, err := g.app.Token(r.Context(), sandbox, routes.AppScope{Owner: q.owner, Name: q.name, Permissions: perms})
		if err != nil {
			a.Fail(err)
			return
		}
		t.Credential = cred
	}
	g.fwd.Forward(a, r, t)
}

// parse checks r's path and query and finds its endpoint: a request that
// is outside a repository, that no endpoint matches or that has a query
// parameter not in queryParams is refused.
func parse(r *http.Request, sandbox string) (request, error) {
	p := r.URL.Path
	under, ok := strings.CutPrefix(p, rest)
	if !ok {
		return request{}, routes.Refuse(routes.ErrForbidden, "%s is not GitHub's API for sandbox %s: cproxy serves the REST API under /api/v3/ (set GH_HOST to cproxy's host and port); do not retry", routes.Clip(p, 128), sandbox)
	}
	segs := strings.Split(under, "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return request{}, routes.Refuse(routes.ErrForbidden, "%s has an empty, . or .. segment: refused for sandbox %s; do not retry", routes.Clip(p, 128), sandbox)
		}
	}
	if segs[0] != "repos" || len(segs) < 3 {
		return request{}, routes.Refuse(routes.ErrForbidden, "%s %s is refused for sandbox %s: it is outside any repository; cproxy serves only the API of the repositories the sandbox's policy allows (/repos/OWNER/REPO/…), never the user, organizations or search; do not retry", r.Method, routes.Clip(p, 128), sandbox)
	}
	if !ownerRE.MatchString(segs[1]) || !repoRE.MatchString(segs[2]) || strings.HasSuffix(strings.ToLower(segs[2]), ".git") {
		return request{}, routes.Refuse(routes.ErrForbidden, "%q is not a GitHub repository (OWNER/REPO): refused for sandbox %s; do not retry", routes.Clip(segs[1]+"/"+segs[2], 128), sandbox)
	}
	q := request{method: r.Method, owner: segs[1], name: segs[2], segs: segs}
	i := match(r.Method, segs)
	if i < 0 {
		return request{}, routes.Refuse(routes.ErrForbidden, "%s %s is not a request cproxy understands, so it is refused for sandbox %s (docs/github-api.md lists what is served); do not retry", r.Method, routes.Clip(p, 128), sandbox)
	}
	q.ep = endpoints[i]
	if q.ep.never != "" {
		return q, nil
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return request{}, routes.Refuse(routes.ErrBadRequest, "the query of %s cannot be read", routes.Clip(p, 128))
	}
	for k := range vals {
		if !slices.Contains(queryParams, k) {
			return request{}, routes.Refuse(routes.ErrForbidden, "query parameter %q is not one cproxy forwards (docs/github-api.md lists them): refused for sandbox %s", routes.Clip(k, 64), sandbox)
		}
	}
	q.query = vals
	return q, nil
}

// decide asks prof the request's question, and words its refusal. A pull
// request into a base the profile asks about (ask_pr_bases) goes on only
// with an operator's approval of it, asked for through a.
func decide(a *routes.Call, prof *policy.Profile, sandbox string, q policy.APIQuestion) (string, error) {
	ans := prof.AskAPI(q)
	if ans.Allow {
		return ans.Rule, nil
	}
	if ans.Ask {
		return ans.Rule, a.AskApproval(prof, pullApproval(q))
	}
	step, _ := ans.Refusal()
	switch step.Key {
	case "refs":
		return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeRefNotAllowed, "a pull request from branch %s of %s is refused for sandbox %s: the sandbox may not push that branch (allowed: %s); open it from a branch the policy's refs allow", q.Head, q.Repo, sandbox, routes.Listed(prof.AllowedRefs(q.Repo, false, false)))
	case "pr_bases":
		return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeRefNotAllowed, "a pull request into %s of %s is refused for sandbox %s: that base is not in the policy's pr_bases (allowed: %s)", q.Base, q.Repo, sandbox, routes.Listed(prof.AllowedPRBases(q.Repo)))
	}
	return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeAPINotAllowed, "GitHub API %q on repository %s is not allowed for sandbox %s (allowed on %s: %s)", q.Permission, q.Repo, sandbox, q.Repo, routes.Listed(prof.AllowedAPI(q.Repo)))
}

// pullDetail is a pull request's account in its approval request.
type pullDetail struct {
	Repository string `json:"repository"`
	Head       string `json:"head"`
	Base       string `json:"base"`
}

// pullApproval is the approval request of a pull request the policy
// answered with ask: the repository as the request names it, its head
// and its base, whether it is opened through REST or GraphQL.
func pullApproval(q policy.APIQuestion) routes.ApprovalRequest {
	return routes.ApprovalRequest{
		Subject: q.Repo + " pull request " + q.Head + " into " + q.Base,
		Detail:  pullDetail{Repository: q.Repo, Head: q.Head, Base: q.Base},
		What:    fmt.Sprintf("a pull request into %s of %s", q.Base, q.Repo),
	}
}

// pullKeys are the keys of GitHub's "create a pull request" body, as
// GitHub reads them: exactly, in this case.
var pullKeys = []string{"title", "body", "head", "head_repo", "base", "draft", "maintainer_can_modify", "issue"}

// pullHeadBase reads a pull request's head and base branches from its
// JSON body: a head of the form OWNER:BRANCH must name owner, the
// repository's own (a fork's branch is not one the sandbox pushed), and a
// body with another key (in any other case too: encoding/json would match
// "HEAD" to head, GitHub would not), a key twice or head_repo is refused.
func pullHeadBase(body []byte, owner, sandbox string) (head, base string, err error) {
	bad := func(format string, args ...any) (string, string, error) {
		return "", "", routes.Refuse(routes.ErrForbidden, "the pull request is refused for sandbox %s: "+format+"; do not retry", append([]any{sandbox}, args...)...)
	}
	if err := uniqueKeys(body); err != nil {
		return bad("its body %v", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return bad("its body is not a JSON object")
	}
	for k := range fields {
		if !slices.Contains(pullKeys, k) {
			return bad("its body has %q, not a key GitHub takes (%s)", routes.Clip(k, 64), strings.Join(pullKeys, ", "))
		}
	}
	if _, ok := fields["head_repo"]; ok {
		return bad("head_repo (a pull request from another repository) is not served")
	}
	if json.Unmarshal(fields["head"], &head) != nil || json.Unmarshal(fields["base"], &base) != nil {
		return bad("it needs head and base, each a branch name")
	}
	if o, branch, ok := strings.Cut(head, ":"); ok {
		if !strings.EqualFold(o, owner) {
			return bad("its head %q is in another owner's repository", routes.Clip(head, 128))
		}
		head = branch
	}
	if !branchName(head) || !branchName(base) {
		return bad("it needs head and base, each a branch name")
	}
	return head, base, nil
}

// branchName reports whether s can be a branch name as git takes one.
func branchName(s string) bool {
	if s == "" || len(s) > 255 || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") ||
		strings.HasSuffix(s, ".lock") || strings.Contains(s, "..") || strings.Contains(s, "//") || strings.Contains(s, "@{") {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?*[\\", c) {
			return false
		}
	}
	return true
}

// uniqueKeys refuses a JSON object with a key twice: which one GitHub
// reads is a guess that cproxy must not make.
func uniqueKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("is not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return errors.New("is not JSON")
		}
		k, _ := t.(string)
		if seen[k] {
			return fmt.Errorf("has %q twice", routes.Clip(k, 64))
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return errors.New("is not JSON")
		}
	}
	if _, err := dec.Token(); err != nil {
		return errors.New("is not JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("has more than one JSON value")
	}
	return nil
}

// restError is GitHub's REST error shape, whose message gh and Octokit
// print.
type restError struct {
	Message          string `json:"message"`
	DocumentationURL string `json:"documentation_url"`
	// Code is the refusal's stable code (docs/refusals.md), which gh does
	// not print.
	Code string `json:"code"`
}

func writeRESTError(w http.ResponseWriter, err error) int {
	return writeJSON(w, err, restError{Message: routes.Message(err), DocumentationURL: docsURL, Code: routes.Code(err)})
}

// graphQLError is GraphQL's error shape, {"errors": [{"message": …}]}.
type graphQLError struct {
	Errors []graphQLMessage `json:"errors"`
}

// graphQLMessage is one of a GraphQL error's errors: its message, and the
// refusal's stable code where GraphQL keeps a code, in its extensions.
type graphQLMessage struct {
	Message    string            `json:"message"`
	Extensions graphQLExtensions `json:"extensions"`
}

type graphQLExtensions struct {
	Code string `json:"code"`
}

func writeGraphQLError(w http.ResponseWriter, err error) int {
	var e graphQLError
	e.Errors = append(e.Errors, graphQLMessage{Message: routes.Message(err), Extensions: graphQLExtensions{Code: routes.Code(err)}})
	return writeJSON(w, err, e)
}

func writeJSON(w http.ResponseWriter, err error, v any) int {
	code, _ := routes.Status(err)
	body, _ := json.Marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if errors.Is(err, routes.ErrUnauthorized) {
		h.Set("WWW-Authenticate", `Bearer realm="cproxy"`)
	}
	routes.SetRetryAfter(h, err)
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
	return code
}

// setCredential sends the real token as GitHub's API takes every kind of
// token: Authorization: Bearer. With no credential (credential = "")
// requests go without one.
func setCredential(h http.Header, cred secrets.Secret) {
	if !cred.IsZero() {
		h.Set("Authorization", "Bearer "+cred.Reveal())
	}
}

// checkResponse turns the upstream refusing cproxy's credential into a 502
// for the operator: passed through, the client would take the 401 for the
// sandbox token's fault.
func checkResponse(resp *http.Response) error {
	return routes.CredentialRefused(resp, "githubapi", "GitHub API")
}

// apiQuestion is q as the audit record keeps it.
func apiQuestion(q policy.APIQuestion) policy.Question {
	return policy.Question{Route: "api", Repo: q.Repo, Permission: q.Permission, Head: q.Head, Base: q.Base}
}
