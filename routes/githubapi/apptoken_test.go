package githubapi

import "testing"

// Every request the table serves has the one App permission its token is
// minted with; a write is never more than pull requests or issues.
func TestAppPermissions(t *testing.T) {
	want := map[string]string{
		"GET /repos/{owner}/{repo}":                           "metadata:read",
		"GET /repos/{owner}/{repo}/pulls/{number}/files":      "pull_requests:read",
		"GET /repos/{owner}/{repo}/issues/{number}/comments":  "issues:read",
		"GET /repos/{owner}/{repo}/commits/{ref}/check-runs":  "checks:read",
		"GET /repos/{owner}/{repo}/commits/{ref}/status":      "statuses:read",
		"GET /repos/{owner}/{repo}/commits/{ref}":             "contents:read",
		"GET /repos/{owner}/{repo}/actions/jobs/{id}":         "actions:read",
		"POST /repos/{owner}/{repo}/pulls":                    "pull_requests:write",
		"POST /repos/{owner}/{repo}/issues/{number}/comments": "issues:write",
	}
	for _, ep := range endpoints {
		perms := appPermissions(ep)
		if ep.perm == "" {
			continue
		}
		if len(perms) != 1 {
			t.Errorf("%s %s: App permissions %v, want one", ep.method, ep.path, perms)
			continue
		}
		for k, v := range perms {
			if w, ok := want[ep.method+" "+ep.path]; ok && k+":"+v != w {
				t.Errorf("%s %s: %s:%s, want %s", ep.method, ep.path, k, v, w)
			}
		}
	}
	if p := appPermissions(endpoint{method: "PUT", path: "/repos/{owner}/{repo}/contents/{rest...}"}); p != nil {
		t.Errorf("a contents write: %v", p)
	}
}
