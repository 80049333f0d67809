package fakes

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GitHubRESTOptions configure a fake GitHub REST API.
type GitHubRESTOptions struct {
	// Token, if set, is the only token the API accepts (as Authorization:
	// Bearer or token); every request without it gets GitHub's 401.
	Token string
	// Repos are the repositories it has, "owner/name", each with a main
	// branch.
	Repos []string
	// Parents are the repositories some of Repos were forked from, by the
	// fork's "owner/name" in lower case; GraphQL's parent is null for the
	// others.
	Parents map[string]string
	// TLS also serves the same API over HTTPS at TLSURL, under the paths
	// of GitHub Enterprise Server (/api/v3/... and /api/graphql), which is
	// how gh reaches any host but github.com: for gh run directly beside
	// gh through cproxy's TLS listener.
	TLS bool
	// Forget keeps no record of the requests (Requests returns none), for
	// a benchmark that sends hundreds of thousands of them.
	Forget bool
}

// GitHubRESTRequest is one request the API received.
type GitHubRESTRequest struct {
	Method string
	Path   string // as sent, still percent-encoded
	Query  string
	Header http.Header
	Body   []byte
}

// GitHubREST is GitHub's REST API on loopback, at the root of its URL as
// api.github.com serves it, for the requests cproxy's githubapi route
// forwards: a repository, its pull requests and issues, and comments.
// Its answers have the fields of GitHub's (docs.github.com/rest) that
// clients read; anything else is GitHub's 404. POST /graphql is GitHub's
// GraphQL API for the queries gh pr view and gh pr list send
// (githubgraphql.go), over the same pull requests.
type GitHubREST struct {
	URL string
	// TLSURL is the API over HTTPS, with GitHubRESTOptions.TLS; its
	// certificate, for the client to trust, is CertPEM. Empty without.
	TLSURL   string
	CertPEM  []byte
	opts     GitHubRESTOptions
	srv, tls *httptest.Server

	mu    sync.Mutex
	reqs  []GitHubRESTRequest
	pulls map[string][]map[string]any // by repository, lower-case
	next  int
	// mutations are the GraphQL mutations run, in order.
	mutations []GitHubMutation
	// scoped are the tokens it takes beside opts.Token, each for the
	// repositories (lower case) it was added for, as a GitHub App's
	// installation tokens.
	scoped map[string]map[string]bool
}

// AddScopedToken makes the API take token, as Authorization: Bearer or
// token, for the repository repo ("owner/name") and the others it was
// added for alone, as GitHub takes an App installation token narrowed to
// them. On GraphQL, such a token reads and changes only those
// repositories: any other is GitHub's NOT_FOUND.
func (g *GitHubREST) AddScopedToken(token, repo string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.scoped == nil {
		g.scoped = map[string]map[string]bool{}
	}
	if g.scoped[token] == nil {
		g.scoped[token] = map[string]bool{}
	}
	g.scoped[token][strings.ToLower(repo)] = true
}

// authorized says what r may reach: every repository (all) when it
// carries opts.Token or the API has none; else the repositories of its
// scoped token, for GraphQL or a REST path under one of them (nil when it
// may reach nothing).
func (g *GitHubREST) authorized(r *http.Request) (all bool, repos map[string]bool) {
	t := g.opts.Token
	if t == "" {
		return true, nil
	}
	auth := r.Header.Get("Authorization")
	if auth == "Bearer "+t || auth == "token "+t {
		return true, nil
	}
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		tok, _ = strings.CutPrefix(auth, "token ")
	}
	g.mu.Lock()
	repos = g.scoped[tok]
	g.mu.Unlock()
	if tok == "" || repos == nil {
		return false, nil
	}
	if r.URL.Path == "/graphql" {
		return false, repos
	}
	segs := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(segs) >= 3 && segs[0] == "repos" && repos[strings.ToLower(segs[1]+"/"+segs[2])] {
		return false, repos
	}
	return false, nil
}

// NewGitHubREST starts a fake GitHub REST API; Close stops it.
func NewGitHubREST(o GitHubRESTOptions) *GitHubREST {
	g := &GitHubREST{opts: o, pulls: map[string][]map[string]any{}, next: 1}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	g.URL = g.srv.URL
	if o.TLS {
		// HTTP/2, as GitHub and cproxy's TLS listener speak it to gh.
		g.tls = httptest.NewUnstartedServer(http.HandlerFunc(g.serveEnterprise))
		g.tls.EnableHTTP2 = true
		g.tls.StartTLS()
		g.TLSURL = g.tls.URL
		g.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.tls.Certificate().Raw})
	}
	return g
}

// Close stops the API.
func (g *GitHubREST) Close() {
	g.srv.Close()
	if g.tls != nil {
		g.tls.Close()
	}
}

// serveEnterprise serves the API under GitHub Enterprise Server's paths:
// /api/v3/X is the REST API's /X, /api/graphql its /graphql.
func (g *GitHubREST) serveEnterprise(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case p == "/api/graphql":
		r.URL.Path = "/graphql"
	case strings.HasPrefix(p, "/api/v3/"):
		r.URL.Path = strings.TrimPrefix(p, "/api/v3")
	default:
		gitHubRESTError(w, http.StatusNotFound, "Not Found")
		return
	}
	r.URL.RawPath = ""
	g.serve(w, r)
}

// Requests returns what the API received, in order.
func (g *GitHubREST) Requests() []GitHubRESTRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]GitHubRESTRequest(nil), g.reqs...)
}

func (g *GitHubREST) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if !g.opts.Forget {
		g.mu.Lock()
		g.reqs = append(g.reqs, GitHubRESTRequest{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		g.mu.Unlock()
	}
	all, repos := g.authorized(r)
	if !all && repos == nil {
		gitHubRESTError(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	if r.URL.Path == "/graphql" && r.Method == http.MethodPost {
		g.graphql(w, body, func(repo string) bool { return g.has(repo) && (all || repos[strings.ToLower(repo)]) })
		return
	}
	segs := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(segs) < 3 || segs[0] != "repos" || !g.has(segs[1]+"/"+segs[2]) {
		gitHubRESTError(w, http.StatusNotFound, "Not Found")
		return
	}
	owner, name, tail := segs[1], segs[2], strings.Join(segs[3:], "/")
	repo := strings.ToLower(owner + "/" + name)
	switch {
	case r.Method == http.MethodGet && tail == "":
		g.json(w, http.StatusOK, g.repository(owner, name))
	case r.Method == http.MethodGet && tail == "readme":
		// The readme as GitHub sends it: the file's content in base64.
		g.json(w, http.StatusOK, map[string]any{
			"name": "README.md", "path": "README.md", "encoding": "base64",
			"content":  base64.StdEncoding.EncodeToString([]byte("# " + name + "\n\nThe readme of " + owner + "/" + name + ".\n")),
			"html_url": "https://github.com/" + owner + "/" + name + "/blob/main/README.md",
		})
	case r.Method == http.MethodGet && tail == "pulls":
		g.mu.Lock()
		list := append([]map[string]any{}, g.pulls[repo]...)
		g.mu.Unlock()
		g.json(w, http.StatusOK, g.page(w, r, list))
	case r.Method == http.MethodPost && tail == "pulls":
		g.createPull(w, owner, name, body)
	case r.Method == http.MethodGet && len(segs) == 5 && segs[3] == "pulls":
		n, _ := strconv.Atoi(segs[4])
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, p := range g.pulls[repo] {
			if p["number"] == n {
				g.json(w, http.StatusOK, p)
				return
			}
		}
		gitHubRESTError(w, http.StatusNotFound, "Not Found")
	case r.Method == http.MethodGet && tail == "issues":
		g.json(w, http.StatusOK, []any{})
	case r.Method == http.MethodPost && (tail == "issues" || len(segs) == 6 && segs[3] == "issues" && segs[5] == "comments"):
		var in map[string]any
		if json.Unmarshal(body, &in) != nil {
			gitHubRESTError(w, http.StatusBadRequest, "Problems parsing JSON")
			return
		}
		g.mu.Lock()
		n := g.next
		g.next++
		g.mu.Unlock()
		in["id"], in["number"] = n, n
		g.json(w, http.StatusCreated, in)
	default:
		gitHubRESTError(w, http.StatusNotFound, "Not Found")
	}
}

func (g *GitHubREST) has(repo string) bool {
	for _, r := range g.opts.Repos {
		if strings.EqualFold(r, repo) {
			return true
		}
	}
	return false
}

func (g *GitHubREST) repository(owner, name string) map[string]any {
	return map[string]any{
		"id": 1296269, "name": name, "full_name": owner + "/" + name, "private": true,
		"owner":          map[string]any{"login": owner, "type": "Organization"},
		"html_url":       "https://github.com/" + owner + "/" + name,
		"url":            g.URL + "/repos/" + owner + "/" + name,
		"default_branch": "main",
	}
}

// page is list's page that r asks for with per_page and page (the whole
// list without per_page), and sets the Link header GitHub sends with it:
// the next and last pages, at /repositories/ID/…, as GitHub writes them.
func (g *GitHubREST) page(w http.ResponseWriter, r *http.Request, list []map[string]any) []map[string]any {
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 {
		return list
	}
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	page = max(page, 1)
	last := max((len(list)+per-1)/per, 1)
	if page < last {
		segs := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
		at := g.URL + "/repositories/1296269/" + strings.Join(segs[3:], "/") + "?per_page=" + strconv.Itoa(per) + "&page="
		w.Header().Set("Link", "<"+at+strconv.Itoa(page+1)+`>; rel="next", <`+at+strconv.Itoa(last)+`>; rel="last"`)
	}
	from := min((page-1)*per, len(list))
	return list[from:min(from+per, len(list))]
}

// createPull answers "create a pull request" as GitHub does: 201 with
// the pull request, or 422 Validation Failed without head or base.
func (g *GitHubREST) createPull(w http.ResponseWriter, owner, name string, body []byte) {
	var in struct{ Title, Body, Head, Base string }
	if json.Unmarshal(body, &in) != nil {
		gitHubRESTError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if in.Head == "" || in.Base == "" {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintf(w, `{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":"head","code":"missing_field"}],"documentation_url":"https://docs.github.com/rest/pulls/pulls#create-a-pull-request"}`)
		return
	}
	p := g.addPull(owner, name, in.Title, in.Body, in.Head, in.Base, false)
	g.json(w, http.StatusCreated, p)
}

// addPull records a pull request of owner/name and returns it, in the
// REST API's shape.
func (g *GitHubREST) addPull(owner, name, title, body, head, base string, draft bool) map[string]any {
	if _, b, ok := strings.Cut(head, ":"); ok {
		head = b
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.next
	g.next++
	p := map[string]any{
		"id": 1000 + n, "number": n, "state": "open", "title": title, "body": body, "draft": draft,
		"url":        g.URL + "/repos/" + owner + "/" + name + "/pulls/" + strconv.Itoa(n),
		"html_url":   "https://github.com/" + owner + "/" + name + "/pull/" + strconv.Itoa(n),
		"head":       map[string]any{"ref": head, "label": owner + ":" + head},
		"base":       map[string]any{"ref": base, "label": owner + ":" + base},
		"created_at": time.Now().UTC().Format(time.RFC3339),
	}
	repo := strings.ToLower(owner + "/" + name)
	g.pulls[repo] = append(g.pulls[repo], p)
	return p
}

func (g *GitHubREST) json(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b)
}

// gitHubRESTError is GitHub's REST error body.
func gitHubRESTError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
	w.Write(b)
}
