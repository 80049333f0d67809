package fakes

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// PyPIIndexOptions configure a fake PyPI index.
type PyPIIndexOptions struct {
	// Credential, if set, is the only Basic USER:PASSWORD the index pages
	// accept; a request with another credential gets a 401, and so does one
	// with none unless Anonymous is set. The files host asks for none, as
	// files.pythonhosted.org does.
	Credential string
	// Anonymous lets requests without a credential through, as PyPI
	// does.
	Anonymous bool
	// HTMLOnly makes the index serve PEP 503 HTML alone, as an older
	// private index does: no JSON form, so no upload times.
	HTMLOnly bool
}

// PyPIRequest is one request the index or its files host received.
type PyPIRequest struct {
	Host   string // "index" or "files"
	Path   string // as sent, still percent-encoded
	Accept string
	// Authorization is the request's Authorization header.
	Authorization string
}

// PyPIIndex is a PyPI simple repository (PEP 503 and PEP 691, with PEP 658
// metadata files and PEP 700 upload times) on loopback, serving real
// distribution files built for the projects it is given: wheels that pip
// installs as they are, and sdists with a setup.py that it builds. Its
// files are on a second server, as PyPI's are on files.pythonhosted.org.
type PyPIIndex struct {
	// URL is the index's simple API ("http://127.0.0.1:PORT/simple/");
	// FilesURL the files host ("http://127.0.0.1:PORT/").
	URL, FilesURL string

	opts         PyPIIndexOptions
	index, files *httptest.Server

	mu       sync.Mutex
	projects map[string][]*pypiFile // by normalised name
	blobs    map[string][]byte      // by path on the files host
	reqs     []PyPIRequest
}

// pypiFile is one distribution file of a project.
type pypiFile struct {
	name, version, path string
	sha256, metaSHA256  string // the file's, and its .metadata's for a wheel
	requiresPython      string
	yanked              string // "": not yanked; "true" for a yank with no reason
	uploaded            time.Time
}

var pypiSeparators = regexp.MustCompile(`[-_.]+`)

// normalizePyPI is a project name's PEP 503 normal form.
func normalizePyPI(name string) string {
	return pypiSeparators.ReplaceAllString(strings.ToLower(name), "-")
}

// NewPyPIIndex starts an index with no project.
func NewPyPIIndex(opts PyPIIndexOptions) *PyPIIndex {
	p := &PyPIIndex{opts: opts, projects: map[string][]*pypiFile{}, blobs: map[string][]byte{}}
	p.index = httptest.NewServer(http.HandlerFunc(p.serveIndex))
	p.files = httptest.NewServer(http.HandlerFunc(p.serveFile))
	p.URL, p.FilesURL = p.index.URL+"/simple/", p.files.URL+"/"
	return p
}

// Close stops both servers.
func (p *PyPIIndex) Close() {
	p.index.Close()
	p.files.Close()
}

// Requests returns the requests received so far.
func (p *PyPIIndex) Requests() []PyPIRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PyPIRequest(nil), p.reqs...)
}

func (p *PyPIIndex) record(host string, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, PyPIRequest{Host: host, Path: r.URL.EscapedPath(), Accept: r.Header.Get("Accept"), Authorization: r.Header.Get("Authorization")})
}

// AddWheel publishes a pure-Python wheel of project at version, uploaded
// at uploaded (zero: the index gives no upload time), requiring the
// requirements given (PEP 508 strings, "other>=1.0"). Its module,
// import name the project's with "_" for "-", holds __version__.
func (p *PyPIIndex) AddWheel(project, version string, uploaded time.Time, requires ...string) error {
	dist := strings.ReplaceAll(normalizePyPI(project), "-", "_")
	metadata := pypiMetadata(project, version, requires)
	files := []struct{ name, body string }{
		{dist + "/__init__.py", fmt.Sprintf("__version__ = %q\n", version)},
		{dist + "-" + version + ".dist-info/METADATA", metadata},
		{dist + "-" + version + ".dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: cproxy-fakes\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			return err
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	recordName := dist + "-" + version + ".dist-info/RECORD"
	fmt.Fprintf(&record, "%s,,\n", recordName)
	w, err := zw.Create(recordName)
	if err != nil {
		return err
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		return err
	}
	name := dist + "-" + version + "-py3-none-any.whl"
	f := p.add(project, version, name, buf.Bytes(), uploaded)
	msum := sha256.Sum256([]byte(metadata))
	f.metaSHA256 = hex.EncodeToString(msum[:])
	p.mu.Lock()
	p.blobs[f.path+".metadata"] = []byte(metadata)
	p.mu.Unlock()
	return nil
}

// AddSdist publishes a source distribution of project at version, with a
// setup.py that setuptools builds (pip builds it during resolution).
func (p *PyPIIndex) AddSdist(project, version string, uploaded time.Time, requires ...string) error {
	dist := strings.ReplaceAll(normalizePyPI(project), "-", "_")
	root := dist + "-" + version
	var reqs []string
	for _, r := range requires {
		reqs = append(reqs, fmt.Sprintf("%q", r))
	}
	files := []struct{ name, body string }{
		{root + "/PKG-INFO", pypiMetadata(project, version, requires)},
		{root + "/setup.py", fmt.Sprintf("from setuptools import setup\nsetup(name=%q, version=%q, packages=[%q], install_requires=[%s])\n", project, version, dist, strings.Join(reqs, ", "))},
		{root + "/" + dist + "/__init__.py", fmt.Sprintf("__version__ = %q\n", version)},
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(1600000000, 0)}); err != nil {
			return err
		}
		tw.Write([]byte(f.body))
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	p.add(project, version, root+".tar.gz", buf.Bytes(), uploaded)
	return nil
}

// pypiMetadata is a distribution's core metadata (METADATA, PKG-INFO).
func pypiMetadata(project, version string, requires []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Metadata-Version: 2.1\nName: %s\nVersion: %s\n", project, version)
	for _, r := range requires {
		fmt.Fprintf(&b, "Requires-Dist: %s\n", r)
	}
	return b.String()
}

// add stores a file's bytes on the files host, under a path named by its
// hash as PyPI's are.
func (p *PyPIIndex) add(project, version, name string, body []byte, uploaded time.Time) *pypiFile {
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	f := &pypiFile{name: name, version: version, path: "/packages/" + h[:2] + "/" + h[2:4] + "/" + h[4:16] + "/" + name, sha256: h, uploaded: uploaded}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := normalizePyPI(project)
	p.projects[n] = append(p.projects[n], f)
	p.blobs[f.path] = body
	return f
}

// Yank marks every file of project at version yanked, with reason (""
// for none).
func (p *PyPIIndex) Yank(project, version, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if reason == "" {
		reason = "true"
	}
	for _, f := range p.projects[normalizePyPI(project)] {
		if f.version == version {
			f.yanked = reason
		}
	}
}

// SetRequiresPython sets the Requires-Python of every file of project.
func (p *PyPIIndex) SetRequiresPython(project, spec string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.projects[normalizePyPI(project)] {
		f.requiresPython = spec
	}
}

// FileSHA256 is the sha256 of project's file named name, for a lock file
// made outside the sandbox ("" if there is none).
func (p *PyPIIndex) FileSHA256(project, name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.projects[normalizePyPI(project)] {
		if f.name == name {
			return f.sha256
		}
	}
	return ""
}

func (p *PyPIIndex) serveIndex(w http.ResponseWriter, r *http.Request) {
	p.record("index", r)
	if p.opts.Credential != "" && (r.Header.Get("Authorization") != "" || !p.opts.Anonymous) {
		user, pass, ok := r.BasicAuth()
		if !ok || user+":"+pass != p.opts.Credential {
			w.Header().Set("WWW-Authenticate", `Basic realm="fake pypi"`)
			http.Error(w, "401 Unauthorized", http.StatusUnauthorized)
			return
		}
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/simple/")
	if !ok || !strings.HasSuffix(name, "/") || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	name = strings.TrimSuffix(name, "/")
	if n := normalizePyPI(name); n != name {
		// PyPI sends other spellings to the normal one.
		http.Redirect(w, r, "/simple/"+n+"/", http.StatusMovedPermanently)
		return
	}
	p.mu.Lock()
	files := append([]*pypiFile(nil), p.projects[name]...)
	p.mu.Unlock()
	if len(files) == 0 {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "max-age=600, public")
	w.Header().Set("ETag", `"fake-`+name+`"`)
	if !p.opts.HTMLOnly && strings.Contains(r.Header.Get("Accept"), "application/vnd.pypi.simple.v1+json") {
		w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
		w.Write(p.jsonPage(name, files))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(p.htmlPage(name, files))
}

func (p *PyPIIndex) jsonPage(name string, files []*pypiFile) []byte {
	type file struct {
		Filename       string            `json:"filename"`
		URL            string            `json:"url"`
		Hashes         map[string]string `json:"hashes"`
		RequiresPython string            `json:"requires-python,omitempty"`
		CoreMetadata   any               `json:"core-metadata,omitempty"`
		DistInfo       any               `json:"data-dist-info-metadata,omitempty"`
		Yanked         any               `json:"yanked"`
		Size           int               `json:"size"`
		UploadTime     string            `json:"upload-time,omitempty"`
	}
	var out []file
	seen, versions := map[string]bool{}, []string{}
	for _, f := range files {
		jf := file{Filename: f.name, URL: p.FilesURL + strings.TrimPrefix(f.path, "/"), Hashes: map[string]string{"sha256": f.sha256},
			RequiresPython: f.requiresPython, Yanked: false, Size: len(p.blobs[f.path])}
		if f.metaSHA256 != "" {
			jf.CoreMetadata = map[string]string{"sha256": f.metaSHA256}
			jf.DistInfo = jf.CoreMetadata
		}
		switch f.yanked {
		case "":
		case "true":
			jf.Yanked = true
		default:
			jf.Yanked = f.yanked
		}
		if !f.uploaded.IsZero() {
			jf.UploadTime = f.uploaded.UTC().Format("2006-01-02T15:04:05.000000Z")
		}
		out = append(out, jf)
		if !seen[f.version] {
			seen[f.version] = true
			versions = append(versions, f.version)
		}
	}
	sort.Strings(versions)
	b, _ := json.Marshal(map[string]any{"meta": map[string]string{"api-version": "1.1", "_last-serial": "1"}, "name": name, "versions": versions, "files": out})
	return b
}

func (p *PyPIIndex) htmlPage(name string, files []*pypiFile) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.0\">\n    <title>Links for %s</title>\n  </head>\n  <body>\n    <h1>Links for %s</h1>\n", name, name)
	for _, f := range files {
		fmt.Fprintf(&b, `    <a href="%s#sha256=%s"`, html.EscapeString(p.FilesURL+strings.TrimPrefix(f.path, "/")), f.sha256)
		if f.requiresPython != "" {
			fmt.Fprintf(&b, ` data-requires-python="%s"`, html.EscapeString(f.requiresPython))
		}
		if f.metaSHA256 != "" {
			fmt.Fprintf(&b, ` data-dist-info-metadata="sha256=%s" data-core-metadata="sha256=%s"`, f.metaSHA256, f.metaSHA256)
		}
		switch f.yanked {
		case "":
		case "true":
			b.WriteString(` data-yanked=""`)
		default:
			fmt.Fprintf(&b, ` data-yanked="%s"`, html.EscapeString(f.yanked))
		}
		fmt.Fprintf(&b, ">%s</a><br />\n", html.EscapeString(f.name))
	}
	b.WriteString("  </body>\n</html>\n")
	return []byte(b.String())
}

func (p *PyPIIndex) serveFile(w http.ResponseWriter, r *http.Request) {
	p.record("files", r)
	p.mu.Lock()
	body, ok := p.blobs[r.URL.Path]
	p.mu.Unlock()
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(body)
}
