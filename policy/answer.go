package policy

import (
	"fmt"
	"strings"
	"time"
)

// Outcome is what one rule decided about a request.
type Outcome int

const (
	// Refused: the rule refuses the request. The zero Outcome, so that a
	// step nobody decided denies.
	Refused Outcome = iota
	// Allowed: the rule lets the request go on to the next step.
	Allowed
	// Deferred: the rule cannot be decided with what the question holds
	// (a version not named, a publish time not yet fetched); the request
	// is decided by it later, when that is known.
	Deferred
	// Asked: the rule lets the request go on only with an operator's
	// approval of exactly it (a rule's ask, docs/approvals.md).
	Asked
)

// Step is one rule looked at in answering a question.
type Step struct {
	// Check is what was asked, in explain's words: "package react",
	// "push to acme/app", "update refs/heads/main".
	Check string
	// Key is the key of the rules looked at, for a route that words a
	// refusal by what refused: "models", "repos", "refs", "packages",
	// "npm.deny", "npm.min_release_age", "npm.search", "npm.audit",
	// "pypi.packages", "pypi.deny", "pypi.min_release_age", "relays", and a
	// relay's "methods" and "paths"; "npm" for a packument's versions and
	// "pypi" for a project index's, deferred to its rewrite.
	Key string
	// Outcome is what the rule decided.
	Outcome Outcome
	// Rule is the rule that decided, as Decision.Rule.
	Rule string
	// Reason says why in words, when the rule has more to say than its
	// name: an npm.deny rule's reason, or what a deferred step waits for.
	// Empty otherwise.
	Reason string
}

// Answer is a policy question's answer: each rule looked at, in the
// order a route asks them, up to the first that refuses (a push's updates
// are all asked, so that git's report can answer each). The routes act on
// it and `cproxy policy explain` prints it, so the two cannot disagree.
type Answer struct {
	// Steps are the rules looked at, in order; the last one decided,
	// unless it was deferred.
	Steps []Step
	// Allow is whether the request may go ahead as far as the question
	// could tell: no step refused it, and none asked. The zero Answer
	// denies.
	Allow bool
	// Ask is set, with Allow false, when no step refused the request and
	// one or more asked: it may go ahead with an operator's approval of
	// exactly it. A route that does not ask for approvals refuses it, as
	// it refuses any answer that does not allow.
	Ask bool
	// Rule is the rule the route records as the one that decided (the
	// audit line's rule=): for a refusal the refusing step's; for an
	// allowed request the one the question names as deciding, which is not
	// always the last (a tarball is allowed by its package's rule).
	Rule string
}

// Deferred reports whether a step could not be decided with what the
// question held.
func (a Answer) Deferred() bool {
	for _, s := range a.Steps {
		if s.Outcome == Deferred {
			return true
		}
	}
	return false
}

// Refusal is the step that refused the request; false when none did.
func (a Answer) Refusal() (Step, bool) {
	for _, s := range a.Steps {
		if s.Outcome == Refused {
			return s, true
		}
	}
	return Step{}, false
}

// Decided is the last step that was not deferred: the rule explain names
// as deciding. The zero Step when there is none.
func (a Answer) Decided() Step {
	for i := len(a.Steps) - 1; i >= 0; i-- {
		if a.Steps[i].Outcome != Deferred {
			return a.Steps[i]
		}
	}
	return Step{}
}

// ask adds a step decided by d and reports whether it let the request go
// on (allowed it, or asked). The first step to refuse names the answer's
// Rule, else the first to ask; while every step allows, the question sets
// Rule to the one it names as deciding.
func (a *Answer) ask(check, key string, d Decision, reason string) bool {
	o := Refused
	switch {
	case d.Allow:
		o = Allowed
	case d.Ask:
		o = Asked
	}
	a.Steps = append(a.Steps, Step{Check: check, Key: key, Outcome: o, Rule: d.Rule, Reason: reason})
	switch {
	case o == Refused && (a.Allow || a.Ask):
		a.Allow, a.Ask, a.Rule = false, false, d.Rule
	case o == Asked && a.Allow:
		a.Allow, a.Ask, a.Rule = false, true, d.Rule
	}
	return o != Refused
}

// later adds a step that waits for something the question did not hold.
func (a *Answer) later(check, key, rule, reason string) {
	a.Steps = append(a.Steps, Step{Check: check, Key: key, Outcome: Deferred, Rule: rule, Reason: reason})
}

// newAnswer starts an answer that allows until a step refuses.
func newAnswer() Answer { return Answer{Allow: true} }

// oneStep is the answer of a question that looks at one rule.
func oneStep(check, key string, d Decision) Answer {
	a := newAnswer()
	a.ask(check, key, d, "")
	a.Rule = d.Rule
	return a
}

// AskModel asks whether the profile may use a model: its models.
func (pr *Profile) AskModel(model string) Answer {
	return oneStep("model "+model, "models", pr.Model(model))
}

// AskFetch asks whether the profile may fetch from a repository
// ("owner/name"): a repos rule of either access.
func (pr *Profile) AskFetch(repo string) Answer {
	return oneStep("fetch from "+repo, "repos", pr.Repo(repo, false))
}

// RefUpdate is one ref-update command of a push.
type RefUpdate struct {
	// Ref is the full ref name ("refs/heads/agent/x").
	Ref string `json:"ref"`
	// Delete says the command deletes the ref.
	Delete bool `json:"delete,omitempty"`
}

// AskPush asks whether the profile may push updates to a repository: a
// repos rule with push access, then every update against its refs, tags
// and delete (and ask). Every update is asked, so that a push refused for
// one ref can say what of each; the answer's Rule is the first refused
// update's rule, else the first asking update's, or the first update's
// when all are allowed. With no updates (git's
// first request of a push, or its probe) only the repository is asked.
func (pr *Profile) AskPush(repo string, updates []RefUpdate) Answer {
	a := newAnswer()
	d := pr.Repo(repo, true)
	a.Rule = d.Rule
	if !a.ask("push to "+repo, "repos", d, "") {
		return a
	}
	for i, u := range updates {
		verb := "update "
		if u.Delete {
			verb = "delete "
		}
		d := pr.Ref(repo, u.Ref, strings.HasPrefix(u.Ref, "refs/tags/"), u.Delete)
		if i == 0 {
			a.Rule = d.Rule
		}
		a.ask(verb+u.Ref, "refs", d, "")
	}
	return a
}

// NPMQuestion is a request for an npm package: its packument (no
// version) or one version's tarball.
type NPMQuestion struct {
	// Name is the package's full name ("react", "@types/node").
	Name string
	// Version is the tarball's version; empty for the packument.
	Version string
	// Published is the version's publish time, as the registry's
	// packument gives it (zero when it gives none); nil while not fetched.
	Published *time.Time
	// Now is the time the release age is measured at.
	Now time.Time
}

// AskNPM asks whether the profile may have an npm package: its packages,
// then for a version npm.deny, npm.min_release_age and npm.ask. A packument's
// versions are each decided when it is rewritten, and a release age needs
// the version's publish time: both are deferred steps. The answer's Rule
// is the package's rule unless a version rule refuses.
func (pr *Profile) AskNPM(q NPMQuestion) Answer {
	return pr.askVersioned(versionedQuestion{
		what: "package", name: q.Name, version: q.Version, published: q.Published, now: q.Now,
		allow: pr.Package(q.Name), allowKey: "packages", section: "npm", hasPolicy: pr.HasNPMVersionPolicy(),
		minAge: pr.NPM.MinReleaseAge, timeFrom: "the registry's publish time", placeholder: "NAME@VERSION",
		deny:      func() (Decision, string) { d := pr.NPMDeny(q.Name, q.Version); return d.Decision, d.Reason },
		ask:       func() Decision { return pr.NPMAsk(q.Name, q.Version) },
		askTooNew: pr.NPM.AskTooNew,
		aged: func(published time.Time) (Decision, string) {
			d := pr.NPMVersion(q.Name, q.Version, published, q.Now)
			return d.Decision, d.Reason
		},
	})
}

// versionedQuestion is what differs between the package routes' questions
// (npm, Go modules), which are asked in the same steps by askVersioned.
type versionedQuestion struct {
	what, name, version string // "package", "react", "18.2.0"
	published           *time.Time
	now                 time.Time
	allow               Decision // the name's rule
	allowKey            string   // its key: "packages", "go.modules"
	section             string   // the version policy's table: "npm", "go"
	hasPolicy           bool     // whether the section filters versions
	minAge              Age
	timeFrom            string // where a release age's time comes from, in words
	placeholder         string // how explain names a version: "NAME@VERSION"
	deny                func() (Decision, string)
	aged                func(published time.Time) (Decision, string)
	// ask is SECTION.ask's decision, asked last; nil: the section has none.
	ask func() Decision
	// askTooNew says a version the release age refuses, of a known time,
	// asks for an approval instead (npm.ask_too_new).
	askTooNew bool
}

// askVersioned asks a package route's steps: the name's rule, then for a
// version SECTION.deny and SECTION.min_release_age. Without a version the
// version policy is deferred to each version, and without the version's time
// the release age is deferred to request time. The answer's Rule is the
// name's rule unless a version rule refuses.
func (pr *Profile) askVersioned(q versionedQuestion) Answer {
	a := newAnswer()
	a.Rule = q.allow.Rule
	if !a.ask(q.what+" "+q.name, q.allowKey, q.allow, "") {
		return a
	}
	if q.version == "" {
		if q.hasPolicy {
			a.later("versions of "+q.name, q.section, pr.rule(".%s", q.section), fmt.Sprintf("each version is checked against %s.%s at request time; ask about %s for one", pr.Key(), q.section, q.placeholder))
		}
		return a
	}
	nv := q.name + "@" + q.version
	if d, reason := q.deny(); !a.ask("version "+nv, q.section+".deny", d, reason) {
		return a
	}
	if q.minAge.Duration > 0 {
		ageKey := q.section + ".min_release_age"
		if q.published == nil {
			text, _ := q.minAge.MarshalText()
			a.later("release age of "+nv, ageKey, pr.rule(".%s", ageKey),
				fmt.Sprintf("release age checked against %s at request time (%s.%s = %q)", q.timeFrom, pr.Key(), ageKey, text))
			return a
		}
		d, reason := q.aged(*q.published)
		if !d.Allow && q.askTooNew && !q.published.IsZero() {
			d.Ask = true
		}
		if !a.ask("release age of "+nv, ageKey, d, reason) {
			return a
		}
	}
	// Asked last, once nothing refuses: an approval is asked for only
	// of a version that would otherwise be served.
	if q.ask != nil {
		if d := q.ask(); d.Ask {
			a.ask("approval of "+nv, q.section+".ask", d, "")
		}
	}
	return a
}

// AskNPMSearch asks whether the profile may search the registry: npm.search.
func (pr *Profile) AskNPMSearch() Answer {
	return oneStep("npm search", "npm.search", pr.NPMSearch())
}

// AskNPMAudit asks whether the profile may send npm audit's report:
// npm.audit. The packages the report names are asked of Package each,
// once its body is read.
func (pr *Profile) AskNPMAudit() Answer {
	return oneStep("npm audit", "npm.audit", pr.NPMAudit())
}

// RelayQuestion is a request for a relay of the config.
type RelayQuestion struct {
	// Relay is the config's relay; with only Name set (a policy without
	// its config), only the profile's relays are asked.
	Relay *Relay
	// Method is the request's method, upper-case; empty: not asked.
	Method string
	// Path is the request's path under the relay's prefix, decoded (a
	// leading slash is ignored); empty: not asked.
	Path string
}

// AskRelay asks whether the profile may use a relay: its relays, then the
// relay's methods and paths, each only when the question names it. The
// answer's Rule is the profile's rule, joined by the path's when the
// path was asked ("profile.web.relays[\"mod\"], relay.mod.paths[…]").
func (pr *Profile) AskRelay(q RelayQuestion) Answer {
	a := newAnswer()
	r := q.Relay
	d := pr.Relay(r.Name)
	a.Rule = d.Rule
	if !a.ask("relay "+r.Name, "relays", d, "") {
		return a
	}
	if q.Method != "" {
		md := Decision{Allow: true, Rule: fmt.Sprintf("relay.%s.methods[%q]", tomlKey(r.Name), q.Method)}
		if !r.AllowsMethod(q.Method) {
			md = Decision{Rule: fmt.Sprintf("relay.%s.methods: %s is not one of %s", tomlKey(r.Name), q.Method, strings.Join(r.Methods, ", "))}
		}
		if !a.ask("method "+q.Method, "methods", md, "") {
			// A refused method leaves the profile's rule on the audit
			// line, as before the path was looked at.
			a.Rule = d.Rule
			return a
		}
	}
	if q.Path != "" {
		pd := r.AllowsPath(strings.TrimPrefix(q.Path, "/"))
		a.ask("path "+q.Path, "paths", pd, "")
		a.Rule = d.Rule + ", " + pd.Rule
	}
	return a
}
