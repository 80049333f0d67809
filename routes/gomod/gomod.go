package gomod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/secrets"
)

const (
	name   = "gomod"
	prefix = "/gomod/"
)

// Kind is the Go modules route: the GOPROXY protocol under /gomod/, and
// the checksum database the upstream proxies (sumdb.go).
// go mod download of a large module graph asks for each module's .info,
// .mod and .zip and the checksum database's lookups and tiles, some
// thousands of requests at once: it must not meet a 429.
var Kind = routes.Kind{Name: name, Prefix: prefix, Upstream: name, New: newRoute,
	Limits: routes.Limits{Concurrent: 64, RequestsPerMinute: 6000}}

// The most cproxy reads of an answer it must check: an @v/list holds a
// line per version (a module with thousands of versions is some tens of
// KiB), an .info or @latest a JSON object of a few fields.
const (
	maxListBytes = 1 << 20
	maxInfoBytes = 64 << 10
)

// maxTimed is how many versions of one @v/list cproxy fetches the .info
// time of under a min_release_age, the newest first: an older version
// past it is hidden (fail closed), though go can still fetch it by its
// exact version.
const maxTimed = 256

// timeFetchers is how many .info times one list fetches at once.
const timeFetchers = 8

// route forwards the GOPROXY requests of the modules a sandbox's policy
// allows, hiding the versions it does not.
type route struct {
	fwd   *routes.Forwarder
	now   func() time.Time
	times *timeCache
}

func newRoute(env routes.Env) routes.Route {
	s := &route{now: env.Now, times: &timeCache{m: map[string]time.Time{}}}
	s.fwd = env.NewForwarder(name, prefix, setCredential, s.checkResponse)
	// Every answer go asks a module proxy for has a known length (.info,
	// .mod, .zip, a list, the checksum database's lookups and tiles), and go
	// reads each whole before it uses it. Flushing each write (the core's
	// default) had a timer's goroutine flush the headers first, then the
	// body after each write: two TLS records and two write(2)s where one
	// does. With 0 an answer is written with its headers as it is copied; a
	// large .zip still goes out 32 KiB at a time, as the copy reads it.
	s.fwd.SetCopy(nil, 0)
	return s
}

func (s *route) Name() string          { return name }
func (s *route) Prefix() string        { return prefix }
func (s *route) Limits() routes.Limits { return Kind.Limits }
func (s *route) Close()                { s.fwd.Close() }

// Sources is the proxy credential's source, when it has one.
func (s *route) Sources() []routes.Source { return s.fwd.Sources("upstream.gomod.credential") }

// WriteError writes a refusal as plain text, "cproxy: …": go prints the
// first lines of a text/plain error answer after the status, so the
// sandbox sees cproxy's reason.
func (s *route) WriteError(w http.ResponseWriter, err error) int {
	return routes.WritePlainError(w, err)
}

// setCredential sends the proxy credential, when one is configured, as a
// Bearer token (what Athens, JFrog Artifactory and other private module
// proxies take); proxy.golang.org needs none.
func setCredential(h http.Header, cred secrets.Secret) {
	if !cred.IsZero() {
		h.Set("Authorization", "Bearer "+cred.Reveal())
	}
}

// served is what checkResponse needs of a forwarded request.
type served struct {
	req     Request
	sumdb   bool
	prof    *policy.Profile
	sandbox string
	now     time.Time
	// timed, when set, is a .info request still to be decided on the
	// time the answer holds (Serve's first ask deferred it), and call the
	// request's, whose rule that decision sets.
	timed *question
	call  *routes.Call
}

type servedKey struct{}

func (s *route) Serve(a *routes.Call) {
	r := a.Request()
	if r.Method != http.MethodGet {
		a.Fail(routes.Refuse(routes.ErrForbidden, "the Go modules route serves GET only, not %s", routes.Clip(r.Method, 32)))
		return
	}
	if r.ContentLength > 0 || len(r.TransferEncoding) > 0 {
		a.Fail(routes.Refuse(routes.ErrBadRequest, "GET takes no body"))
		return
	}
	r.Body, r.ContentLength = http.NoBody, 0
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		a.Fail(routes.Refuse(routes.ErrForbidden, "go sends no query string to a module proxy; cproxy does not forward one"))
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, prefix)
	if strings.HasPrefix(rest, "sumdb/") {
		s.serveSumDB(a, rest)
		return
	}
	req, err := ParsePath(rest)
	if err != nil {
		a.Fail(routes.Refuse(routes.ErrForbidden, "%q is not a module proxy request cproxy serves: MODULE/@v/list, MODULE/@latest or MODULE/@v/VERSION.info, .mod or .zip, with a canonical version (v1.2.3, not a branch, commit or v1.2) spelt as go spells it", routes.Clip(rest, 128)))
		return
	}
	a.SetTarget(req.Module)
	if req.Version != "" {
		a.SetVersion(req.Version)
	}
	sess := a.Session()
	q := &question{req: req, sandbox: sess.Sandbox, now: s.now()}
	if prof := sess.Profile; req.Version != "" && prof != nil && prof.Go.MinReleaseAge.Duration > 0 {
		// A time cproxy holds answers the release age at the first ask.
		if t, ok := s.times.get(req.Module, req.Version); ok {
			q.published = &t
		}
	}
	a.AskAgain(q.decide)
	rule, err := q.decide(sess.Profile)
	err = q.record(a, err)
	sv := served{req: req, prof: sess.Profile, sandbox: sess.Sandbox, now: q.now}
	if err == errNeedsTime && req.Kind == KindInfo {
		// The release age is the .info Time, not held yet, and the .info
		// is what go asks for (first, when it resolves a version: go get,
		// go list -m): one request upstream, not two, decided by
		// checkResponse on the time it holds, before any of it is passed
		// on. (go mod download asks for the .mod first: its time is
		// fetched then, and held for the .info and .zip.)
		sv.timed, sv.call = q, a
		a.SetRule(rule)
		s.forward(a, sv, routes.Target{Path: "/" + req.path()})
		return
	}
	if err == errNeedsTime {
		// The release age is the .info Time: fetch it, then ask again.
		var published time.Time
		published, err = s.infoTime(r.Context(), req.Module, req.Version)
		fetched := err == nil
		q.published = &published
		rule, err = q.decideErr(sess.Profile, err)
		if fetched {
			err = q.record(a, err)
		}
	}
	a.SetRule(rule)
	if err != nil {
		a.Fail(err)
		return
	}
	if req.Version == "" {
		q.filtered = true
	}
	s.forward(a, sv, routes.Target{Path: "/" + req.path()})
}

// forward sends the request to t, asking for an answer cproxy can read
// (no compression, no validators: go sends neither, and what a list
// holds depends on the policy and the clock as well as the upstream).
// The client's header is copied only to drop one of these: go sends
// none, so its requests go without a copy of their header each.
func (s *route) forward(a *routes.Call, sv served, t routes.Target) {
	r := a.Request()
	for _, h := range conditionalHeaders {
		if _, ok := r.Header[h]; ok {
			r.Header = r.Header.Clone()
			for _, h := range conditionalHeaders {
				delete(r.Header, h)
			}
			break
		}
	}
	t.Header = http.Header{"Accept-Encoding": {"identity"}}
	r = r.WithContext(context.WithValue(r.Context(), servedKey{}, sv))
	s.fwd.Forward(a, r, t)
}

// conditionalHeaders ask for part of an answer, or none when it has not
// changed; canonical, as net/http keys a request's header.
var conditionalHeaders = []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range"}

// question is what Serve asks a profile about one request, kept so that
// it can be asked again of another profile (a reload while it runs).
type question struct {
	req     Request
	sandbox string
	// published is a version's .info Time, once fetched.
	published *time.Time
	// filtered says that a list or @latest answer is being filtered for
	// the profile asked first.
	filtered bool
	now      time.Time
}

// record puts q on a's audit record with the policy's answer (err from
// decide), unless that answer waits for the version's time, and returns
// err, or nil for a refusal a warn-mode profile lets pass.
func (q *question) record(a *routes.Call, err error) error {
	a.SetQuestion(policy.Question{Route: "go", Package: q.req.Module, Version: q.req.Version, Published: q.published})
	if err == errNeedsTime {
		return err
	}
	a.Answered(err == nil)
	return a.Warned(err)
}

// errNeedsTime is question.decide's answer about a version when the
// profile's min_release_age needs its .info time and it has not been
// fetched: Serve fetches it and asks again. Asked again of a new profile
// (a reload) before forwarding, it refuses the request, which may be sent
// again; so does a list being filtered for the profile before.
var errNeedsTime = routes.Deferred("the policy's Go module version rules changed while the request was under way; send it again")

func (q *question) decideErr(prof *policy.Profile, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return q.decide(prof)
}

// moduleNotAllowed refuses a module that is not one of prof's go.modules,
// saying which are.
func moduleNotAllowed(mod, sandbox string, prof *policy.Profile) error {
	var allowed []string
	if prof != nil {
		allowed = prof.Go.Modules
	}
	return routes.RefuseCode(routes.ErrForbidden, routes.CodePackageNotAllowed, "module %s is not allowed for sandbox %s (allowed: %s)", mod, sandbox, routes.Listed(allowed))
}

// decide asks prof about the request (policy's AskGo) and words its
// refusal for go: the module, or the version and why.
func (q *question) decide(prof *policy.Profile) (string, error) {
	ans := prof.AskGo(policy.GoQuestion{Module: q.req.Module, Version: q.req.Version, Published: q.published, Now: q.now})
	if step, refused := ans.Refusal(); refused {
		nv := q.req.Module + "@" + q.req.Version
		switch {
		case step.Key == "go.modules":
			return ans.Rule, moduleNotAllowed(q.req.Module, q.sandbox, prof)
		case step.Key == "go.min_release_age" && q.published != nil && !q.published.IsZero():
			return ans.Rule, routes.RefuseTooNew(nv, q.sandbox, *q.published, q.now, prof.Go.MinReleaseAge.Duration, "")
		case step.Key == "go.min_release_age":
			return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeTooNew, "%s is not allowed for sandbox %s: %s", nv, q.sandbox, step.Reason)
		}
		return ans.Rule, routes.RefuseCode(routes.ErrForbidden, routes.CodeVersionDenied, "%s is not allowed for sandbox %s: %s; use another version", nv, q.sandbox, step.Reason)
	}
	switch {
	case q.req.Version != "" && ans.Deferred():
		return ans.Rule, errNeedsTime
	case q.req.Version == "" && q.filtered && prof.HasGoVersionPolicy():
		return ans.Rule, errNeedsTime
	}
	return ans.Rule, nil
}

// checkResponse checks each upstream answer: the proxy refusing cproxy's
// own credential is the operator's problem (502); only a 200, a redirect
// the core kept on cproxy and errors pass; a list is filtered and an
// @latest answered for a visible version.
func (s *route) checkResponse(resp *http.Response) error {
	sv, _ := resp.Request.Context().Value(servedKey{}).(served)
	if sv.timed != nil {
		return s.checkTimed(resp, sv)
	}
	if err := routes.CredentialRefused(resp, name, "Go module proxy"); err != nil {
		return err
	}
	code := resp.StatusCode
	switch {
	case code >= 400:
		return nil
	case code >= 300 && code <= 399 && resp.Header.Get("Location") != "":
		return nil // kept on cproxy by the forwarder's redirect map
	case code != http.StatusOK:
		return routes.Refuse(routes.ErrUpstream, "the module proxy %s answered %d; cproxy passes only 200, redirects and errors", resp.Request.URL.Host, code)
	}
	if sv.sumdb {
		return nil
	}
	switch sv.req.Kind {
	case KindList:
		body, err := readAnswer(resp, maxListBytes, "the version list of "+sv.req.Module)
		if err != nil {
			return err
		}
		vs, err := s.visible(resp.Request.Context(), sv, body)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		for _, v := range vs {
			b.WriteString(v + "\n")
		}
		replaceBody(resp, b.Bytes())
	case KindLatest:
		body, err := readAnswer(resp, maxInfoBytes, "the @latest answer for "+sv.req.Module)
		if err != nil {
			return err
		}
		body, err = s.latest(resp.Request.Context(), sv, body)
		if err != nil {
			return err
		}
		replaceBody(resp, body)
	}
	return nil
}

// checkTimed decides a .info request on the time its answer holds, as
// Serve does on a time it fetched first (infoTime, get): an answer other
// than a 200 is refused in the same words, with no rule, and one whose
// version is hidden is never passed on. A visible one is passed with the
// upstream's headers and bytes.
func (s *route) checkTimed(resp *http.Response, sv served) error {
	req, host := sv.req, resp.Request.URL.Host
	what := req.describe()
	var body []byte
	err := routes.CredentialRefused(resp, name, "Go module proxy")
	if err == nil {
		err = needOK(resp, host, what)
	}
	if err != nil {
		resp.Body.Close()
	} else {
		body, err = readAnswer(resp, maxInfoBytes, what)
	}
	var published time.Time
	if err == nil {
		published, err = s.readInfoTime(host, req.Module, req.Version, body)
	}
	fetched := err == nil
	sv.timed.published = &published
	rule, err := sv.timed.decideErr(sv.prof, err)
	sv.call.SetRule(rule)
	if fetched {
		err = sv.timed.record(sv.call, err)
	}
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return nil
}

// readAnswer reads an answer cproxy must check, bounded, uncompressed.
func readAnswer(resp *http.Response, limit int64, what string) ([]byte, error) {
	if ce := strings.TrimSpace(resp.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, routes.Refuse(routes.ErrUpstream, "%s from %s came with Content-Encoding %q, which cproxy did not ask for", what, resp.Request.URL.Host, routes.Clip(ce, 32))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	resp.Body.Close()
	if err != nil {
		return nil, routes.Refuse(routes.ErrUpstream, "%s from %s could not be read", what, resp.Request.URL.Host)
	}
	if int64(len(b)) > limit {
		return nil, routes.Refuse(routes.ErrUpstream, "%s from %s is over %d bytes", what, resp.Request.URL.Host, limit)
	}
	return b, nil
}

// replaceBody makes b the answer's body: its length, and no validators
// of the upstream's bytes.
func replaceBody(resp *http.Response, b []byte) {
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	resp.Header.Del("ETag")
	resp.Header.Del("Last-Modified")
	resp.Header.Del("Content-Encoding")
}

// visible is the versions of list sv's profile lets its sandbox see, in
// the list's order: not denied and, under a min_release_age, with a .info
// time old enough (fetched for the newest maxTimed; the rest are hidden).
func (s *route) visible(ctx context.Context, sv served, list []byte) ([]string, error) {
	mod, prof := sv.req.Module, sv.prof
	vs := VisibleVersions(mod, list, func(v string) bool { return prof.GoDeny(mod, v).Allow })
	if prof.Go.MinReleaseAge.Duration <= 0 {
		return vs, nil
	}
	newest := slices.Clone(vs)
	semver.Sort(newest)
	slices.Reverse(newest)
	if len(newest) > maxTimed {
		newest = newest[:maxTimed]
	}
	times, err := s.infoTimes(ctx, mod, newest)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(vs, func(v string) bool {
		t, ok := times[v]
		return !ok || !prof.GoVersion(mod, v, t, sv.now).Allow
	}), nil
}

// latest is the @latest answer go gets: the upstream's, byte for byte,
// when its version is visible; else the .info of the newest visible
// version of the list, as go's own query would pick it; else a refusal.
func (s *route) latest(ctx context.Context, sv served, body []byte) ([]byte, error) {
	mod, prof := sv.req.Module, sv.prof
	var info infoJSON
	why := "the module proxy's answer is not a version of it"
	if json.Unmarshal(body, &info) == nil && module.Check(mod, info.Version) == nil {
		d := prof.GoVersion(mod, info.Version, info.Time, sv.now)
		if d.Allow {
			return body, nil
		}
		why = fmt.Sprintf("its latest version, %s, is not: %s", info.Version, d.Reason)
	}
	list, err := s.get(ctx, Request{Module: mod, Kind: KindList}, maxListBytes)
	if err != nil {
		return nil, err
	}
	vs, err := s.visible(ctx, sv, list)
	if err != nil {
		return nil, err
	}
	v := Newest(vs)
	if v == "" {
		return nil, routes.RefuseCode(routes.ErrForbidden, routes.CodeVersionDenied, "no version of %s is allowed for sandbox %s: %s", mod, sv.sandbox, why)
	}
	return s.get(ctx, Request{Module: mod, Version: v, Kind: KindInfo}, maxInfoBytes)
}

// infoJSON is the .info (and @latest) answer's fields cproxy reads.
type infoJSON struct {
	Version string
	Time    time.Time
}

// get fetches req from the upstream with the route's own request
// (Forwarder.RoundTrip) and reads its 200 answer, bounded.
func (s *route) get(ctx context.Context, req Request, limit int64) ([]byte, error) {
	host := s.fwd.Upstream().URL.Host
	what := req.describe()
	resp, err := s.fwd.RoundTrip(ctx, http.MethodGet, routes.Target{Path: "/" + req.path()}, http.Header{"Accept-Encoding": {"identity"}}, nil)
	if err != nil {
		if routes.IsRefusal(err) {
			return nil, err
		}
		return nil, routes.Refuse(routes.ErrUpstream, "the module proxy %s could not be reached for %s; try again later", host, what)
	}
	defer resp.Body.Close()
	if err := routes.CredentialRefused(resp, name, "Go module proxy"); err != nil {
		return nil, err
	}
	if err := needOK(resp, host, what); err != nil {
		return nil, err
	}
	return readAnswer(resp, limit, what)
}

// needOK refuses an answer other than a 200 to a request whose answer
// cproxy reads to check the policy: what the proxy lacks is not found,
// anything else the upstream's fault.
func needOK(resp *http.Response, host, what string) error {
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusNotFound, http.StatusGone:
		return routes.Refuse(routes.ErrNotFound, "the module proxy %s has no %s", host, what)
	}
	return routes.Refuse(routes.ErrUpstream, "the module proxy %s answered %d for %s, which cproxy needs to check the policy", host, resp.StatusCode, what)
}

// describe names the request in messages: "the version list of M",
// "the .info of M@V".
func (r Request) describe() string {
	switch r.Kind {
	case KindList:
		return "the version list of " + r.Module
	case KindLatest:
		return "the @latest of " + r.Module
	}
	return "the ." + r.Kind + " of " + r.Module + "@" + r.Version
}

// infoTime is the .info Time of mod@version: zero when the upstream gives
// none, which the policy takes as too new.
func (s *route) infoTime(ctx context.Context, mod, version string) (time.Time, error) {
	if t, ok := s.times.get(mod, version); ok {
		return t, nil
	}
	body, err := s.get(ctx, Request{Module: mod, Version: version, Kind: KindInfo}, maxInfoBytes)
	if err != nil {
		return time.Time{}, err
	}
	return s.readInfoTime(s.fwd.Upstream().URL.Host, mod, version, body)
}

// readInfoTime reads the Time of body, the .info of mod@version host
// answered, and keeps it.
func (s *route) readInfoTime(host, mod, version string, body []byte) (time.Time, error) {
	var info infoJSON
	if err := json.Unmarshal(body, &info); err != nil || info.Version != version {
		return time.Time{}, routes.Refuse(routes.ErrUpstream, "the module proxy %s's .info for %s@%s is not one cproxy can read", host, mod, version)
	}
	s.times.put(mod, version, info.Time)
	return info.Time, nil
}

// infoTimes fetches the .info times of versions of mod, timeFetchers at a
// time; a version whose .info cannot be had is left out (hidden).
func (s *route) infoTimes(ctx context.Context, mod string, versions []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(versions))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, timeFetchers)
	var firstErr error
	for _, v := range versions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t, err := s.infoTime(ctx, mod, v)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out[v] = t
			case firstErr == nil && !errors.Is(err, routes.ErrNotFound):
				firstErr = err
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// timeCache keeps the .info times cproxy has read: a module proxy's
// version never changes once served, nor does its time. A time that is
// zero is not kept (it may be filled in later). Bounded: when full, it
// starts again.
type timeCache struct {
	mu sync.Mutex
	m  map[string]time.Time
}

const maxCachedTimes = 1 << 16

func (c *timeCache) get(mod, version string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[mod+"@"+version]
	return t, ok
}

func (c *timeCache) put(mod, version string, t time.Time) {
	if t.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedTimes {
		clear(c.m)
	}
	c.m[mod+"@"+version] = t
}
