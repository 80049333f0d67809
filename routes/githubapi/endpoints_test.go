package githubapi

import (
	"strings"
	"testing"
)

// TestEveryEndpointIsExercised asks the table about one request per line,
// and fails for a line no request reaches: a template that never matches
// (a typo, or shadowed by a line above it) is a request cproxy says it
// serves or refuses for a reason and does not.
func TestEveryEndpointIsExercised(t *testing.T) {
	cases := []struct{ method, path, want string }{
		{"GET", "/repos/acme/app", "read"},
		{"GET", "/repos/acme/app/pulls", "read"},
		{"GET", "/repos/acme/app/pulls/12", "read"},
		{"GET", "/repos/acme/app/pulls/12/commits", "read"},
		{"GET", "/repos/acme/app/pulls/12/files", "read"},
		{"GET", "/repos/acme/app/pulls/12/comments", "read"},
		{"GET", "/repos/acme/app/pulls/12/reviews", "read"},
		{"GET", "/repos/acme/app/pulls/12/requested_reviewers", "read"},
		{"GET", "/repos/acme/app/issues", "read"},
		{"GET", "/repos/acme/app/issues/3", "read"},
		{"GET", "/repos/acme/app/issues/3/comments", "read"},
		{"GET", "/repos/acme/app/commits", "read"},
		{"GET", "/repos/acme/app/commits/0123abcd", "read"},
		{"GET", "/repos/acme/app/commits/main/check-runs", "read"},
		{"GET", "/repos/acme/app/commits/main/status", "read"},
		{"GET", "/repos/acme/app/commits/main/statuses", "read"},
		{"GET", "/repos/acme/app/check-runs/99", "read"},
		{"GET", "/repos/acme/app/readme", "read"},
		{"GET", "/repos/acme/app/branches", "read"},
		{"GET", "/repos/acme/app/branches/main", "read"},
		{"GET", "/repos/acme/app/actions/runs", "read"},
		{"GET", "/repos/acme/app/actions/runs/5", "read"},
		{"GET", "/repos/acme/app/actions/runs/5/jobs", "read"},
		{"GET", "/repos/acme/app/actions/jobs/6", "read"},
		{"POST", "/repos/acme/app/pulls", "pulls:create"},
		{"POST", "/repos/acme/app/pulls/12/requested_reviewers", "pulls:request-reviewers"},
		{"POST", "/repos/acme/app/issues", "issues:create"},
		{"POST", "/repos/acme/app/issues/3/comments", "issues:comment"},
		{"PUT", "/repos/acme/app/pulls/12/merge", "never: merging a pull request"},
		{"POST", "/repos/acme/app/pulls/12/reviews", "never: submitting, approving or dismissing reviews"},
		{"PUT", "/repos/acme/app/pulls/12/reviews/7/dismissals", "never: submitting, approving or dismissing reviews"},
		{"POST", "/repos/acme/app/merges", "never: merging is"},
		{"PATCH", "/repos/acme/app", "never: repository settings"},
		{"DELETE", "/repos/acme/app", "never: repository settings"},
		{"PUT", "/repos/acme/app/branches/main/protection", "never: branch protection"},
		{"DELETE", "/repos/acme/app/branches/main/protection/required_signatures", "never: branch protection"},
		{"POST", "/repos/acme/app/rulesets", "never: rulesets"},
		{"PUT", "/repos/acme/app/collaborators/mallory", "never: collaborators"},
		{"POST", "/repos/acme/app/keys", "never: deploy keys"},
		{"POST", "/repos/acme/app/hooks", "never: webhooks"},
		{"PUT", "/repos/acme/app/actions/secrets/TOKEN", "never: Actions secrets"},
		{"POST", "/repos/acme/app/actions/variables", "never: Actions variables"},
		{"POST", "/repos/acme/app/actions/workflows/ci.yml/dispatches", "never: Actions workflows"},
		{"PUT", "/repos/acme/app/contents/.github/workflows/ci.yml", "never: Actions workflow files"},
		{"PUT", "/repos/acme/app/contents/README.md", "never: files are not read or changed"},
		{"POST", "/repos/acme/app/releases", "never: releases"},
	}
	hit := make([]bool, len(endpoints))
	for _, c := range cases {
		i := match(c.method, strings.Split(strings.TrimPrefix(c.path, "/"), "/"))
		if i < 0 {
			t.Errorf("%s %s matches no endpoint", c.method, c.path)
			continue
		}
		hit[i] = true
		e := endpoints[i]
		got := e.perm
		if e.never != "" {
			got = "never: " + e.never
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s %s = %q, want %q", c.method, c.path, got, c.want)
		}
	}
	for i, ok := range hit {
		if !ok {
			t.Errorf("endpoint %s %s is exercised by no case", endpoints[i].method, endpoints[i].path)
		}
	}
}

// TestNotUnderstood: a request near a template but not one is no match.
func TestNotUnderstood(t *testing.T) {
	for _, c := range []struct{ method, path string }{
		{"DELETE", "/repos/acme/app/pulls/12"},
		{"PATCH", "/repos/acme/app/pulls/12"},
		{"GET", "/repos/acme/app/pulls/x"},
		{"GET", "/repos/acme/app/pulls/012"},
		{"GET", "/repos/acme/app/tarball/main"},
		{"GET", "/repos/acme/app/actions/runs/5/logs"},
		{"POST", "/repos/acme/app/issues/3/lock"},
		{"GET", "/repos/-acme/app"},
		{"GET", "/repos/acme/app/pulls/12/commits/extra"},
	} {
		if i := match(c.method, strings.Split(strings.TrimPrefix(c.path, "/"), "/")); i >= 0 {
			t.Errorf("%s %s matches %s %s", c.method, c.path, endpoints[i].method, endpoints[i].path)
		}
	}
}

func TestPullHeadBase(t *testing.T) {
	for _, c := range []struct{ body, head, base, err string }{
		{`{"title":"t","head":"agent/x","base":"main"}`, "agent/x", "main", ""},
		{`{"head":"ACME:agent/x","base":"main","draft":true}`, "agent/x", "main", ""},
		{`{"head":"mallory:agent/x","base":"main"}`, "", "", "another owner's repository"},
		{`{"head":"agent/x","base":"main","head_repo":"mallory/app"}`, "", "", "head_repo"},
		{`{"head":"agent/x","base":"prod","base":"main"}`, "", "", `has "base" twice`},
		{`{"head":"agent/x","base":"main","labels":["x"]}`, "", "", `has "labels", not a key GitHub takes`},
		{`{"head":"main","HEAD":"agent/x","base":"main"}`, "", "", `has "HEAD", not a key`},
		{`{"head":null,"base":"main"}`, "", "", "needs head and base"},
		{`{"head":7,"base":"main"}`, "", "", "needs head and base"},
		{`{"head":"agent/x","base":"main"} {}`, "", "", "more than one JSON value"},
		{`{"head":"agent/x"}`, "", "", "needs head and base"},
		{`{"head":"../x","base":"main"}`, "", "", "needs head and base"},
		{`[]`, "", "", "is not a JSON object"},
	} {
		head, base, err := pullHeadBase([]byte(c.body), "acme", "conv-42")
		switch {
		case c.err == "" && (err != nil || head != c.head || base != c.base):
			t.Errorf("%s: %q %q %v, want %q %q", c.body, head, base, err, c.head, c.base)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one with %q", c.body, err, c.err)
		}
	}
}
