package pypi

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/policy"
)

// Whatever an index's HTML page holds, the page cproxy serves from it reads
// back as the same files: parsing the rendered page again gives the same
// names, URLs and markers, so a client of the HTML form and one of the JSON
// form are shown one set of files.
func FuzzHTMLPage(f *testing.F) {
	f.Add(`<html><body><a href="https://files.example/p/aa/demo-1.0-py3-none-any.whl#sha256=ab12" data-requires-python="&gt;=3.8" data-core-metadata="sha256=cd">demo-1.0-py3-none-any.whl</a><br/>` +
		`<a href="../../p/demo-1.0.tar.gz" data-yanked="">demo-1.0.tar.gz</a></body></html>`)
	f.Add(`<base href="https://files.example/x/"><a href="demo-2.0.zip" data-dist-info-metadata="true" data-yanked="bad &amp; broken">demo-2.0.zip</a>`)
	f.Add(`<a href="https://files.example/p/demo-1.0-py3-none-any.whl" href="https://evil.example/x">demo-1.0-py3-none-any.whl</a>`)
	f.Add(`<a href=https://files.example/p/demo-1.0.tar.gz>demo-1.0.tar.gz<a href=https://files.example/p/demo-2.0.tar.gz>demo-2.0.tar.gz</a>`)
	pageURL, _ := url.Parse("https://files.example/simple/demo/")
	files, _ := url.Parse("https://files.example/")
	all := func(string, time.Time) bool { return true }
	f.Fuzz(func(t *testing.T, page string) {
		doc, err := ParseHTML([]byte(page), "demo")
		if err != nil {
			return
		}
		kept, err := RewriteJSON(doc, "demo", pageURL, files, all)
		if err != nil {
			t.Fatalf("RewriteJSON of ParseHTML's page: %v\n%s", err, doc)
		}
		html, err := RenderHTML(kept)
		if err != nil {
			t.Fatalf("RenderHTML: %v", err)
		}
		again, err := ParseHTML(html, "demo")
		if err != nil {
			t.Fatalf("the rendered page does not parse: %v\n%s", err, html)
		}
		var a, b struct {
			Files []map[string]any `json:"files"`
		}
		json.Unmarshal(kept, &a)
		json.Unmarshal(again, &b)
		if len(a.Files) != len(b.Files) {
			t.Fatalf("%d files kept, %d read back from\n%s", len(a.Files), len(b.Files), html)
		}
		for i := range a.Files {
			for _, k := range []string{"filename", "requires-python", "yanked", "core-metadata"} {
				if ja, jb := mustMarshal(a.Files[i][k]), mustMarshal(b.Files[i][k]); ja != jb {
					t.Errorf("file %d: %s %s, read back %s", i, k, ja, jb)
				}
			}
			if u := a.Files[i]["url"].(string); !strings.HasPrefix(b.Files[i]["url"].(string), u) {
				t.Errorf("file %d: url %q, read back %q", i, u, b.Files[i]["url"])
			}
		}
	})
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A path the route accepts names a normalised project, a distribution file
// of it, and a place on the files host with no "." or ".." segment, whose
// escaped form decodes to it.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"/pypi/simple/Foo_Bar/", "/pypi/simple/", "/pypi/files/demo/packages/aa/demo-1.0-py3-none-any.whl",
		"/pypi/files/demo/packages/%2e%2e/demo-1.0.tar.gz", "/pypi/files/demo/a%2Fb/demo-1.0.tar.gz",
		"/pypi/files/demo/x/demo-1.0-py3-none-any.whl.metadata", "/pypi/files/demo/x/demo-1!2.0+local.tar.gz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, escaped string) {
		q, err := parsePath(escaped)
		if err != nil {
			return
		}
		if q.project == "" || policy.NormalizePyPIName(q.project) != q.project {
			t.Fatalf("%q: project %q is not normalised", escaped, q.project)
		}
		if !q.isFile() {
			return
		}
		if f, err := FileOf(q.project, q.filename); err != nil || f != q.file {
			t.Fatalf("%q: file %q is not one of %s: %v", escaped, q.filename, q.project, err)
		}
		decoded, err := url.PathUnescape(q.rawPath)
		if err != nil || decoded != q.path || !strings.HasSuffix(q.path, "/"+q.filename) {
			t.Fatalf("%q: path %q, raw %q, file %q", escaped, q.path, q.rawPath, q.filename)
		}
		for _, seg := range strings.Split(q.path, "/")[1:] {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("%q: segment %q in %q", escaped, seg, q.path)
			}
		}
	})
}
