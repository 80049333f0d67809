package npm

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/cproxy/cproxy/routes"
	"github.com/go-json-experiment/json/jsontext"
)

// Packuments are rewritten as they stream: cproxy reads the top-level object
// member by member and sends each on as soon as it is rewritten, so a request
// holds one top-level value or version manifest at a time, not the packument
// (the largest on registry.npmjs.org are tens of MiB, and only grow).
//
// What it must hold counts against maxPackument, and a packument that needs
// more is refused: the value being read (a version manifest, a readme),
// dist-tags (sent last, since what they keep depends on the versions
// dropped), time (which is sent last when a version policy filters it) and,
// when the policy has a min_release_age and versions come before time (as on
// registry.npmjs.org), the rewritten versions until time arrives.
const (
	maxPackument = 64 << 20
	// packumentWhole: a rewrite that fits is sent whole, with a
	// Content-Length; anything wrong in it is a 502. Past it the packument
	// goes out in packumentChunk pieces, chunked, and a fault found later cuts
	// the response off.
	packumentWhole = 1 << 20
	packumentChunk = 64 << 10
)

// packumentMembers are the top-level members of a packument as npm's
// registry documents it (docs/responses/package-metadata.md in
// github.com/npm/registry: the full format's, the fields hoisted from the
// latest version, and the abbreviated format's modified). Only these reach
// the client; any other is dropped, above all those npm-pick-manifest picks
// versions from besides versions (policyRestrictions, stagedVersions), which
// cproxy does not filter. Each may come once.
var packumentMembers = map[string]bool{
	"_id": true, "_rev": true, "name": true, "dist-tags": true, "versions": true, "time": true, "modified": true, "users": true,
	"author": true, "bugs": true, "contributors": true, "description": true, "homepage": true, "keywords": true,
	"license": true, "maintainers": true, "readme": true, "readmeFilename": true, "repository": true,
}

// rewritePackumentResponse replaces resp's body with the rewritten
// packument, decoded (identity): whole with its length when it is small,
// streamed otherwise.
func rewritePackumentResponse(resp *http.Response, base *url.URL, rw *npmRewrite) error {
	upstream := resp.Body
	var body io.Reader = upstream
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(upstream)
		if err != nil {
			upstream.Close()
			return routes.Refuse(routes.ErrUpstream, "the packument of %s from %s is not valid gzip", rw.req.name, base.Host)
		}
		body = zr
	default:
		upstream.Close()
		return routes.Refuse(routes.ErrUpstream, "the packument of %s from %s came with Content-Encoding %q, which cproxy cannot read", rw.req.name, base.Host, routes.Clip(ce, 32))
	}
	ps := newPackumentStream(body, base, rw)
	next, stop := iter.Pull2(ps.chunks)
	first, err, _ := next()
	if err != nil || ps.done {
		stop()
		upstream.Close()
	}
	if err != nil {
		return err
	}
	h := resp.Header
	h.Del("Content-Encoding")
	h.Del("Content-Md5")
	if ps.done {
		h.Set("Content-Length", strconv.Itoa(len(first)))
		resp.ContentLength = int64(len(first))
		resp.Body = io.NopCloser(bytes.NewReader(first))
	} else {
		h.Del("Content-Length")
		resp.ContentLength = -1
		resp.Body = &packumentBody{next: next, stop: stop, buf: first, upstream: upstream}
	}
	// The rewrite is a deterministic function of the upstream's bytes and
	// cproxy's public URL, so the upstream's validators still identify the
	// answer; only the bytes differ, so a strong ETag becomes weak.
	weakenETag(h)
	if rw.profile != nil {
		h.Del("Etag")
		h.Del("Last-Modified")
	}
	resp.Uncompressed = false
	return nil
}

// weakenETag marks the upstream's ETag weak: it still names the same
// packument, which cproxy sends rewritten and decoded, so not the same bytes.
// A conditional request with it matches upstream (If-None-Match compares
// weakly) and gets a 304.
func weakenETag(h http.Header) {
	if et := h.Get("Etag"); et != "" && !strings.HasPrefix(et, "W/") {
		h.Set("Etag", "W/"+et)
	}
}

// packumentBody is a streamed packument's body: each Read pulls the next
// rewritten chunk. A fault in the packument is a read error, so the
// ReverseProxy cuts the response off (ErrAbortHandler) instead of ending it:
// the client sees a broken response, never a shorter packument that parses.
type packumentBody struct {
	next     func() ([]byte, error, bool)
	stop     func()
	buf      []byte // the rest of the current chunk
	err      error
	upstream io.Closer
}

var errBodyClosed = errors.New("read of a closed packument body")

func (b *packumentBody) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		chunk, err, ok := b.next()
		switch {
		case !ok:
			b.err = io.EOF
		case err != nil:
			b.err = err
		default:
			b.buf = chunk
		}
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

func (b *packumentBody) Close() error {
	b.stop()
	b.buf = nil
	if b.err == nil {
		b.err = errBodyClosed
	}
	return b.upstream.Close()
}

// packumentStream rewrites one packument from its decoder into out. It
// points every tarball on the upstream at cproxy and drops every version
// whose tarball is anywhere else (and the dist-tags naming them). With
// rw.profile set it also drops the versions the profile's npm version policy
// denies (and their time entries); a latest tag it drops is moved to the
// highest release left. Top-level members other than packumentMembers are
// dropped. Whitespace goes; values (integrity, shasum, everything else) keep
// their bytes, and so does the order of the top-level keys, except that
// cproxy moves dist-tags (and time, when it filters it) to the end. npm does
// not care about key order.
type packumentStream struct {
	sc       *jsonScanner
	out      jsonOut // the rewritten packument, handed on in chunks
	base     *url.URL
	rw       *npmRewrite
	needTime bool // the policy decides by time[version]
	done     bool // out holds the rest of the packument, which is complete

	members   int             // top-level members written
	versionsN int             // versions written
	held      int             // bytes held below, against maxPackument
	removed   map[string]bool // versions dropped, for dist-tags
	denied    map[string]bool // versions the policy dropped, for time
	foreign   map[string]bool // versions dropped for a dependency off the registry
	specs     map[string]bool // registrySpec's answers, by dependency spec
	kept      []string        // the versions written, for a latest moved (counted with the version names)
	distTags  []byte          // raw; nil: none
	timeRaw   []byte          // raw, when the policy filters time; nil: none
	times     map[string]json.RawMessage
	pending   []pendingVersion // rewritten versions waiting for time
	pendingOn bool             // versions were read and wait for time
	vbuf      []byte           // the version being read
	mbuf      []byte           // the version rewritten
}

type pendingVersion struct {
	rawKey   []byte
	name     string
	manifest []byte
}

func newPackumentStream(r io.Reader, base *url.URL, rw *npmRewrite) *packumentStream {
	p := &packumentStream{
		base:     base,
		rw:       rw,
		needTime: rw.profile != nil && rw.profile.NPM.MinReleaseAge.Duration > 0,
		removed:  map[string]bool{},
		denied:   map[string]bool{},
		foreign:  map[string]bool{},
		specs:    map[string]bool{},
	}
	p.sc = newJSONScanner(r, p.room)
	return p
}

var errStopped = errors.New("packument reader closed")

// chunks runs the rewrite, yielding the output: first when it reaches
// packumentWhole (or is complete: then done is set), then every
// packumentChunk bytes. A fault is yielded as an error, last.
func (p *packumentStream) chunks(yield func([]byte, error) bool) {
	stopped := false
	p.out.limit = packumentWhole
	p.out.flush = func(b []byte) error {
		if stopped || !yield(b, nil) {
			stopped = true
			return errStopped
		}
		return nil
	}
	err := p.run()
	switch {
	case stopped:
	case err != nil:
		yield(nil, err)
	default:
		p.done = true
		yield(p.out.b, nil)
	}
}

// run reads the packument and writes it rewritten to p.out.
func (p *packumentStream) run() error {
	sc := p.sc
	if c, err := sc.peek(); err != nil || c != '{' {
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return p.fault(err, "")
		}
		return routes.Refuse(routes.ErrUpstream, "the packument of %s from %s is not a JSON object", p.rw.req.name, p.base.Host)
	}
	if err := sc.enterObject(); err != nil {
		return p.fault(err, "")
	}
	if err := p.out.writeByte('{'); err != nil {
		return err
	}
	for {
		more, err := sc.next()
		if err != nil {
			return p.fault(err, "")
		}
		if !more {
			break
		}
		rawKey, key, err := sc.name()
		if err != nil {
			return p.fault(err, "a key")
		}
		switch {
		case !packumentMembers[key]:
			_, err = sc.value(nil, true)
		case key == "versions":
			err = p.versions(rawKey)
		case key == "dist-tags":
			err = p.readDistTags()
		case key == "time":
			err = p.readTime(rawKey)
		default:
			if err = p.member(rawKey); err == nil {
				if p.out.b, err = sc.value(p.out.b, false); err == nil {
					err = p.out.handOnFull()
				}
			}
		}
		if err != nil {
			return p.fault(err, key)
		}
	}
	// Nothing but whitespace may follow, to the end (which also checks
	// gzip's checksum).
	if err := sc.finish(); err != nil {
		return p.fault(err, "")
	}
	if p.pendingOn {
		// No time at all: every version is decided without one.
		if err := p.writePending(); err != nil {
			return err
		}
	}
	if p.distTags != nil {
		if err := p.writeDistTags(); err != nil {
			return err
		}
	}
	if p.timeRaw != nil {
		if err := p.writeTime(); err != nil {
			return err
		}
	}
	return p.out.writeByte('}')
}

// errJSONSyntax says JSON text is not valid where the decoder does not
// say why (it ends early, or more follows the value).
var errJSONSyntax = errors.New("invalid JSON")

// fault turns an error from reading into cproxy's refusal.
func (p *packumentStream) fault(err error, what string) error {
	switch {
	case err == errStopped || routes.IsRefusal(err):
		return err
	case errors.Is(err, errHeldFull):
		return routes.Refuse(routes.ErrUpstream, "the packument of %s is larger than %d MiB where cproxy must hold it (%s)", p.rw.req.name, maxPackument>>20, what)
	case isReadError(err):
		return routes.Refuse(routes.ErrUpstream, "reading the packument of %s from %s failed", p.rw.req.name, p.base.Host)
	}
	if err := ambiguous(err, p.rw.req.name, p.base.Host); err != nil {
		return err
	}
	return routes.Refuse(routes.ErrUpstream, "the packument of %s from %s is not valid JSON", p.rw.req.name, p.base.Host)
}

// ambiguous is the refusal of a packument in which an object gives a name
// twice, from the decoder's error; nil for any other error.
func ambiguous(err error, name, host string) error {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) || !errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return nil
	}
	path := slices.Collect(se.JSONPointer.Tokens())
	if len(path) == 0 {
		return nil
	}
	last := routes.Clip(path[len(path)-1], 64)
	switch {
	case len(path) == 1:
		return routes.Refuse(routes.ErrUpstream, "the packument of %s from %s has more than one %q", name, host, last)
	case len(path) == 2 && path[0] == "versions":
		return routes.Refuse(routes.ErrUpstream, "the packument of %s from %s has version %q twice", name, host, last)
	}
	in := strings.TrimPrefix(string(se.JSONPointer.Parent()), "/")
	return routes.Refuse(routes.ErrUpstream, "the packument of %s from %s is ambiguous: key %q comes twice in %q", name, host, last, routes.Clip(in, 64))
}

func (p *packumentStream) malformed() error {
	return routes.Refuse(routes.ErrUpstream, "the packument of %s from %s has malformed versions", p.rw.req.name, p.base.Host)
}

// member writes the separator and key of the next top-level member.
func (p *packumentStream) member(rawKey []byte) error {
	if p.members > 0 {
		if err := p.out.writeByte(','); err != nil {
			return err
		}
	}
	p.members++
	if err := p.out.write(rawKey); err != nil {
		return err
	}
	return p.out.writeByte(':')
}

// account adds n bytes to what is held.
func (p *packumentStream) account(n int, what string) error {
	p.held += n
	if p.held > maxPackument {
		return p.fault(errHeldFull, what)
	}
	return nil
}

// room is what may still be held, at least 1 (since 0 is no limit).
func (p *packumentStream) room() int {
	return max(1, maxPackument-p.held)
}

// hold reads the next value into memory, compacted, and counts it as held.
func (p *packumentStream) hold(what string) ([]byte, error) {
	b, err := p.sc.value(nil, false)
	if err != nil {
		return nil, p.fault(err, what)
	}
	return b, p.account(len(b), what)
}

// readDistTags holds dist-tags, which are written last, without the tags
// naming a version the rewrite drops.
func (p *packumentStream) readDistTags() error {
	raw, err := p.hold("dist-tags")
	if err != nil {
		return err
	}
	p.distTags = raw
	return nil
}

// readTime holds time. Without a version policy it is written where it
// came; with one, it is filtered and written last, and the versions waiting
// for it are decided.
func (p *packumentStream) readTime(rawKey []byte) error {
	raw, err := p.hold("time")
	if err != nil {
		return err
	}
	if p.rw.profile == nil {
		p.held -= len(raw)
		if err := p.member(rawKey); err != nil {
			return err
		}
		return p.out.write(raw)
	}
	p.timeRaw, p.times = raw, objectMembers(raw) // times is nil when time is not an object: no version has a known time
	if p.pendingOn {
		return p.writePending()
	}
	return nil
}

// versions reads the versions object, rewriting each version as it comes.
// When the policy needs time and time has not come yet, the rewritten
// versions are held until it does.
func (p *packumentStream) versions(rawKey []byte) error {
	sc := p.sc
	c, err := sc.peek()
	switch {
	case err != nil:
		return err
	case c == 'n':
		// null: left as it is, as no version is in it.
		if _, err := sc.value(nil, true); err != nil {
			return err
		}
		if err := p.member(rawKey); err != nil {
			return err
		}
		return p.out.write([]byte("null"))
	case c == '"' || c == '[' || c == 't' || c == 'f' || c == '-' || isDigit(c):
		return p.malformed()
	case c != '{':
		return syntaxError()
	}
	if err := sc.enterObject(); err != nil {
		return err
	}
	wait := p.needTime && p.timeRaw == nil
	if wait {
		p.pendingOn = true
	} else {
		if err := p.member(rawKey); err != nil {
			return err
		}
		if err := p.out.writeByte('{'); err != nil {
			return err
		}
	}
	for {
		more, err := sc.next()
		if err != nil || !more {
			if err != nil {
				return err
			}
			break
		}
		rawVer, ver, err := sc.name()
		if err != nil {
			return p.fault(err, "a version name")
		}
		if err := p.account(len(ver)+16, "version names"); err != nil {
			return err
		}
		if p.vbuf, err = sc.value(p.vbuf[:0], false); err != nil {
			return p.fault(err, "version "+routes.Clip(ver, 64))
		}
		manifest, keep, err := p.rewriteVersion(p.vbuf)
		switch {
		case err == errForeignDependency:
			p.removed[ver], p.foreign[ver] = true, true
		case err != nil:
			return err
		case !keep:
			p.removed[ver] = true
		case wait:
			p.pending = append(p.pending, pendingVersion{rawKey: rawVer, name: ver, manifest: bytes.Clone(manifest)})
			if err := p.account(len(rawVer)+len(manifest), "the versions before time, which the version policy needs"); err != nil {
				return err
			}
		default:
			if err := p.writeVersion(rawVer, ver, manifest); err != nil {
				return err
			}
		}
	}
	if wait {
		return nil
	}
	return p.out.writeByte('}')
}

// rewriteVersion points one version's tarball at cproxy; keep is false for
// a version whose tarball is elsewhere (or that has none). A version that
// npm would install with a dependency from elsewhere than the registry (a
// URL, git, a file: foreignDependency) is errForeignDependency: npm would
// fetch it past cproxy's policy, so cproxy does not show it the way. raw is
// the version as the scanner read it (checked, compact); the manifest is
// raw with its tarball's value replaced, in p.mbuf.
func (p *packumentStream) rewriteVersion(raw []byte) (manifest []byte, keep bool, err error) {
	switch raw[0] {
	case 'n':
		return nil, false, nil // null: no tarball
	case '{':
	default:
		return nil, false, p.malformed()
	}
	dist := -1
	foreign := false
	for name, at := range checkedMembers(raw) {
		switch string(name) {
		case "dist":
			dist = at
		case "dependencies", "optionalDependencies", "peerDependencies":
			foreign = foreign || foreignMember(raw[at:skipChecked(raw, at)], p.specs)
		}
	}
	if foreign {
		return nil, false, errForeignDependency
	}
	if dist < 0 || raw[dist] != '{' {
		return nil, false, nil
	}
	tb := -1
	for name, at := range checkedMembers(raw[dist:]) {
		if string(name) == "tarball" {
			tb = dist + at
			break
		}
	}
	if tb < 0 || raw[tb] != '"' {
		return nil, false, nil
	}
	end := skipString(raw, tb)
	u, ok := proxyTarballPath(checkedString(raw[tb:end]), p.base, p.rw.req.name)
	if !ok {
		return nil, false, nil
	}
	m := append(p.mbuf[:0], raw[:tb]...)
	m, _ = jsontext.AppendQuote(m, p.rw.public+u) // a URL: valid UTF-8
	m = append(m, raw[end:]...)
	p.mbuf = m
	return m, true, nil
}

// errForeignDependency is rewriteVersion's answer for a version that has a
// dependency from elsewhere than the registry: the version is dropped.
var errForeignDependency = errors.New("a dependency from elsewhere than the registry")

// writeVersion decides a rewritten version against the policy and writes it
// if it stays.
func (p *packumentStream) writeVersion(rawKey []byte, ver string, manifest []byte) error {
	if pr := p.rw.profile; pr != nil && !pr.NPMVersion(p.rw.req.name, ver, publishedAt(p.times, ver), p.rw.now).Allow {
		p.denied[ver], p.removed[ver] = true, true
		return nil
	}
	p.kept = append(p.kept, ver)
	if p.versionsN > 0 {
		if err := p.out.writeByte(','); err != nil {
			return err
		}
	}
	p.versionsN++
	if err := p.out.write(rawKey); err != nil {
		return err
	}
	if err := p.out.writeByte(':'); err != nil {
		return err
	}
	return p.out.write(manifest)
}

// writePending writes the versions held for time, deciding each.
func (p *packumentStream) writePending() error {
	p.pendingOn = false
	if err := p.member([]byte(`"versions"`)); err != nil {
		return err
	}
	if err := p.out.writeByte('{'); err != nil {
		return err
	}
	for i, v := range p.pending {
		if err := p.writeVersion(v.rawKey, v.name, v.manifest); err != nil {
			return err
		}
		p.held -= len(v.rawKey) + len(v.manifest)
		p.pending[i] = pendingVersion{}
	}
	p.pending = nil
	return p.out.writeByte('}')
}

// writeDistTags writes dist-tags without the tags naming a removed version;
// a latest the policy removed, or removed for a dependency from elsewhere,
// moves to the highest release left, so "npm install pkg" gets the newest
// allowed one.
func (p *packumentStream) writeDistTags() error {
	out := p.distTags
	if tags := objectMembers(out); len(p.removed) > 0 && tags != nil {
		latestDenied := false
		for tag, v := range tags {
			var s string
			if json.Unmarshal(v, &s) == nil && p.removed[s] {
				delete(tags, tag)
				latestDenied = latestDenied || tag == "latest" && (p.denied[s] || p.foreign[s])
			}
		}
		if best := highestRelease(p.kept); latestDenied && best != "" {
			tags["latest"] = mustJSON(best)
		}
		out = mustJSON(tags)
	}
	if err := p.member([]byte(`"dist-tags"`)); err != nil {
		return err
	}
	return p.out.write(out)
}

// highestRelease is the highest of versions that is not a pre-release
// (the first of equals), "" if none is.
func highestRelease(versions []string) string {
	var best *semver.Version
	name := ""
	for _, ver := range versions {
		if v, err := semver.StrictNewVersion(ver); err == nil && v.Prerelease() == "" && (best == nil || v.GreaterThan(best)) {
			best, name = v, ver
		}
	}
	return name
}

// writeTime writes time without the versions the policy removed.
func (p *packumentStream) writeTime() error {
	out := p.timeRaw
	if p.times != nil && len(p.denied) > 0 {
		for v := range p.denied {
			delete(p.times, v)
		}
		out = mustJSON(p.times)
	}
	if err := p.member([]byte(`"time"`)); err != nil {
		return err
	}
	return p.out.write(out)
}

// packumentPublished reads a packument from r and returns time[version];
// zero when the packument has none for the version, or one that is not an
// RFC 3339 time.
func packumentPublished(r io.Reader, version string) (time.Time, error) {
	times, err := packumentTimes(r)
	return publishedAt(times, version), err
}

// packumentTimes reads a packument from r and returns its time, decoded by
// objectMembers (nil when it has none). It reads the packument as the
// rewrite does (its decoder, objectMembers), holding time alone, and reads
// to the end, refusing a name given twice anywhere: what a tarball check
// reads is what the packument's reader was shown.
func packumentTimes(r io.Reader) (map[string]json.RawMessage, error) {
	sc := newJSONScanner(r, func() int { return maxPackument })
	if c, err := sc.peek(); err != nil || c != '{' {
		if err == nil {
			err = errNotObject
		}
		return nil, err
	}
	if err := sc.enterObject(); err != nil {
		return nil, err
	}
	var times map[string]json.RawMessage
	for {
		more, err := sc.next()
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		_, k, err := sc.name()
		if err != nil {
			return nil, err
		}
		if k != "time" {
			if _, err := sc.value(nil, true); err != nil {
				return nil, err
			}
			continue
		}
		v, err := sc.value(nil, false)
		if err != nil {
			return nil, err
		}
		times = objectMembers(v)
	}
	if err := sc.finish(); err != nil {
		return nil, err
	}
	return times, nil
}

// publishedAt is version's publish time in a packument's time, decoded by
// objectMembers; zero when there is none or it is not an RFC 3339 time.
func publishedAt(times map[string]json.RawMessage, version string) time.Time {
	var ts string
	if json.Unmarshal(times[version], &ts) != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return time.Time{}
	}
	return t
}

// errNotObject says a JSON value is not an object.
var errNotObject = errors.New("not a JSON object")

// objectMembers decodes a JSON object the packument's scanner has read (so
// checked, compact, with no name twice) into its members, names decoded as
// encoding/json decodes them; nil for any other value.
func objectMembers(raw []byte) map[string]json.RawMessage {
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	m := map[string]json.RawMessage{}
	for name, at := range checkedMembers(raw) {
		m[string(name)] = raw[at:skipChecked(raw, at)]
	}
	return m
}

// jsonOut collects JSON text, handing it on to flush each time it reaches
// limit bytes.
type jsonOut struct {
	b     []byte
	limit int
	flush func([]byte) error
}

var errHeldFull = errors.New("more than cproxy holds")

func (o *jsonOut) write(p []byte) error {
	o.b = append(o.b, p...)
	return o.handOnFull()
}

func (o *jsonOut) writeByte(c byte) error {
	o.b = append(o.b, c)
	return o.handOnFull()
}

func (o *jsonOut) handOnFull() error {
	if o.flush == nil || len(o.b) < o.limit {
		return nil
	}
	err := o.flush(o.b)
	o.b = o.b[:0]
	o.limit = packumentChunk
	return err
}

// readError is an error from the reader, not in the JSON.
type readError struct{ err error }

func (e *readError) Error() string { return "reading: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

func isReadError(err error) bool {
	var re *readError
	return errors.As(err, &re)
}
