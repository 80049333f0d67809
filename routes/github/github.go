// Package github is cproxy's github route: git's smart HTTP under
// /github/, for the clones, fetches and pushes of the repositories a
// sandbox's policy allows, forwarded to GitHub with the real credential.
package github

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/secrets"
)

// Limits of the github route. The ref-update commands are the only part of
// a request body cproxy keeps in memory: each is ~100 bytes, so this allows
// a push of tens of thousands of refs. A refused push is read to its end
// before the answer (git is still sending its pack and would otherwise see
// a broken pipe instead of cproxy's reasons), up to GitHub's own push limit.
const (
	maxPushCommands = 4 << 20
	maxRefusedDrain = 2 << 30
)

// The two git services of smart HTTP.
const (
	uploadPack  = "git-upload-pack"  // clone, fetch, pull, ls-remote
	receivePack = "git-receive-pack" // push
)

// gitRequest is a github route request, parsed from the path as sent.
type gitRequest struct {
	owner, name string // as sent; name without ".git"
	service     string // uploadPack or receivePack
	advertise   bool   // GET …/info/refs?service=…, else POST …/<service>
}

// repo is "owner/name" for the policy and for messages.
func (g gitRequest) repo() string { return g.owner + "/" + g.name }

func (g gitRequest) push() bool { return g.service == receivePack }

// target is where the request goes upstream, rebuilt from the parsed parts:
// always with ".git", whatever the client sent.
func (g gitRequest) target() routes.Target {
	base := "/" + g.owner + "/" + g.name + ".git/"
	if g.advertise {
		return routes.Target{Path: base + "info/refs", Query: "service=" + g.service}
	}
	return routes.Target{Path: base + g.service}
}

// GitHub's name rules: an account (user or organization) name has letters,
// digits and hyphens, starts with a letter or digit, and has at most 39
// characters (older accounts may have doubled or trailing hyphens, so those
// pass); a repository name has letters, digits, '.', '-' and '_', at most
// 100 characters, and is not "." or "..".
var (
	gitOwnerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}$`)
	gitRepoRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
)

// parseGitPath accepts git's smart-HTTP requests and nothing else:
// GET /github/OWNER/REPO[.git]/info/refs?service=git-upload-pack|git-receive-pack
// and POST /github/OWNER/REPO[.git]/git-upload-pack|git-receive-pack, with
// exactly that query. path is the path as sent (the caller has checked that
// it holds no percent-encoding).
func parseGitPath(method, path, rawQuery string) (gitRequest, error) {
	rest, ok := strings.CutPrefix(path, "/github/")
	if !ok {
		return gitRequest{}, routes.Refuse(routes.ErrForbidden, "not a github route path")
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 3 {
		return gitRequest{}, routes.Refuse(routes.ErrForbidden, "%s is not a git smart-HTTP request (want /github/OWNER/REPO.git/info/refs, /git-upload-pack or /git-receive-pack); do not retry", routes.Clip(path, 128))
	}
	owner, repo, tail := parts[0], parts[1], parts[2]
	if !gitOwnerRE.MatchString(owner) {
		return gitRequest{}, routes.Refuse(routes.ErrForbidden, "%q is not a GitHub account name", routes.Clip(owner, 64))
	}
	name := repo
	if len(name) >= 4 && strings.EqualFold(name[len(name)-4:], ".git") {
		name = name[:len(name)-4]
	}
	// "app.git.git" would be "app.git" upstream but "app" to the policy.
	if !gitRepoRE.MatchString(name) || name == "." || name == ".." || strings.HasSuffix(strings.ToLower(name), ".git") {
		return gitRequest{}, routes.Refuse(routes.ErrForbidden, "%q is not a GitHub repository name", routes.Clip(repo, 128))
	}
	g := gitRequest{owner: owner, name: name}
	switch {
	case tail == "info/refs" && method == http.MethodGet:
		svc, ok := strings.CutPrefix(rawQuery, "service=")
		if !ok || (svc != uploadPack && svc != receivePack) {
			return gitRequest{}, routes.Refuse(routes.ErrForbidden, "info/refs is served only to git's smart HTTP (?service=git-upload-pack or git-receive-pack); do not retry")
		}
		g.service, g.advertise = svc, true
	case (tail == uploadPack || tail == receivePack) && method == http.MethodPost:
		if rawQuery != "" {
			return gitRequest{}, routes.Refuse(routes.ErrForbidden, "POST %s takes no query", tail)
		}
		g.service = tail
	default:
		return gitRequest{}, routes.Refuse(routes.ErrForbidden, "%s %s is not a git smart-HTTP request cproxy forwards (only clone, fetch and push; no dumb HTTP, LFS, archives or web pages); do not retry", method, routes.Clip(path, 128))
	}
	return g, nil
}

// Kind registers the github route: git smart HTTP under /github/,
// forwarded to the config's [upstream.github].
var Kind = routes.Kind{Name: "github", Prefix: "/github/", Upstream: "github", New: newGitHubRoute}

// gitHubRoute forwards git's clones, fetches and pushes of the
// repositories a sandbox's policy allows to GitHub.
type gitHubRoute struct {
	fwd *routes.Forwarder
	// app mints the installation tokens of a GitHub App, one per
	// sandbox, repository and access (the core's, Env.AppTokens); nil:
	// the upstream's credential (a token) is sent.
	app *routes.AppTokens
}

func newGitHubRoute(env routes.Env) routes.Route {
	g := &gitHubRoute{}
	check := gitHubResponse
	if env.AppTokens != nil {
		g.app = env.AppTokens
		check = g.app.CheckResponse("upstream.github.api_url is the API of the GitHub at upstream.github.url", appToken)
	}
	g.fwd = env.NewForwarder("github", "/github/", setGitHubCredential, check)
	g.fwd.CheckRedirects(gitHubMoved)
	return g
}

// EndSandbox drops the App tokens minted for sandbox (routes.Ender).
func (g *gitHubRoute) EndSandbox(sandbox string) {
	if g.app != nil {
		g.app.EndSandbox(sandbox)
	}
}

func (g *gitHubRoute) Name() string                                    { return "github" }
func (g *gitHubRoute) Prefix() string                                  { return "/github/" }
func (g *gitHubRoute) Close()                                          { g.fwd.Close() }
func (g *gitHubRoute) WriteError(w http.ResponseWriter, err error) int { return writeGitError(w, err) }

// Sources is the GitHub credential's source, when it has one, or the
// GitHub App's private key's.
func (g *gitHubRoute) Sources() []routes.Source {
	if g.app != nil {
		return []routes.Source{{Name: "upstream.github.private_key", Live: g.app.Key()}}
	}
	return g.fwd.Sources("upstream.github.credential")
}

func (gr *gitHubRoute) Serve(a *routes.Call) {
	r := a.Request()
	// Paths are checked as sent: any percent-encoding (%2F, %2e, %61)
	// means the client means something other than the plain path.
	sent, _, _ := strings.Cut(r.RequestURI, "?")
	if r.URL.RawPath != "" || sent != r.URL.Path {
		a.Fail(routes.Refuse(routes.ErrForbidden, "non-canonical path %q", routes.Clip(sent, 128)))
		return
	}
	g, err := parseGitPath(r.Method, r.URL.Path, r.URL.RawQuery)
	if err != nil {
		a.Fail(err)
		return
	}
	a.SetTarget(g.repo())
	if err := checkGitBody(r, g); err != nil {
		a.Fail(err)
		return
	}
	sandbox := a.Session().Sandbox
	a.SetQuestion(policy.Question{Route: "git", Repo: g.repo(), Push: g.push()})
	if err := a.Decide(func(prof *policy.Profile) (string, error) { return decideRepo(prof, sandbox, g) }); err != nil {
		if g.advertise {
			a.FailWith(gitAdvertisementError(g.service), err)
		} else {
			a.Fail(err)
		}
		return
	}
	// Only now, once the policy allows the request: a sandbox is told that
	// a repository is not allowed, not to wait for an operator, for what
	// it may never do.
	if up := gr.fwd.Upstream(); !up.Configured() && up.Missing != "" {
		a.Fail(routes.Refuse(routes.ErrUnavailable, "no GitHub credential is configured: %s", up.Missing))
		return
	}
	if g.push() && !g.advertise {
		cmds, ok := checkPush(a, r, g)
		if !ok {
			return
		}
		a.AskAgain(func(prof *policy.Profile) (string, error) { return decidePushAgain(a, prof, sandbox, g, cmds) })
	}
	t := g.target()
	if gr.app != nil {
		// Minted once the policy allows the request, and after a push's
		// commands are checked: the token reaches this repository alone,
		// with write access only for a push.
		access := "read"
		if g.push() {
			access = "write"
		}
		cred, err := gr.app.Token(r.Context(), sandbox, routes.AppScope{Owner: g.owner, Name: g.name, Permissions: map[string]string{"contents": access}})
		if err != nil {
			a.Fail(err)
			return
		}
		t.Credential = cred
	}
	if !g.advertise {
		// The body streams to the upstream while its answer may already be
		// streaming back; without full duplex net/http closes the request
		// body at the first response write and the rest of a pack is lost.
		_ = http.NewResponseController(a.ResponseWriter()).EnableFullDuplex()
	}
	gr.fwd.Forward(a, r, t)
}

// decideRepo asks prof whether sandbox may fetch from (or push to) g's
// repository; a push's ref updates are asked once read (checkPush).
func decideRepo(prof *policy.Profile, sandbox string, g gitRequest) (string, error) {
	ans := prof.AskFetch(g.repo())
	verb := "repository %s is not allowed for sandbox %s (allowed: %s)"
	if g.push() {
		ans = askPush(prof, g.repo(), nil)
		verb = "push to repository %s is not allowed for sandbox %s (allowed for push: %s)"
	}
	if ans.Allow {
		return ans.Rule, nil
	}
	return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeRepoNotAllowed, verb, g.repo(), sandbox, routes.Listed(prof.AllowedRepos(g.push())))
}

// decidePushAgain is a push's decision asked again of another profile
// (Server.recheck): the repository, then every command. Its refusal is
// plain, not a push report: the request may already be on its way. A
// push the profile asks about goes on only with the grant of exactly it
// that the request holds.
func decidePushAgain(a *routes.Call, prof *policy.Profile, sandbox string, g gitRequest, cmds []*packp.Command) (string, error) {
	if rule, err := decideRepo(prof, sandbox, g); err != nil {
		return rule, err
	}
	ans := askPush(prof, g.repo(), cmds)
	if ans.Ask {
		if a.Approved(pushSubject(g, cmds)) {
			return ans.Rule, nil
		}
		return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeNeedsApproval, "%s needs approval; send it again to ask for it", pushApproval(g, cmds, ans).What)
	}
	if denials := pushDenials(ans, cmds, pusher{prof, sandbox, g.repo()}); denials != nil {
		return ans.Rule, refDenial(firstDenial(denials))
	}
	return ans.Rule, nil
}

// checkGitBody checks the body's shape before anything reads it: none for
// info/refs; git's request content type for a POST; gzip only for
// upload-pack (git compresses large fetch requests; cproxy does not need to
// read those), never for receive-pack, whose commands cproxy must read.
func checkGitBody(r *http.Request, g gitRequest) error {
	if g.advertise {
		if r.ContentLength > 0 || len(r.TransferEncoding) > 0 {
			return routes.Refuse(routes.ErrBadRequest, "GET info/refs takes no body")
		}
		r.Body = http.NoBody
		r.ContentLength = 0
		return nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-"+g.service+"-request" {
		return routes.Refuse(routes.ErrBadRequest, "POST %s needs Content-Type application/x-%s-request, got %q", g.service, g.service, routes.Clip(ct, 64))
	}
	ce := r.Header.Values("Content-Encoding")
	switch {
	case len(ce) == 0:
	case len(ce) == 1 && (strings.EqualFold(ce[0], "identity") || strings.EqualFold(ce[0], "gzip") && !g.push()):
	default:
		return routes.Refuse(routes.ErrBadRequest, "Content-Encoding %q is not accepted for %s", routes.Clip(strings.Join(ce, ","), 32), g.service)
	}
	return nil
}

// checkPush decides a push: it reads the ref-update commands at the start
// of the body, asks the policy about every one, and either puts the body
// back together for forwarding (true, with the push's commands) or answers
// with git's push report, every command rejected (false).
func checkPush(a *routes.Call, r *http.Request, g gitRequest) ([]*packp.Command, bool) {
	// The ref updates are kept in memory until they have been forwarded,
	// and held under the request's body memory as they are read; the pack
	// streams through.
	held := a.Held().Reader(r.Context(), r.Body)
	p, err := readPush(held)
	if held.Refused() != nil {
		err = held.Refused()
	}
	r.Body = readCloser{held.Replay(p.body), r.Body}
	if err != nil {
		a.Fail(err)
		return nil, false
	}
	if p.probe {
		// git's probe before a large push: no commands, nothing to decide.
		return nil, true
	}
	refs := make([]string, len(p.commands))
	updates := make([]audit.RefUpdate, len(p.commands))
	for i, c := range p.commands {
		refs[i] = c.Name.String()
		updates[i] = audit.RefUpdate{Ref: refs[i], Old: c.Old.String(), New: c.New.String()}
	}
	a.SetRefs(updates)
	a.SetTarget(g.repo() + " " + strings.Join(refs, ","))
	a.SetQuestion(policy.Question{Route: "git", Repo: g.repo(), Push: true, Refs: pushUpdates(p.commands)})
	ans := askPush(a.Session().Profile, g.repo(), p.commands)
	a.SetRule(ans.Rule)
	a.Answered(ans.Allow)
	var denials []string
	var refusal error
	if ans.Ask {
		// Approved, the push goes on, and its grant is used as it is
		// sent; else it is refused with the approval request's id.
		if refusal = a.NeedApproval(pushApproval(g, p.commands, ans)); refusal == nil {
			return p.commands, true
		}
		denials = askDenials(ans, p.commands, routes.Message(refusal))
	} else if denials = pushDenials(ans, p.commands, pusher{a.Session().Profile, a.Session().Sandbox, g.repo()}); denials == nil || a.Warned(refDenial(firstDenial(denials))) == nil {
		return p.commands, true
	}
	// Read what is left (the pack) before answering, so git reads the
	// report instead of failing to send.
	io.Copy(io.Discard, io.LimitReader(r.Body, maxRefusedDrain))
	if refusal == nil {
		refusal = refDenial(firstDenial(denials))
	}
	if !p.report {
		a.Fail(refusal)
		return nil, false
	}
	a.Denied(refusal)
	writePushReport(a.ResponseWriter(), p.sideband, p.commands, denials)
	return nil, false
}

// readCloser is a forwarded body: the bytes of r, closing the original.
type readCloser struct {
	io.Reader
	io.Closer
}

// push is the start of a receive-pack request body, decoded.
type push struct {
	// body yields exactly the bytes of the original body: those the
	// decoder consumed, then the rest, unread (the pack streams through).
	body     io.Reader
	probe    bool // the body is a lone flush-pkt, git's probe before a large push
	commands []*packp.Command
	report   bool // the client asked for report-status (or -v2)
	sideband bool // … and for side-band or side-band-64k
}

// readPush decodes the ref-update commands at the start of a receive-pack
// body with go-git's decoder, reading through a tee that records exactly
// what it consumed. The returned body is always set, even with an error, so
// the caller can close it.
func readPush(body io.Reader) (push, error) {
	var seen bytes.Buffer
	lim := &io.LimitedReader{R: body, N: maxPushCommands}
	tee := io.TeeReader(lim, &seen)
	rest := func() io.Reader { return io.MultiReader(bytes.NewReader(seen.Bytes()), body) }
	bad := func(format string, args ...any) (push, error) {
		return push{body: rest()}, routes.Refuse(routes.ErrBadRequest, "the push cannot be read: "+format, args...)
	}

	var head [4]byte
	if _, err := io.ReadFull(tee, head[:]); err != nil {
		return bad("it is shorter than one pkt-line")
	}
	if bytes.Equal(head[:], pktline.FlushPkt) {
		var one [1]byte
		if n, _ := io.ReadFull(tee, one[:]); n == 0 {
			return push{body: rest(), probe: true}, nil
		}
		return bad("it starts with a flush-pkt")
	}
	commands, err := commandSection(io.MultiReader(bytes.NewReader(head[:]), tee))
	if err != nil {
		if lim.N == 0 {
			return bad("its ref updates are over %d MiB", maxPushCommands>>20)
		}
		return bad("%v", err)
	}
	req := packp.NewReferenceUpdateRequest()
	if err := req.Decode(bytes.NewReader(commands)); err != nil {
		return bad("%v", err)
	}
	// The decoder and git's receive-pack must agree on what each command
	// names: go-git splits a command line at any white space, receive-pack
	// takes the rest of the line as the ref name. Read the lines again and
	// accept only "old new ref" exactly as decoded.
	if err := sameCommands(commands, req); err != nil {
		if lim.N == 0 {
			return bad("its ref updates are over %d MiB", maxPushCommands>>20)
		}
		return bad("%v", err)
	}
	p := push{body: rest(), commands: req.Commands}
	caps := req.Capabilities
	p.report = caps.Supports(capability.ReportStatus) || caps.Supports(capability.Capability("report-status-v2"))
	p.sideband = caps.Supports(capability.Sideband64k) || caps.Supports(capability.Sideband)
	return p, nil
}

// commandSection reads a push's pkt-lines up to and including the flush-pkt
// that ends its commands, and returns them without its "shallow" lines. A
// push from a shallow clone starts with one such line per shallow commit,
// newline-terminated; go-git's decoder takes at most one, and only without
// the newline. They say which commits the client lacks, nothing the policy
// asks about, and what is forwarded is the original body, so they are left
// out of what is decoded only.
func commandSection(r io.Reader) ([]byte, error) {
	var out bytes.Buffer
	enc := pktline.NewEncoder(&out)
	sc := pktline.NewScanner(r)
	commands := 0
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			out.Write(pktline.FlushPkt)
			return out.Bytes(), nil
		}
		if commands == 0 && bytes.HasPrefix(line, []byte("shallow ")) {
			continue
		}
		commands++
		if err := enc.Encode(line); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no flush-pkt after the commands")
}

// sameCommands checks the command lines recorded in raw against the
// decoded request, byte for byte.
func sameCommands(raw []byte, req *packp.ReferenceUpdateRequest) error {
	sc := pktline.NewScanner(bytes.NewReader(raw))
	i, flushed := 0, false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			flushed = true // the flush-pkt after the commands
			break
		}
		if i == 0 {
			line, _, _ = bytes.Cut(line, []byte{0})
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if i >= len(req.Commands) {
			return fmt.Errorf("more command lines than commands")
		}
		c := req.Commands[i]
		if string(line) != c.Old.String()+" "+c.New.String()+" "+c.Name.String() {
			return fmt.Errorf("command %d is not \"OLD NEW REF\"", i+1)
		}
		if !validRefName(c.Name.String()) {
			return fmt.Errorf("%q is not a valid ref name", routes.Clip(c.Name.String(), 128))
		}
		i++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !flushed {
		// go-git takes the end of the body for one; receive-pack does not.
		return fmt.Errorf("no flush-pkt after the commands")
	}
	if i != len(req.Commands) {
		return fmt.Errorf("fewer command lines than commands")
	}
	return nil
}

// validRefName follows git check-ref-format for the full names a push
// updates: under refs/, no control characters, space, ~ ^ : ? * [ \, no
// "..", "@{", "//", no component starting with '.' or ending in ".lock",
// not ending in '/' or '.'. receive-pack refuses such names anyway; cproxy
// refuses them before a glob could match one.
func validRefName(ref string) bool {
	if !strings.HasPrefix(ref, "refs/") || strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".") ||
		strings.Contains(ref, "..") || strings.Contains(ref, "@{") || ref == "@" {
		return false
	}
	for _, c := range []byte(ref) {
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	for comp := range strings.SplitSeq(ref, "/") {
		if comp == "" || comp[0] == '.' || strings.HasSuffix(comp, ".lock") {
			return false
		}
	}
	return true
}

// askPush asks prof about pushing cmds to repo (policy's AskPush): the
// repository, then every command.
//
// Force pushes are not told apart. A command carries the ref's old and new
// object ids, not whether new descends from old: that needs the commit graph
// between them, part of it in the pack (unresolved deltas) and part only on
// GitHub. GitHub has the whole graph and enforces "block force pushes"
// (rulesets, branch protection) for the token cproxy pushes with, and a
// profile's refs already keep a sandbox to branches such as agent/*, where
// rewriting its own history (a rebase) is usually wanted. So the policy has
// no force-push key: protect branches on GitHub.
func askPush(prof *policy.Profile, repo string, cmds []*packp.Command) policy.Answer {
	return prof.AskPush(repo, pushUpdates(cmds))
}

// pushUpdates are a push's commands as the policy asks about them.
func pushUpdates(cmds []*packp.Command) []policy.RefUpdate {
	updates := make([]policy.RefUpdate, len(cmds))
	for i, c := range cmds {
		updates[i] = policy.RefUpdate{Ref: c.Name.String(), Delete: c.New == plumbing.ZeroHash}
	}
	return updates
}

// pushDenials words askPush's answer for git's push report: nil when the
// push is allowed; otherwise a reason for every command, the refused ones
// first in the report's wording, and the others as not pushed because of
// the first refused.
func pushDenials(ans policy.Answer, cmds []*packp.Command, who pusher) []string {
	if ans.Allow {
		return nil
	}
	reasons := make([]string, len(cmds))
	refused := ""
	for i, c := range cmds {
		// A command the answer did not reach (its repository refused the
		// push) is refused with the rest.
		var step policy.Step
		if 1+i < len(ans.Steps) {
			step = ans.Steps[1+i]
		}
		if step.Outcome == policy.Allowed || step.Outcome == policy.Asked {
			// Asked, it is not pushed for the ref refused.
			continue
		}
		ref := c.Name.String()
		del := c.New == plumbing.ZeroHash
		if refused == "" {
			refused = ref
		}
		tag := strings.HasPrefix(ref, "refs/tags/")
		switch {
		case del && (strings.HasSuffix(step.Rule, ": delete = false") || strings.HasSuffix(step.Rule, ": tags = false")):
			// A tag that may not be pushed may not be deleted either;
			// say what the client asked for.
			reasons[i] = fmt.Sprintf("cproxy: deleting %s is not allowed for sandbox %s (%s)", ref, who.sandbox, who.allowed(tag, true, "deletions"))
		case strings.HasSuffix(step.Rule, ": tags = false"):
			reasons[i] = fmt.Sprintf("cproxy: push of tag %s is not allowed for sandbox %s (%s)", ref, who.sandbox, who.allowed(true, false, "tags"))
		default:
			reasons[i] = fmt.Sprintf("cproxy: push to %s is not allowed for sandbox %s (%s)", ref, who.sandbox, who.allowed(tag, del, ""))
		}
	}
	for i := range reasons {
		if reasons[i] == "" {
			reasons[i] = fmt.Sprintf("cproxy: not pushed: %s in the same push is not allowed", refused)
		}
	}
	return reasons
}

// pushSubject is what an approval of a push to g's repository covers:
// the repository as the push names it, and every command as the push
// sends it (ref, old and new object id), in order, so that a grant is
// used only by the very same push.
func pushSubject(g gitRequest, cmds []*packp.Command) string {
	var b strings.Builder
	b.WriteString(g.repo())
	for i, c := range cmds {
		sep := " "
		if i > 0 {
			sep = ", "
		}
		b.WriteString(sep + c.Name.String() + " " + c.Old.String() + " " + c.New.String())
	}
	return b.String()
}

// pushDetail is a push's account in its approval request.
type pushDetail struct {
	Repository string    `json:"repository"`
	Refs       []pushRef `json:"refs"`
}

// pushRef is one command of a push: Ask when it is one the policy asks
// about.
type pushRef struct {
	Ref string `json:"ref"`
	Old string `json:"old"`
	New string `json:"new"`
	Ask bool   `json:"ask,omitempty"`
}

// pushApproval is the approval request of a push the policy answered
// with ask.
func pushApproval(g gitRequest, cmds []*packp.Command, ans policy.Answer) routes.ApprovalRequest {
	d := pushDetail{Repository: g.repo(), Refs: make([]pushRef, len(cmds))}
	var asked []string
	for i, c := range cmds {
		d.Refs[i] = pushRef{Ref: c.Name.String(), Old: c.Old.String(), New: c.New.String()}
		if 1+i < len(ans.Steps) && ans.Steps[1+i].Outcome == policy.Asked {
			d.Refs[i].Ask = true
			asked = append(asked, c.Name.String())
		}
	}
	what := "push to " + g.repo()
	switch {
	case len(asked) == 1:
		what = "push to " + asked[0]
	case len(asked) > 1:
		what = fmt.Sprintf("push to %s and %d more refs", asked[0], len(asked)-1)
	}
	return routes.ApprovalRequest{Subject: pushSubject(g, cmds), Detail: d, What: what}
}

// askDenials words a push that needs approval for git's push report: the
// refs the policy asks about with the refusal, the others as not pushed
// because of the first of them.
func askDenials(ans policy.Answer, cmds []*packp.Command, refusal string) []string {
	reasons := make([]string, len(cmds))
	asked := ""
	for i, c := range cmds {
		if 1+i < len(ans.Steps) && ans.Steps[1+i].Outcome == policy.Asked {
			reasons[i] = refusal
			if asked == "" {
				asked = c.Name.String()
			}
		}
	}
	for i := range reasons {
		if reasons[i] == "" {
			reasons[i] = fmt.Sprintf("cproxy: not pushed: %s in the same push needs approval", asked)
		}
	}
	return reasons
}

// pusher is who pushes: the sandbox and its profile, and the repository,
// for a push's refusal to say what the profile would allow.
type pusher struct {
	prof    *policy.Profile
	sandbox string
	repo    string
}

// allowed says which refs the profile lets the sandbox push to the
// repository, of those that may be tags (tag) or deleted (del): "allowed:
// refs/heads/agent/*", or, with none, that it allows no what (deletions,
// tags).
func (p pusher) allowed(tag, del bool, what string) string {
	refs := p.prof.AllowedRefs(p.repo, tag, del)
	if len(refs) == 0 && what != "" {
		return fmt.Sprintf("its profile allows pushing no %s to %s", what, p.repo)
	}
	return "allowed: " + routes.Listed(refs)
}

// refDenial is the refusal of a push, with reason, a denial pushDenials
// worded.
func refDenial(reason string) error {
	return routes.RefuseCode(routes.ErrForbidden, routes.CodeRefNotAllowed, "%s", strings.TrimPrefix(reason, "cproxy: "))
}

func firstDenial(reasons []string) string {
	for _, r := range reasons {
		if !strings.HasPrefix(r, "cproxy: not pushed:") {
			return r
		}
	}
	return reasons[0]
}

// writePushReport answers a refused push the way receive-pack answers one
// whose commands all fail: "unpack ok", then "ng REF REASON" per command, in
// a report-status git prints as "! [remote rejected] … (REASON)". With side
// band the report travels in band 1, as receive-pack sends it.
func writePushReport(w http.ResponseWriter, sb bool, cmds []*packp.Command, reasons []string) {
	var report bytes.Buffer
	e := pktline.NewEncoder(&report)
	e.EncodeString("unpack ok\n")
	for i, c := range cmds {
		// A reason is one line of printable text; ref names were checked.
		e.EncodeString("ng " + c.Name.String() + " " + routes.OneLine(reasons[i]) + "\n")
	}
	e.Flush()
	h := w.Header()
	h.Set("Content-Type", "application/x-git-receive-pack-result")
	h.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	w.WriteHeader(http.StatusOK)
	if !sb {
		w.Write(report.Bytes())
		return
	}
	var out bytes.Buffer
	sideband.NewMuxer(sideband.Sideband64k, &out).Write(report.Bytes())
	out.Write(pktline.FlushPkt)
	w.Write(out.Bytes())
}

// gitAdvertisementError answers info/refs with a smart-HTTP advertisement
// that holds only an error packet: git 2.39 prints it as
// "fatal: remote error: MESSAGE". A 403 would show as "The requested URL
// returned error: 403", which tells an agent nothing.
func gitAdvertisementError(service string) func(http.ResponseWriter, error) int {
	return func(w http.ResponseWriter, err error) int {
		var b bytes.Buffer
		e := pktline.NewEncoder(&b)
		e.EncodeString("# service=" + service + "\n")
		e.Flush()
		e.EncodeString("ERR " + routes.OneLine(routes.Message(err)) + "\n")
		h := w.Header()
		h.Set("Content-Type", "application/x-"+service+"-advertisement")
		h.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
		w.WriteHeader(http.StatusOK)
		w.Write(b.Bytes())
		return http.StatusOK
	}
}

// writeGitError answers in plain text, which git prints with "remote: " in
// front for info/refs. A 401 asks for Basic credentials: that is what makes
// git ask its credential helper (git-credential-cproxy) and try again.
func writeGitError(w http.ResponseWriter, err error) int {
	if errors.Is(err, routes.ErrUnauthorized) {
		w.Header().Set("WWW-Authenticate", `Basic realm="cproxy"`)
	}
	return routes.WritePlainError(w, err)
}

// setGitHubCredential puts the real token on a forwarded request: Basic x-access-token:TOKEN, the form github.com takes
// on its git endpoints for every kind of token. With no credential (the
// config's credential = "") requests go without one.
func setGitHubCredential(h http.Header, cred secrets.Secret) {
	if !cred.IsZero() {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+cred.Reveal())))
	}
}

// gitHubMoved refuses a redirect to another repository, which is how
// github.com answers for a renamed one, with an error that names the new
// name. git cannot follow it: it takes a new URL only from a redirect of
// its first request, which cproxy answers 401 until git sends its
// credential, and it never follows a redirect of a POST. A redirect within
// the same repository passes, rewritten onto cproxy.
func gitHubMoved(in *http.Request, path, query string) error {
	from, err := parseGitPath(in.Method, in.URL.Path, in.URL.RawQuery)
	if err != nil {
		return err
	}
	method := in.Method
	if strings.HasSuffix(path, "/info/refs") {
		method = http.MethodGet
	}
	to, err := parseGitPath(method, path, query)
	if err != nil {
		return routes.Refuse(routes.ErrUpstream, "github route: the upstream redirects %s to a path that is not git's smart HTTP; do not retry", from.repo())
	}
	if !strings.EqualFold(to.repo(), from.repo()) {
		return routes.Refuse(routes.ErrUpstream, "github route: repository %s has moved to %s (the upstream answered a redirect); use %s in the remote's URL, if the sandbox's policy allows it; do not retry", from.repo(), to.repo(), to.repo())
	}
	return nil
}

// appToken is the App token a forwarded request carries, as
// setGitHubCredential set it, for AppTokens.CheckResponse.
func appToken(r *http.Request) string {
	_, token, _ := r.BasicAuth()
	return token
}

// gitHubResponse turns the upstream refusing cproxy's own credential into a
// 502 for the operator: passed through, git would take the 401 for the
// sandbox token's fault and ask its credential helper again.
func gitHubResponse(resp *http.Response) error {
	return routes.CredentialRefused(resp, "github", "GitHub")
}
