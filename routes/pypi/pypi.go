package pypi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
)

// Kind is the PyPI route: a project's index page, in either form of the
// simple repository API, at /pypi/simple/PROJECT/, and its distribution
// files at /pypi/files/PROJECT/…, for the projects and versions a
// sandbox's [profile.X.pypi] allows. pip fetches a wheel's metadata, then
// the wheel, for each package of a resolution, on a few connections: npm's
// limits fit it too.
var Kind = routes.Kind{Name: "pypi", Prefix: "/pypi/", Upstream: "pypi", New: newRoute,
	Limits: routes.Limits{Concurrent: 64, RequestsPerMinute: 6000}}

const (
	prefix      = "/pypi/"
	indexPrefix = "/pypi/simple/"
	// maxPage bounds an index page, which cproxy reads whole to filter it
	// (PyPI's largest projects list tens of thousands of files in a few
	// MiB).
	maxPage = 64 << 20
)

// nameRE is a project name as PEP 508 allows it, in any spelling.
var nameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9._-]{0,198}[a-z0-9])?$`)

// segmentRE is one segment of a file's path on the files host, escaped:
// what PyPI's paths and distribution names hold ("+" in a local version,
// "!" in an epoch), and percent escapes. "." and ".." are refused apart.
var segmentRE = regexp.MustCompile(`^[A-Za-z0-9._~+!-]+$|^([A-Za-z0-9._~+!-]|%[0-9A-Fa-f]{2})+$`)

// request is a request of the route, read from its path.
type request struct {
	// project is the PEP 503-normalised project name.
	project string
	// file is the distribution file asked for; zero for an index page.
	file File
	// filename is file's name, path and rawPath its place on the files
	// host.
	filename, path, rawPath string
}

func (q request) isFile() bool { return q.filename != "" }

// parsePath reads a request's escaped path: an index page or a file.
// Anything else is refused.
func parsePath(escaped string) (request, error) {
	rest, ok := strings.CutPrefix(escaped, prefix)
	if !ok {
		return request{}, routes.Refuse(routes.ErrNotFound, "not a path of the PyPI route")
	}
	if name, ok := strings.CutPrefix(rest, "simple/"); ok {
		if name == "" {
			return request{}, routes.Refuse(routes.ErrNotFound, "the list of every project (/pypi/simple/) is not served: ask for a project's page, /pypi/simple/PROJECT/")
		}
		name, ok := strings.CutSuffix(name, "/")
		if !ok || !nameRE.MatchString(name) {
			return request{}, routes.Refuse(routes.ErrNotFound, "not a project page: the PyPI route serves /pypi/simple/PROJECT/, with a project name of letters, digits, '.', '_' and '-' and a trailing '/'")
		}
		return request{project: policy.NormalizePyPIName(name)}, nil
	}
	if tail, ok := strings.CutPrefix(rest, "files/"); ok {
		project, where, _ := strings.Cut(tail, "/")
		if !nameRE.MatchString(project) || policy.NormalizePyPIName(project) != project || where == "" {
			return request{}, routes.Refuse(routes.ErrNotFound, "not a distribution file: the PyPI route serves the files its index pages list, at /pypi/files/PROJECT/PATH")
		}
		segs := strings.Split(where, "/")
		decoded := make([]string, len(segs))
		for i, s := range segs {
			d, err := url.PathUnescape(s)
			if err != nil || !segmentRE.MatchString(s) || d == "." || d == ".." || strings.ContainsAny(d, "/\\\x00") {
				return request{}, routes.Refuse(routes.ErrNotFound, "not a distribution file's path: segment %q", routes.Clip(s, 64))
			}
			decoded[i] = d
		}
		name := decoded[len(decoded)-1]
		f, err := FileOf(project, name)
		if err != nil {
			return request{}, routes.Refuse(routes.ErrForbidden, "%s is not a distribution file of project %s, so it is not served under it", routes.Clip(name, 128), project)
		}
		return request{project: project, file: f, filename: name, path: "/" + strings.Join(decoded, "/"), rawPath: "/" + where}, nil
	}
	return request{}, routes.Refuse(routes.ErrNotFound, "not a path of the PyPI route: it serves /pypi/simple/PROJECT/ and the files those pages list")
}

// version is the version of the request's file, for the audit line.
func (q request) version() string { return q.file.Version }

type route struct {
	index, files *routes.Forwarder
	now          func() time.Time
	// uploads are the upload times of the pages read lately, for a
	// min_release_age's files.
	uploads uploadCache
}

func newRoute(env routes.Env) routes.Route {
	set := credentialSetter(env.Upstream.Auth)
	r := &route{now: env.Now}
	r.index = env.NewForwarder("pypi", indexPrefix, set, r.checkIndex)
	r.files = env.FilesForwarder(set, checkFile)
	return r
}

func (s *route) Name() string   { return Kind.Name }
func (s *route) Prefix() string { return prefix }
func (s *route) Close() {
	s.index.Close()
	if s.files != nil {
		s.files.Close()
	}
}

// WriteError writes a refusal as plain text: pip and uv show the status,
// curl and a person the words.
func (s *route) WriteError(w http.ResponseWriter, err error) int {
	return routes.WritePlainError(w, err)
}

// Sources is the index credential's source, when it has one.
func (s *route) Sources() []routes.Source { return s.index.Sources("upstream.pypi.credential") }

// credentialSetter sends the index's credential as auth says: "basic"
// takes USER:PASSWORD, or a token alone sent as user __token__ (PyPI's
// and most private indexes' convention); "bearer" a token.
func credentialSetter(auth string) func(http.Header, secrets.Secret) {
	return func(h http.Header, cred secrets.Secret) {
		if cred.IsZero() {
			return
		}
		v := cred.Reveal()
		if auth == "bearer" {
			h.Set("Authorization", "Bearer "+v)
			return
		}
		if !strings.Contains(v, ":") {
			v = "__token__:" + v
		}
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(v)))
	}
}

// pageKey keys an index page's rewrite in its request's context.
type pageKey struct{}

// page is what checkIndex needs to filter one index page.
type page struct {
	project string
	form    string // the form the client gets (Negotiate)
	vis     Visible
	// ages says the profile has a min_release_age: the page's upload
	// times are kept for the files the sandbox asks for next.
	ages bool
}

func (s *route) Serve(a *routes.Call) {
	r := a.Request()
	if r.Method != http.MethodGet {
		a.Fail(routes.Refuse(routes.ErrBadRequest, "the PyPI route serves GET only, not %s", routes.Clip(r.Method, 16)))
		return
	}
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		a.Fail(routes.Refuse(routes.ErrBadRequest, "the PyPI route takes no query string"))
		return
	}
	if r.ContentLength > 0 || len(r.TransferEncoding) > 0 {
		a.Fail(routes.Refuse(routes.ErrBadRequest, "GET takes no body"))
		return
	}
	r.Body, r.ContentLength = http.NoBody, 0
	q, err := parsePath(r.URL.EscapedPath())
	if err != nil {
		a.Fail(err)
		return
	}
	a.SetTarget(q.project)
	a.SetVersion(q.version())
	if q.isFile() && s.files == nil {
		a.Fail(routes.Refuse(routes.ErrUnavailable, "the PyPI route has no files host: the operator must set upstream.pypi.files_url"))
		return
	}
	question := &question{req: q, sandbox: a.Session().Sandbox, now: s.now}
	a.SetQuestion(question.policy())
	err = a.Decide(question.decide)
	if err == errNeedsUploaded {
		var at time.Time
		if at, err = s.uploaded(r.Context(), q); err == nil {
			question.uploaded = &at
			a.SetQuestion(question.policy())
			err = a.Decide(question.decide)
		}
	}
	if up := s.index.Upstream(); err == nil && !up.Configured() && up.Missing != "" {
		err = routes.Refuse(routes.ErrUnavailable, "no PyPI index credential is configured: %s", up.Missing)
	}
	if err != nil {
		a.Fail(err)
		return
	}
	if q.isFile() {
		s.files.Forward(a, r, routes.Target{Path: q.path, RawPath: q.rawPath})
		return
	}
	form := Negotiate(r.Header.Get("Accept"))
	if form == "" {
		a.Fail(routes.Refuse(routes.ErrBadRequest, "the index page is served as %s, %s or %s, and the request's Accept takes none of them", TypeJSON, TypeHTML, TypeLegacyHTML))
		return
	}
	prof, now := a.Session().Profile, s.now()
	pg := &page{project: q.project, form: form, ages: prof.PyPI.MinReleaseAge.Duration > 0, vis: func(v string, at time.Time) bool {
		return prof.PyPIVersion(q.project, v, at, now).Allow
	}}
	question.filtered = true
	r.Header = r.Header.Clone()
	r.Header.Set("Accept", upstreamAccept)
	r.Header.Set("Accept-Encoding", "gzip")
	// What is shown depends on the clock and the policy, not only on the
	// index's bytes: no validators, so no stale 304.
	r.Header.Del("If-None-Match")
	r.Header.Del("If-Modified-Since")
	r = r.WithContext(context.WithValue(r.Context(), pageKey{}, pg))
	s.index.Forward(a, r, indexTarget(q.project))
}

// indexTarget is a project's page on the index, by its normalised name.
func indexTarget(project string) routes.Target {
	return routes.Target{Path: "/" + project + "/"}
}

// question is what Serve asks a profile about one request, kept so that it
// can be asked again of another (a reload while the request is under way).
type question struct {
	req     request
	sandbox string
	// uploaded is a file's upload time once read from its index page.
	uploaded *time.Time
	// filtered says that the index page's filter was set up with the
	// profile asked first.
	filtered bool
	now      func() time.Time
}

// policy is q as the audit record keeps it.
func (q *question) policy() policy.Question {
	return policy.Question{Route: "pypi", Package: q.req.project, Version: q.req.version(), Published: q.uploaded}
}

// errNeedsUploaded is question.decide's answer about a file when the
// profile's min_release_age needs its upload time and it has not been read:
// Serve reads it and asks again. Asked again of a new profile (a reload) at
// forward, it refuses the request, which may be sent again; so does an index
// page filtered for the profile before.
var errNeedsUploaded = routes.Deferred("the policy's PyPI version rules changed while the request was under way; send it again")

// decide asks prof about the request (policy's AskPyPI) and words the
// refusal for pip's user.
func (q *question) decide(prof *policy.Profile) (string, error) {
	pq := policy.PyPIQuestion{Name: q.req.project, Version: q.req.version(), Uploaded: q.uploaded, Now: q.now()}
	ans := prof.AskPyPI(pq)
	if step, refused := ans.Refusal(); refused {
		nv := q.req.project + "==" + q.req.version()
		switch {
		case step.Key == "pypi.packages":
			var allowed []string
			if prof != nil {
				allowed = prof.PyPI.Packages
			}
			return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodePackageNotAllowed, "PyPI project %s is not allowed for sandbox %s (allowed: %s)", q.req.project, q.sandbox, routes.Listed(allowed))
		case step.Key == "pypi.min_release_age" && q.uploaded != nil && !q.uploaded.IsZero():
			return ans.Rule, routes.RefuseTooNew(nv, q.sandbox, *q.uploaded, pq.Now, prof.PyPI.MinReleaseAge.Duration, "")
		case step.Key == "pypi.min_release_age":
			return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeTooNew, "%s is not allowed for sandbox %s: %s", nv, q.sandbox, step.Reason)
		}
		return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeVersionDenied, "%s is not allowed for sandbox %s: %s; use another version", nv, q.sandbox, step.Reason)
	}
	switch {
	case !q.req.isFile() && q.filtered && prof.HasPyPIVersionPolicy():
		return ans.Rule, errNeedsUploaded
	case q.req.isFile() && ans.Deferred():
		return ans.Rule, errNeedsUploaded
	}
	return ans.Rule, nil
}

// uploaded reads a file's upload time from its project's index page (PEP
// 700's upload-time, in the JSON form); zero when the page gives none. The
// file must be on the page, at the path asked for: a file the index does
// not list is not served, whatever its name. A page read in the last
// uploadsFresh (to serve it, or for another file) answers without asking
// the index again.
func (s *route) uploaded(ctx context.Context, q request) (time.Time, error) {
	local := FilesPrefix + q.project + strings.TrimSuffix(q.rawPath, metadataSuffix)
	if at, listed, ok := s.uploads.get(q.project, local, s.now()); ok {
		if !listed {
			return time.Time{}, notListed(q)
		}
		return at, nil
	}
	host := s.index.Upstream().URL.Host
	header := http.Header{"Accept": {upstreamAccept}, "Accept-Encoding": {"gzip"}}
	resp, err := s.index.RoundTrip(ctx, http.MethodGet, indexTarget(q.project), header, nil)
	if err != nil {
		if routes.IsRefusal(err) {
			return time.Time{}, err
		}
		return time.Time{}, routes.Refuse(routes.ErrUpstream, "the index %s could not be reached for the page of %s; try again later", host, q.project)
	}
	defer resp.Body.Close()
	if err := routes.CredentialRefused(resp, "pypi", "PyPI index"); err != nil {
		return time.Time{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, routes.Refuse(routes.ErrUpstream, "the index %s answered %d for the page of %s, which cproxy needs to check the release age of %s", host, resp.StatusCode, q.project, q.filename)
	}
	body, err := readPage(resp, q.project)
	if err != nil {
		return time.Time{}, err
	}
	times, err := pageUploads(body, q.project, resp.Request.URL, s.files.Upstream().URL)
	if err != nil {
		return time.Time{}, routes.Refuse(routes.ErrUpstream, "the page of %s from %s is not one cproxy can read", q.project, host)
	}
	s.uploads.put(q.project, times, s.now())
	at, listed := times[local]
	if !listed {
		return time.Time{}, notListed(q)
	}
	return at, nil
}

func notListed(q request) error {
	return routes.Refuse(routes.ErrForbidden, "%s is not on the index's page of %s, so cproxy does not serve it", q.filename, q.project)
}

// pageUploads are the upload times of the files of a project's page (the
// JSON form) that the route serves, by their place on it
// (FilesPrefix+PROJECT+PATH, no fragment): zero for a file whose page gives
// none, or an unreadable one.
func pageUploads(page []byte, project string, pageURL, filesBase *url.URL) (map[string]time.Time, error) {
	var doc struct {
		Files []struct {
			Filename string          `json:"filename"`
			URL      string          `json:"url"`
			Uploaded json.RawMessage `json:"upload-time"`
		} `json:"files"`
	}
	if err := json.Unmarshal(page, &doc); err != nil {
		return nil, err
	}
	times := make(map[string]time.Time, len(doc.Files))
	for _, f := range doc.Files {
		if df, err := FileOf(project, f.Filename); err != nil || df.Metadata {
			continue
		}
		local, ok := localURL(project, f.Filename, f.URL, pageURL, filesBase)
		if !ok {
			continue
		}
		local, _, _ = strings.Cut(local, "#")
		var at string
		var t time.Time
		if json.Unmarshal(f.Uploaded, &at) == nil {
			t, _ = time.Parse(time.RFC3339Nano, at) // zero when unreadable: too new
		}
		if old, seen := times[local]; !seen || t.IsZero() || !old.IsZero() && t.After(old) {
			times[local] = t // the same place twice: the later, or none, time decides
		}
	}
	return times, nil
}

// uploadsFresh is how long a page's upload times answer for its files: as
// long as PyPI lets a page be cached, so a file is served no longer after
// the index stops listing it than a client's own cache would.
const uploadsFresh = 10 * time.Minute

// maxUploadPages bounds the pages whose upload times are kept; past it,
// the oldest is dropped.
const maxUploadPages = 4096

// uploadCache keeps the upload times of the pages the route read lately,
// by project: what a page says of its files is the index's, whichever
// sandbox's request read it.
type uploadCache struct {
	mu    sync.Mutex
	pages map[string]uploadPage
}

type uploadPage struct {
	read  time.Time
	times map[string]time.Time
}

// get answers for the file at local of project from a fresh page: its
// upload time and whether the page lists it; ok is false without one.
func (c *uploadCache) get(project, local string, now time.Time) (at time.Time, listed, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pages[project]
	if !ok || now.Sub(p.read) >= uploadsFresh || now.Before(p.read) {
		return time.Time{}, false, false
	}
	at, listed = p.times[local]
	return at, listed, true
}

func (c *uploadCache) put(project string, times map[string]time.Time, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pages == nil {
		c.pages = map[string]uploadPage{}
	}
	if _, ok := c.pages[project]; !ok && len(c.pages) >= maxUploadPages {
		oldest := ""
		for k, p := range c.pages {
			if oldest == "" || p.read.Before(c.pages[oldest].read) {
				oldest = k
			}
		}
		delete(c.pages, oldest)
	}
	c.pages[project] = uploadPage{read: now, times: times}
}

// readPage reads an index page whole (at most maxPage bytes, gzip or not)
// in the JSON form, parsing the HTML form into it.
func readPage(resp *http.Response, project string) ([]byte, error) {
	host := resp.Request.URL.Host
	var body io.Reader = resp.Body
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, routes.Refuse(routes.ErrUpstream, "the page of %s from %s is not valid gzip", project, host)
		}
		defer zr.Close()
		body = zr
	default:
		return nil, routes.Refuse(routes.ErrUpstream, "the page of %s from %s came with Content-Encoding %q, which cproxy cannot read", project, host, routes.Clip(ce, 32))
	}
	b, err := io.ReadAll(io.LimitReader(body, maxPage+1))
	switch {
	case err != nil:
		return nil, routes.Refuse(routes.ErrUpstream, "the page of %s from %s could not be read", project, host)
	case len(b) > maxPage:
		return nil, routes.Refuse(routes.ErrUpstream, "the page of %s from %s is larger than %d MiB, which cproxy does not filter", project, host, maxPage>>20)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case TypeJSON, strings.Replace(TypeJSON, ".v1+", ".latest+", 1):
		return b, nil
	case TypeHTML, TypeLegacyHTML, strings.Replace(TypeHTML, ".v1+", ".latest+", 1):
		page, err := ParseHTML(b, project)
		if err != nil {
			return nil, routes.Refuse(routes.ErrUpstream, "the page of %s from %s is not HTML cproxy can read", project, host)
		}
		return page, nil
	}
	return nil, routes.Refuse(routes.ErrUpstream, "the page of %s from %s came as %q, not a form of the simple repository API", project, host, routes.Clip(mt, 64))
}

// checkIndex checks the index's answer to a page request and filters the
// page for the sandbox: only 200 is filtered and passed, a redirect (kept
// on the route by the core) and errors pass as they are, anything else is
// refused, since pip would read it as a page cproxy has not checked.
func (s *route) checkIndex(resp *http.Response) error {
	if err := routes.CredentialRefused(resp, "pypi", "PyPI index"); err != nil {
		return err
	}
	pg, _ := resp.Request.Context().Value(pageKey{}).(*page)
	code := resp.StatusCode
	switch {
	case pg == nil:
		return errors.New("pypi: an index answer without its page")
	case code >= 400, code >= 300 && code <= 399 && resp.Header.Get("Location") != "":
		return nil
	case code != http.StatusOK:
		return routes.Refuse(routes.ErrUpstream, "the index %s answered %d for the page of %s; cproxy passes only 200, redirects and errors", resp.Request.URL.Host, code, pg.project)
	}
	body, err := readPage(resp, pg.project)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if pg.ages {
		// The sandbox asks for a file of this page next: its upload time
		// is known now.
		if times, err := pageUploads(body, pg.project, resp.Request.URL, s.files.Upstream().URL); err == nil {
			s.uploads.put(pg.project, times, s.now())
		}
	}
	out, err := RewriteJSON(body, pg.project, resp.Request.URL, s.files.Upstream().URL, pg.vis)
	if err == nil && pg.form != TypeJSON {
		out, err = RenderHTML(out)
	}
	if err != nil {
		return routes.Refuse(routes.ErrUpstream, "the page of %s from %s is not one cproxy can read", pg.project, resp.Request.URL.Host)
	}
	h := resp.Header
	for _, k := range []string{"Content-Encoding", "Content-Md5", "Etag", "Last-Modified", "Content-Length"} {
		h.Del(k)
	}
	ct := pg.form
	if ct == TypeLegacyHTML {
		ct += "; charset=utf-8"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(out)))
	h.Add("Vary", "Accept")
	resp.ContentLength = int64(len(out))
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.Uncompressed = false
	return nil
}

// checkFile checks the files host's answer to a file request: 200 and
// errors pass; anything else is refused.
func checkFile(resp *http.Response) error {
	if err := routes.CredentialRefused(resp, "pypi", "PyPI index"); err != nil {
		return err
	}
	if code := resp.StatusCode; code != http.StatusOK && code < 400 {
		return routes.Refuse(routes.ErrUpstream, "the files host %s answered %d; cproxy passes only 200 and errors", resp.Request.URL.Host, code)
	}
	return nil
}
