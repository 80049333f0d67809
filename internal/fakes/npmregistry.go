package fakes

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"
)

// NPMRegistryOptions configure a fake npm registry.
type NPMRegistryOptions struct {
	// Token, if set, is the only Bearer token the registry accepts; every
	// request without it gets a 401.
	Token string
	// Gzip makes the registry gzip packuments for clients that accept it.
	Gzip bool
}

// NPMRequest is one request the registry received.
type NPMRequest struct {
	Method string
	Path   string // as sent, still percent-encoded
	Header http.Header
}

// NPMRegistry is an npm registry on loopback serving real packuments and
// real tarballs (package/package.json and package/index.js) for the
// packages it is given.
type NPMRegistry struct {
	URL  string
	opts NPMRegistryOptions
	srv  *httptest.Server

	mu   sync.Mutex
	pkgs map[string]*npmPackage
	reqs []NPMRequest
}

type npmPackage struct {
	versions map[string]*npmVersion
	latest   string
}

type npmVersion struct {
	deps      map[string]string // dependencies: name -> range
	tarball   []byte
	shasum    string
	integrity string
	url       string    // the dist.tarball URL; "" means the registry's own
	published time.Time // time[version]; zero means 2020-01-01
	noTime    bool      // leave the version out of time
}

// NewNPMRegistry starts a fake registry.
func NewNPMRegistry(o NPMRegistryOptions) *NPMRegistry {
	g := &NPMRegistry{opts: o, pkgs: map[string]*npmPackage{}}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	g.URL = g.srv.URL
	return g
}

// Close stops the registry.
func (g *NPMRegistry) Close() { g.srv.Close() }

// AddPackage publishes versions of name; the last one is "latest". Each
// tarball's index.js exports "NAME@VERSION".
func (g *NPMRegistry) AddPackage(name string, versions ...string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pkgs[name]
	if p == nil {
		p = &npmPackage{versions: map[string]*npmVersion{}}
		g.pkgs[name] = p
	}
	for _, v := range versions {
		pv := &npmVersion{}
		if err := pv.pack(name, v); err != nil {
			return err
		}
		p.versions[v] = pv
		p.latest = v
	}
	return nil
}

// SetDependencies makes name@version depend on deps (name -> semver
// range), in its packument and in its tarball's package.json.
func (g *NPMRegistry) SetDependencies(name, version string, deps map[string]string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pkgs[name]
	if p == nil || p.versions[version] == nil {
		return fmt.Errorf("no package %s@%s", name, version)
	}
	pv := p.versions[version]
	pv.deps = deps
	return pv.pack(name, version)
}

// pack builds the version's tarball and its checksums.
func (pv *npmVersion) pack(name, version string) error {
	tgz, err := npmTarball(name, version, pv.deps)
	if err != nil {
		return err
	}
	sum1 := sha1.Sum(tgz)
	sum512 := sha512.Sum512(tgz)
	pv.tarball, pv.shasum, pv.integrity = tgz, hex.EncodeToString(sum1[:]), "sha512-"+base64.StdEncoding.EncodeToString(sum512[:])
	return nil
}

// SetTarballURL makes the packument point version's tarball at url
// (another host, say) instead of the registry.
func (g *NPMRegistry) SetTarballURL(name, version, url string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pkgs[name]
	if p == nil || p.versions[version] == nil {
		return fmt.Errorf("no package %s@%s", name, version)
	}
	p.versions[version].url = url
	return nil
}

// SetPublishTime sets version's publish time in the packument's time; a
// zero t leaves the version out of time altogether.
func (g *NPMRegistry) SetPublishTime(name, version string, t time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pkgs[name]
	if p == nil || p.versions[version] == nil {
		return fmt.Errorf("no package %s@%s", name, version)
	}
	p.versions[version].published, p.versions[version].noTime = t, t.IsZero()
	return nil
}

// Requests returns what the registry received, in order.
func (g *NPMRegistry) Requests() []NPMRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]NPMRequest(nil), g.reqs...)
}

// NPMTarball builds a package tarball as npm pack would: a gzipped tar
// with package/package.json and package/index.js.
func NPMTarball(name, version string) ([]byte, error) {
	return npmTarball(name, version, nil)
}

func npmTarball(name, version string, deps map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	manifest := map[string]any{"name": name, "version": version, "main": "index.js"}
	if len(deps) > 0 {
		manifest["dependencies"] = deps
	}
	pj, _ := json.MarshalIndent(manifest, "", "  ")
	files := []struct {
		name string
		body []byte
	}{
		{"package/package.json", append(pj, '\n')},
		{"package/index.js", []byte(fmt.Sprintf("module.exports = %q;\n", name+"@"+version))},
	}
	mtime := time.Date(1985, 10, 26, 8, 15, 0, 0, time.UTC)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (g *NPMRegistry) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.reqs = append(g.reqs, NPMRequest{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone()})
	g.mu.Unlock()
	if g.opts.Token != "" && r.Header.Get("Authorization") != "Bearer "+g.opts.Token {
		npmFakeError(w, http.StatusUnauthorized, "authentication required")
		return
	}
	if r.Method != http.MethodGet {
		npmFakeError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
	if path == "-/ping" {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}\n"))
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if name, file, ok := strings.Cut(path, "/-/"); ok {
		p := g.pkgs[name]
		base := name[strings.LastIndexByte(name, '/')+1:]
		if p != nil {
			if v := p.versions[strings.TrimSuffix(strings.TrimPrefix(file, base+"-"), ".tgz")]; v != nil && file == base+"-"+strings.TrimSuffix(strings.TrimPrefix(file, base+"-"), ".tgz")+".tgz" {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Content-Length", fmt.Sprint(len(v.tarball)))
				w.Write(v.tarball)
				return
			}
		}
		npmFakeError(w, http.StatusNotFound, "Not found")
		return
	}
	p := g.pkgs[path]
	if p == nil {
		npmFakeError(w, http.StatusNotFound, "Not found")
		return
	}
	abbreviated := strings.Contains(r.Header.Get("Accept"), "application/vnd.npm.install-v1+json")
	body := g.packument(path, p, abbreviated)
	ct := "application/json"
	if abbreviated {
		ct = "application/vnd.npm.install-v1+json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Etag", fmt.Sprintf(`"%x"`, sha1.Sum(body)))
	if g.opts.Gzip && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(body)
		zw.Close()
		body = buf.Bytes()
		w.Header().Set("Content-Encoding", "gzip")
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Write(body)
}

func (g *NPMRegistry) packument(name string, p *npmPackage, abbreviated bool) []byte {
	base := name[strings.LastIndexByte(name, '/')+1:]
	versions := map[string]any{}
	times := map[string]string{"created": "2020-01-01T00:00:00.000Z", "modified": "2020-01-02T00:00:00.000Z"}
	var vs []string
	for v := range p.versions {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	for _, v := range vs {
		pv := p.versions[v]
		url := pv.url
		if url == "" {
			url = g.URL + "/" + name + "/-/" + base + "-" + v + ".tgz"
		}
		doc := map[string]any{
			"name":    name,
			"version": v,
			"dist":    map[string]string{"tarball": url, "shasum": pv.shasum, "integrity": pv.integrity},
		}
		if len(pv.deps) > 0 {
			doc["dependencies"] = pv.deps
		}
		if !abbreviated {
			doc["main"] = "index.js"
			doc["description"] = "a <fake> package & more"
		}
		versions[v] = doc
		switch {
		case pv.noTime:
		case !pv.published.IsZero():
			times[v] = pv.published.UTC().Format("2006-01-02T15:04:05.000Z")
		default:
			times[v] = "2020-01-01T00:00:00.000Z"
		}
	}
	doc := map[string]any{"name": name, "dist-tags": map[string]string{"latest": p.latest}, "versions": versions}
	if abbreviated {
		doc["modified"] = times["modified"]
	} else {
		doc["_id"] = name
		doc["time"] = times
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return b
}

func npmFakeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Write(b)
}
