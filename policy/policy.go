package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// Policy is a loaded policy file: named profiles, and rules that pick a profile by
// sandbox id. It is not modified after loading, so it is safe for concurrent use.
type Policy struct {
	// Profiles by name; a profile's Name is its key here. Empty: no profile, so no
	// request is allowed (LoadPolicy refuses such a file).
	Profiles map[string]*Profile `toml:"profile"`
	// Sandboxes pick a profile for sandboxes whose tokens name none; the first match
	// wins. Empty: every such sandbox gets the profile "default".
	Sandboxes []SandboxRule `toml:"sandbox"`
	// Path is the file the policy was loaded from; empty for DefaultPolicy().
	Path string `toml:"-"`

	ix *index // where each key is in the file, for the config's checks
}

// Profile is what a sandbox may do. Every list is an allowlist of globs: empty allows nothing.
type Profile struct {
	// Name is the profile's name in the policy (profile.NAME).
	Name string `toml:"-"`
	// Models are model-id globs, matched exactly (case-sensitive). Empty: no model.
	Models []string `toml:"models"`
	// AskModels are model-id globs, matched as Models are, that the
	// sandbox may use only with an operator's approval of each request
	// (docs/approvals.md): a model one matches asks even when Models match
	// it too. Empty: no model asks.
	AskModels []string `toml:"ask_models"`
	// Repos are the GitHub repositories the sandbox may fetch from or push to. Empty: none.
	Repos []RepoRule `toml:"repos"`
	// Packages are npm package-name globs ("react", "@types/*"), matched exactly.
	// Empty: no package.
	Packages []string `toml:"packages"`
	// NPM is the version policy for the allowed packages: a deny list of semver
	// ranges and a minimum release age. Zero: every version.
	NPM NPMPolicy `toml:"npm"`
	// PyPI is the projects the sandbox may install from the PyPI route and
	// their version policy. Zero: no project.
	PyPI PyPIPolicy `toml:"pypi"`
	// Go is the Go modules the sandbox may fetch and their version policy.
	// Zero: no module.
	Go GoPolicy `toml:"go"`
	// Relays are the config's relays ([relay.NAME]) the sandbox may use, by
	// name or glob. Empty: none.
	Relays []string `toml:"relays"`
	// MCP are the remote MCP servers ([mcp.NAME] of the config) the
	// sandbox may use, by name, with what it may do on each. Absent: none.
	MCP map[string]*MCPServer `toml:"mcp"`
	// Budget caps what each of the profile's tokens may spend on the model
	// route. Zero: no limit.
	Budget Budget `toml:"budget"`
	// Sources are where a token of this profile is accepted from: IP addresses
	// ("10.30.1.7") or CIDR prefixes ("10.20.0.0/16"), matched against the
	// connection's TCP peer address, never a forwarded-for header. Empty: any
	// address, and the Unix-socket listeners, which have none.
	Sources []string `toml:"sources"`
	// Bind ties a token of this profile to a channel: BindSocket accepts it
	// only on its own sandbox's Unix socket (listen.sandbox_sockets). Empty:
	// any proxy listener.
	Bind string `toml:"bind"`
	// Mode is ModeWarn for a profile whose refusals are only warned
	// about: a request the policy would refuse is forwarded, and its
	// audit line says decision warn, with the rule and what it would have
	// said. Empty or ModeEnforce: refused.
	Mode string `toml:"mode"`
	// Warn are the codes of the refusals (WarnCodes) that are only warned
	// about, for a profile in enforce mode: a request such a refusal would
	// refuse is forwarded and logged as warn, while the profile's other
	// rules refuse as ever (docs/policy.md#warn-mode).
	Warn []string `toml:"warn"`

	sources []netip.Prefix // Sources, parsed by validate
}

// The modes of a profile.
const (
	ModeEnforce = "enforce"
	ModeWarn    = "warn"
)

// Warns reports whether the profile is in warn mode: its refusals are
// logged and the requests forwarded.
func (pr *Profile) Warns() bool { return pr != nil && pr.Mode == ModeWarn }

// WarnsOf reports whether a refusal of code (docs/refusals.md) is only
// warned about: the profile is in warn mode, or its warn list names code.
func (pr *Profile) WarnsOf(code string) bool {
	return pr.Warns() || pr != nil && code != "" && slices.Contains(pr.Warn, code)
}

// WarnCodes are the codes of the refusals the policy's own rules decide,
// which a profile's warn list may name (docs/refusals.md): never a token's,
// a budget's, an approval's or a request cproxy does not understand.
var WarnCodes = []string{
	"cproxy-model-not-allowed", "cproxy-repo-not-allowed", "cproxy-ref-not-allowed", "cproxy-api-not-allowed",
	"cproxy-package-not-allowed", "cproxy-version-denied", "cproxy-version-too-new", "cproxy-relay-not-allowed",
	"cproxy-mcp-not-allowed",
}

// StepCode is the refusal code of a refusing step of key (Step.Key), as
// the routes send it; "" for a key the warn list cannot name.
func StepCode(key string) string {
	_, rest, dotted := strings.Cut(key, ".")
	if !dotted {
		rest = key
	}
	switch {
	case key == "models":
		return "cproxy-model-not-allowed"
	case key == "repos":
		return "cproxy-repo-not-allowed"
	case key == "refs" || key == "pr_bases":
		return "cproxy-ref-not-allowed"
	case key == "api":
		return "cproxy-api-not-allowed"
	case key == "packages" || key == "pypi.packages" || key == "go.modules":
		return "cproxy-package-not-allowed"
	case rest == "deny" && key != "deny":
		return "cproxy-version-denied"
	case rest == "min_release_age":
		return "cproxy-version-too-new"
	case key == "relays" || key == "methods" || key == "paths":
		return "cproxy-relay-not-allowed"
	case strings.HasPrefix(key, "mcp"):
		return "cproxy-mcp-not-allowed"
	}
	return ""
}

// BindSocket is the Bind of a profile, and of a token, valid only on its
// sandbox's own Unix socket.
const BindSocket = "socket"

// Access levels of a RepoRule.
const (
	AccessRead = "read" // clone and fetch
	AccessPush = "push" // clone, fetch, and push to the refs the rule names
)

// RepoRule allows one repository glob. Rules add up: a request is allowed if any rule
// allows it, so a repository may have one rule for branches and another for tags.
type RepoRule struct {
	// Repo is an "owner/name" glob without ".git", matched case-insensitively. Required.
	Repo string `toml:"repo"`
	// Access is AccessRead or AccessPush. Required.
	Access string `toml:"access"`
	// Refs are full ref-name globs ("refs/heads/agent/*") a push may create or update.
	// Push only, and required with push: a push rule without refs is refused at load
	// rather than silently meaning "no ref" or "every ref".
	Refs []string `toml:"refs"`
	// Ask are full ref-name globs a push may create or update only with an
	// operator's approval of exactly that push (docs/approvals.md): a ref
	// one matches needs the approval even when Refs (of this rule or
	// another) match it too. Push only. Empty: no ref asks.
	Ask []string `toml:"ask"`
	// Tags lets a push create or move tags (refs/tags/…) matching Refs or Ask. Push only; default false.
	Tags bool `toml:"tags"`
	// Delete lets a push delete refs matching Refs or Ask. Push only; default false.
	Delete bool `toml:"delete"`
	// API is what the sandbox may do through GitHub's REST API on the
	// repositories Repo matches: names of APIPermissions ("read",
	// "pulls:create", …). Empty: nothing (the API route refuses every
	// request for them).
	API []string `toml:"api"`
	// PRBases are the branch-name globs ("main", "release/*") a pull request
	// opened through the API may target. Only with "pulls:create" in API,
	// which without them opens none. Empty: no base.
	PRBases []string `toml:"pr_bases"`
	// AskPRBases are branch-name globs, as PRBases, a pull request opened
	// through the API may target only with an operator's approval of
	// exactly it (docs/approvals.md): a base one matches asks even when
	// PRBases (of this rule or another) match it too. Only with
	// "pulls:create" in API. Empty: no base asks.
	AskPRBases []string `toml:"ask_pr_bases"`
}

// SandboxRule assigns a profile to sandboxes whose id matches a glob.
type SandboxRule struct {
	// Match is a sandbox-id glob ("conv-*"). Required.
	Match string `toml:"match"`
	// Profile names a profile of the same policy. Required.
	Profile string `toml:"profile"`
}

// Decision is the answer to a policy question. A nil *Profile answers every question
// with a denial.
type Decision struct {
	// Allow is whether the request may go ahead; the zero Decision denies.
	Allow bool
	// Ask is set, with Allow false, when the request may go ahead only
	// with an operator's approval of exactly it (a rule's ask).
	Ask bool
	// Rule says which rule decided, for logs and denial messages, e.g.
	// `profile.web.models["claude-sonnet-*"]` or `profile.web: no models entry matches`.
	Rule string
}

// ErrNoProfile is wrapped by ProfileFor's errors.
var ErrNoProfile = errors.New("no profile")

// DefaultPolicy is the policy of a config that names none: one profile, "default",
// that allows every model and no repository or package.
func DefaultPolicy() *Policy {
	return &Policy{Profiles: map[string]*Profile{
		"default": {Name: "default", Models: []string{"*"}},
	}}
}

// LoadPolicy reads a policy file. A file that cannot be read gives its os error; a
// file with problems gives a *Problems listing all of them.
func LoadPolicy(path string) (*Policy, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePolicy(path, data)
}

// ParsePolicy is LoadPolicy for a file's text already read (by ReadFile),
// as a reload checks it before putting it in force.
func ParsePolicy(file string, data []byte) (*Policy, error) {
	p, probs := loadPolicy(file, data)
	if len(probs) > 0 {
		return nil, &probs
	}
	return p, nil
}

func loadPolicy(file string, data []byte) (*Policy, Problems) {
	tree, ix, probs := parse(file, data)
	if probs != nil {
		return nil, probs
	}
	p := &Policy{}
	d := newDecoder(file, ix)
	d.hint = policyHint
	d.decode(reflect.ValueOf(p).Elem(), tree, nil)
	p.Path, p.ix = file, ix
	for name, pr := range p.Profiles {
		pr.Name = name
	}
	p.validate(d)
	sortProblems(d.probs)
	if len(d.probs) > 0 {
		return nil, d.probs
	}
	return p, nil
}

func policyHint(p path, key string) string {
	if len(p) == 0 && slices.Contains(ConfigKeys, key) {
		return "that is a config key; a policy file has only [profile.NAME] and [[sandbox]]"
	}
	return ""
}

// HasProfile reports whether the policy defines the named profile.
func (p *Policy) HasProfile(name string) bool {
	_, ok := p.Profiles[name]
	return ok
}

// ProfileFor picks the profile for a sandbox: the explicit one (named when its token
// was created) if not empty; else the profile of the first [[sandbox]] rule whose
// match glob matches the sandbox id; else "default" if the policy has it. Otherwise
// it returns an error wrapping ErrNoProfile that says how to add one. ChooseProfile
// says which of these it was.
func (p *Policy) ProfileFor(sandbox, explicit string) (*Profile, error) {
	c, err := p.ChooseProfile(sandbox, explicit)
	return c.Profile, err
}

func (p *Policy) name() string {
	if p.Path == "" {
		return "the built-in policy"
	}
	return p.Path
}

func (pr *Profile) rule(format string, args ...any) string {
	return "profile." + tomlKey(pr.Name) + fmt.Sprintf(format, args...)
}

// Model decides whether the profile allows a model id: it asks
// (Decision.Ask) when an ask_models glob matches it, whatever models say.
func (pr *Profile) Model(model string) Decision {
	if pr == nil {
		return Decision{Rule: "no profile"}
	}
	if model != "" {
		for _, g := range pr.AskModels {
			if matchGlob(g, model) {
				return Decision{Ask: true, Rule: pr.rule(".ask_models[%q]", g)}
			}
		}
	}
	return pr.firstMatch("models", "model", pr.Models, model)
}

// Package decides whether the profile allows an npm package, by its full name
// ("react", "@types/node").
func (pr *Profile) Package(name string) Decision {
	if pr == nil {
		return Decision{Rule: "no profile"}
	}
	return pr.firstMatch("packages", "package", pr.Packages, name)
}

// firstMatch allows name if one of the globs under key matches it exactly.
func (pr *Profile) firstMatch(key, what string, globs []string, name string) Decision {
	if name == "" {
		return Decision{Rule: pr.rule(": no %s named", what)}
	}
	for _, g := range globs {
		if matchGlob(g, name) {
			return Decision{Allow: true, Rule: pr.rule(".%s[%q]", key, g)}
		}
	}
	return Decision{Rule: pr.rule(": no %s entry matches", key)}
}

// ParseSource reads a source address: an IP address ("10.30.1.7",
// "fd00::7"), which stands for itself alone, or a CIDR prefix
// ("10.20.0.0/16") without host bits. An IPv4-mapped IPv6 address is read as
// the IPv4 address it maps.
func ParseSource(s string) (netip.Prefix, error) {
	bad := fmt.Errorf(`%q is not an IP address or CIDR prefix (e.g. "10.20.30.5", "10.20.0.0/16")`, s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, bad
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, bad
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped prefix: write the IPv4 prefix", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its length: write %q", s, p.Masked().String())
	}
	return p, nil
}

// SourceAllowed reports whether a token of the profile is accepted from the
// peer address addr: true when the profile has no sources; else when addr
// is inside one of them. An invalid addr (a Unix-socket peer, which has no
// address) is inside none.
func (pr *Profile) SourceAllowed(addr netip.Addr) bool {
	if pr == nil || len(pr.sources) == 0 {
		return true
	}
	addr = addr.Unmap()
	for _, p := range pr.sources {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// CoversSource reports whether every address of p is inside one of the
// profile's sources; true when the profile has none.
func (pr *Profile) CoversSource(p netip.Prefix) bool {
	if pr == nil || len(pr.sources) == 0 {
		return true
	}
	for _, q := range pr.sources {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// HasSources reports whether the profile limits where its tokens are
// accepted from.
func (pr *Profile) HasSources() bool { return pr != nil && len(pr.sources) > 0 }

func (pr *Profile) validateBinding(d *decoder, pp path) {
	seen := map[netip.Prefix]int{}
	for i, s := range pr.Sources {
		ep := pp.key("sources").elem(i, false)
		p, err := ParseSource(s)
		if err != nil {
			d.atValue(ep, "%s: %v", pp.key("sources"), err)
			continue
		}
		if j, dup := seen[p]; dup {
			d.atValue(ep, "%s: %q is the same source as %q (remove one)", pp.key("sources"), s, pr.Sources[j])
			continue
		}
		seen[p] = i
		pr.sources = append(pr.sources, p)
	}
	switch {
	case pr.Bind == "" && !d.has(pp.key("bind")):
	case pr.Bind == BindSocket:
		if len(pr.Sources) > 0 {
			d.atKey(pp.key("bind"), `%s: bind = "socket" cannot be combined with sources: a Unix socket has no peer address (the socket is the sandbox's identity; drop sources)`, pp.key("bind"))
		}
	default:
		d.atValue(pp.key("bind"), `%s: %q is not a binding (use "socket", or leave bind out for any listener)`, pp.key("bind"), pr.Bind)
	}
	switch pr.Mode {
	case "", ModeEnforce, ModeWarn:
	default:
		d.atValue(pp.key("mode"), `%s: %q is not a mode (use "warn" to forward what the profile would refuse and log it, or "enforce", the default)`, pp.key("mode"), pr.Mode)
	}
	for i, code := range pr.Warn {
		if !slices.Contains(WarnCodes, code) {
			d.atValue(pp.key("warn").elem(i, false), `%s: %q is not the code of a refusal the policy decides (one of %s; docs/refusals.md)`, pp.key("warn"), code, strings.Join(WarnCodes, ", "))
		}
	}
}

// Repo decides whether the profile allows fetching from (push false) or pushing to
// (push true) a repository, named "owner/name" (any case; a trailing ".git" is
// ignored). Fetching needs a rule with access read or push; pushing needs push, and
// then every ref the push updates needs Ref as well.
func (pr *Profile) Repo(ownerName string, push bool) Decision {
	if pr == nil {
		return Decision{Rule: "no profile"}
	}
	name, ok := repoName(ownerName)
	if !ok {
		return Decision{Rule: pr.rule(": %q is not an owner/name repository", ownerName)}
	}
	readOnly := ""
	for _, r := range pr.Repos {
		if !matchGlob(strings.ToLower(r.Repo), name) {
			continue
		}
		if !push || r.Access == AccessPush {
			return Decision{Allow: true, Rule: pr.rule(".repos[%q]", r.Repo)}
		}
		if readOnly == "" {
			readOnly = r.Repo
		}
	}
	if readOnly != "" {
		return Decision{Rule: pr.rule(`.repos[%q]: access = "read"`, readOnly)}
	}
	return Decision{Rule: pr.rule(": no repos entry matches")}
}

// Ref decides one ref update of a push to a repository Repo allowed for push: ref is
// the full ref name ("refs/heads/agent/x"), tag whether it names a tag (any ref under
// refs/tags/ counts as one regardless), del whether the command deletes it. It is
// allowed when a push rule for the repository has a refs glob matching ref, and Tags
// for a tag, and Delete for a deletion; it asks (Decision.Ask) when such a rule has an
// ask glob matching it, whatever refs say.
func (pr *Profile) Ref(ownerName, ref string, tag, del bool) Decision {
	if pr == nil {
		return Decision{Rule: "no profile"}
	}
	name, ok := repoName(ownerName)
	if !ok {
		return Decision{Rule: pr.rule(": %q is not an owner/name repository", ownerName)}
	}
	if !strings.HasPrefix(ref, "refs/") {
		return Decision{Rule: pr.rule(": %q is not a full ref name (refs/…)", ref)}
	}
	tag = tag || strings.HasPrefix(ref, "refs/tags/")
	blocked, pushRepo := "", ""
	var allowed *Decision
	for _, r := range pr.Repos {
		if r.Access != AccessPush || !matchGlob(strings.ToLower(r.Repo), name) {
			continue
		}
		if pushRepo == "" {
			pushRepo = r.Repo
		}
		// An ask glob is looked at first, in every rule: a ref it
		// matches needs an approval whatever refs allow.
		for _, key := range []string{"ask", "refs"} {
			globs := r.Ask
			if key == "refs" {
				globs = r.Refs
			}
			for _, g := range globs {
				if !matchGlob(g, ref) {
					continue
				}
				rule := pr.rule(".repos[%q].%s[%q]", r.Repo, key, g)
				switch {
				case tag && !r.Tags:
					blocked = cmpOr(blocked, rule+": tags = false")
				case del && !r.Delete:
					blocked = cmpOr(blocked, rule+": delete = false")
				case key == "ask":
					return Decision{Ask: true, Rule: rule}
				case allowed == nil:
					allowed = &Decision{Allow: true, Rule: rule}
				}
			}
		}
	}
	switch {
	case allowed != nil:
		return *allowed
	case blocked != "":
		return Decision{Rule: blocked}
	case pushRepo != "":
		return Decision{Rule: pr.rule(".repos[%q]: no refs entry matches", pushRepo)}
	}
	return Decision{Rule: pr.rule(": no repos entry allows push")}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// repoName lower-cases an owner/name and drops ".git"; ok is false for anything
// that is not one GitHub repository.
func repoName(s string) (string, bool) {
	s = strings.TrimSuffix(strings.ToLower(s), ".git")
	owner, name, ok := strings.Cut(s, "/")
	if !ok || !repoPartRE.MatchString(owner) || !repoPartRE.MatchString(name) || name == "." || name == ".." {
		return "", false
	}
	return s, true
}

var (
	repoPartRE      = regexp.MustCompile(`^[a-z0-9._-]+$`)
	profileNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	repoGlobPartRE  = regexp.MustCompile(`^[A-Za-z0-9._*?-]+$`)
	npmGlobPartRE   = regexp.MustCompile(`^[A-Za-z0-9._~*?-]+$`)
	npmScopeGlobRE  = regexp.MustCompile(`^[a-z0-9._~*?-]+$`)
	sandboxGlobRE   = regexp.MustCompile(`^[a-z0-9*?-]+$`)
	maxNpmNameBytes = 214
)

func (p *Policy) validate(d *decoder) {
	if len(p.Profiles) == 0 {
		d.problemAt(1, 1, `no profiles: nothing would be allowed (add one, e.g. [profile.default] with models = ["claude-*"])`)
	}
	for _, name := range sortedKeys(p.Profiles) {
		pp := keyPath("profile", name)
		if !profileNameRE.MatchString(name) {
			d.atKey(pp, "profile %q: a profile name has lower-case letters, digits, - and _, starts with a letter or digit, and has at most 63 characters", name)
		}
		pr := p.Profiles[name]
		checkGlobs(d, pp.key("models"), pr.Models, nil)
		checkGlobs(d, pp.key("ask_models"), pr.AskModels, nil)
		checkGlobs(d, pp.key("packages"), pr.Packages, checkPackageGlob)
		pr.validateNPM(d, pp)
		pr.validatePyPI(d, pp)
		pr.validateGo(d, pp)
		pr.validateBudget(d, pp)
		checkGlobs(d, pp.key("relays"), pr.Relays, checkRelayNameGlob)
		pr.validateMCP(d, pp)
		pr.validateBinding(d, pp)
		for i := range pr.Repos {
			checkRepoRule(d, pp.key("repos"), i, pr.Repos)
		}
	}
	for i, r := range p.Sandboxes {
		sp := path{}.key("sandbox").elem(i, isTableArray(d, i))
		switch {
		case !d.has(sp.key("match")):
			d.missing(sp.key("match"), sp, `sandbox: missing match, a sandbox-id glob (e.g. match = "conv-*")`)
		case checkGlob(r.Match) != nil:
			d.atValue(sp.key("match"), "sandbox.match: %q %v", r.Match, checkGlob(r.Match))
		case !sandboxGlobRE.MatchString(r.Match):
			d.atValue(sp.key("match"), "sandbox.match: %q can never match: sandbox ids have only a-z, 0-9 and -", r.Match)
		}
		switch {
		case !d.has(sp.key("profile")):
			d.missing(sp.key("profile"), sp, `sandbox: missing profile, the profile these sandboxes get (e.g. profile = "default")`)
		case !p.HasProfile(r.Profile):
			d.atValue(sp.key("profile"), "sandbox.profile: no profile %q in this file (add [profile.%s] or use one of: %s)",
				r.Profile, tomlKey(r.Profile), strings.Join(sortedKeys(p.Profiles), ", "))
		}
	}
}

// isTableArray says whether sandbox entry i came from a [[sandbox]] header; only the
// wording of messages depends on it.
func isTableArray(d *decoder, i int) bool {
	l := d.ix.locs[path{}.key("sandbox").elem(i, true).id()]
	return l != nil && l.val >= 0 && strings.HasPrefix(d.ix.src[l.val:], "[[")
}

// checkGlobs checks a list of globs, each also with check if not nil, and refuses duplicates.
func checkGlobs(d *decoder, p path, globs []string, check func(string) error) {
	seen := map[string]bool{}
	for i, g := range globs {
		ep := p.elem(i, false)
		err := checkGlob(g)
		if err == nil && check != nil {
			err = check(g)
		}
		switch {
		case err != nil:
			d.atValue(ep, "%s: %q %v", p, g, err)
		case seen[g]:
			d.atValue(ep, "%s: %q is listed twice (remove one)", p, g)
		}
		seen[g] = true
	}
}

func checkPackageGlob(g string) error {
	bad := fmt.Errorf(`is not an npm package name pattern (e.g. "react", "@types/*", "@acme/*")`)
	if len(g) > maxNpmNameBytes {
		return fmt.Errorf("is longer than an npm package name can be (%d bytes)", maxNpmNameBytes)
	}
	name := g
	if scoped, ok := strings.CutPrefix(g, "@"); ok {
		scope, rest, ok := strings.Cut(scoped, "/")
		if !ok || !npmScopeGlobRE.MatchString(scope) {
			return bad
		}
		name = rest
	}
	if !npmGlobPartRE.MatchString(name) || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return bad
	}
	return nil
}

func checkRefGlob(g string) error {
	if !strings.HasPrefix(g, "refs/") {
		return fmt.Errorf(`is not a full ref name pattern: start it with refs/ (e.g. "refs/heads/agent/*", "refs/tags/v*")`)
	}
	if strings.ContainsAny(g, "~^:") || strings.Contains(g, "..") || strings.Contains(g, "@{") {
		return fmt.Errorf("can never match: git ref names cannot contain ~ ^ : .. or @{")
	}
	return nil
}

func checkRepoGlob(g string) error {
	if strings.HasSuffix(strings.ToLower(g), ".git") {
		return fmt.Errorf("ends in .git: write %q", g[:len(g)-4])
	}
	owner, name, ok := strings.Cut(g, "/")
	if !ok || !repoGlobPartRE.MatchString(owner) || !repoGlobPartRE.MatchString(name) {
		return fmt.Errorf(`is not an owner/name pattern (e.g. "acme/app", "acme/*")`)
	}
	return nil
}

func checkRepoRule(d *decoder, p path, i int, rules []RepoRule) {
	r := rules[i]
	ep := p.elem(i, false)
	if !d.has(ep.key("repo")) {
		d.missing(ep.key("repo"), ep, `%s: entry needs repo, an owner/name glob (e.g. repo = "acme/app")`, p)
	} else if err := checkGlob(r.Repo); err != nil {
		d.atValue(ep.key("repo"), "%s.repo: %q %v", p, r.Repo, err)
	} else if err := checkRepoGlob(r.Repo); err != nil {
		d.atValue(ep.key("repo"), "%s.repo: %q %v", p, r.Repo, err)
	}

	switch {
	case !d.has(ep.key("access")):
		d.missing(ep.key("access"), ep, `%s: entry needs access = "read" or "push"`, p)
	case r.Access == AccessRead:
		for _, k := range []string{"refs", "ask", "tags", "delete"} {
			if d.has(ep.key(k)) {
				d.atKey(ep.key(k), `%s.%s: only for access = "push" (this entry has access = "read")`, p, k)
			}
		}
	case r.Access == AccessPush:
		if len(r.Refs) == 0 && len(r.Ask) == 0 {
			at := ep.key("access")
			if d.has(ep.key("refs")) {
				at = ep.key("refs")
			}
			d.atValue(at, `%s: access = "push" needs refs, the refs a push may update (e.g. refs = ["refs/heads/agent/*"], or ["refs/heads/**"] for every branch)`, p)
		}
		checkGlobs(d, ep.key("refs"), r.Refs, checkRefGlob)
		checkGlobs(d, ep.key("ask"), r.Ask, checkRefGlob)
	default:
		d.atValue(ep.key("access"), `%s.access: %q is not an access level (use "read" or "push")`, p, r.Access)
	}
	checkAPI(d, ep, r)

	for j := range i {
		if q := rules[j]; strings.EqualFold(q.Repo, r.Repo) && q.Access == r.Access && slices.Equal(q.Refs, r.Refs) && slices.Equal(q.Ask, r.Ask) && q.Tags == r.Tags && q.Delete == r.Delete && slices.Equal(q.API, r.API) && slices.Equal(q.PRBases, r.PRBases) && slices.Equal(q.AskPRBases, r.AskPRBases) {
			line, _ := d.ix.find(p.elem(j, false), false)
			d.atValue(ep, "%s: entry for %q is the same as the one on line %d (remove one)", p, r.Repo, line)
			break
		}
	}
}
