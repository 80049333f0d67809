package githubapi

import (
	"net/http"
	"strings"
)

// appPermissions are the GitHub App permissions of the installation token
// a REST request is sent with, when the upstream has an App: the least
// that GitHub serves the request with, read for a GET and write for a
// POST, of the one permission its path is under (GitHub adds metadata:
// read to every token). Nil for an endpoint this table does not know,
// which is then refused: a token is never minted with the installation's
// every permission.
func appPermissions(ep endpoint) map[string]string {
	level := "read"
	if ep.method != http.MethodGet {
		level = "write"
	}
	// /repos/{owner}/{repo}/KIND/…
	segs := strings.Split(strings.TrimPrefix(ep.path, "/"), "/")
	kind, last := "", segs[len(segs)-1]
	if len(segs) > 3 {
		kind = segs[3]
	}
	perm := ""
	switch {
	case kind == "":
		perm = "metadata"
	case kind == "pulls":
		perm = "pull_requests"
	case kind == "issues":
		perm = "issues"
	case kind == "check-runs" || last == "check-runs":
		perm = "checks"
	case last == "status" || last == "statuses":
		perm = "statuses"
	case kind == "commits" || kind == "branches" || kind == "readme":
		perm = "contents"
	case kind == "actions":
		perm = "actions"
	default:
		return nil
	}
	if level == "write" && (perm != "pull_requests" && perm != "issues") {
		return nil
	}
	return map[string]string{perm: level}
}

// bearerToken is the token a forwarded request carries, as setCredential
// set it, for AppTokens.CheckResponse.
func bearerToken(r *http.Request) string {
	t, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return t
}
