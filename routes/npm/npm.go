// Package npm is the npm route: the registry under /npm/. It forwards the
// packuments and tarballs of the packages a sandbox's policy allows, and
// its searches and audits when the policy allows those, and rewrites each
// packument as it streams (packument.go) so that its tarballs point back at
// cproxy and the versions the policy denies are gone. It is registered in
// routes/builtin as Kind.
//
// It is part of cproxy's implementation, not an API for other programs: it
// changes with cproxy. Only client and helpers/sandboxenv are kept compatible
// (docs/architecture.md).
package npm

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
)

// The kinds of npm request cproxy forwards.
const (
	npmPackument = iota + 1
	npmTarball
	npmPing
	npmSearch // GET /-/v1/search, if the profile has npm.search
	npmAudit  // POST /-/npm/v1/security/advisories/bulk, if the profile has npm.audit
)

// npmRequest is an npm route request, parsed from the path as sent.
type npmRequest struct {
	kind int
	name string // the package's full name, decoded: "react", "@types/node"
	file string // the tarball's file name: "react-18.2.0.tgz"
	// query is a search's query, rebuilt from the parameters cproxy checked.
	query string
}

// npm's naming rule for names cproxy serves (validate-npm-package-name):
// URL-safe characters, not starting with '.' or '_', an optional @scope/
// prefix, at most 214 characters in all. A scope is lowercase; a name may
// hold capitals, which npm allows for packages published before the rule
// (JSONStream is a common dependency), as the policy's globs do.
var (
	npmScopeRE   = regexp.MustCompile(`^[a-z0-9~-][a-z0-9._~-]*$`)
	npmPartRE    = regexp.MustCompile(`^[A-Za-z0-9~-][A-Za-z0-9._~-]*$`)
	npmVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.+-]*)?$`)
)

// validNPMName reports whether name is a package name by npm's rules.
func validNPMName(name string) bool {
	if name == "" || len(name) > 214 {
		return false
	}
	rest := name
	if scope, pkg, ok := strings.Cut(name, "/"); ok {
		if !strings.HasPrefix(scope, "@") || !npmScopeRE.MatchString(scope[1:]) {
			return false
		}
		rest = pkg
	} else if strings.HasPrefix(name, "@") {
		return false
	}
	// npm compares these two in any case (NODE_MODULES is no name either).
	return npmPartRE.MatchString(rest) && !strings.EqualFold(rest, "node_modules") && !strings.EqualFold(rest, "favicon.ico")
}

// baseName is the name without its scope: the tarball file name's prefix.
func (n npmRequest) baseName() string {
	if i := strings.IndexByte(n.name, '/'); i >= 0 {
		return n.name[i+1:]
	}
	return n.name
}

// encodedName is the name as the upstream takes it in a packument path:
// the scope's slash encoded.
func (n npmRequest) encodedName() string {
	return strings.Replace(n.name, "/", "%2f", 1)
}

// target is where the request goes upstream, rebuilt from the parsed parts.
func (n npmRequest) target() routes.Target {
	switch n.kind {
	case npmPing:
		return routes.Target{Path: "/-/ping"}
	case npmSearch:
		return routes.Target{Path: "/-/v1/search", Query: n.query}
	case npmAudit:
		return routes.Target{Path: "/-/npm/v1/security/advisories/bulk"}
	case npmTarball:
		return routes.Target{Path: "/" + n.name + "/-/" + n.file}
	}
	return routes.Target{Path: "/" + n.name, RawPath: "/" + n.encodedName()}
}

// version is a tarball's version, from its file name (checked by parseNPMPath).
func (n npmRequest) version() string {
	return strings.TrimSuffix(strings.TrimPrefix(n.file, n.baseName()+"-"), ".tgz")
}

// proxyPath is the request's path on cproxy, for rewritten tarball URLs.
func (n npmRequest) proxyPath() string { return "/npm" + n.target().Path }

// parseNPMPath accepts the npm requests cproxy forwards: GET of a packument,
// a tarball or the ping. escaped is the path as sent (still percent-encoded);
// each segment is decoded exactly once. Everything else is refused, with a
// message naming what it is.
func parseNPMPath(method, escaped, rawQuery string) (npmRequest, error) {
	rest, ok := strings.CutPrefix(escaped, "/npm/")
	if !ok {
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "not an npm route path")
	}
	if strings.HasPrefix(rest, "-/") || rest == "-" {
		return parseNPMSpecial(method, rest, rawQuery)
	}
	if rawQuery != "" {
		// npm sends none; one the upstream might act on is not forwarded.
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "a query string on %s is not something npm sends; cproxy does not forward it", routes.Clip(escaped, 128))
	}
	segs := strings.Split(rest, "/")
	var dec []string
	for _, s := range segs {
		d, err := url.PathUnescape(s)
		if err != nil {
			return npmRequest{}, routes.Refuse(routes.ErrBadRequest, "malformed percent-encoding in %q", routes.Clip(escaped, 128))
		}
		dec = append(dec, d)
	}
	var n npmRequest
	switch {
	case strings.HasPrefix(dec[0], "@") && strings.Contains(dec[0], "/"):
		// @scope%2fname: the encoded slash is the only one allowed.
		n.name, dec = dec[0], dec[1:]
	case strings.HasPrefix(dec[0], "@") && len(dec) >= 2:
		if strings.Contains(dec[1], "/") {
			return npmRequest{}, routes.Refuse(routes.ErrForbidden, "%q is not an npm package name", routes.Clip(dec[0]+"/"+dec[1], 128))
		}
		n.name, dec = dec[0]+"/"+dec[1], dec[2:]
	default:
		n.name, dec = dec[0], dec[1:]
	}
	if !validNPMName(n.name) {
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "%q is not an npm package name (URL-safe characters, optional lowercase @scope/, at most 214 characters)", routes.Clip(n.name, 128))
	}
	switch {
	case len(dec) == 0:
		n.kind = npmPackument
		switch method {
		case http.MethodGet:
		case http.MethodPut:
			return npmRequest{}, routes.Refuse(routes.ErrForbidden, "publishing %s is not allowed through cproxy", n.name)
		case http.MethodDelete:
			return npmRequest{}, routes.Refuse(routes.ErrForbidden, "unpublishing %s is not allowed through cproxy", n.name)
		default:
			return npmRequest{}, routes.Refuse(routes.ErrForbidden, "%s of a packument is not allowed through cproxy (only GET)", method)
		}
	case len(dec) == 2 && dec[0] == "-":
		n.kind, n.file = npmTarball, dec[1]
		if method != http.MethodGet {
			if method == http.MethodDelete {
				return npmRequest{}, routes.Refuse(routes.ErrForbidden, "unpublishing %s is not allowed through cproxy", n.name)
			}
			return npmRequest{}, routes.Refuse(routes.ErrForbidden, "%s of a tarball is not allowed through cproxy (only GET)", method)
		}
		v, ok := strings.CutPrefix(n.file, n.baseName()+"-")
		if !ok || !strings.HasSuffix(v, ".tgz") || !npmVersionRE.MatchString(strings.TrimSuffix(v, ".tgz")) {
			return npmRequest{}, routes.Refuse(routes.ErrForbidden, "%q is not a tarball of %s (want %s-VERSION.tgz)", routes.Clip(n.file, 128), n.name, n.baseName())
		}
	case len(dec) == 2 && dec[0] == "-rev":
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "unpublishing %s is not allowed through cproxy", n.name)
	default:
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "%s %s is not an npm request cproxy forwards (only packuments, tarballs and ping)", method, routes.Clip(escaped, 128))
	}
	return n, nil
}

// parseNPMSpecial decides the registry's /-/ endpoints: the ping passes,
// search and the bulk audit go on to the policy; the rest are refused, each
// with its own reason.
func parseNPMSpecial(method, rest, rawQuery string) (npmRequest, error) {
	if rawQuery != "" && rest != "-/v1/search" {
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "a query string on /npm/%s is not something npm sends; cproxy does not forward it", routes.Clip(rest, 128))
	}
	switch {
	case rest == "-/ping" && method == http.MethodGet:
		return npmRequest{kind: npmPing}, nil
	case rest == "-/v1/search" && method == http.MethodGet:
		q, err := searchQuery(rawQuery)
		if err != nil {
			return npmRequest{}, err
		}
		return npmRequest{kind: npmSearch, query: q}, nil
	case rest == "-/npm/v1/security/advisories/bulk" && method == http.MethodPost:
		return npmRequest{kind: npmAudit}, nil
	case strings.HasPrefix(rest, "-/npm/v1/security/"):
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "%s /npm/%s is not forwarded: cproxy takes npm audit only as npm 7 and later send it (POST /-/npm/v1/security/advisories/bulk)", method, routes.Clip(rest, 128))
	case strings.HasPrefix(rest, "-/npm/v1/tokens"):
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "registry token endpoints are not allowed through cproxy")
	case strings.HasPrefix(rest, "-/user/") || rest == "-/whoami" || strings.HasPrefix(rest, "-/v1/login"):
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "registry user endpoints (login, whoami) are not allowed through cproxy")
	case strings.HasPrefix(rest, "-/package/") && strings.Contains(rest, "/dist-tags"):
		return npmRequest{}, routes.Refuse(routes.ErrForbidden, "dist-tag endpoints are not allowed through cproxy")
	}
	return npmRequest{}, routes.Refuse(routes.ErrForbidden, "%s /npm/%s is not an npm request cproxy forwards (only packuments, tarballs and ping)", method, routes.Clip(rest, 128))
}

// npmRewriteKey keys a packument request's *npmRewrite in its context;
// npmRequestKey keys every forwarded request's npmRequest.
type (
	npmRewriteKey struct{}
	npmRequestKey struct{}
)

// npmRewrite is what the response hook needs to rewrite one packument.
type npmRewrite struct {
	req    npmRequest
	public string // cproxy's public URL, no trailing slash
	// profile, if it has an npm version policy, filters the versions
	// (Profile.NPMVersion) as of now.
	profile *policy.Profile
	now     time.Time
}

// Kind is the npm route: the registry under /npm/.
// npm install fetches every package of a lockfile, on about 16 sockets at
// once: a lockfile of a few thousand packages must install without a 429.
var Kind = routes.Kind{Name: "npm", Prefix: "/npm/", Upstream: "npm", New: newRoute,
	Limits: routes.Limits{Concurrent: 64, RequestsPerMinute: 6000}}

// route forwards the packuments and tarballs of the packages a
// sandbox's policy allows, and its audits, to the npm registry, rewriting
// packuments to point their tarballs back at cproxy.
type route struct {
	fwd       *routes.Forwarder
	publicURL string
	now       func() time.Time
}

func newRoute(env routes.Env) routes.Route {
	return &route{
		fwd:       env.NewForwarder("npm", "/npm/", setNPMCredential, npmResponse(env.Upstream.URL)),
		publicURL: env.PublicURL,
		now:       env.Now,
	}
}

func (s *route) Name() string          { return "npm" }
func (s *route) Limits() routes.Limits { return Kind.Limits }
func (s *route) Prefix() string        { return "/npm/" }
func (s *route) Close()                { s.fwd.Close() }

// WriteError renders a refusal as the registry renders errors,
// {"error": "..."}, which npm prints after the status.
func (s *route) WriteError(w http.ResponseWriter, err error) int {
	return routes.WriteJSONError(w, err)
}

// Sources is the npm credential's source, when it has one.
func (s *route) Sources() []routes.Source { return s.fwd.Sources("upstream.npm.credential") }

func (s *route) Serve(a *routes.Call) {
	r := a.Request()
	n, err := parseNPMPath(r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
	if err != nil {
		a.Fail(err)
		return
	}
	if n.kind != npmAudit {
		if r.ContentLength > 0 || len(r.TransferEncoding) > 0 {
			a.Fail(routes.Refuse(routes.ErrBadRequest, "GET takes no body"))
			return
		}
		r.Body = http.NoBody
		r.ContentLength = 0
	}
	// The questions are asked in this order, each only if the one before
	// allowed the request: the audit's body is read, and a tarball's
	// publish time fetched, only for what the profile may ask for.
	q := &npmQuestion{n: n, sandbox: a.Session().Sandbox, now: s.now, call: a}
	switch n.kind {
	case npmSearch:
		a.SetTarget("search")
	case npmAudit:
		a.SetTarget("audit")
	case npmTarball:
		a.SetVersion(n.version())
		fallthrough
	case npmPackument:
		a.SetTarget(n.name)
	}
	a.AskAgain(q.decide)
	rule, err := q.decide(a.Session().Profile)
	if err == nil && n.kind == npmAudit {
		q.audit, err = readAudit(a)
		rule, err = q.decideErr(a.Session().Profile, err)
	}
	if err != errNeedsPublished {
		a.Answered(err == nil)
		err = a.Warned(err)
	}
	// Only once the policy allows the request (or needs only the publish
	// time, which is fetched with the credential): a sandbox is told that a
	// package is not allowed, not to wait for an operator, for what it may
	// never do.
	if up := s.fwd.Upstream(); (err == nil || err == errNeedsPublished) && !up.Configured() && up.Missing != "" {
		err = routes.Refuse(routes.ErrUnavailable, "no npm credential is configured: %s", up.Missing)
	}
	if err == errNeedsPublished {
		// The age is in the packument: read its time[version] first.
		var published time.Time
		published, q.times, err = s.npmPublished(r.Context(), n, n.version())
		q.published = &published
		if rule = ""; err == nil {
			rule, err = q.decide(a.Session().Profile)
			a.Answered(err == nil)
			err = a.Warned(err)
		}
	}
	a.SetRule(rule)
	a.SetQuestion(q.question())
	if err != nil {
		a.Fail(err)
		return
	}
	if n.kind == npmPackument {
		public := strings.TrimSuffix(s.publicURL, "/")
		if public == "" {
			public = "http://" + r.Host
			if r.TLS != nil {
				public = "https://" + r.Host
			}
		}
		// cproxy must read what it rewrites: gzip or nothing.
		r.Header = r.Header.Clone()
		r.Header.Set("Accept-Encoding", "gzip")
		rw := &npmRewrite{req: n, public: public}
		if pr := a.Session().Profile; pr.HasNPMVersionPolicy() {
			rw.profile, rw.now = pr, s.now()
			// What is hidden depends on the clock and the policy, not only on
			// the upstream's bytes: no validators, so no stale 304s.
			r.Header.Del("If-None-Match")
			r.Header.Del("If-Modified-Since")
			if pr.NPM.MinReleaseAge.Duration > 0 {
				// The abbreviated packument has no time: ask for the full one,
				// which npm takes as well.
				r.Header.Set("Accept", "application/json")
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), npmRewriteKey{}, rw))
		q.rewritten = true
	}
	r = r.WithContext(context.WithValue(r.Context(), npmRequestKey{}, n))
	s.fwd.Forward(a, r, n.target())
}

// npmQuestion is what serveNPM asks a profile about one request, kept so
// that it can be asked again of another profile (Server.recheck).
type npmQuestion struct {
	n       npmRequest
	sandbox string
	// audit is an audit's body as read (checkedAudit); nil until then.
	audit *checkedAudit
	// published is a tarball's publish time, once fetched, and times the
	// packument's time it was read from, for a refusal to name the newest
	// version allowed.
	published *time.Time
	times     map[string]json.RawMessage
	// rewritten says that the packument's rewrite is set up, for the
	// profile asked first.
	rewritten bool
	now       func() time.Time
	// call is the request, for a tarball the policy asks about
	// (approval); filed says its approval request was filed or found.
	call  *routes.Call
	filed bool
}

// npmDetail is a tarball's account in its approval request.
type npmDetail struct {
	Package string `json:"package"`
	Version string `json:"version"`
}

// approval answers a tarball the policy asks about (npm.ask): the request
// goes on with the grant of exactly this package version; without one, the
// first time it is asked, its approval request is filed (or found) and its
// refusal names it. Asked again of another profile (a reload), it goes on
// only with the grant it holds.
func (q *npmQuestion) approval() error {
	n := q.n
	subject := n.name + "@" + n.version()
	if q.call.Approved(subject) {
		return nil
	}
	if q.filed {
		return routes.RefuseCode(routes.ErrForbidden, routes.CodeNeedsApproval, "package %s needs approval; send the request again to ask for it", subject)
	}
	q.filed = true
	return q.call.NeedApproval(routes.ApprovalRequest{Subject: subject, Detail: npmDetail{Package: n.name, Version: n.version()}, What: "package " + subject})
}

// decideErr is decide, unless err (reading the audit, fetching the
// publish time) already refuses the request.
func (q *npmQuestion) decideErr(prof *policy.Profile, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return q.decide(prof)
}

// question is the request's question as the audit record keeps it.
func (q *npmQuestion) question() policy.Question {
	pq := policy.Question{Route: "npm", Search: q.n.kind == npmSearch, Audit: q.n.kind == npmAudit}
	if q.n.kind == npmPackument || q.n.kind == npmTarball {
		pq.Package, pq.Published = q.n.name, q.published
	}
	if q.n.kind == npmTarball {
		pq.Version = q.n.version()
	}
	return pq
}

// errNeedsPublished is npmQuestion.decide's answer about a tarball when
// the profile's min_release_age needs its publish time and it has not been
// fetched: serveNPM fetches it and asks again. Asked again of a new profile
// (a reload) at forward, it refuses the request, which may be sent again;
// so does a packument whose rewrite was set up for the profile before.
var errNeedsPublished = routes.Deferred("the policy's npm version rules changed while the request was under way; send it again")

// decide asks prof about the request (policy's AskNPMSearch, AskNPMAudit
// and, for a package, AskNPM) and words its refusal for npm: the search
// or audit (and the packages an audit names, once read), or the package
// and, for a tarball, its version.
func (q *npmQuestion) decide(prof *policy.Profile) (string, error) {
	n := q.n
	switch n.kind {
	case npmSearch, npmAudit:
		what, ans, hint := "search", prof.AskNPMSearch(), ""
		if n.kind == npmAudit {
			what, ans, hint = "audit", prof.AskNPMAudit(), "; run npm with --no-audit"
		}
		if !ans.Allow {
			return ans.Rule, routes.Refuse(routes.ErrForbidden, "npm %s is not allowed for sandbox %s (the policy's npm.%s is off)%s", what, q.sandbox, what, hint)
		}
		if q.audit != nil {
			return ans.Rule, q.audit.check(q.sandbox, prof)
		}
		return ans.Rule, nil
	case npmPackument, npmTarball:
		nq := policy.NPMQuestion{Name: n.name, Published: q.published, Now: q.now()}
		if n.kind == npmTarball {
			nq.Version = n.version()
		}
		ans := prof.AskNPM(nq)
		if step, refused := ans.Refusal(); refused {
			switch {
			case step.Key == "packages":
				return ans.Rule, q.notAllowed(prof)
			case step.Key == "npm.min_release_age" && q.published != nil && !q.published.IsZero():
				return ans.Rule, routes.RefuseTooNew(n.name+"@"+n.version(), q.sandbox, *q.published, nq.Now, prof.NPM.MinReleaseAge.Duration, q.newestAllowed(prof, nq.Now))
			case step.Key == "npm.min_release_age":
				return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeTooNew, "%s@%s is not allowed for sandbox %s: %s", n.name, n.version(), q.sandbox, step.Reason)
			}
			return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeVersionDenied, "%s@%s is not allowed for sandbox %s: %s; use another version", n.name, n.version(), q.sandbox, step.Reason)
		}
		switch {
		case n.kind == npmPackument && q.rewritten && prof.HasNPMVersionPolicy():
			// The rewrite filters versions for the profile asked first.
			return ans.Rule, errNeedsPublished
		case n.kind == npmTarball && ans.Deferred():
			// The release age needs the version's publish time.
			return ans.Rule, errNeedsPublished
		case n.kind == npmTarball && ans.Ask:
			return ans.Rule, q.approval()
		case !ans.Allow:
			// Deny by default: an answer that neither allows nor
			// refuses nor waits is refused.
			return ans.Rule, q.notAllowed(prof)
		}
		return ans.Rule, nil
	}
	return "", nil // the ping
}

// notAllowed refuses the package, not one of prof's packages, saying which
// are.
func (q *npmQuestion) notAllowed(prof *policy.Profile) error {
	return routes.RefuseCode(routes.ErrForbidden, routes.CodePackageNotAllowed, "package %s is not allowed for sandbox %s (allowed: %s)", q.n.name, q.sandbox, routes.Listed(prof.Packages))
}

// The search parameters npm sends, and the most each may hold.
var searchParams = map[string]int{"text": 512, "size": 3, "from": 6, "quality": 8, "popularity": 8, "maintenance": 8}

// searchQuery checks a search's query and rebuilds it from the parameters
// npm sends, each once: text is required, the rest are numbers.
func searchQuery(raw string) (string, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", routes.Refuse(routes.ErrBadRequest, "the search query is malformed")
	}
	out := url.Values{}
	for k, vs := range q {
		max, ok := searchParams[k]
		if !ok {
			return "", routes.Refuse(routes.ErrForbidden, "search parameter %q is not one npm sends (text, size, from, quality, popularity, maintenance)", routes.Clip(k, 32))
		}
		if len(vs) != 1 || len(vs[0]) > max || k != "text" && !isDecimal(vs[0]) {
			return "", routes.Refuse(routes.ErrBadRequest, "search parameter %s must be given once, as %s", k, map[bool]string{true: "text of at most 512 bytes", false: "a number"}[k == "text"])
		}
		out.Set(k, vs[0])
	}
	if strings.TrimSpace(out.Get("text")) == "" {
		return "", routes.Refuse(routes.ErrBadRequest, "a search needs text")
	}
	return out.Encode(), nil
}

// isDecimal reports whether s is a non-negative decimal number, as npm
// writes its search weights ("0.65") and sizes ("20").
func isDecimal(s string) bool {
	dot := false
	for i, c := range s {
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0:
			dot = true
		default:
			return false
		}
	}
	return s != "" && !strings.HasSuffix(s, ".")
}

// The most an audit body may hold: npm sends package names and versions,
// some tens of bytes each, gzip-compressed.
const (
	maxAuditBody    = 4 << 20
	maxAuditDecoded = 32 << 20
)

// readAudit reads an npm audit body before it goes upstream, gzip-compressed
// or not, within the memory for bodies read whole; checkedAudit.check
// checks it. What is forwarded is exactly the bytes read (still
// compressed).
func readAudit(a *routes.Call) (*checkedAudit, error) {
	r := a.Request()
	raw, err := a.ReadEncodedBody(maxAuditBody, "gzip")
	if err != nil {
		return nil, err
	}
	r.TransferEncoding = nil
	gz := strings.EqualFold(strings.TrimSpace(r.Header.Get("Content-Encoding")), "gzip")
	return &checkedAudit{raw: raw, gzip: gz}, nil
}

// checkedAudit is an audit body as read.
type checkedAudit struct {
	raw  []byte
	gzip bool
}

// check checks the body for sandbox, whose profile is prof: a JSON object
// of package name to an array of versions, each name a package the sandbox
// may install and each version a version.
func (c *checkedAudit) check(sandbox string, prof *policy.Profile) error {
	var body io.Reader = bytes.NewReader(c.raw)
	if c.gzip {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return routes.Refuse(routes.ErrBadRequest, "the audit body is not valid gzip")
		}
		body = zr
	}
	return checkAudit(io.LimitReader(body, maxAuditDecoded+1), sandbox, prof)
}

// checkAudit walks an audit body token by token, so that a name given
// twice is checked both times, and nothing may follow the object.
func checkAudit(body io.Reader, sandbox string, prof *policy.Profile) error {
	bad := func(what string) error {
		return routes.Refuse(routes.ErrBadRequest, "the audit body is not what npm sends (an object of package name to an array of versions): %s", what)
	}
	dec := json.NewDecoder(body)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return bad("not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return bad("malformed JSON")
		}
		name := t.(string)
		if !validNPMName(name) {
			return routes.Refuse(routes.ErrForbidden, "the audit names %q, which is not an npm package name", routes.Clip(name, 128))
		}
		if d := prof.Package(name); !d.Allow {
			return routes.RefuseCode(routes.ErrForbidden, routes.CodePackageNotAllowed, "the audit names package %s, which is not allowed for sandbox %s (allowed: %s); run npm with --no-audit", name, sandbox, routes.Listed(prof.Packages))
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return bad("the versions of " + name + " are not an array")
		}
		for dec.More() {
			t, err := dec.Token()
			v, ok := t.(string)
			if err != nil || !ok || len(v) > 256 || !npmVersionRE.MatchString(v) {
				return bad("a version of " + name + " is not a version")
			}
		}
		if _, err := dec.Token(); err != nil {
			return bad("malformed JSON")
		}
	}
	if _, err := dec.Token(); err != nil {
		return bad("malformed JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return bad("data after the object")
		}
		return bad("malformed JSON or over the size limit")
	}
	return nil
}

// npmPublished reads the publish time of a version from the upstream's full
// packument (time[version]); zero when the packument has none for it. It is
// what a tarball request costs under a min_release_age: one more packument
// fetch, read as rewritePackumentResponse reads one (bounded, gzip or not).
func (s *route) npmPublished(ctx context.Context, n npmRequest, version string) (time.Time, map[string]json.RawMessage, error) {
	base := s.fwd.Upstream().URL
	pn := npmRequest{kind: npmPackument, name: n.name}
	header := http.Header{"Accept": {"application/json"}, "Accept-Encoding": {"gzip"}}
	resp, err := s.fwd.RoundTrip(ctx, http.MethodGet, pn.target(), header, nil)
	if err != nil {
		if routes.IsRefusal(err) {
			return time.Time{}, nil, err
		}
		return time.Time{}, nil, routes.Refuse(routes.ErrUpstream, "the upstream %s could not be reached for the packument of %s; try again later", base.Host, n.name)
	}
	defer resp.Body.Close()
	if err := npmResponse(base)(resp); err != nil {
		return time.Time{}, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, nil, routes.Refuse(routes.ErrUpstream, "the upstream %s answered %d for the packument of %s, which cproxy needs to check the release age of %s@%s", base.Host, resp.StatusCode, n.name, n.name, version)
	}
	var body io.Reader = resp.Body
	if ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce == "gzip" || ce == "x-gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return time.Time{}, nil, routes.Refuse(routes.ErrUpstream, "the packument of %s from %s is not valid gzip", n.name, base.Host)
		}
		defer zr.Close()
		body = zr
	} else if ce != "" && ce != "identity" {
		return time.Time{}, nil, routes.Refuse(routes.ErrUpstream, "the packument of %s from %s came with Content-Encoding %q, which cproxy cannot read", n.name, base.Host, routes.Clip(ce, 32))
	}
	// Read to the end, holding time alone.
	times, err := packumentTimes(body)
	if err != nil {
		if err := ambiguous(err, n.name, base.Host); err != nil {
			return time.Time{}, nil, err
		}
		return time.Time{}, nil, routes.Refuse(routes.ErrUpstream, "the packument of %s from %s is not a JSON object cproxy can read", n.name, base.Host)
	}
	return publishedAt(times, version), times, nil
}

// newestAllowed is the highest release in the packument's time that prof
// allows at now, for a refusal of a version too new to name; "" when none
// is, or the packument was not read.
func (q *npmQuestion) newestAllowed(prof *policy.Profile, now time.Time) string {
	var best *semver.Version
	newest := ""
	for ver := range q.times {
		v, err := semver.StrictNewVersion(ver)
		if err != nil || v.Prerelease() != "" || best != nil && !v.GreaterThan(best) {
			continue
		}
		published := publishedAt(q.times, ver)
		if published.IsZero() {
			continue
		}
		if prof.AskNPM(policy.NPMQuestion{Name: q.n.name, Version: ver, Published: &published, Now: now}).Allow {
			best, newest = v, ver
		}
	}
	return newest
}

// setNPMCredential puts the registry token on a forwarded request, when
// one is configured; the public registry needs none.
func setNPMCredential(h http.Header, cred secrets.Secret) {
	if !cred.IsZero() {
		h.Set("Authorization", "Bearer "+cred.Reveal())
	}
}

// npmResponse checks each upstream answer: the registry refusing cproxy's
// own token is the operator's problem (502), and a packument is rewritten.
func npmResponse(base *url.URL) func(*http.Response) error {
	return func(resp *http.Response) error {
		if err := routes.CredentialRefused(resp, "npm", "npm"); err != nil {
			return err
		}
		n, _ := resp.Request.Context().Value(npmRequestKey{}).(npmRequest)
		if n.kind != npmPackument && n.kind != npmTarball {
			return nil
		}
		if err := npmStatus(resp, n); err != nil {
			return err
		}
		rw, ok := resp.Request.Context().Value(npmRewriteKey{}).(*npmRewrite)
		if !ok {
			return nil
		}
		if resp.StatusCode == http.StatusNotModified {
			weakenETag(resp.Header)
		}
		if resp.StatusCode != http.StatusOK {
			return nil
		}
		return rewritePackumentResponse(resp, base, rw)
	}
}

// npmStatus refuses an answer to a packument or tarball request that npm
// would take as a success but cproxy has not checked: npm takes any status
// below 400 as one, and cproxy rewrites (or, for a tarball, passes) a 200
// alone. A 304 passes only when cproxy asked with a validator, so that npm's
// cached copy, which came through cproxy, is what it names. Errors (400 and
// up) pass: npm reads no packument or tarball from them. So do redirects,
// which the forwarder's redirectMap has pointed back at cproxy.
func npmStatus(resp *http.Response, n npmRequest) error {
	code := resp.StatusCode
	switch {
	case code == http.StatusOK || code >= 400:
		return nil
	case code >= 300 && code <= 399 && resp.Header.Get("Location") != "":
		// A redirect, kept on cproxy by its redirectMap.
		return nil
	case code == http.StatusNotModified:
		if h := resp.Request.Header; h.Get("If-None-Match") != "" || h.Get("If-Modified-Since") != "" {
			return nil
		}
	}
	what := "packument"
	if n.kind == npmTarball {
		what = "tarball " + n.file
	}
	return routes.Refuse(routes.ErrUpstream, "npm route: the upstream %s answered %d for the %s of %s; cproxy passes only 200, a 304 to a conditional request, and errors", resp.Request.URL.Host, code, what, n.name)
}

// proxyTarballPath is cproxy's path for a tarball URL on the upstream, or
// false for a URL elsewhere (another scheme, host or path, or not a tarball
// of the package).
func proxyTarballPath(tarball string, base *url.URL, name string) (string, bool) {
	u, err := url.Parse(tarball)
	if err != nil || !strings.EqualFold(u.Scheme, base.Scheme) || !strings.EqualFold(u.Host, base.Host) ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	prefix := strings.TrimSuffix(base.EscapedPath(), "/")
	rest, ok := strings.CutPrefix(u.EscapedPath(), prefix+"/")
	if !ok {
		return "", false
	}
	n, err := parseNPMPath(http.MethodGet, "/npm/"+rest, "")
	if err != nil || n.kind != npmTarball || n.name != name {
		return "", false
	}
	return n.proxyPath(), true
}

// mustJSON encodes v without HTML escaping; the values are maps of
// RawMessage and strings, which always encode.
func mustJSON(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("cproxy: encoding a packument: %v", err))
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
