package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const answerPolicy = `[profile.web]
models = ["claude-sonnet-*"]
repos = [
  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*", "refs/tags/agent/*"] },
  { repo = "acme/docs", access = "read" },
]
packages = ["react", "left-pad", "@types/*"]
relays = ["mod"]
npm = { min_release_age = "3d", deny = [ { package = "left-pad", versions = "1.3.0", reason = "compromised release" } ], search = true }

[profile.bare]
packages = ["react"]
`

// steps writes an answer's steps one a line, as "allow|deny|later check
// by rule: reason", then "= allow|deny rule".
func steps(a Answer) string {
	var b strings.Builder
	for _, s := range a.Steps {
		o := map[Outcome]string{Refused: "deny", Allowed: "allow", Deferred: "later"}[s.Outcome]
		fmt.Fprintf(&b, "%s %s by %s", o, s.Check, s.Rule)
		if s.Reason != "" {
			fmt.Fprintf(&b, ": %s", s.Reason)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "= %s %s", map[bool]string{true: "allow", false: "deny"}[a.Allow], a.Rule)
	return b.String()
}

// TestAnswers: each kind of question, the rules it looks at in the route's
// order, what each decided, and the rule the audit line names.
func TestAnswers(t *testing.T) {
	p := mustPolicy(t, answerPolicy)
	web, bare := p.Profiles["web"], p.Profiles["bare"]
	var none *Profile
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	old, fresh := now.Add(-96*time.Hour), now.Add(-time.Hour)
	mod := &Relay{Name: "mod", Methods: []string{"GET", "POST"}, Paths: []string{"sessions/*"}}
	tests := []struct {
		name string
		ask  Answer
		want string
	}{
		{"model allowed", web.AskModel("claude-sonnet-4-5"), `
allow model claude-sonnet-4-5 by profile.web.models["claude-sonnet-*"]
= allow profile.web.models["claude-sonnet-*"]`},
		{"model refused", web.AskModel("claude-opus-4-1"), `
deny model claude-opus-4-1 by profile.web: no models entry matches
= deny profile.web: no models entry matches`},
		{"no profile", none.AskModel("claude-opus-4-1"), `
deny model claude-opus-4-1 by no profile
= deny no profile`},

		{"fetch", web.AskFetch("acme/docs"), `
allow fetch from acme/docs by profile.web.repos["acme/docs"]
= allow profile.web.repos["acme/docs"]`},
		{"fetch refused", web.AskFetch("acme/other"), `
deny fetch from acme/other by profile.web: no repos entry matches
= deny profile.web: no repos entry matches`},
		{"push, no updates yet", web.AskPush("acme/app", nil), `
allow push to acme/app by profile.web.repos["acme/app"]
= allow profile.web.repos["acme/app"]`},
		{"push to a read-only repository", web.AskPush("acme/docs", []RefUpdate{{Ref: "refs/heads/agent/x"}}), `
deny push to acme/docs by profile.web.repos["acme/docs"]: access = "read"
= deny profile.web.repos["acme/docs"]: access = "read"`},
		{"push allowed names the first update's rule", web.AskPush("acme/app", []RefUpdate{{Ref: "refs/heads/agent/x"}, {Ref: "refs/heads/agent/y"}}), `
allow push to acme/app by profile.web.repos["acme/app"]
allow update refs/heads/agent/x by profile.web.repos["acme/app"].refs["refs/heads/agent/*"]
allow update refs/heads/agent/y by profile.web.repos["acme/app"].refs["refs/heads/agent/*"]
= allow profile.web.repos["acme/app"].refs["refs/heads/agent/*"]`},
		{"push asks every update, names the first refused", web.AskPush("acme/app", []RefUpdate{{Ref: "refs/heads/agent/x"}, {Ref: "refs/heads/main"}, {Ref: "refs/tags/agent/v1"}, {Ref: "refs/heads/agent/y", Delete: true}}), `
allow push to acme/app by profile.web.repos["acme/app"]
allow update refs/heads/agent/x by profile.web.repos["acme/app"].refs["refs/heads/agent/*"]
deny update refs/heads/main by profile.web.repos["acme/app"]: no refs entry matches
deny update refs/tags/agent/v1 by profile.web.repos["acme/app"].refs["refs/tags/agent/*"]: tags = false
deny delete refs/heads/agent/y by profile.web.repos["acme/app"].refs["refs/heads/agent/*"]: delete = false
= deny profile.web.repos["acme/app"]: no refs entry matches`},

		{"packument with a version policy", web.AskNPM(NPMQuestion{Name: "@types/node"}), `
allow package @types/node by profile.web.packages["@types/*"]
later versions of @types/node by profile.web.npm: each version is checked against profile.web.npm at request time; ask about NAME@VERSION for one
= allow profile.web.packages["@types/*"]`},
		{"packument without one", bare.AskNPM(NPMQuestion{Name: "react"}), `
allow package react by profile.bare.packages["react"]
= allow profile.bare.packages["react"]`},
		{"package refused", web.AskNPM(NPMQuestion{Name: "lodash", Version: "4.17.21"}), `
deny package lodash by profile.web: no packages entry matches
= deny profile.web: no packages entry matches`},
		{"version denied", web.AskNPM(NPMQuestion{Name: "left-pad", Version: "1.3.0", Published: &old, Now: now}), `
allow package left-pad by profile.web.packages["left-pad"]
deny version left-pad@1.3.0 by profile.web.npm.deny[0]: it is denied by the sandbox's policy (versions "1.3.0"): compromised release
= deny profile.web.npm.deny[0]`},
		{"release age waits for the publish time", web.AskNPM(NPMQuestion{Name: "left-pad", Version: "1.3.1"}), `
allow package left-pad by profile.web.packages["left-pad"]
allow version left-pad@1.3.1 by profile.web.npm
later release age of left-pad@1.3.1 by profile.web.npm.min_release_age: release age checked against the registry's publish time at request time (profile.web.npm.min_release_age = "3d")
= allow profile.web.packages["left-pad"]`},
		{"old enough", web.AskNPM(NPMQuestion{Name: "left-pad", Version: "1.3.1", Published: &old, Now: now}), `
allow package left-pad by profile.web.packages["left-pad"]
allow version left-pad@1.3.1 by profile.web.npm
allow release age of left-pad@1.3.1 by profile.web.npm
= allow profile.web.packages["left-pad"]`},
		{"too fresh", web.AskNPM(NPMQuestion{Name: "left-pad", Version: "1.3.1", Published: &fresh, Now: now}), `
allow package left-pad by profile.web.packages["left-pad"]
allow version left-pad@1.3.1 by profile.web.npm
deny release age of left-pad@1.3.1 by profile.web.npm.min_release_age: it was published 2026-11-30T23:00:00Z, less than 3d ago (the sandbox's minimum release age)
= deny profile.web.npm.min_release_age`},
		{"tarball without a version policy", bare.AskNPM(NPMQuestion{Name: "react", Version: "19.1.0"}), `
allow package react by profile.bare.packages["react"]
allow version react@19.1.0 by profile.bare.npm
= allow profile.bare.packages["react"]`},
		{"search", web.AskNPMSearch(), `
allow npm search by profile.web.npm.search
= allow profile.web.npm.search`},
		{"audit off", web.AskNPMAudit(), `
deny npm audit by profile.web.npm.audit is off (the default)
= deny profile.web.npm.audit is off (the default)`},

		{"relay without its config", web.AskRelay(RelayQuestion{Relay: &Relay{Name: "mod"}}), `
allow relay mod by profile.web.relays["mod"]
= allow profile.web.relays["mod"]`},
		{"relay refused", bare.AskRelay(RelayQuestion{Relay: mod, Method: "GET", Path: "sessions/7"}), `
deny relay mod by profile.bare: no relays entry matches
= deny profile.bare: no relays entry matches`},
		{"relay allowed names the profile's and the path's rules", web.AskRelay(RelayQuestion{Relay: mod, Method: "POST", Path: "sessions/7"}), `
allow relay mod by profile.web.relays["mod"]
allow method POST by relay.mod.methods["POST"]
allow path sessions/7 by relay.mod.paths["sessions/*"]
= allow profile.web.relays["mod"], relay.mod.paths["sessions/*"]`},
		{"relay method refused names the profile's rule", web.AskRelay(RelayQuestion{Relay: mod, Method: "DELETE", Path: "sessions/7"}), `
allow relay mod by profile.web.relays["mod"]
deny method DELETE by relay.mod.methods: DELETE is not one of GET, POST
= deny profile.web.relays["mod"]`},
		{"relay path refused", web.AskRelay(RelayQuestion{Relay: mod, Method: "GET", Path: "admin"}), `
allow relay mod by profile.web.relays["mod"]
allow method GET by relay.mod.methods["GET"]
deny path admin by relay.mod: no paths entry matches
= deny profile.web.relays["mod"], relay.mod: no paths entry matches`},
		{"relay path with a leading slash", web.AskRelay(RelayQuestion{Relay: mod, Path: "/sessions/7"}), `
allow relay mod by profile.web.relays["mod"]
allow path /sessions/7 by relay.mod.paths["sessions/*"]
= allow profile.web.relays["mod"], relay.mod.paths["sessions/*"]`},
	}
	for _, tc := range tests {
		if got, want := steps(tc.ask), strings.TrimPrefix(tc.want, "\n"); got != want {
			t.Errorf("%s:\n got:\n%s\nwant:\n%s", tc.name, got, want)
		}
	}
}

// TestAnswerReaders: what the two readers take from an answer, the route
// (Refusal, Deferred) and explain (Decided).
func TestAnswerReaders(t *testing.T) {
	web := mustPolicy(t, answerPolicy).Profiles["web"]
	waits := web.AskNPM(NPMQuestion{Name: "left-pad", Version: "1.3.1"})
	if _, refused := waits.Refusal(); refused || !waits.Deferred() || !waits.Allow {
		t.Errorf("a release age without the publish time: refused %v, deferred %v, allow %v", refused, waits.Deferred(), waits.Allow)
	}
	if got := waits.Decided().Rule; got != "profile.web.npm" {
		t.Errorf("decided by %q, want the last step not deferred", got)
	}
	denied := web.AskNPM(NPMQuestion{Name: "left-pad", Version: "1.3.0"})
	if s, refused := denied.Refusal(); !refused || s.Rule != "profile.web.npm.deny[0]" || denied.Deferred() {
		t.Errorf("a denied version: refusal %+v %v, deferred %v", s, refused, denied.Deferred())
	}
	mod := &Relay{Name: "mod", Methods: []string{"GET"}, Paths: []string{"*"}}
	for _, c := range []struct {
		ask  Answer
		keys string
	}{
		{web.AskModel("m"), "models"},
		{web.AskFetch("acme/app"), "repos"},
		{web.AskPush("acme/app", []RefUpdate{{Ref: "refs/heads/main"}, {Ref: "refs/heads/agent/x"}}), "repos refs refs"},
		{web.AskNPM(NPMQuestion{Name: "react"}), "packages npm"},
		{waits, "packages npm.deny npm.min_release_age"},
		{web.AskNPMSearch(), "npm.search"},
		{web.AskNPMAudit(), "npm.audit"},
		{web.AskRelay(RelayQuestion{Relay: mod, Method: "GET", Path: "x"}), "relays methods paths"},
	} {
		var keys []string
		for _, s := range c.ask.Steps {
			keys = append(keys, s.Key)
		}
		if got := strings.Join(keys, " "); got != c.keys {
			t.Errorf("%q: keys %q, want %q", c.ask.Steps[0].Check, got, c.keys)
		}
	}
	var zero Answer
	if _, refused := zero.Refusal(); zero.Allow || refused || zero.Decided() != (Step{}) {
		t.Error("the zero Answer is not a denial with no steps")
	}
}
