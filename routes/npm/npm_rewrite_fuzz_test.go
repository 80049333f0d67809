package npm

import (
	"bytes"
	"encoding/json"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/Masterminds/semver/v3"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
)

// FuzzRewritePackument checks the streaming rewrite against oraclePackument,
// a simple map-based rewrite of the whole document: for any input, with and
// without a version policy, both refuse it, or both give the same JSON value
// (key order aside), with only the members of npm's documented format. The
// streaming one may also refuse a packument in which an object anywhere
// gives a name twice, which the oracle resolves by keeping the last.
// Whatever it sends is valid JSON in which every tarball is on cproxy, every
// version came from the input, and every integrity and shasum is the
// upstream's, byte for byte. Reading the input one byte at a time changes
// nothing.
func FuzzRewritePackument(f *testing.F) {
	f.Add([]byte(`{"name":"is-x","dist-tags":{"latest":"2.0.0"},"versions":{"1.0.0":{"dist":{"integrity":"sha512-A\u002b==","shasum":"ab","tarball":"https://registry.example/is-x/-/is-x-1.0.0.tgz"}},"2.0.0":{"dist":{"tarball":"https://registry.example/is-x/-/is-x-2.0.0.tgz"}}},"time":{"1.0.0":"2020-01-01T00:00:00.000Z","2.0.0":"2026-11-30T00:00:00Z"}}`), true)
	f.Add([]byte(`{"time":{"1.0.0":"2020-01-01T00:00:00.000Z","2.0.0":"2026-11-30T00:00:00Z"},"readme":"# x\n","dist-tags":{"latest":"2.0.0","next":"1.0.0"},"versions":{"1.0.0":{"dist":{"integrity":"sha512-A\u002b==","shasum":"ab","tarball":"https://registry.example/is-x/-/is-x-1.0.0.tgz"}},"2.0.0":{"dist":{"tarball":"https://registry.example/is-x/-/is-x-2.0.0.tgz"}}}}`), true)
	f.Add([]byte(`{"versions":{"1.1.0":{"dist":{"tarball":"https://registry.example/is-x/-/is-x-1.1.0.tgz","shasum":1}}},"time":[]}`), false)
	f.Add([]byte(`{"versions":null,"dist-tags":{"latest":1}}`), true)
	f.Add([]byte(` {"a":[1.5e+3,-0,true,false,null,{"b":"\"\\\/\b\f\n\r\t\u00e9"}],"versions":{},"ver\u0073ions":{}} `), false)
	f.Add([]byte(`{"versions":{"1.0.0":{"dependencies":{"a":"^1.0.0","b":"npm:@s/b@2"},"dist":{"tarball":"https://registry.example/is-x/-/is-x-1.0.0.tgz"}},"2.0.0":{"optionalDependencies":{"c":"git+https://evil.example/c.git"},"dist":{"tarball":"https://registry.example/is-x/-/is-x-2.0.0.tgz"}},"2.1.0":{"peerDependencies":["github:u/r"],"dist":{"tarball":"https://registry.example/is-x/-/is-x-2.1.0.tgz"}}},"dist-tags":{"latest":"2.1.0","next":"2.0.0"}}`), false)
	f.Add([]byte(`{"versions":{"0.9.0":{"dist":{"tarball":"https://registry.example/is-x/-/is-x-0.9.0.tgz"}},"1.1.0-rc.1":{"dist":{"tarball":"https://registry.example/is-x/-/is-x-1.1.0-rc.1.tgz"}},"1.0.0":{"dist":{"tarball":"https://evil.example/is-x/-/is-x-1.0.0.tgz"}}},"dist-tags":{"latest":"1.0.0","beta":"1.1.0-rc.1"},"time":{"0.9.0":"2019-01-01T00:00:00Z","1.1.0-rc.1":"2019-01-01T00:00:00Z"}}`), true)
	base, _ := url.Parse("https://registry.example/")
	pol := routetest.MustPolicy(f, npmVersionPolicy)
	f.Fuzz(func(t *testing.T, raw []byte, withPolicy bool) {
		rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "is-x"}, public: "http://p:1"}
		if withPolicy {
			rw.profile, rw.now = pol.Profiles["default"], npmNow
		}
		out, err := rewritePackument(raw, base, rw)
		slow, serr := rewritePackumentFrom(iotest.OneByteReader(bytes.NewReader(raw)), base, rw)
		if !bytes.Equal(out, slow) || (err == nil) != (serr == nil) {
			t.Fatalf("one byte at a time: %q, %v; at once: %q, %v", slow, serr, out, err)
		}
		want, werr := oraclePackument(raw, base, rw)
		switch {
		case werr != nil && err == nil:
			t.Fatalf("the oracle refused (%v), the stream sent %q", werr, out)
		case werr != nil:
			return
		case err != nil:
			if !hasDuplicateKeys(raw) {
				t.Fatalf("the stream refused (%v), the oracle sent %q", err, want)
			}
			return
		}
		var gotV, wantV any
		if err := unmarshalNumbers(out, &gotV); err != nil {
			t.Fatalf("output does not parse: %v: %q", err, out)
		}
		if err := unmarshalNumbers(want, &wantV); err != nil {
			t.Fatalf("oracle output does not parse: %v", err)
		}
		if !reflect.DeepEqual(gotV, wantV) {
			t.Fatalf("stream and oracle differ:\n got  %s\n want %s", out, want)
		}

		// Maps, not structs: a struct field would also take "Versions".
		in, ok := dists(raw)
		if !ok {
			return // valid for the rewriter, not of this shape: nothing more to compare
		}
		got, ok := dists(out)
		if !ok {
			t.Fatalf("output does not parse as a packument: %s", out)
		}
		for v, gd := range got {
			id, ok := in[v]
			if !ok {
				t.Fatalf("version %q appeared", v)
			}
			var tb string
			if json.Unmarshal(gd["tarball"], &tb) != nil || !strings.HasPrefix(tb, "http://p:1/npm/is-x/-/") {
				t.Fatalf("tarball of %s not on cproxy: %s", v, gd["tarball"])
			}
			for _, k := range []string{"integrity", "shasum"} {
				if !bytes.Equal(compactJSON(id[k]), compactJSON(gd[k])) {
					t.Fatalf("%s of %s changed: %s -> %s", k, v, id[k], gd[k])
				}
			}
		}
	})
}

// dists is each version's dist in a packument, by exact key; false if the
// packument is not of that shape.
func dists(raw []byte) (map[string]map[string]json.RawMessage, bool) {
	var doc map[string]json.RawMessage
	var versions map[string]map[string]json.RawMessage
	if json.Unmarshal(raw, &doc) != nil || json.Unmarshal(doc["versions"], &versions) != nil && doc["versions"] != nil {
		return nil, false
	}
	out := map[string]map[string]json.RawMessage{}
	for v, m := range versions {
		var d map[string]json.RawMessage
		if json.Unmarshal(m["dist"], &d) != nil && m["dist"] != nil {
			return nil, false
		}
		out[v] = d
	}
	return out, true
}

func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

func unmarshalNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// hasDuplicateKeys reports whether an object anywhere in the JSON value raw
// gives a name twice (names compared as encoding/json decodes them).
func hasDuplicateKeys(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch raw[0] {
	case '{':
		d := json.NewDecoder(bytes.NewReader(raw))
		d.Token()
		names := map[string]bool{}
		for d.More() {
			t, err := d.Token()
			if err != nil {
				return false
			}
			k, _ := t.(string)
			var v json.RawMessage
			if d.Decode(&v) != nil {
				return false
			}
			if names[k] || hasDuplicateKeys(v) {
				return true
			}
			names[k] = true
		}
	case '[':
		var vs []json.RawMessage
		json.Unmarshal(raw, &vs)
		return slices.ContainsFunc(vs, func(v json.RawMessage) bool { return hasDuplicateKeys(v) })
	}
	return false
}

// oraclePackument is the rewrite cproxy did before it streamed: the whole
// packument unmarshalled into maps, rewritten and encoded again.
func oraclePackument(raw []byte, base *url.URL, rw *npmRewrite) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, routes.Refuse(routes.ErrUpstream, "not a JSON object")
	}
	for k := range doc {
		if !packumentMembers[k] {
			delete(doc, k)
		}
	}
	bad := func() error { return routes.Refuse(routes.ErrUpstream, "malformed versions") }
	var versions map[string]json.RawMessage
	if v, ok := doc["versions"]; ok {
		if err := json.Unmarshal(v, &versions); err != nil {
			return nil, bad()
		}
	}
	removed, foreign := map[string]bool{}, map[string]bool{}
	for ver, vraw := range versions {
		var vdoc map[string]json.RawMessage
		if err := json.Unmarshal(vraw, &vdoc); err != nil {
			return nil, bad()
		}
		if _, _, ok := foreignDependency(vdoc, map[string]bool{}); ok {
			removed[ver], foreign[ver] = true, true
			delete(versions, ver)
			continue
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
		var times map[string]json.RawMessage
		if t, ok := doc["time"]; ok && json.Unmarshal(t, &times) != nil {
			times = nil
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
				denied[ver], removed[ver] = true, true
				delete(versions, ver)
			}
		}
		if times != nil {
			for ver := range denied {
				delete(times, ver)
			}
			doc["time"] = mustJSON(times)
		}
	}
	if versions != nil {
		doc["versions"] = mustJSON(versions)
	}
	if t, ok := doc["dist-tags"]; ok && len(removed) > 0 {
		var tags map[string]json.RawMessage
		if err := json.Unmarshal(t, &tags); err == nil {
			latestDenied := false
			for tag, v := range tags {
				var s string
				if json.Unmarshal(v, &s) == nil && removed[s] {
					delete(tags, tag)
					latestDenied = latestDenied || tag == "latest" && (denied[s] || foreign[s])
				}
			}
			if latestDenied {
				var best *semver.Version
				name := ""
				for ver := range versions {
					v, err := semver.StrictNewVersion(ver)
					if err == nil && v.Prerelease() == "" && (best == nil || v.GreaterThan(best)) {
						best, name = v, ver
					}
				}
				if name != "" {
					tags["latest"] = mustJSON(name)
				}
			}
			doc["dist-tags"] = mustJSON(tags)
		}
	}
	return mustJSON(doc), nil
}
