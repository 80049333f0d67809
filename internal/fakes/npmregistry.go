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
	"io"
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
	Body   []byte // as received (still compressed), for POST
}

// NPMRegistry is an npm registry on loopback serving real packuments and
// real tarballs (package/package.json and package/index.js) for the
// packages it is given.
type NPMRegistry struct {
	URL  string
	opts NPMRegistryOptions
	srv  *httptest.Server

	mu         sync.Mutex
	pkgs       map[string]*npmPackage
	advisories map[string][]NPMAdvisory
	reqs       []NPMRequest
	hostile    npmHostile
}

// npmHostile is how the registry answers when told to act as a compromised
// mirror or a hostile private registry would; the zero value is honest.
type npmHostile struct {
	status     int               // of packuments and tarballs; 0: 200
	ignoreCase bool              // names are looked up in any case
	redirects  map[string]string // path as sent -> "STATUS LOCATION"
}

// NPMAdvisory is a vulnerability the registry's audit endpoint reports, in
// the shape of registry.npmjs.org's bulk advisory answer.
type NPMAdvisory struct {
	ID                 int      `json:"id"`
	URL                string   `json:"url"`
	Title              string   `json:"title"`
	Severity           string   `json:"severity"` // low, moderate, high, critical
	VulnerableVersions string   `json:"vulnerable_versions"`
	CWE                []string `json:"cwe"`
	CVSS               struct {
		Score        float64 `json:"score"`
		VectorString *string `json:"vectorString"`
	} `json:"cvss"`
}

type npmPackage struct {
	versions map[string]*npmVersion
	latest   string
	// elsewhere are versions left out of versions and offered under
	// another top-level member instead (policyRestrictions,
	// stagedVersions), by version.
	elsewhere map[string]string
}

type npmVersion struct {
	// deps are the version's dependencies by member (dependencies,
	// optionalDependencies, peerDependencies): name -> spec.
	deps      map[string]map[string]string
	tarball   []byte
	shasum    string
	integrity string
	url       string    // the dist.tarball URL; "" means the registry's own
	published time.Time // time[version]; zero means 2020-01-01
	noTime    bool      // leave the version out of time
	// earlier, when set, is a first time[version] before the real one: the
	// key given twice.
	earlier time.Time
}

// NewNPMRegistry starts a fake registry.
func NewNPMRegistry(o NPMRegistryOptions) *NPMRegistry {
	g := &NPMRegistry{opts: o, pkgs: map[string]*npmPackage{}, advisories: map[string][]NPMAdvisory{}}
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

// AddAdvisory makes the audit endpoint report a vulnerability of name in
// the versions the semver range vulnerable covers.
func (g *NPMRegistry) AddAdvisory(name, vulnerable, severity, title string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	id := 1000 + len(g.advisories)
	a := NPMAdvisory{ID: id, URL: fmt.Sprintf("https://github.com/advisories/GHSA-fake-%d", id), Title: title, Severity: severity, VulnerableVersions: vulnerable, CWE: []string{"CWE-1333"}}
	a.CVSS.Score = 7.5
	g.advisories[name] = append(g.advisories[name], a)
}

// SetDependencies makes name@version depend on deps (name -> semver
// range), in its packument and in its tarball's package.json.
func (g *NPMRegistry) SetDependencies(name, version string, deps map[string]string) error {
	return g.SetDependencyMember(name, version, "dependencies", deps)
}

// SetDependencyMember sets the member (dependencies, optionalDependencies,
// peerDependencies, …) of name@version to deps (name -> spec, any spec: a
// range, a URL, git), in its packument and in its tarball's package.json.
func (g *NPMRegistry) SetDependencyMember(name, version, member string, deps map[string]string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pkgs[name]
	if p == nil || p.versions[version] == nil {
		return fmt.Errorf("no package %s@%s", name, version)
	}
	pv := p.versions[version]
	if pv.deps == nil {
		pv.deps = map[string]map[string]string{}
	}
	pv.deps[member] = deps
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

// SetStatus makes the registry answer every packument and tarball it has
// with code instead of 200 (a hostile registry: 203 or 299 are successes to
// npm); 0 is 200 again.
func (g *NPMRegistry) SetStatus(code int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hostile.status = code
}

// OfferElsewhere takes versions of name out of the packument's versions and
// offers them under the top-level member instead (policyRestrictions or
// stagedVersions, which npm-pick-manifest picks from), each with a dist-tag
// "hostile-VERSION", a tarball on the registry, and a manifest version with
// "+hostile" appended (npm refuses a policyRestrictions entry only when the
// version it picked is a key there).
func (g *NPMRegistry) OfferElsewhere(name, member string, versions ...string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pkgs[name]
	if p == nil {
		return fmt.Errorf("no package %s", name)
	}
	for _, v := range versions {
		if p.versions[v] == nil {
			return fmt.Errorf("no package %s@%s", name, v)
		}
		if p.elsewhere == nil {
			p.elsewhere = map[string]string{}
		}
		p.elsewhere[v] = member
	}
	return nil
}

// SetEarlierTime gives name@version a first time entry at t, before its
// real one: time names the version twice.
func (g *NPMRegistry) SetEarlierTime(name, version string, t time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pkgs[name]
	if p == nil || p.versions[version] == nil {
		return fmt.Errorf("no package %s@%s", name, version)
	}
	p.versions[version].earlier = t
	return nil
}

// SetIgnoreCase makes the registry look package names up in any case, so
// that /Evstream serves evstream.
func (g *NPMRegistry) SetIgnoreCase(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hostile.ignoreCase = on
}

// SetRedirect makes the registry answer a request for path (as sent, still
// percent-encoded) with a redirect: code and a Location of location.
func (g *NPMRegistry) SetRedirect(path string, code int, location string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hostile.redirects == nil {
		g.hostile.redirects = map[string]string{}
	}
	g.hostile.redirects[path] = fmt.Sprintf("%d %s", code, location)
}

// lookup is the package a request names, in any case when the registry
// ignores case; "" and nil when there is none.
func (g *NPMRegistry) lookup(name string) (string, *npmPackage) {
	if p := g.pkgs[name]; p != nil {
		return name, p
	}
	if g.hostile.ignoreCase {
		for n, p := range g.pkgs {
			if strings.EqualFold(n, name) {
				return n, p
			}
		}
	}
	return "", nil
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

func npmTarball(name, version string, deps map[string]map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	manifest := map[string]any{"name": name, "version": version, "main": "index.js"}
	for member, d := range deps {
		if len(d) > 0 {
			manifest[member] = d
		}
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
	var body []byte
	if r.Method == http.MethodPost {
		body, _ = io.ReadAll(io.LimitReader(r.Body, 64<<20))
	}
	g.mu.Lock()
	g.reqs = append(g.reqs, NPMRequest{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: body})
	g.mu.Unlock()
	if g.opts.Token != "" && r.Header.Get("Authorization") != "Bearer "+g.opts.Token {
		npmFakeError(w, http.StatusUnauthorized, "authentication required")
		return
	}
	g.mu.Lock()
	redirect, status := g.hostile.redirects[r.URL.EscapedPath()], g.hostile.status
	g.mu.Unlock()
	if code, loc, ok := strings.Cut(redirect, " "); ok {
		w.Header().Set("Location", loc)
		w.WriteHeader(map[string]int{"301": 301, "302": 302, "303": 303, "307": 307, "308": 308}[code])
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/-/npm/v1/security/advisories/bulk":
		g.audit(w, r, body)
		return
	case r.Method == http.MethodGet && r.URL.Path == "/-/v1/search":
		g.search(w, r)
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
		_, p := g.lookup(name)
		base := name[strings.LastIndexByte(name, '/')+1:]
		prefix := len(file) > len(base) && file[len(base)] == '-' &&
			(file[:len(base)] == base || g.hostile.ignoreCase && strings.EqualFold(file[:len(base)], base))
		if p != nil && prefix && strings.HasSuffix(file, ".tgz") {
			if v := p.versions[strings.TrimSuffix(file[len(base)+1:], ".tgz")]; v != nil {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Content-Length", fmt.Sprint(len(v.tarball)))
				w.WriteHeader(status)
				w.Write(v.tarball)
				return
			}
		}
		npmFakeError(w, http.StatusNotFound, "Not found")
		return
	}
	name, p := g.lookup(path)
	if p == nil {
		npmFakeError(w, http.StatusNotFound, "Not found")
		return
	}
	abbreviated := strings.Contains(r.Header.Get("Accept"), "application/vnd.npm.install-v1+json")
	body = g.packument(name, p, abbreviated)
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
	w.WriteHeader(status)
	w.Write(body)
}

func (g *NPMRegistry) packument(name string, p *npmPackage, abbreviated bool) []byte {
	base := name[strings.LastIndexByte(name, '/')+1:]
	versions := map[string]any{}
	elsewhere := map[string]map[string]any{} // member -> version -> manifest
	distTags := map[string]string{"latest": p.latest}
	times := map[string]string{"created": "2020-01-01T00:00:00.000Z", "modified": "2020-01-02T00:00:00.000Z"}
	var earlier []string // "VERSION":"TIME", a key time gives twice
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
		for member, d := range pv.deps {
			if len(d) > 0 {
				doc[member] = d
			}
		}
		if !abbreviated {
			doc["main"] = "index.js"
			doc["description"] = "a <fake> package & more"
		}
		if member := p.elsewhere[v]; member != "" {
			doc["version"] = v + "+hostile"
			if elsewhere[member] == nil {
				elsewhere[member] = map[string]any{}
			}
			elsewhere[member][v] = doc
			distTags["hostile-"+v] = v
		} else {
			versions[v] = doc
		}
		if !pv.earlier.IsZero() {
			earlier = append(earlier, fmt.Sprintf("%q:%q,", v, pv.earlier.UTC().Format("2006-01-02T15:04:05.000Z")))
		}
		switch {
		case pv.noTime:
		case !pv.published.IsZero():
			times[v] = pv.published.UTC().Format("2006-01-02T15:04:05.000Z")
		default:
			times[v] = "2020-01-01T00:00:00.000Z"
		}
	}
	doc := map[string]any{"name": name, "dist-tags": distTags, "versions": versions}
	for member, vs := range elsewhere {
		doc[member] = map[string]any{"message": "offered by a hostile registry", "versions": vs}
	}
	if abbreviated {
		doc["modified"] = times["modified"]
	} else {
		doc["_id"] = name
		t, _ := json.Marshal(times)
		// The earlier entries come first, so a reader keeping the first
		// sees them and one keeping the last (encoding/json, JSON.parse)
		// does not.
		doc["time"] = json.RawMessage("{" + strings.Join(earlier, "") + string(t[1:]))
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return b
}

// audit answers the bulk advisory endpoint as registry.npmjs.org does: the
// body is {name: [versions]} (gzip when Content-Encoding says so); the
// answer lists, per package named, every advisory the registry knows for it.
func (g *NPMRegistry) audit(w http.ResponseWriter, r *http.Request, body []byte) {
	var in io.Reader = bytes.NewReader(body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(in)
		if err != nil {
			npmFakeError(w, http.StatusBadRequest, "invalid gzip")
			return
		}
		in = zr
	}
	var req map[string][]string
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		npmFakeError(w, http.StatusBadRequest, "invalid JSON")
		return
	}
	out := map[string][]NPMAdvisory{}
	g.mu.Lock()
	for name := range req {
		if as := g.advisories[name]; len(as) > 0 {
			out[name] = as
		}
	}
	g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// search answers /-/v1/search: every package whose name contains text.
func (g *NPMRegistry) search(w http.ResponseWriter, r *http.Request) {
	text := r.URL.Query().Get("text")
	type pkg struct {
		Name        string              `json:"name"`
		Version     string              `json:"version"`
		Description string              `json:"description"`
		Date        string              `json:"date"`
		Links       map[string]string   `json:"links"`
		Publisher   map[string]string   `json:"publisher"`
		Maintainers []map[string]string `json:"maintainers"`
		Keywords    []string            `json:"keywords"`
		Scope       string              `json:"scope"`
	}
	type object struct {
		Package     pkg            `json:"package"`
		Score       map[string]any `json:"score"`
		SearchScore float64        `json:"searchScore"`
	}
	res := struct {
		Objects []object `json:"objects"`
		Total   int      `json:"total"`
		Time    string   `json:"time"`
	}{Objects: []object{}, Time: "Mon Nov 30 2026 06:00:00 GMT+0000 (Coordinated Universal Time)"}
	g.mu.Lock()
	var names []string
	for name := range g.pkgs {
		if strings.Contains(name, text) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		res.Objects = append(res.Objects, object{
			Package: pkg{Name: name, Version: g.pkgs[name].latest, Description: "a fake package", Date: "2020-01-01T00:00:00.000Z",
				Links: map[string]string{"npm": "https://www.npmjs.com/package/" + name}, Publisher: map[string]string{"username": "fake", "email": "fake@example.com"},
				Maintainers: []map[string]string{{"username": "fake", "email": "fake@example.com"}}, Keywords: []string{"fake"}, Scope: "unscoped"},
			Score:       map[string]any{"final": 0.5, "detail": map[string]float64{"quality": 0.5, "popularity": 0.5, "maintenance": 0.5}},
			SearchScore: 1,
		})
	}
	g.mu.Unlock()
	res.Total = len(res.Objects)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

func npmFakeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Write(b)
}
