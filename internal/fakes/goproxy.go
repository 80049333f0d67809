package fakes

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/sumdb/note"
	modzip "golang.org/x/mod/zip"
)

// GoProxyOptions configure a fake module proxy.
type GoProxyOptions struct {
	// Token, if set, is the only Bearer token the proxy accepts; every
	// request without it gets a 401, unless Anonymous.
	Token string
	// Anonymous serves requests with no Authorization too, as
	// proxy.golang.org does; one with another credential still gets a 401.
	Anonymous bool
	// SumDB is the name of the checksum database it proxies under
	// /sumdb/NAME/; empty: "sum.golang.org", as proxy.golang.org's.
	SumDB string
	// TLS also serves the same proxy over HTTPS, at TLSURL, for a client
	// compared with one that reaches it through cproxy's TLS listener.
	TLS bool
}

// GoProxy is a module proxy on loopback (the GOPROXY protocol, as
// proxy.golang.org serves it) with real module zips, built with
// golang.org/x/mod/zip, and a real checksum database over them
// (golang.org/x/mod/sumdb, signed with a key of its own, VerifierKey), so
// that the real go command can download, verify and build with them.
type GoProxy struct {
	URL string
	// TLSURL is the same proxy over HTTPS, with GoProxyOptions.TLS; its
	// certificate, for the client to trust, is CertPEM. Empty without.
	TLSURL  string
	CertPEM []byte
	// VerifierKey is the checksum database's public key: go trusts it with
	// GOSUMDB=VerifierKey (NAME+HASH+KEY), and then reads the database
	// through its GOPROXY, which asks NAME/supported first.
	VerifierKey string
	opts        GoProxyOptions
	srv, tls    *httptest.Server
	dir         string

	mu      sync.Mutex
	modules map[string]map[string]*goVersion // path -> version -> files
	reqs    []string
}

type goVersion struct {
	info, mod, zip []byte
	zipHash        string
	modHash        string
}

// NewGoProxy starts a module proxy with no modules.
func NewGoProxy(opts GoProxyOptions) (*GoProxy, error) {
	if opts.SumDB == "" {
		opts.SumDB = "sum.golang.org"
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, opts.SumDB)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fake-goproxy-")
	if err != nil {
		return nil, err
	}
	p := &GoProxy{VerifierKey: vkey, opts: opts, dir: dir, modules: map[string]map[string]*goVersion{}}
	db := sumdb.NewServer(sumdb.NewTestServer(skey, p.gosum))
	mux := http.NewServeMux()
	base := "/sumdb/" + opts.SumDB
	mux.HandleFunc(base+"/supported", func(w http.ResponseWriter, r *http.Request) {})
	mux.Handle(base+"/", http.StripPrefix(base, db))
	mux.HandleFunc("/", p.serveModule)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + r.URL.EscapedPath()
		switch a := r.Header.Get("Authorization"); {
		case a == "":
			line += " auth=none"
		case opts.Token != "" && a == "Bearer "+opts.Token:
			line += " auth=real"
		default:
			line += " auth=other"
		}
		p.mu.Lock()
		p.reqs = append(p.reqs, line)
		p.mu.Unlock()
		if a := r.Header.Get("Authorization"); opts.Token != "" && a != "Bearer "+opts.Token && !(opts.Anonymous && a == "") {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		mux.ServeHTTP(w, r)
	})
	p.srv = httptest.NewServer(handler)
	p.URL = p.srv.URL
	if opts.TLS {
		// HTTP/2 as proxy.golang.org and cproxy's TLS listener speak it.
		p.tls = httptest.NewUnstartedServer(handler)
		p.tls.EnableHTTP2 = true
		p.tls.StartTLS()
		p.TLSURL = p.tls.URL
		p.CertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.tls.Certificate().Raw})
	}
	return p, nil
}

// Close stops the proxy and removes its files.
func (p *GoProxy) Close() {
	p.srv.Close()
	if p.tls != nil {
		p.tls.Close()
	}
	os.RemoveAll(p.dir)
}

// Requests are the requests the proxy received, "GET /PATH auth=A" with
// the path as sent and A real (its Token), other or none.
func (p *GoProxy) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.reqs...)
}

// AddModule adds version of the module path, released at t (its .info
// Time; zero leaves Time out), with files (name to content) beside a
// go.mod of "module PATH" unless files has one.
func (p *GoProxy) AddModule(path, version string, t time.Time, files map[string]string) error {
	if err := module.Check(path, version); err != nil {
		return err
	}
	src := filepath.Join(p.dir, "src", path+"@"+version)
	if _, ok := files["go.mod"]; !ok {
		files["go.mod"] = "module " + path + "\n\ngo 1.21\n"
	}
	for name, content := range files {
		f := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			return err
		}
	}
	zipFile := filepath.Join(p.dir, "zip", path+"@"+version+".zip")
	if err := os.MkdirAll(filepath.Dir(zipFile), 0o755); err != nil {
		return err
	}
	var zb bytes.Buffer
	if err := modzip.CreateFromDir(&zb, module.Version{Path: path, Version: version}, src); err != nil {
		return err
	}
	if err := os.WriteFile(zipFile, zb.Bytes(), 0o644); err != nil {
		return err
	}
	zh, err := dirhash.HashZip(zipFile, dirhash.Hash1)
	if err != nil {
		return err
	}
	mod := []byte(files["go.mod"])
	mh, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(mod)), nil })
	if err != nil {
		return err
	}
	info := map[string]any{"Version": version}
	if !t.IsZero() {
		info["Time"] = t.UTC().Format(time.RFC3339)
	}
	ib, _ := json.Marshal(info)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.modules[path] == nil {
		p.modules[path] = map[string]*goVersion{}
	}
	p.modules[path][version] = &goVersion{info: ib, mod: mod, zip: zb.Bytes(), zipHash: zh, modHash: mh}
	return nil
}

// gosum is the checksum database's record of path@vers: the go.sum lines
// of its zip and its go.mod.
func (p *GoProxy) gosum(path, vers string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.modules[path][vers]
	if v == nil {
		return nil, fmt.Errorf("module %s@%s not found", path, vers)
	}
	return fmt.Appendf(nil, "%s %s %s\n%s %s/go.mod %s\n", path, vers, v.zipHash, path, vers, v.modHash), nil
}

// serveModule answers the GOPROXY protocol's requests, and 404 "not
// found: …" in plain text, as proxy.golang.org does, for the rest.
func (p *GoProxy) serveModule(w http.ResponseWriter, r *http.Request) {
	notFound := func(format string, args ...any) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, "not found: "+format+"\n", args...)
	}
	escMod, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/@")
	path, err := module.UnescapePath(escMod)
	if !ok || err != nil {
		notFound("%s", r.URL.Path)
		return
	}
	p.mu.Lock()
	versions := p.modules[path]
	var list []string
	for v := range versions {
		list = append(list, v)
	}
	p.mu.Unlock()
	semver.Sort(list)
	switch {
	case rest == "v/list":
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		fmt.Fprint(w, strings.Join(list, "\n"))
		if len(list) > 0 {
			fmt.Fprint(w, "\n")
		}
		return
	case rest == "latest":
		if len(list) == 0 {
			notFound("module %s: no matching versions for query \"latest\"", path)
			return
		}
		latest := list[len(list)-1]
		for i := len(list) - 1; i >= 0; i-- {
			if semver.Prerelease(list[i]) == "" {
				latest = list[i]
				break
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(versions[latest].info)
		return
	case strings.HasPrefix(rest, "v/"):
		file := strings.TrimPrefix(rest, "v/")
		dot := strings.LastIndexByte(file, '.')
		if dot < 0 {
			break
		}
		vers, err := module.UnescapeVersion(file[:dot])
		v := versions[vers]
		if err != nil || v == nil {
			notFound("%s@%s: invalid version: unknown revision %s", path, file[:dot], file[:dot])
			return
		}
		switch file[dot+1:] {
		case "info":
			w.Header().Set("Content-Type", "application/json")
			w.Write(v.info)
			return
		case "mod":
			w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
			w.Write(v.mod)
			return
		case "zip":
			w.Header().Set("Content-Type", "application/zip")
			w.Write(v.zip)
			return
		}
	}
	notFound("%s", r.URL.Path)
}

// Modules lists the modules the proxy has, as path@version, sorted.
func (p *GoProxy) Modules() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for path, vs := range p.modules {
		for v := range vs {
			out = append(out, path+"@"+v)
		}
	}
	sort.Strings(out)
	return out
}
