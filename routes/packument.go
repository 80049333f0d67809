package routes

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Masterminds/semver/v3"
)

// Packuments are rewritten as they stream: cproxy reads the top-level object
// member by member and sends each on as soon as it is rewritten, so a request
// holds one version manifest at a time, not the packument (the largest on
// registry.npmjs.org are tens of MiB, and only grow).
//
// What it must hold counts against maxPackument, and a packument that needs
// more is refused: a version manifest, dist-tags (sent last, since what they
// keep depends on the versions dropped), time (whose keys are checked, and
// which is sent last when a version policy filters it) and, when the policy
// has a min_release_age and versions
// come before time (as on registry.npmjs.org), the rewritten versions until
// time arrives.
const (
	maxPackument = 64 << 20
	// packumentWhole: a rewrite that fits is sent whole, with a
	// Content-Length; anything wrong in it is a 502. Past it the packument
	// goes out in packumentChunk pieces, chunked, and a fault found later cuts
	// the response off.
	packumentWhole = 1 << 20
	packumentChunk = 64 << 10
	// maxJSONDepth is encoding/json's nesting limit.
	maxJSONDepth = 10000
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
			return refuse(ErrUpstream, "the packument of %s from %s is not valid gzip", rw.req.name, base.Host)
		}
		body = zr
	default:
		upstream.Close()
		return refuse(ErrUpstream, "the packument of %s from %s came with Content-Encoding %q, which cproxy cannot read", rw.req.name, base.Host, clip(ce, 32))
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

// packumentStream rewrites one packument from its scanner into out. It points
// every tarball on the upstream at cproxy and drops every version whose
// tarball is anywhere else (and the dist-tags naming them). With rw.profile
// set it also drops the versions the profile's npm version policy denies (and
// their time entries); a latest tag it drops is moved to the highest release
// left. Top-level members other than packumentMembers are dropped.
// Whitespace goes; values (integrity, shasum, everything else) keep their
// bytes, and so does the order of the top-level keys, except that cproxy
// moves dist-tags (and time, when it filters it) to the end. npm does not
// care about key order.
type packumentStream struct {
	sc       *jsonScanner
	out      jsonOut // the rewritten packument, handed on in chunks
	tmp      jsonOut // the version manifest or key being read
	base     *url.URL
	rw       *npmRewrite
	needTime bool // the policy decides by time[version]
	done     bool // out holds the rest of the packument, which is complete

	members   int // top-level members written
	versionsN int // versions written
	held      int // bytes held below, against maxPackument
	seenTop   map[string]bool
	seen      map[string]bool // every version name, to refuse duplicates
	removed   map[string]bool // versions dropped, for dist-tags
	denied    map[string]bool // versions the policy dropped, for time
	best      *semver.Version // the highest release kept
	bestName  string
	distTags  []byte // raw; nil: none
	timeRaw   []byte // raw, when the policy filters time; nil: none
	times     map[string]json.RawMessage
	pending   []pendingVersion // rewritten versions waiting for time
	pendingOn bool             // versions were read and wait for time
}

type pendingVersion struct {
	rawKey   []byte
	name     string
	manifest []byte
}

func newPackumentStream(r io.Reader, base *url.URL, rw *npmRewrite) *packumentStream {
	return &packumentStream{
		sc:       newJSONScanner(r),
		base:     base,
		rw:       rw,
		needTime: rw.profile != nil && rw.profile.NPM.MinReleaseAge.Duration > 0,
		seenTop:  map[string]bool{},
		seen:     map[string]bool{},
		removed:  map[string]bool{},
		denied:   map[string]bool{},
	}
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
	c, err := sc.peek()
	if err != nil || c != '{' {
		if isReadError(err) {
			return p.fault(err, "")
		}
		return refuse(ErrUpstream, "the packument of %s from %s is not a JSON object", p.rw.req.name, p.base.Host)
	}
	sc.pos++
	if err := p.out.writeByte('{'); err != nil {
		return err
	}
	if c, err := sc.peekIn(); err != nil {
		return p.fault(err, "")
	} else if c == '}' {
		sc.pos++
	} else {
		for {
			rawKey, key, err := p.key()
			if err != nil {
				return p.fault(err, "a key")
			}
			if packumentMembers[key] {
				if p.seenTop[key] {
					return refuse(ErrUpstream, "the packument of %s from %s has more than one %q", p.rw.req.name, p.base.Host, key)
				}
				p.seenTop[key] = true
			}
			switch {
			case !packumentMembers[key]:
				err = sc.copyValue(nil)
			case key == "versions":
				err = p.versions(rawKey)
			case key == "dist-tags":
				err = p.readDistTags()
			case key == "time":
				err = p.readTime(rawKey)
			default:
				if err = p.member(rawKey); err == nil {
					err = sc.copyValue(&p.out)
				}
			}
			if err != nil {
				return p.fault(err, key)
			}
			if c, err = sc.peekIn(); err != nil {
				return p.fault(err, "")
			}
			sc.pos++
			if c == '}' {
				break
			}
			if c != ',' {
				return p.fault(errJSONSyntax, "")
			}
		}
	}
	// Nothing but whitespace may follow, to the end (which also checks
	// gzip's checksum).
	if _, err := sc.peek(); err != io.EOF {
		if err == nil {
			err = errJSONSyntax
		}
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

// fault turns an error from reading into cproxy's refusal.
func (p *packumentStream) fault(err error, what string) error {
	var ref *refusal
	switch {
	case err == errStopped || errors.As(err, &ref):
		return err
	case err == errHeldFull:
		return refuse(ErrUpstream, "the packument of %s is larger than %d MiB where cproxy must hold it (%s)", p.rw.req.name, maxPackument>>20, what)
	case isReadError(err):
		return refuse(ErrUpstream, "reading the packument of %s from %s failed", p.rw.req.name, p.base.Host)
	}
	return refuse(ErrUpstream, "the packument of %s from %s is not valid JSON", p.rw.req.name, p.base.Host)
}

func (p *packumentStream) malformed() error {
	return refuse(ErrUpstream, "the packument of %s from %s has malformed versions", p.rw.req.name, p.base.Host)
}

// key reads an object key and its colon: the key as sent and decoded.
func (p *packumentStream) key() ([]byte, string, error) {
	p.tmp.b, p.tmp.max = p.tmp.b[:0], p.room()
	k, err := p.sc.key(&p.tmp)
	if err != nil {
		return nil, "", err
	}
	return bytes.Clone(p.tmp.b), k, nil
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
	o := jsonOut{max: p.room()}
	if err := p.sc.copyValue(&o); err != nil {
		return nil, p.fault(err, what)
	}
	return o.b, p.account(len(o.b), what)
}

// readDistTags holds dist-tags, which are written last, without the tags
// naming a version the rewrite drops.
func (p *packumentStream) readDistTags() error {
	raw, err := p.hold("dist-tags")
	if err != nil {
		return err
	}
	if _, err := objectMembers(raw); err != nil && err != errNotObject {
		return p.duplicate("dist-tags", err)
	}
	p.distTags = raw
	return nil
}

// readTime holds time, whose keys must each come once (npmPublished reads
// it for a tarball as this rewrite does for the packument). Without a
// version policy it is written where it came; with one, it is filtered and
// written last, and the versions waiting for it are decided.
func (p *packumentStream) readTime(rawKey []byte) error {
	raw, err := p.hold("time")
	if err != nil {
		return err
	}
	times, err := objectMembers(raw)
	if err != nil && err != errNotObject {
		return p.duplicate("time", err)
	}
	if p.rw.profile == nil {
		p.held -= len(raw)
		if err := p.member(rawKey); err != nil {
			return err
		}
		return p.out.write(raw)
	}
	p.timeRaw, p.times = raw, times // times is nil when time is not an object: no version has a known time
	if p.pendingOn {
		return p.writePending()
	}
	return nil
}

// duplicate is the refusal of a member whose object gives a key twice.
func (p *packumentStream) duplicate(member string, err error) error {
	return refuse(ErrUpstream, "the packument of %s from %s is ambiguous: %s in %q", p.rw.req.name, p.base.Host, err, member)
}

// versions reads the versions object, rewriting each version as it comes.
// When the policy needs time and time has not come yet, the rewritten
// versions are held until it does.
func (p *packumentStream) versions(rawKey []byte) error {
	sc := p.sc
	c, err := sc.peekIn()
	if err != nil {
		return err
	}
	if c != '{' {
		if c != 'n' {
			return p.malformed()
		}
		// null: left as it is, as no version is in it.
		if err := p.member(rawKey); err != nil {
			return err
		}
		return sc.copyValue(&p.out)
	}
	sc.pos++
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
	if c, err = sc.peekIn(); err != nil {
		return err
	} else if c == '}' {
		sc.pos++
	} else {
		for {
			rawVer, ver, err := p.key()
			if err != nil {
				return p.fault(err, "a version name")
			}
			if p.seen[ver] {
				return refuse(ErrUpstream, "the packument of %s from %s has version %q twice", p.rw.req.name, p.base.Host, clip(ver, 64))
			}
			p.seen[ver] = true
			if err := p.account(len(ver)+16, "version names"); err != nil {
				return err
			}
			p.tmp.b, p.tmp.max = p.tmp.b[:0], p.room()
			if err := sc.copyValue(&p.tmp); err != nil {
				return p.fault(err, "version "+clip(ver, 64))
			}
			manifest, keep, err := p.rewriteVersion(p.tmp.b)
			switch {
			case err != nil:
				return err
			case !keep:
				p.removed[ver] = true
			case wait:
				p.pending = append(p.pending, pendingVersion{rawKey: rawVer, name: ver, manifest: manifest})
				if err := p.account(len(rawVer)+len(manifest), "the versions before time, which the version policy needs"); err != nil {
					return err
				}
			default:
				if err := p.writeVersion(rawVer, ver, manifest); err != nil {
					return err
				}
			}
			if c, err = sc.peekIn(); err != nil {
				return err
			}
			sc.pos++
			if c == '}' {
				break
			}
			if c != ',' {
				return errJSONSyntax
			}
		}
	}
	if wait {
		return nil
	}
	return p.out.writeByte('}')
}

// rewriteVersion points one version's tarball at cproxy; keep is false for
// a version whose tarball is elsewhere (or that has none).
func (p *packumentStream) rewriteVersion(raw []byte) (manifest []byte, keep bool, err error) {
	var vdoc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &vdoc); err != nil {
		return nil, false, p.malformed()
	}
	var dist map[string]json.RawMessage
	var tarball string
	if err := json.Unmarshal(vdoc["dist"], &dist); err != nil || json.Unmarshal(dist["tarball"], &tarball) != nil {
		return nil, false, nil
	}
	u, ok := proxyTarballPath(tarball, p.base, p.rw.req.name)
	if !ok {
		return nil, false, nil
	}
	dist["tarball"] = mustJSON(p.rw.public + u)
	vdoc["dist"] = mustJSON(dist)
	return mustJSON(vdoc), true, nil
}

// writeVersion decides a rewritten version against the policy and writes it
// if it stays.
func (p *packumentStream) writeVersion(rawKey []byte, ver string, manifest []byte) error {
	if pr := p.rw.profile; pr != nil {
		if !pr.NPMVersion(p.rw.req.name, ver, publishedAt(p.times, ver), p.rw.now).Allow {
			p.denied[ver], p.removed[ver] = true, true
			return nil
		}
		if v, err := semver.StrictNewVersion(ver); err == nil && v.Prerelease() == "" && (p.best == nil || v.GreaterThan(p.best)) {
			p.best, p.bestName = v, ver
		}
	}
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
// a latest the policy removed moves to the highest release left, so
// "npm install pkg" gets the newest allowed one.
func (p *packumentStream) writeDistTags() error {
	out := p.distTags
	if tags, err := objectMembers(out); len(p.removed) > 0 && err == nil {
		latestDenied := false
		for tag, v := range tags {
			var s string
			if json.Unmarshal(v, &s) == nil && p.removed[s] {
				delete(tags, tag)
				latestDenied = latestDenied || tag == "latest" && p.denied[s]
			}
		}
		if latestDenied && p.bestName != "" {
			tags["latest"] = mustJSON(p.bestName)
		}
		out = mustJSON(tags)
	}
	if err := p.member([]byte(`"dist-tags"`)); err != nil {
		return err
	}
	return p.out.write(out)
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
// RFC 3339 time. It reads time as the rewrite does (objectMembers,
// publishedAt), holding it alone, and reads to the end, refusing a second
// time or a key given twice in it: what a tarball check reads is what the
// packument's reader was shown.
func packumentPublished(r io.Reader, version string) (time.Time, error) {
	sc := newJSONScanner(r)
	c, err := sc.peekIn()
	if err != nil {
		return time.Time{}, err
	}
	if c != '{' {
		return time.Time{}, errJSONSyntax
	}
	sc.pos++
	var published time.Time
	seenTime := false
	var tmp jsonOut
	if c, err = sc.peekIn(); err != nil {
		return time.Time{}, err
	}
	for c != '}' {
		tmp.b, tmp.max = tmp.b[:0], maxPackument
		k, err := sc.key(&tmp)
		if err != nil {
			return time.Time{}, err
		}
		if k != "time" {
			if err := sc.copyValue(nil); err != nil {
				return time.Time{}, err
			}
		} else {
			if seenTime {
				return time.Time{}, &duplicateKeyError{"time"}
			}
			seenTime = true
			val := jsonOut{max: maxPackument}
			if err := sc.copyValue(&val); err != nil {
				return time.Time{}, err
			}
			times, err := objectMembers(val.b)
			if err != nil && err != errNotObject {
				return time.Time{}, fmt.Errorf(`%w in "time"`, err)
			}
			published = publishedAt(times, version)
		}
		if c, err = sc.peekIn(); err != nil {
			return time.Time{}, err
		}
		if c == ',' {
			sc.pos++
		} else if c != '}' {
			return time.Time{}, errJSONSyntax
		}
	}
	sc.pos++
	if _, err := sc.peek(); err != io.EOF {
		if err == nil {
			err = errJSONSyntax
		}
		return time.Time{}, err
	}
	return published, nil
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

// duplicateKeyError names a key an object gives twice.
type duplicateKeyError struct{ key string }

func (e *duplicateKeyError) Error() string {
	return "key " + strconv.Quote(clip(e.key, 64)) + " comes twice"
}

// objectMembers decodes a JSON object into its members as json.Unmarshal
// into a map does, except that a key given twice is an error: encoding/json
// keeps the last value, a reader that stops at the first sees another, and
// cproxy must decide on what its client will read. errNotObject for any
// other value.
func objectMembers(raw []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errNotObject
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, errNotObject
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, errNotObject
		}
		if _, ok := out[k]; ok {
			return nil, &duplicateKeyError{k}
		}
		out[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, errNotObject
	}
	return out, nil
}

// jsonOut collects JSON text: held, up to max bytes (0: no limit), or, with
// flush, handed on each time it reaches limit bytes.
type jsonOut struct {
	b     []byte
	max   int
	limit int
	flush func([]byte) error
}

var errHeldFull = errors.New("more than cproxy holds")

func (o *jsonOut) write(p []byte) error {
	if o == nil {
		return nil
	}
	if o.max > 0 && len(o.b)+len(p) > o.max {
		return errHeldFull
	}
	o.b = append(o.b, p...)
	if o.flush != nil && len(o.b) >= o.limit {
		return o.handOn()
	}
	return nil
}

func (o *jsonOut) writeByte(c byte) error {
	if o == nil {
		return nil
	}
	if o.max > 0 && len(o.b) >= o.max {
		return errHeldFull
	}
	o.b = append(o.b, c)
	if o.flush != nil && len(o.b) >= o.limit {
		return o.handOn()
	}
	return nil
}

func (o *jsonOut) handOn() error {
	err := o.flush(o.b)
	o.b = o.b[:0]
	o.limit = packumentChunk
	return err
}

// jsonScanner reads JSON text from a stream and copies values through,
// checked and compacted, without holding them.
type jsonScanner struct {
	r        io.Reader
	buf      []byte
	pos, end int
	err      error // the reader's error once it has returned one (io.EOF at the end)
}

var errJSONSyntax = errors.New("invalid JSON")

// readError is an error from the reader, not in the JSON.
type readError struct{ err error }

func (e *readError) Error() string { return "reading: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

func isReadError(err error) bool {
	var re *readError
	return errors.As(err, &re)
}

func newJSONScanner(r io.Reader) *jsonScanner {
	return &jsonScanner{r: r, buf: make([]byte, 64<<10)}
}

// more makes at least one byte available: nil, io.EOF at the end, or a
// *readError.
func (s *jsonScanner) more() error {
	if s.pos < s.end {
		return nil
	}
	if s.err != nil {
		return s.readErr()
	}
	s.pos, s.end = 0, 0
	for range 100 {
		n, err := s.r.Read(s.buf)
		s.end = n
		if err != nil {
			s.err = err
		}
		if n > 0 {
			return nil
		}
		if err != nil {
			return s.readErr()
		}
	}
	s.err = io.ErrNoProgress
	return s.readErr()
}

func (s *jsonScanner) readErr() error {
	if s.err == io.EOF {
		return io.EOF
	}
	return &readError{s.err}
}

// peek skips whitespace and returns the next byte without consuming it;
// io.EOF at the end.
func (s *jsonScanner) peek() (byte, error) {
	for {
		if err := s.more(); err != nil {
			return 0, err
		}
		for s.pos < s.end {
			switch c := s.buf[s.pos]; c {
			case ' ', '\t', '\n', '\r':
				s.pos++
			default:
				return c, nil
			}
		}
	}
}

// peekIn is peek inside a value, where the end is a syntax error.
func (s *jsonScanner) peekIn() (byte, error) {
	c, err := s.peek()
	if err == io.EOF {
		err = errJSONSyntax
	}
	return c, err
}

// nextIn consumes one byte inside a value.
func (s *jsonScanner) nextIn() (byte, error) {
	if err := s.more(); err != nil {
		if err == io.EOF {
			err = errJSONSyntax
		}
		return 0, err
	}
	c := s.buf[s.pos]
	s.pos++
	return c, nil
}

// key copies an object key to w and consumes the colon after it; it
// returns the key decoded.
func (s *jsonScanner) key(w *jsonOut) (string, error) {
	c, err := s.peekIn()
	if err != nil {
		return "", err
	}
	if c != '"' {
		return "", errJSONSyntax
	}
	start := len(w.b)
	if err := s.copyString(w); err != nil {
		return "", err
	}
	if c, err = s.peekIn(); err != nil {
		return "", err
	}
	if c != ':' {
		return "", errJSONSyntax
	}
	s.pos++
	raw := w.b[start:]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1]), nil
	}
	var k string
	if err := json.Unmarshal(raw, &k); err != nil {
		return "", errJSONSyntax
	}
	return k, nil
}

// copyValue copies the next JSON value to w (nil: skips it), checking its
// syntax and dropping whitespace.
func (s *jsonScanner) copyValue(w *jsonOut) error {
	var stack []byte // the closing byte of each open container
	for {
		c, err := s.peekIn()
		if err != nil {
			return err
		}
		switch c {
		case '{', '[':
			s.pos++
			if err := w.writeByte(c); err != nil {
				return err
			}
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			d, err := s.peekIn()
			if err != nil {
				return err
			}
			if d == end {
				s.pos++
				if err := w.writeByte(end); err != nil {
					return err
				}
				break
			}
			if len(stack) >= maxJSONDepth {
				return errJSONSyntax
			}
			stack = append(stack, end)
			if c == '{' {
				if err := s.memberKey(w); err != nil {
					return err
				}
			}
			continue
		case '"':
			err = s.copyString(w)
		case 't':
			err = s.copyLiteral(w, "true")
		case 'f':
			err = s.copyLiteral(w, "false")
		case 'n':
			err = s.copyLiteral(w, "null")
		default:
			if c != '-' && (c < '0' || c > '9') {
				return errJSONSyntax
			}
			err = s.copyNumber(w)
		}
		if err != nil {
			return err
		}
		// After a value: close containers, or go on to the next element.
		for {
			if len(stack) == 0 {
				return nil
			}
			d, err := s.peekIn()
			if err != nil {
				return err
			}
			end := stack[len(stack)-1]
			if d == end {
				s.pos++
				stack = stack[:len(stack)-1]
				if err := w.writeByte(d); err != nil {
					return err
				}
				continue
			}
			if d != ',' {
				return errJSONSyntax
			}
			s.pos++
			if err := w.writeByte(','); err != nil {
				return err
			}
			if end == '}' {
				if err := s.memberKey(w); err != nil {
					return err
				}
			}
			break
		}
	}
}

// memberKey copies a key and its colon inside a copied object.
func (s *jsonScanner) memberKey(w *jsonOut) error {
	c, err := s.peekIn()
	if err != nil {
		return err
	}
	if c != '"' {
		return errJSONSyntax
	}
	if err := s.copyString(w); err != nil {
		return err
	}
	if c, err = s.peekIn(); err != nil {
		return err
	}
	if c != ':' {
		return errJSONSyntax
	}
	s.pos++
	return w.writeByte(':')
}

// copyString copies a string, quotes and escapes as sent; s.buf[s.pos] is
// its opening quote.
func (s *jsonScanner) copyString(w *jsonOut) error {
	start := s.pos
	s.pos++
	for {
		i := s.pos
		for i < s.end {
			c := s.buf[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			i++
		}
		if i == s.end {
			if err := w.write(s.buf[start:i]); err != nil {
				return err
			}
			s.pos = i
			if err := s.more(); err != nil {
				if err == io.EOF {
					err = errJSONSyntax
				}
				return err
			}
			start = s.pos
			continue
		}
		switch c := s.buf[i]; {
		case c == '"':
			s.pos = i + 1
			return w.write(s.buf[start:s.pos])
		case c < 0x20:
			return errJSONSyntax
		}
		// An escape: flush what came before, then check it byte by byte
		// (it may straddle a refill).
		if err := w.write(s.buf[start:i]); err != nil {
			return err
		}
		s.pos = i + 1
		e, err := s.nextIn()
		if err != nil {
			return err
		}
		esc := [6]byte{'\\', e}
		n := 2
		switch e {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			for range 4 {
				h, err := s.nextIn()
				if err != nil {
					return err
				}
				if !isHex(h) {
					return errJSONSyntax
				}
				esc[n] = h
				n++
			}
		default:
			return errJSONSyntax
		}
		if err := w.write(esc[:n]); err != nil {
			return err
		}
		start = s.pos
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (s *jsonScanner) copyLiteral(w *jsonOut, lit string) error {
	for i := range len(lit) {
		c, err := s.nextIn()
		if err != nil {
			return err
		}
		if c != lit[i] {
			return errJSONSyntax
		}
	}
	return w.write([]byte(lit))
}

// copyNumber copies a number by JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScanner) copyNumber(w *jsonOut) error {
	// peekNum returns the next byte, or 0 at the end (which ends the
	// number; what must follow is checked by the caller).
	peekNum := func() (byte, error) {
		if err := s.more(); err != nil {
			if err == io.EOF {
				return 0, nil
			}
			return 0, err
		}
		return s.buf[s.pos], nil
	}
	take := func(c byte) error {
		s.pos++
		return w.writeByte(c)
	}
	digits := func(atLeastOne bool) error {
		for n := 0; ; n++ {
			c, err := peekNum()
			if err != nil {
				return err
			}
			if !isDigit(c) {
				if atLeastOne && n == 0 {
					return errJSONSyntax
				}
				return nil
			}
			if err := take(c); err != nil {
				return err
			}
		}
	}
	c, err := peekNum()
	if err != nil {
		return err
	}
	if c == '-' {
		if err := take(c); err != nil {
			return err
		}
		if c, err = peekNum(); err != nil {
			return err
		}
	}
	switch {
	case c == '0':
		if err := take(c); err != nil {
			return err
		}
	case isDigit(c):
		if err := digits(true); err != nil {
			return err
		}
	default:
		return errJSONSyntax
	}
	if c, err = peekNum(); err != nil {
		return err
	}
	if c == '.' {
		if err := take(c); err != nil {
			return err
		}
		if err := digits(true); err != nil {
			return err
		}
		if c, err = peekNum(); err != nil {
			return err
		}
	}
	if c == 'e' || c == 'E' {
		if err := take(c); err != nil {
			return err
		}
		if c, err = peekNum(); err != nil {
			return err
		}
		if c == '+' || c == '-' {
			if err := take(c); err != nil {
				return err
			}
		}
		return digits(true)
	}
	return nil
}
