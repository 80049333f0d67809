// Package policy is cproxy's rule engine: it loads the policy file and answers
// the questions the routes ask of it.
//
// The policy file (Policy, LoadPolicy) says what each sandbox may do: named
// profiles, each an allowlist of models, GitHub repositories (read or push, with
// the refs a push may update) and npm packages, and [[sandbox]] rules that pick a
// profile by sandbox id. The daemon's config file, which names the policy file
// with policy = "…", is the config package's; without a policy file,
// DefaultPolicy applies: every model, no repository, no package.
//
// Each route's question is one method of Profile (AskModel, AskFetch, AskPush,
// AskAPI, AskNPM, AskNPMSearch, AskNPMAudit, AskRelay) whose Answer lists the rules it
// looked at in the route's order and what each decided: the route acts on it, its
// re-check before forwarding asks it again, and `cproxy policy explain` prints it.
//
// The policy file is loaded strictly: an unknown key, a value of the wrong type or a
// value that cannot mean anything is refused, every problem is reported (not just the
// first) as "file:line:col: message", and a message names the fix where there is one.
// File gives the config package the same strict loading, so that a config's problems
// and its policy file's are one Problems.
//
// # Policy file
//
//	[profile.web]
//	models = ["claude-sonnet-*", "claude-haiku-*"]
//	repos = [
//	  { repo = "acme/app", access = "push", refs = ["refs/heads/agent/*"], api = ["read", "pulls:create"], pr_bases = ["main"] },
//	  { repo = "acme/app", access = "push", refs = ["refs/tags/v*"], tags = true },
//	  { repo = "acme/*-docs", access = "read" },
//	]
//	packages = ["react", "react-dom", "@types/*"]
//
//	[[sandbox]]
//	match = "conv-*"
//	profile = "web"
//
// A profile name has lower-case letters, digits, - and _, and starts with a letter or
// digit. Every list is an allowlist; an empty or missing list allows nothing.
//
// Repository rules add up: fetching is allowed by any rule whose repo glob matches,
// pushing by any with access = "push", and each ref a push updates must match a refs
// glob of such a rule. A push rule must list its refs: cproxy refuses a push rule
// without them rather than guess between "no ref" (a rule that does nothing) and
// "every ref" (including the default branch). Creating, moving or deleting a tag
// also needs tags = true, and deleting any ref needs delete = true. Force pushes are
// not told apart from other updates.
//
// Ask is the policy's third answer, beside allow and deny: the request may go ahead
// only with an operator's approval of exactly it (Decision.Ask, Answer.Ask, the step
// outcome Asked). A push rule's ask lists ref globs a push may update only so; a ref
// an ask glob matches asks even when refs also match it, and tags and delete apply
// to it as to refs. A push rule needs refs or ask. One refused ref refuses the push,
// whatever else asks. [profile.NAME.npm]'s ask lists version ranges, shaped as deny's,
// whose tarballs need an approval; deny and min_release_age are asked first. A
// profile's ask_models lists model globs a request may use only so, even when models
// also match, and a rule's ask_pr_bases the bases a pull request may target only so,
// even when pr_bases also match.
//
// A rule's api lists what the sandbox may do through GitHub's REST API on its
// repositories (APIPermissions: read, pulls:create, pulls:request-reviewers,
// issues:create, issues:comment); without it, nothing. A pull request (pulls:create)
// must come from a head branch a push rule's refs allow, as refs/heads/BRANCH, into
// a base branch matching a pr_bases glob of a rule whose api lists pulls:create.
// pr_bases goes only with pulls:create. What the API route refuses whatever the
// policy says (merging, approvals, settings) is the route's, not the policy's.
//
// A sandbox's profile is the one named when its token was created; else the profile
// of the first [[sandbox]] rule whose match glob matches its id; else "default".
//
// # Globs
//
// Models, repositories, refs, packages and sandbox matches are globs:
//
//	"*"    any run of characters, possibly empty, except "/"
//	"**"   any run of characters, possibly empty, including "/"
//	"?"    exactly one character except "/"
//
// Everything else is literal: no classes, braces or escapes. So "refs/heads/agent/*"
// matches refs/heads/agent/x but not refs/heads/agent/x/y ("refs/heads/agent/**"
// does), and "@types/*" matches every @types package while "*" matches only
// unscoped ones. Repositories are matched case-insensitively (owner/name, without
// ".git"); models, refs and packages exactly. Package globs have npm's shape (an
// optional lower-case @scope/, then a name; capitals are allowed in the name because
// old packages such as JSONStream have them).
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package policy
