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
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestNPMRegistry(t *testing.T) {
	reg := NewNPMRegistry(NPMRegistryOptions{Token: "tok", Gzip: true})
	defer reg.Close()
	if err := reg.AddPackage("@acme/util", "1.0.0", "1.1.0"); err != nil {
		t.Fatal(err)
	}
	get := func(path string, h ...string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", reg.URL+path, nil)
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	if resp, _ := get("/@acme%2futil"); resp.StatusCode != 401 {
		t.Errorf("no token: %d", resp.StatusCode)
	}
	resp, body := get("/@acme%2futil", "Authorization", "Bearer tok", "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("not gzipped: %v", resp.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(zr)
	var doc struct {
		DistTags map[string]string `json:"dist-tags"`
		Versions map[string]struct {
			Dist struct{ Tarball, Shasum, Integrity string }
		}
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.DistTags["latest"] != "1.1.0" || len(doc.Versions) != 2 {
		t.Fatalf("packument: %s", body)
	}
	d := doc.Versions["1.1.0"].Dist
	if d.Tarball != reg.URL+"/@acme/util/-/util-1.1.0.tgz" {
		t.Errorf("tarball URL %q", d.Tarball)
	}
	resp, tgz := get(strings.TrimPrefix(d.Tarball, reg.URL), "Authorization", "Bearer tok")
	if resp.StatusCode != 200 {
		t.Fatalf("tarball: %d", resp.StatusCode)
	}
	s1, s512 := sha1.Sum(tgz), sha512.Sum512(tgz)
	if d.Shasum != hex.EncodeToString(s1[:]) || d.Integrity != "sha512-"+base64.StdEncoding.EncodeToString(s512[:]) {
		t.Errorf("shasum/integrity do not match the tarball")
	}
	zr, _ = gzip.NewReader(bytes.NewReader(tgz))
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "package/package.json,package/index.js" {
		t.Errorf("tarball holds %v", names)
	}
	resp, body = get("/@acme/util", "Authorization", "Bearer tok", "Accept", "application/vnd.npm.install-v1+json")
	if ct := resp.Header.Get("Content-Type"); ct != "application/vnd.npm.install-v1+json" || !strings.Contains(string(body), `"modified"`) || strings.Contains(string(body), `"time"`) {
		t.Errorf("abbreviated: %s %s", ct, body)
	}
	if n := len(reg.Requests()); n != 4 {
		t.Errorf("%d requests recorded", n)
	}
}
