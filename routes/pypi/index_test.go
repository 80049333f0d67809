package pypi

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
)

const upstreamPage = `{"meta":{"api-version":"1.1"},"name":"demo","versions":["1.0","2.0","3.0"],"files":[
{"filename":"demo-1.0-py3-none-any.whl","url":"https://files.example/packages/aa/demo-1.0-py3-none-any.whl","hashes":{"sha256":"ab12"},"requires-python":">=3.8","core-metadata":{"sha256":"cd34"},"yanked":false,"upload-time":"2020-01-01T00:00:00.000000Z","size":10},
{"filename":"demo-1.0.tar.gz","url":"https://files.example/packages/bb/demo-1.0.tar.gz#sha256=ef56","hashes":{"sha256":"ef56"},"yanked":"broken build","upload-time":"2020-01-01T00:00:00Z"},
{"filename":"demo-2.0-py3-none-any.whl","url":"https://files.example/packages/cc/demo-2.0-py3-none-any.whl","hashes":{},"upload-time":"2026-11-30T11:00:00Z"},
{"filename":"demo-3.0-py3-none-any.whl","url":"https://files.example/packages/dd/demo-3.0-py3-none-any.whl","hashes":{}},
{"filename":"other-1.0-py3-none-any.whl","url":"https://files.example/packages/ee/other-1.0-py3-none-any.whl","hashes":{},"upload-time":"2020-01-01T00:00:00Z"},
{"filename":"demo-1.0-py2-none-any.whl","url":"https://evil.example/packages/ff/demo-1.0-py2-none-any.whl","hashes":{},"upload-time":"2020-01-01T00:00:00Z"},
{"filename":"demo-1.0-py2.py3-none-any.whl","url":"https://files.example/packages/gg/something-else.whl","hashes":{},"upload-time":"2020-01-01T00:00:00Z"}
]}`

func TestRewriteJSON(t *testing.T) {
	base, _ := url.Parse("https://files.example/")
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// Versions a day old or more, as a min_release_age of 1d would allow.
	vis := func(v string, at time.Time) bool { return !at.IsZero() && now.Sub(at) >= 24*time.Hour }
	out, err := RewriteJSON([]byte(upstreamPage), "Demo", nil, base, vis)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Meta     json.RawMessage
		Name     string
		Versions []string
		Files    []map[string]json.RawMessage
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if string(doc.Meta) != `{"api-version":"1.1"}` || doc.Name != "demo" || strings.Join(doc.Versions, ",") != "1.0" {
		t.Errorf("page = %s", out)
	}
	if len(doc.Files) != 2 {
		t.Fatalf("kept %d files, want the two of 1.0 on the files host: %s", len(doc.Files), out)
	}
	want := []map[string]string{
		{"url": `"/pypi/files/demo/packages/aa/demo-1.0-py3-none-any.whl"`, "hashes": `{"sha256":"ab12"}`, "requires-python": `">=3.8"`, "core-metadata": `{"sha256":"cd34"}`, "yanked": "false", "size": "10"},
		{"url": `"/pypi/files/demo/packages/bb/demo-1.0.tar.gz#sha256=ef56"`, "yanked": `"broken build"`},
	}
	for i, w := range want {
		for k, v := range w {
			if got := string(doc.Files[i][k]); got != v {
				t.Errorf("file %d: %s = %s, want %s", i, k, got, v)
			}
		}
	}
}

func TestRewriteJSONRefusesWhatItCannotRead(t *testing.T) {
	base, _ := url.Parse("https://files.example/")
	all := func(string, time.Time) bool { return true }
	for _, page := range []string{`[]`, `{"files":{}}`, `{"files":[],"versions":{}}`, `not json`} {
		if _, err := RewriteJSON([]byte(page), "demo", nil, base, all); err == nil {
			t.Errorf("RewriteJSON(%s) gave no error", page)
		}
	}
	if out, err := RewriteJSON([]byte(`{"files":[{"filename":"demo-1.0.tar.gz","url":"https://files.example/demo-1.0.tar.gz","upload-time":5}]}`), "demo", nil, base, all); err != nil || !strings.Contains(string(out), `"files":[]`) {
		t.Errorf("a file with an unreadable upload-time was kept: %s %v", out, err)
	}
}

// FuzzRewriteJSON holds that whatever an index sends, every file left on
// the page is the project's, at a version vis allowed, with a URL on the
// route under the project.
func FuzzRewriteJSON(f *testing.F) {
	f.Add([]byte(upstreamPage))
	f.Add([]byte(`{"files":[{"filename":"demo-1.0.tar.gz","url":"https://files.example/demo-1.0.tar.gz#x"}]}`))
	base, _ := url.Parse("https://files.example/")
	f.Fuzz(func(t *testing.T, page []byte) {
		vis := func(v string, _ time.Time) bool { return v != "2.0" }
		out, err := RewriteJSON(page, "demo", nil, base, vis)
		if err != nil {
			return
		}
		var doc struct {
			Files []struct{ Filename, URL string }
		}
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatalf("output is not JSON: %v: %s", err, out)
		}
		for _, fl := range doc.Files {
			df, err := FileOf("demo", fl.Filename)
			if err != nil || df.Version == "2.0" || !strings.HasPrefix(fl.URL, FilesPrefix+"demo/") || strings.Contains(fl.URL, "..") {
				t.Fatalf("kept %+v (%+v, %v): %s", fl, df, err, out)
			}
		}
	})
}
