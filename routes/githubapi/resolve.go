package githubapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
)

// The bounds of what the route asks GitHub before it decides.
const (
	// maxLookups bounds the node IDs one GraphQL request may make cproxy
	// resolve: gh names one or two; more is refused, not cut.
	maxLookups = 20
	// maxCached bounds the resolutions kept: past it, the oldest go.
	maxCached = 4096
	// cacheTTL is how long a resolution is kept. An ID names one object
	// for good, but the repository's name it is decided on can change (a
	// rename, a transfer), and the policy is written in names.
	cacheTTL = 10 * time.Minute
	// maxLookupAnswer bounds what is read of GitHub's answer to a look-up.
	maxLookupAnswer = 1 << 20
)

// node is what a node ID is, as GitHub answered cproxy's look-up: its
// type (Repository, PullRequest, Issue) and the repository it is or
// belongs to, "owner/name"; typ "" is an object of another type.
type node struct{ typ, repo string }

// resolver looks up, through the upstream with cproxy's credential, what
// GraphQL node IDs are and which repository a repository's parent is, and
// keeps the answers for cacheTTL, at most maxCached of them. Its answers
// never reach the sandbox: only the decision taken on them does.
type resolver struct {
	fwd *routes.Forwarder
	now func() time.Time

	mu    sync.Mutex
	cache map[string]cached
	order []string // the keys in cache, oldest first
}

type cached struct {
	n  node
	at time.Time
}

func newResolver(fwd *routes.Forwarder, now func() time.Time) *resolver {
	return &resolver{fwd: fwd, now: now, cache: map[string]cached{}}
}

func (r *resolver) get(key string) (node, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.cache[key]
	if !ok || r.now().Sub(c.at) > cacheTTL {
		return node{}, false
	}
	return c.n, true
}

func (r *resolver) put(key string, n node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cache[key]; !ok {
		r.order = append(r.order, key)
	}
	r.cache[key] = cached{n, r.now()}
	for len(r.order) > maxCached {
		delete(r.cache, r.order[0])
		r.order = r.order[1:]
	}
}

// nodeQuery asks GitHub what each ID is: a repository, or a pull request
// or issue and its repository.
const nodeQuery = `query($ids: [ID!]!) { nodes(ids: $ids) { __typename ` +
	`... on Repository { nameWithOwner } ` +
	`... on PullRequest { repository { nameWithOwner } } ` +
	`... on Issue { repository { nameWithOwner } } } }`

// nodes resolves ids, from the cache or in one look-up of those it does
// not hold, with each of creds in turn (an App's token for each owner;
// none: the upstream's credential) for the IDs the ones before did not
// find. An ID GitHub does not know (or no token can see) is refused: what
// it would reach cannot be told.
func (r *resolver) nodes(ctx context.Context, ids []string, sandbox string, creds []secrets.Secret) (map[string]node, error) {
	out := make(map[string]node, len(ids))
	var ask []string
	for _, id := range ids {
		if n, ok := r.get("node:" + id); ok {
			out[id] = n
		} else {
			ask = append(ask, id)
		}
	}
	if len(ask) == 0 {
		return out, nil
	}
	if len(creds) == 0 {
		creds = []secrets.Secret{{}}
	}
	for _, cred := range creds {
		if len(ask) == 0 {
			break
		}
		var err error
		if ask, err = r.lookNodes(ctx, ask, cred, out); err != nil {
			return nil, err
		}
	}
	if len(ask) > 0 {
		return nil, routes.Refuse(routes.ErrForbidden, "the GraphQL request is refused for sandbox %s: the node ID %q is not one GitHub knows, so what it reaches cannot be told; do not retry", sandbox, routes.Clip(ask[0], 64))
	}
	return out, nil
}

// lookNodes looks ask up with cred into out, and returns those GitHub did
// not find.
func (r *resolver) lookNodes(ctx context.Context, ask []string, cred secrets.Secret, out map[string]node) ([]string, error) {
	var data struct {
		Nodes []*struct {
			Typename      string `json:"__typename"`
			NameWithOwner string `json:"nameWithOwner"`
			Repository    *struct {
				NameWithOwner string `json:"nameWithOwner"`
			} `json:"repository"`
		} `json:"nodes"`
	}
	if err := r.query(ctx, nodeQuery, map[string]any{"ids": ask}, &data, cred); err != nil {
		return nil, err
	}
	if len(data.Nodes) != len(ask) {
		return nil, routes.Refuse(routes.ErrUpstream, "the upstream %s answered cproxy's look-up of %d node IDs with %d", r.fwd.Upstream().URL.Host, len(ask), len(data.Nodes))
	}
	var missing []string
	for i, id := range ask {
		got := data.Nodes[i]
		if got == nil {
			missing = append(missing, id)
			continue
		}
		n := node{}
		switch got.Typename {
		case "Repository":
			n = node{typ: got.Typename, repo: got.NameWithOwner}
		case "PullRequest", "Issue":
			if got.Repository != nil {
				n = node{typ: got.Typename, repo: got.Repository.NameWithOwner}
			}
		}
		if n.typ != "" && !validRepo(n.repo) {
			return nil, routes.Refuse(routes.ErrUpstream, "the upstream %s named no repository for the node ID %q", r.fwd.Upstream().URL.Host, routes.Clip(id, 64))
		}
		r.put("node:"+id, n)
		out[id] = n
	}
	return missing, nil
}

// parents resolves the repository each of repos ("owner/name") was
// forked from, "" for one that is no fork.
func (r *resolver) parents(ctx context.Context, repos []string, cred secrets.Secret) (map[string]string, error) {
	out := make(map[string]string, len(repos))
	var ask []string
	for _, repo := range repos {
		if n, ok := r.get("parent:" + strings.ToLower(repo)); ok {
			out[repo] = n.repo
		} else {
			ask = append(ask, repo)
		}
	}
	if len(ask) == 0 {
		return out, nil
	}
	var q strings.Builder
	var decl []string
	vars := map[string]any{}
	for i, repo := range ask {
		owner, name, _ := strings.Cut(repo, "/")
		vars[fmt.Sprintf("o%d", i)], vars[fmt.Sprintf("n%d", i)] = owner, name
		decl = append(decl, fmt.Sprintf("$o%d: String!, $n%d: String!", i, i))
		fmt.Fprintf(&q, "r%d: repository(owner: $o%d, name: $n%d) { parent { nameWithOwner } } ", i, i, i)
	}
	var data map[string]*struct {
		Parent *struct {
			NameWithOwner string `json:"nameWithOwner"`
		} `json:"parent"`
	}
	if err := r.query(ctx, "query("+strings.Join(decl, ", ")+") { "+q.String()+"}", vars, &data, cred); err != nil {
		return nil, err
	}
	for i, repo := range ask {
		got := data[fmt.Sprintf("r%d", i)]
		if got == nil {
			return nil, routes.Refuse(routes.ErrUpstream, "the upstream %s did not answer cproxy's look-up of %s's parent", r.fwd.Upstream().URL.Host, repo)
		}
		parent := ""
		if got.Parent != nil {
			if parent = got.Parent.NameWithOwner; !validRepo(parent) {
				return nil, routes.Refuse(routes.ErrUpstream, "the upstream %s named no repository for %s's parent", r.fwd.Upstream().URL.Host, repo)
			}
		}
		r.put("parent:"+strings.ToLower(repo), node{typ: "Repository", repo: parent})
		out[repo] = parent
	}
	return out, nil
}

// query sends a GraphQL query of cproxy's own to the upstream, with cred
// (an App's token) or, when zero, the credential the core sets, and reads
// its data into v. GitHub's errors
// beside data (a node it does not know) are left to the caller, which
// sees what data lacks.
func (r *resolver) query(ctx context.Context, query string, vars map[string]any, v any, cred secrets.Secret) error {
	host := r.fwd.Upstream().URL.Host
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	header := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}
	resp, err := r.fwd.RoundTrip(ctx, http.MethodPost, routes.Target{Path: "/graphql", Credential: cred}, header, body)
	if err != nil {
		if routes.IsRefusal(err) {
			return err
		}
		return routes.Refuse(routes.ErrUpstream, "the upstream %s could not be reached for cproxy's look-up of what the GraphQL request reaches; try again later", host)
	}
	defer resp.Body.Close()
	if err := checkResponse(resp); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return routes.Refuse(routes.ErrUpstream, "the upstream %s answered %d to cproxy's look-up of what the GraphQL request reaches; try again later", host, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLookupAnswer+1))
	if err != nil || len(b) > maxLookupAnswer {
		return routes.Refuse(routes.ErrUpstream, "the upstream %s sent an answer cproxy could not read to its look-up", host)
	}
	var out struct {
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(b, &out) != nil || len(bytes.TrimSpace(out.Data)) == 0 || json.Unmarshal(out.Data, v) != nil {
		return routes.Refuse(routes.ErrUpstream, "the upstream %s sent an answer cproxy could not read to its look-up", host)
	}
	return nil
}

// validRepo reports whether s is an "owner/name" GitHub could name.
func validRepo(s string) bool {
	owner, name, ok := strings.Cut(s, "/")
	return ok && ownerRE.MatchString(owner) && repoRE.MatchString(name) && !strings.HasSuffix(strings.ToLower(name), ".git")
}
