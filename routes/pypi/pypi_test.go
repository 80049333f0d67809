package pypi

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// canaryIndex is the private index's USER:PASSWORD, which must reach the
// index and nothing else.
const canaryIndex = "cproxy:pypi-CANARYindex0123456789abcdefghij"

const pypiPolicy = `
[profile.default]
models = ["claude-*"]
pypi = { packages = ["demo", "dep-*", "old"], min_release_age = "2d", deny = [ { package = "demo", versions = "==1.1", reason = "compromised release" } ] }

[profile.ages]
pypi = { packages = ["demo"] }

[[sandbox]]
match = "ages-*"
profile = "ages"
`

var now = time.Now()

func newIndex(t *testing.T, opts fakes.PyPIIndexOptions) *fakes.PyPIIndex {
	idx := fakes.NewPyPIIndex(opts)
	t.Cleanup(idx.Close)
	old := now.Add(-30 * 24 * time.Hour)
	for _, err := range []error{
		idx.AddWheel("demo", "1.0", old, "dep-one>=1"),
		idx.AddSdist("demo", "1.0", old, "dep-one>=1"),
		idx.AddWheel("demo", "1.1", old),
		idx.AddWheel("demo", "1.2", now.Add(-time.Hour)),
		idx.AddWheel("dep_one", "1.0", old),
		idx.AddWheel("other", "1.0", old),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func newEnv(t *testing.T, idx *fakes.PyPIIndex) *routetest.Env {
	u, _ := url.Parse(idx.URL)
	files, _ := url.Parse(idx.FilesURL)
	up := routes.Upstream{URL: u, Files: files, HeaderTimeout: 10 * time.Second}
	if idx != nil {
		up.Credential = secrets.New(canaryIndex)
	}
	return routetest.New(t, routetest.Serve(Kind, up), routetest.WithPolicy(t, pypiPolicy), func(o *routetest.Options) {
		o.Canaries = append(o.Canaries, canaryIndex, strings.SplitN(canaryIndex, ":", 2)[1])
	})
}

type jsonPage struct {
	Name     string   `json:"name"`
	Versions []string `json:"versions"`
	Files    []struct {
		Filename     string            `json:"filename"`
		URL          string            `json:"url"`
		Hashes       map[string]string `json:"hashes"`
		CoreMetadata map[string]string `json:"core-metadata"`
	} `json:"files"`
}

// A project's page comes filtered in the form the client asks for: the
// version the policy denies and the one too new are gone, the files point
// back at the route, and the index got cproxy's credential, never the
// sandbox token.
func TestIndexPageFiltered(t *testing.T) {
	idx := newIndex(t, fakes.PyPIIndexOptions{Credential: canaryIndex})
	e := newEnv(t, idx)
	tok := e.Token("conv-1")
	pipAccept := "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"
	rep := e.Do("GET", "/pypi/simple/demo/", routetest.With(routetest.Bearer(tok), "Accept", pipAccept), "")
	if rep.Status != 200 || rep.Header.Get("Content-Type") != TypeJSON {
		t.Fatalf("status %d, type %q: %s", rep.Status, rep.Header.Get("Content-Type"), rep.Body)
	}
	var pg jsonPage
	if err := json.Unmarshal([]byte(rep.Body), &pg); err != nil {
		t.Fatal(err)
	}
	if strings.Join(pg.Versions, ",") != "1.0" || len(pg.Files) != 2 {
		t.Fatalf("page: %s", rep.Body)
	}
	for _, f := range pg.Files {
		if !strings.HasPrefix(f.URL, "/pypi/files/demo/packages/") || !strings.HasSuffix(f.URL, "/"+f.Filename) || f.Hashes["sha256"] == "" {
			t.Errorf("file %+v", f)
		}
	}
	for _, r := range idx.Requests() {
		if r.Host != "index" || r.Path != "/simple/demo/" || !strings.HasPrefix(r.Authorization, "Basic ") || strings.Contains(r.Authorization, "cpx_") {
			t.Errorf("the index got %+v", r)
		}
	}

	// Without Accept, PEP 503 HTML, with the hash and metadata markers.
	rep = e.Do("GET", "/pypi/simple/Demo/", routetest.Bearer(tok), "")
	if rep.Status != 200 || rep.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("status %d, type %q: %s", rep.Status, rep.Header.Get("Content-Type"), rep.Body)
	}
	if !strings.Contains(rep.Body, `<a href="/pypi/files/demo/packages/`) || !strings.Contains(rep.Body, `-py3-none-any.whl#sha256=`) ||
		!strings.Contains(rep.Body, `data-core-metadata="sha256=`) || strings.Contains(rep.Body, "demo-1.1") || strings.Contains(rep.Body, "demo-1.2") {
		t.Errorf("HTML page:\n%s", rep.Body)
	}

	// A client that takes no form of the API gets 406's cousin, a 400 naming them.
	if rep := e.Do("GET", "/pypi/simple/demo/", routetest.With(routetest.Bearer(tok), "Accept", "image/png"), ""); rep.Status != 400 || !strings.Contains(rep.Body, TypeJSON) {
		t.Errorf("Accept image/png: %d %s", rep.Status, rep.Body)
	}
}

// The files a page lists are served, metadata files too, and the files
// host never gets the index's credential: it is on another origin.
func TestFilesServed(t *testing.T) {
	idx := newIndex(t, fakes.PyPIIndexOptions{Credential: canaryIndex})
	e := newEnv(t, idx)
	tok := e.Token("conv-1")
	rep := e.Do("GET", "/pypi/simple/demo/", routetest.With(routetest.Bearer(tok), "Accept", TypeJSON), "")
	var pg jsonPage
	if err := json.Unmarshal([]byte(rep.Body), &pg); err != nil {
		t.Fatal(err)
	}
	for _, f := range pg.Files {
		got := e.Do("GET", f.URL, routetest.Bearer(tok), "")
		if got.Status != 200 || len(got.Body) == 0 {
			t.Errorf("%s: %d %s", f.URL, got.Status, got.Body)
		}
		if f.CoreMetadata != nil {
			if got := e.Do("GET", f.URL+".metadata", routetest.Bearer(tok), ""); got.Status != 200 || !strings.Contains(got.Body, "Requires-Dist: dep-one>=1") {
				t.Errorf("%s.metadata: %d %s", f.URL, got.Status, got.Body)
			}
		}
	}
	for _, r := range idx.Requests() {
		if r.Host == "files" && r.Authorization != "" {
			t.Errorf("the files host got a credential: %+v", r)
		}
	}
}

// What the policy does not allow is refused before the index hears of it,
// with the reason; a file is served only under its own project, a hidden
// version's files are refused, and paths the route does not know are too.
func TestRefusals(t *testing.T) {
	idx := newIndex(t, fakes.PyPIIndexOptions{Credential: canaryIndex})
	e := newEnv(t, idx)
	tok := e.Token("conv-1")
	demo := e.Do("GET", "/pypi/simple/demo/", routetest.With(routetest.Bearer(tok), "Accept", TypeJSON), "")
	var pg jsonPage
	json.Unmarshal([]byte(demo.Body), &pg)
	whl := pg.Files[0].URL
	hidden := strings.Replace(whl, "1.0", "1.1", -1)
	before := len(idx.Requests())
	cases := []struct {
		path   string
		status int
		want   string
	}{
		{"/pypi/simple/other/", 403, "PyPI project other is not allowed for sandbox conv-1"},
		{"/pypi/simple/Other_/", 404, "not a project page"},
		{"/pypi/simple/", 404, "list of every project"},
		{"/pypi/simple/demo", 404, "trailing '/'"},
		{"/pypi/files/demo/packages/aa/bb/cc/other-1.0-py3-none-any.whl", 403, "is not a distribution file of project demo"},
		{"/pypi/files/other/packages/aa/bb/cc/other-1.0-py3-none-any.whl", 403, "PyPI project other is not allowed"},
		{"/pypi/files/Demo/packages/aa/demo-1.0-py3-none-any.whl", 404, "not a distribution file"},
		{"/pypi/files/demo/packages/../demo-1.0-py3-none-any.whl", 404, "segment"},
		{"/pypi/files/demo/packages/%2e%2e/demo-1.0-py3-none-any.whl", 404, "segment"},
		{"/pypi/files/demo/packages/aa/demo-1.1-py3-none-any.whl", 403, `demo==1.1 is not allowed for sandbox conv-1: it is denied by the sandbox's policy (versions "==1.1"): compromised release`},
		{hidden, 403, "demo==1.1 is not allowed"},
		{"/pypi/other", 404, "not a path of the PyPI route"},
		{"/pypi/simple/demo/?x=1", 400, "no query string"},
	}
	for _, c := range cases {
		rep := e.Do("GET", c.path, routetest.Bearer(tok), "")
		if rep.Status != c.status || !strings.Contains(rep.Body, c.want) || !strings.HasPrefix(rep.Body, "cproxy: ") {
			t.Errorf("%s: %d %q, want %d %q", c.path, rep.Status, rep.Body, c.status, c.want)
		}
	}
	if rep := e.Do("POST", "/pypi/simple/demo/", routetest.Bearer(tok), "x"); rep.Status != 400 || !strings.Contains(rep.Body, "GET only") {
		t.Errorf("POST: %d %s", rep.Status, rep.Body)
	}
	if rep := e.Do("GET", "/pypi/simple/demo/", nil, ""); rep.Status != 401 {
		t.Errorf("no token: %d %s", rep.Status, rep.Body)
	}
	if n := len(idx.Requests()); n != before {
		t.Errorf("the index heard of %d refused requests: %+v", n-before, idx.Requests()[before:])
	}
}

// A min_release_age reads a file's upload time from its project's page
// before serving it: an old file is served, one whose page gives no upload
// time (an index that speaks HTML alone) is refused as too new, and a file
// the page does not list is refused whatever its name.
func TestReleaseAgeOfFiles(t *testing.T) {
	idx := newIndex(t, fakes.PyPIIndexOptions{Credential: canaryIndex})
	e := newEnv(t, idx)
	tok := e.Token("conv-1")
	rep := e.Do("GET", "/pypi/simple/demo/", routetest.With(routetest.Bearer(tok), "Accept", TypeJSON), "")
	var pg jsonPage
	json.Unmarshal([]byte(rep.Body), &pg)
	if got := e.Do("GET", pg.Files[0].URL, routetest.Bearer(tok), ""); got.Status != 200 {
		t.Fatalf("old file: %d %s", got.Status, got.Body)
	}
	// demo 1.2 is an hour old: its page hides it and its file is refused.
	var newFile string
	for _, r := range []string{"1.2"} {
		newFile = strings.Replace(pg.Files[0].URL, "demo-1.0-", "demo-"+r+"-", 1)
	}
	if got := e.Do("GET", newFile, routetest.Bearer(tok), ""); got.Status != 403 {
		t.Errorf("new file: %d %s", got.Status, got.Body)
	}
	// Not on the page at that path.
	moved := strings.Replace(pg.Files[0].URL, "/packages/", "/packages/xx/", 1)
	if got := e.Do("GET", moved, routetest.Bearer(tok), ""); got.Status != 403 || !strings.Contains(got.Body, "is not on the index's page of demo") {
		t.Errorf("moved file: %d %s", got.Status, got.Body)
	}

	html := newIndex(t, fakes.PyPIIndexOptions{Credential: canaryIndex, HTMLOnly: true})
	e = newEnv(t, html)
	tok = e.Token("conv-2")
	rep = e.Do("GET", "/pypi/simple/demo/", routetest.With(routetest.Bearer(tok), "Accept", TypeJSON), "")
	if rep.Status != 200 || !strings.Contains(rep.Body, `"files":[]`) {
		t.Errorf("an HTML index under a min_release_age shows no file: %d %s", rep.Status, rep.Body)
	}
	// Without a minimum age, the HTML index's files pass, parsed and
	// rendered again.
	tok = e.Token("ages-1")
	rep = e.Do("GET", "/pypi/simple/demo/", routetest.Bearer(tok), "")
	if rep.Status != 200 || strings.Count(rep.Body, "<a href=\"/pypi/files/demo/") != 4 {
		t.Errorf("HTML index, no minimum age: %d %s", rep.Status, rep.Body)
	}
	json.Unmarshal([]byte(e.Do("GET", "/pypi/simple/demo/", routetest.With(routetest.Bearer(tok), "Accept", TypeJSON), "").Body), &pg)
	if len(pg.Files) != 4 {
		t.Fatalf("JSON from an HTML index: %+v", pg)
	}
	if got := e.Do("GET", pg.Files[0].URL, routetest.Bearer(tok), ""); got.Status != 200 {
		t.Errorf("file from an HTML index: %d %s", got.Status, got.Body)
	}
}

// An index that refuses cproxy's credential is the operator's problem: a
// 502 naming the key, not a 401 pip would blame on its token.
func TestIndexRefusesCredential(t *testing.T) {
	idx := newIndex(t, fakes.PyPIIndexOptions{Credential: "someone:else"})
	e := newEnv(t, idx)
	rep := e.Do("GET", "/pypi/simple/demo/", routetest.Bearer(e.Token("conv-1")), "")
	if rep.Status != 502 || !strings.Contains(rep.Body, "upstream.pypi.credential") {
		t.Errorf("%d %s", rep.Status, rep.Body)
	}
}

// Under a min_release_age, the page a sandbox was just served tells the
// upload time of the files it asks for next: the index is asked for the
// page once, not once more per file. A file asked for with no page read
// lately costs one page read, which then answers for its siblings too.
func TestUploadTimesFromThePageServed(t *testing.T) {
	idx := newIndex(t, fakes.PyPIIndexOptions{Credential: canaryIndex})
	e := newEnv(t, idx)
	tok := e.Token("conv-1")
	rep := e.Do("GET", "/pypi/simple/demo/", routetest.With(routetest.Bearer(tok), "Accept", TypeJSON), "")
	var pg jsonPage
	json.Unmarshal([]byte(rep.Body), &pg)
	for _, f := range pg.Files {
		if got := e.Do("GET", f.URL, routetest.Bearer(tok), ""); got.Status != 200 {
			t.Fatalf("%s: %d %s", f.URL, got.Status, got.Body)
		}
	}
	pages := 0
	for _, r := range idx.Requests() {
		if r.Host == "index" {
			pages++
		}
	}
	if pages != 1 || len(pg.Files) != 2 {
		t.Errorf("the index was asked for %d pages for a page and its %d files, want 1", pages, len(pg.Files))
	}
}
