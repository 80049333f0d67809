package routes

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
)

// maxPackument bounds the packument cproxy reads, decompresses and rewrites
// in memory. The largest packuments on registry.npmjs.org are some tens of
// MiB; a larger one is refused with a 502 that says so.
const maxPackument = 64 << 20

// rewritePackumentResponse replaces resp's body with the rewritten
// packument, decoded (identity), with its length.
func rewritePackumentResponse(resp *http.Response, base *url.URL, rw *npmRewrite) error {
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(io.LimitReader(resp.Body, maxPackument+1))
		if err != nil {
			return refuse(ErrUpstream, "the packument of %s from %s is not valid gzip", rw.req.name, base.Host)
		}
		defer zr.Close()
		body = zr
	default:
		return refuse(ErrUpstream, "the packument of %s from %s came with Content-Encoding %q, which cproxy cannot read", rw.req.name, base.Host, clip(ce, 32))
	}
	raw, err := io.ReadAll(io.LimitReader(body, maxPackument+1))
	if err != nil {
		return refuse(ErrUpstream, "reading the packument of %s from %s failed", rw.req.name, base.Host)
	}
	if len(raw) > maxPackument {
		return refuse(ErrUpstream, "the packument of %s is larger than %d MiB, the most cproxy rewrites", rw.req.name, maxPackument>>20)
	}
	out, err := rewritePackument(raw, base, rw)
	if err != nil {
		return err
	}
	h := resp.Header
	h.Del("Content-Encoding")
	h.Del("Content-Md5")
	h.Set("Content-Length", strconv.Itoa(len(out)))
	// The rewrite is a deterministic function of the upstream's bytes and
	// cproxy's public URL, so the upstream's validators still identify the
	// answer; only the bytes differ, so a strong ETag becomes weak.
	weakenETag(h)
	if rw.profile != nil {
		h.Del("Etag")
		h.Del("Last-Modified")
	}
	resp.ContentLength = int64(len(out))
	resp.Body = io.NopCloser(bytes.NewReader(out))
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

// rewritePackument points every tarball on the upstream at cproxy and drops
// every version whose tarball is anywhere else (and the dist-tags naming
// them). With rw.profile set it also drops the versions the profile's npm
// version policy denies (and their time entries); a latest tag it drops is
// moved to the highest release left. Keys are re-sorted and whitespace removed; values (integrity,
// shasum, everything else) keep their bytes.
func rewritePackument(raw []byte, base *url.URL, rw *npmRewrite) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, refuse(ErrUpstream, "the packument of %s from %s is not a JSON object", rw.req.name, base.Host)
	}
	bad := func() error {
		return refuse(ErrUpstream, "the packument of %s from %s has malformed versions", rw.req.name, base.Host)
	}
	var versions map[string]json.RawMessage
	if v, ok := doc["versions"]; ok {
		if err := json.Unmarshal(v, &versions); err != nil {
			return nil, bad()
		}
	}
	removed := map[string]bool{}
	for ver, vraw := range versions {
		var vdoc map[string]json.RawMessage
		if err := json.Unmarshal(vraw, &vdoc); err != nil {
			return nil, bad()
		}
		var dist map[string]json.RawMessage
		var tarball string
		if err := json.Unmarshal(vdoc["dist"], &dist); err != nil || json.Unmarshal(dist["tarball"], &tarball) != nil {
			removed[ver] = true
			delete(versions, ver)
			continue
		}
		p, ok := proxyTarballPath(tarball, base, rw.req.name)
		if !ok {
			removed[ver] = true
			delete(versions, ver)
			continue
		}
		dist["tarball"] = mustJSON(rw.public + p)
		vdoc["dist"] = mustJSON(dist)
		versions[ver] = mustJSON(vdoc)
	}
	denied := map[string]bool{}
	if rw.profile != nil && versions != nil {
		filterVersions(doc, versions, denied, rw)
		for v := range denied {
			removed[v] = true
		}
	}
	if versions != nil {
		doc["versions"] = mustJSON(versions)
	}
	if len(removed) > 0 {
		if t, ok := doc["dist-tags"]; ok {
			var tags map[string]json.RawMessage
			if err := json.Unmarshal(t, &tags); err == nil {
				latestDenied := false
				for tag, v := range tags {
					var s string
					if json.Unmarshal(v, &s) == nil && removed[s] {
						delete(tags, tag)
						latestDenied = latestDenied || tag == "latest" && denied[s]
					}
				}
				// A latest the version policy removed moves to the highest
				// release left, so "npm install pkg" gets the newest allowed one.
				if latestDenied {
					if v := highestRelease(versions); v != "" {
						tags["latest"] = mustJSON(v)
					}
				}
				doc["dist-tags"] = mustJSON(tags)
			}
		}
	}
	return mustJSON(doc), nil
}

// filterVersions removes from versions (and from the packument's time) every
// version the profile's npm version policy does not allow, by its publish time
// in time[version], recording each in removed.
func filterVersions(doc map[string]json.RawMessage, versions map[string]json.RawMessage, removed map[string]bool, rw *npmRewrite) {
	var times map[string]json.RawMessage
	if t, ok := doc["time"]; ok && json.Unmarshal(t, &times) != nil {
		times = nil // not an object: no version has a known time
	}
	for ver := range versions {
		var published time.Time
		var ts string
		if json.Unmarshal(times[ver], &ts) == nil {
			if t, err := time.Parse(time.RFC3339, ts); err == nil {
				published = t
			}
		}
		if !rw.profile.NPMVersion(rw.req.name, ver, published, rw.now).Allow {
			removed[ver] = true
			delete(versions, ver)
		}
	}
	if times != nil {
		for ver := range removed {
			delete(times, ver)
		}
		doc["time"] = mustJSON(times)
	}
}

// highestRelease is the highest version in versions that is semver and not a
// pre-release, or "".
func highestRelease(versions map[string]json.RawMessage) string {
	var best *semver.Version
	name := ""
	for ver := range versions {
		v, err := semver.StrictNewVersion(ver)
		if err != nil || v.Prerelease() != "" {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, name = v, ver
		}
	}
	return name
}
