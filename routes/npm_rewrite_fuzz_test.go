package routes

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"
)

// FuzzRewritePackument: any input either is refused or rewrites to valid JSON
// in which every kept version's integrity and shasum are byte for byte the
// upstream's, with and without a version policy.
func FuzzRewritePackument(f *testing.F) {
	f.Add([]byte(`{"name":"is-x","dist-tags":{"latest":"2.0.0"},"versions":{"1.0.0":{"dist":{"integrity":"sha512-A\u002b==","shasum":"ab","tarball":"https://registry.example/is-x/-/is-x-1.0.0.tgz"}},"2.0.0":{"dist":{"tarball":"https://registry.example/is-x/-/is-x-2.0.0.tgz"}}},"time":{"1.0.0":"2020-01-01T00:00:00.000Z","2.0.0":"2026-11-30T00:00:00Z"}}`), true)
	f.Add([]byte(`{"versions":{"1.1.0":{"dist":{"tarball":"https://registry.example/is-x/-/is-x-1.1.0.tgz","shasum":1}}},"time":[]}`), false)
	f.Add([]byte(`{"versions":null,"dist-tags":{"latest":1}}`), true)
	base, _ := url.Parse("https://registry.example/")
	pol := mustPolicy(f, npmVersionPolicy)
	f.Fuzz(func(t *testing.T, raw []byte, withPolicy bool) {
		rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "is-x"}, public: "http://p:1"}
		if withPolicy {
			rw.profile, rw.now = pol.Profiles["default"], npmNow
		}
		out, err := rewritePackument(raw, base, rw)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out: %q", out)
		}
		var in, got struct {
			Versions map[string]struct {
				Dist map[string]json.RawMessage `json:"dist"`
			} `json:"versions"`
		}
		if json.Unmarshal(raw, &in) != nil {
			return // valid for the rewriter, not for this shape: nothing to compare
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("output does not parse: %v: %s", err, out)
		}
		for v, gv := range got.Versions {
			iv, ok := in.Versions[v]
			if !ok {
				t.Fatalf("version %q appeared", v)
			}
			for _, k := range []string{"integrity", "shasum"} {
				if !bytes.Equal(compactJSON(iv.Dist[k]), compactJSON(gv.Dist[k])) {
					t.Fatalf("%s of %s changed: %s -> %s", k, v, iv.Dist[k], gv.Dist[k])
				}
			}
		}
	})
}

func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}
