package npm

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cproxy/cproxy/routes/routetest"
)

// FuzzParseNPMPath checks the npm path parser's promises on any input: an
// accepted request names a valid package, its upstream path is canonical
// (no dot segments, no encoding but the scope's %2f) and parsing cproxy's
// own path for it gives the same request back.
func FuzzParseNPMPath(f *testing.F) {
	for _, s := range []string{
		"/npm/react", "/npm/@types%2fnode", "/npm/@types/node", "/npm/@types%2Fnode",
		"/npm/react/-/react-18.2.0.tgz", "/npm/@a/b/-/b-1.0.0-rc.1.tgz", "/npm/-/ping",
		"/npm/%2e%2e", "/npm/@a%2f..%2f..", "/npm/a/-/a-1.0.0.tgz%2f..", "/npm/-/v1/search",
		"/npm/@a%252fb", "/npm/react/-rev/1",
	} {
		f.Add("GET", s)
	}
	f.Add("PUT", "/npm/react")
	f.Fuzz(func(t *testing.T, method, path string) {
		n, err := parseNPMPath(method, path, "")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "cproxy: ") {
				t.Fatalf("refusal without cproxy's prefix: %q", err)
			}
			return
		}
		if want := map[bool]string{true: http.MethodPost, false: http.MethodGet}[n.kind == npmAudit]; method != want {
			t.Fatalf("%s %s accepted as %+v", method, path, n)
		}
		if n.kind == npmPing || n.kind == npmAudit || n.kind == npmSearch {
			return
		}
		if !validNPMName(n.name) {
			t.Fatalf("%s: invalid name %q accepted", path, n.name)
		}
		tg := n.target()
		for _, seg := range strings.Split(tg.Path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%s: dot segment upstream: %q", path, tg.Path)
			}
		}
		if strings.ContainsAny(tg.Path, "%?#\\ ") {
			t.Fatalf("%s: upstream path %q holds an unsafe character", path, tg.Path)
		}
		if tg.RawPath != "" {
			if p, err := url.PathUnescape(tg.RawPath); err != nil || p != tg.Path {
				t.Fatalf("%s: raw path %q is not path %q encoded", path, tg.RawPath, tg.Path)
			}
		}
		again, err := parseNPMPath(http.MethodGet, n.proxyPath(), "")
		if err != nil || again != n {
			t.Fatalf("%s: own path %q parses to %+v, %v; want %+v", path, n.proxyPath(), again, err, n)
		}
		if n.kind == npmTarball && !strings.HasPrefix(n.file, n.baseName()+"-") {
			t.Fatalf("%s: tarball %q not of %s", path, n.file, n.name)
		}
	})
}

// FuzzNPMAudit checks the audit body check and the search query check on
// any input: an accepted body is what the registry will read as npm's shape
// (an object of valid, allowed package names to arrays of versions), and an
// accepted query is rebuilt from the parameters npm sends.
func FuzzNPMAudit(f *testing.F) {
	f.Add(`{"is-thing":["1.0.0"],"@acme/util":["2.0.0-rc.1"]}`, "text=is-&size=20")
	f.Add(`{"is-thing":["1.0.0"],"is-thing":["1.0.0"]}`, "text=a&quality=0.65")
	f.Add(`{"left-pad":["1.3.0"]} {}`, "text=a&text=b")
	f.Add(`{"is-a":[]}`, "")
	prof := routetest.MustPolicy(f, npmAuditPolicy).Profiles["default"]
	f.Fuzz(func(t *testing.T, body, query string) {
		if err := checkAudit(strings.NewReader(body), "conv-1", prof); err == nil {
			var doc map[string][]string
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatalf("accepted %q, which is not npm's shape: %v", body, err)
			}
			for name, vs := range doc {
				if !validNPMName(name) || !prof.Package(name).Allow {
					t.Fatalf("accepted %q naming %q", body, name)
				}
				for _, v := range vs {
					if !npmVersionRE.MatchString(v) {
						t.Fatalf("accepted %q with version %q", body, v)
					}
				}
			}
		} else if !strings.HasPrefix(err.Error(), "cproxy: ") {
			t.Fatalf("refusal without cproxy's prefix: %q", err)
		}
		q, err := searchQuery(query)
		if err != nil {
			return
		}
		vals, err := url.ParseQuery(q)
		if err != nil || strings.TrimSpace(vals.Get("text")) == "" {
			t.Fatalf("searchQuery(%q) = %q, not a query with text", query, q)
		}
		for k, vs := range vals {
			if _, ok := searchParams[k]; !ok || len(vs) != 1 {
				t.Fatalf("searchQuery(%q) = %q passes %q", query, q, k)
			}
		}
	})
}
