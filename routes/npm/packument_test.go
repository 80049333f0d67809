package npm

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
)

// rewritePackument runs the streaming rewrite over raw and returns the
// whole output.
func rewritePackument(raw []byte, base *url.URL, rw *npmRewrite) ([]byte, error) {
	return rewritePackumentFrom(bytes.NewReader(raw), base, rw)
}

func rewritePackumentFrom(r io.Reader, base *url.URL, rw *npmRewrite) ([]byte, error) {
	ps := newPackumentStream(r, base, rw)
	var out []byte
	var err error
	for b, e := range ps.chunks {
		if e != nil {
			err = e
			break
		}
		out = append(out, b...)
	}
	return out, err
}

// fakeManifest is a version manifest shaped like registry.npmjs.org's,
// about 1 KiB plus pad bytes of description.
func fakeManifest(registry, name, v string, pad int) string {
	var deps []string
	for i := range 12 {
		deps = append(deps, fmt.Sprintf(`"dep-%d":"^%d.%d.0"`, i, i, v[0]-'0'))
	}
	return fmt.Sprintf(`{"name":%q,"version":%q,"description":"%s","main":"index.js","scripts":{"test":"node test.js","build":"tsc -p ."},`+
		`"repository":{"type":"git","url":"git+https://github.com/example/%s.git"},"license":"MIT","dependencies":{%s},`+
		`"maintainers":[{"name":"someone","email":"someone@example.com"}],"_npmUser":{"name":"someone","email":"someone@example.com"},`+
		`"dist":{"integrity":"sha512-%s==","shasum":"%040x","tarball":"%s/%s/-/%s-%s.tgz","fileCount":12,"unpackedSize":48213,`+
		`"signatures":[{"keyid":"SHA256:jl3bwswu80PjjokCgh0o2w5c2U4LhQAE57gj9cz1kzA","sig":"MEUCIQD%s"}]},`+
		`"gitHead":"%040x","_id":"%s@%s","_nodeVersion":"20.11.0","_npmVersion":"10.2.4","directories":{},"_hasShrinkwrap":false}`,
		name, v, strings.Repeat("d", pad), name, strings.Join(deps, ","),
		strings.Repeat("Q", 86), len(v)*7919, registry, name, name, v, strings.Repeat("s", 90), len(v)*104729, name, v)
}

// genReader produces its bytes as it is read, piece by piece from next
// (nil: the end), never holding more than one piece.
type genReader struct {
	next func() []byte
	buf  []byte
}

func (g *genReader) Read(p []byte) (int, error) {
	for len(g.buf) == 0 {
		if g.buf = g.next(); g.buf == nil {
			return 0, io.EOF
		}
	}
	n := copy(p, g.buf)
	g.buf = g.buf[n:]
	return n, nil
}

// genPackument generates a packument of is-big with n versions (each with
// pad bytes of description) and a readme of readme bytes, with time before
// or after versions; its tarballs are on registry.
func genPackument(registry string, n, pad, readme int, timeFirst bool) (io.Reader, int64) {
	ver := func(i int) string { return fmt.Sprintf("1.%d.%d", i/100, i%100) }
	head := `{"_id":"is-big","name":"is-big","dist-tags":{"latest":"` + ver(n-1) + `","next":"` + ver(0) + `"},`
	var tm strings.Builder
	tm.WriteString(`"time":{"created":"2020-01-01T00:00:00.000Z"`)
	for i := range n {
		fmt.Fprintf(&tm, `,%q:"2020-01-02T00:00:00.000Z"`, ver(i))
	}
	tm.WriteString(`},`)
	parts := []func() []byte{}
	str := func(s string) func() []byte { return func() []byte { return []byte(s) } }
	parts = append(parts, str(head))
	if timeFirst {
		parts = append(parts, str(tm.String()))
	}
	parts = append(parts, str(`"versions":{`))
	for i := range n {
		sep := ","
		if i == n-1 {
			sep = ""
		}
		parts = append(parts, func() []byte {
			return []byte(fmt.Sprintf("%q:%s%s", ver(i), fakeManifest(registry, "is-big", ver(i), pad), sep))
		})
	}
	parts = append(parts, str(`},`))
	if !timeFirst {
		parts = append(parts, str(tm.String()))
	}
	parts = append(parts, str(`"readme":"`))
	line := []byte(strings.Repeat(`# is-big\n\nA \"big\" package. `, 2048))
	left := readme
	for range (readme + len(line) - 1) / len(line) {
		parts = append(parts, func() []byte {
			n := min(left, len(line))
			left -= n
			return line[:n]
		})
	}
	parts = append(parts, str(`","readmeFilename":"README.md"}`))
	size := int64(readme)
	for _, p := range parts[:len(parts)-1-(readme+len(line)-1)/len(line)] {
		size += int64(len(p()))
	}
	size += int64(len(parts[len(parts)-1]()))
	i := 0
	return &genReader{next: func() []byte {
		if i == len(parts) {
			return nil
		}
		i++
		return parts[i-1]()
	}}, size
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// TestPackumentMemoryBound streams a packument three times larger than
// maxPackument through rewritePackumentResponse and samples the heap: what
// it holds is a version at a time, not the packument.
func TestPackumentMemoryBound(t *testing.T) {
	size, versions := 200<<20, 20000
	race := raceEnabled()
	if testing.Short() || race {
		size, versions = 72<<20, 4000
	}
	base, _ := url.Parse("https://registry.example/")
	// The bulk is in the versions: the readme, like any single value, is
	// held whole while it is read (a string over maxPackument is refused).
	readme := 1 << 20
	pad := (size-readme)/versions - 1300
	body, total := genPackument("https://registry.example", versions, pad, readme, false)
	if total <= maxPackument {
		t.Fatalf("generated only %d bytes", total)
	}
	rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "is-big"}, public: "http://p:1"}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapAlloc
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})

	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Length": {fmt.Sprint(total)}}, Body: io.NopCloser(body)}
	if err := rewritePackumentResponse(resp, base, rw); err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
		t.Errorf("a streamed packument has a length: %d %q", resp.ContentLength, resp.Header.Get("Content-Length"))
	}
	// Check the output as it goes by: every tarball on cproxy, and (but
	// under -race, which makes it slow) valid JSON.
	pr, pw := io.Pipe()
	var n int64
	var tarballs int
	wg.Go(func() {
		defer pr.Close()
		if race {
			io.Copy(io.Discard, pr)
			return
		}
		if err := jsontext.NewDecoder(pr, jsontext.AllowInvalidUTF8(true)).SkipValue(); err != nil {
			t.Errorf("output is not JSON: %v", err)
		}
	})
	// A match split across reads is found in the tail of the last read (too
	// short to hold a whole one) and the start of the next.
	pat := []byte(`"tarball":"http://p:1/npm/is-big/-/is-big-1.`)
	buf := make([]byte, 32<<10)
	tail := 0
	for {
		m, err := resp.Body.Read(buf[tail:])
		pw.Write(buf[tail : tail+m])
		n += int64(m)
		seen := buf[:tail+m]
		tarballs += bytes.Count(seen, pat)
		tail = copy(buf, seen[max(0, len(seen)-len(pat)+1):])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	pw.Close()
	resp.Body.Close()
	close(stop)
	wg.Wait()
	if tarballs != versions {
		t.Errorf("%d tarballs rewritten, want %d", tarballs, versions)
	}
	over := int64(peak) - int64(baseline)
	t.Logf("%d MiB in, %d MiB out, heap peak %.1f MiB over baseline", total>>20, n>>20, float64(over)/(1<<20))
	if over > 32<<20 {
		t.Errorf("heap peak %d MiB over baseline for a %d MiB packument", over>>20, total>>20)
	}
}

// TestNPMPackumentCutOff: a fault found after the packument has begun to go
// out cuts the response off. The client never gets a shorter packument
// that parses.
func TestNPMPackumentCutOff(t *testing.T) {
	for _, gz := range []bool{false, true} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := []byte(`{"name":"is-thing","readme":"` + strings.Repeat("a", 2*packumentWhole) + `","versions":{"1.0.0":[1]}}`)
			if gz {
				var b bytes.Buffer
				zw := gzip.NewWriter(&b)
				zw.Write(body)
				zw.Close()
				body = b.Bytes()
				w.Header().Set("Content-Encoding", "gzip")
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.Write(body)
		}))
		u, _ := url.Parse(up.URL)
		e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u}), routetest.WithPolicy(t, npmPolicy))
		req, _ := http.NewRequest("GET", e.Proxy.URL+"/npm/is-thing", nil)
		req.Header.Set("Authorization", "Bearer "+e.Token("conv-42"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err == nil || json.Valid(b) {
			t.Errorf("gzip=%v: %d, %d bytes, read error %v", gz, resp.StatusCode, len(b), err)
		}
		if len(b) < packumentWhole {
			t.Errorf("gzip=%v: only %d bytes before the cut", gz, len(b))
		}
		if !strings.Contains(e.Logs.String(), "response cut off before its end") {
			t.Errorf("gzip=%v: the audit line does not say the response was cut off:\n%s", gz, e.Logs.String())
		}
		up.Close()
	}
}

// TestNPMPackumentStreamed: a large packument through the route goes out
// chunked, rewritten, with its dist-tags at the end; a small one keeps its
// Content-Length (TestNPMForwards).
func TestNPMPackumentStreamed(t *testing.T) {
	var upURL string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := genPackument(upURL, 600, 2<<10, 2<<20, false)
		w.Header().Set("Etag", `"v1"`)
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.Copy(zw, body)
		zw.Close()
	}))
	defer up.Close()
	upURL = up.URL
	u, _ := url.Parse(up.URL)
	e := routetest.New(t, routetest.Serve(Kind, routes.Upstream{URL: u}), routetest.WithPolicy(t, "[profile.default]\npackages = [\"is-*\"]\n"), func(o *routetest.Options) {
		o.PublicURL = "http://proxy.example:8080"
	})
	r := e.Do("GET", "/npm/is-big", routetest.Bearer(e.Token("conv-42")), "")
	if r.Status != 200 || r.Header.Get("Content-Length") != "" || r.Header.Get("Content-Encoding") != "" || r.Header.Get("Etag") != `W/"v1"` {
		t.Fatalf("%d %v", r.Status, r.Header)
	}
	var p packument
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Versions) != 600 || p.DistTags["latest"] != "1.5.99" || len(p.Time) != 601 {
		t.Errorf("%d versions, dist-tags %v, %d times", len(p.Versions), p.DistTags, len(p.Time))
	}
	if strings.Count(r.Body, `"tarball":"http://proxy.example:8080/npm/is-big/-/is-big-1.`) != 600 || strings.Contains(r.Body, u.Host) {
		t.Errorf("tarballs not all rewritten")
	}
	if !strings.HasSuffix(r.Body, `"dist-tags":{"latest":"1.5.99","next":"1.0.0"}}`) {
		t.Errorf("ends %q", r.Body[len(r.Body)-80:])
	}
}

// TestRewritePackumentTimeOrder: with a min_release_age, versions that come
// before time are held until it comes; after it they stream. Either way the
// answer is the same, with time (filtered) and dist-tags last.
func TestRewritePackumentTimeOrder(t *testing.T) {
	base, _ := url.Parse("https://registry.example/")
	pr := routetest.MustPolicy(t, npmVersionPolicy).Profiles["default"]
	rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "is-x"}, public: "http://p:1", profile: pr, now: npmNow}
	v := func(s string) string {
		return `"` + s + `":{"dist":{"tarball":"https://registry.example/is-x/-/is-x-` + s + `.tgz"}}`
	}
	vs := `"versions":{` + v("1.0.0") + `,` + v("2.0.0") + `}`
	tm := `"time":{"1.0.0":"2020-01-01T00:00:00Z","2.0.0":"2026-11-30T00:00:00Z"}`
	kept := `"versions":{"1.0.0":{"dist":{"tarball":"http://p:1/npm/is-x/-/is-x-1.0.0.tgz"}}}`
	end := `"dist-tags":{"latest":"1.0.0"},"time":{"1.0.0":"2020-01-01T00:00:00Z"}}`
	for in, want := range map[string]string{
		`{"name":"is-x","dist-tags":{"latest":"2.0.0"},` + tm + `,` + vs + `,"readme":"r"}`: `{"name":"is-x",` + kept + `,"readme":"r",` + end,
		// The versions held for time are written where time was.
		`{"name":"is-x","dist-tags":{"latest":"2.0.0"},` + vs + `,"readme":"r",` + tm + `}`: `{"name":"is-x","readme":"r",` + kept + `,` + end,
	} {
		out, err := rewritePackument([]byte(in), base, rw)
		if err != nil || string(out) != want {
			t.Errorf("in   %s\ngot  %s, %v\nwant %s", in, out, err, want)
		}
	}
}

func TestRewritePackumentRefusals(t *testing.T) {
	base, _ := url.Parse("https://registry.example/")
	rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "is-x"}, public: "http://p:1"}
	for in, want := range map[string]string{
		``:                                   "not a JSON object",
		`[1]`:                                "not a JSON object",
		`{"a":1}x`:                           "not valid JSON",
		`{"a":01}`:                           "not valid JSON",
		`{"a":"\x"}`:                         "not valid JSON",
		`{"a":tru}`:                          "not valid JSON",
		`{"a":1`:                             "not valid JSON",
		`{"a":` + strings.Repeat("[", 10001): "not valid JSON",
		`{"versions":[]}`:                    "malformed versions",
		`{"versions":{"1.0.0":1}}`:           "malformed versions",
		`{"time":{},"time":{}}`:              `more than one "time"`,
		`{"versions":{"1.0.0":null,"1.0.0":null}}`:  `version "1.0.0" twice`,
		`{"name":"a","name":"b"}`:                   `more than one "name"`,
		`{"time":{"1.0.0":"x","1.0.\u0030":"y"}}`:   `ambiguous: key "1.0.0" comes twice in "time"`,
		`{"dist-tags":{"latest":"1","latest":"2"}}`: `ambiguous: key "latest" comes twice in "dist-tags"`,
		// A name given twice anywhere, even in a member that is dropped.
		`{"stagedVersions":{},"stagedVersions":1}`:                  `more than one "stagedVersions"`,
		`{"versions":{"1.0.0":{"dist":{},"dist":{"tarball":"x"}}}}`: `ambiguous: key "dist" comes twice in "versions/1.0.0"`,
		`{"users":{"a":[{"b":1,"\u0062":2}]}}`:                      `ambiguous: key "b" comes twice in "users/a/0"`,
	} {
		if _, err := rewritePackument([]byte(in), base, rw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", in, err, want)
		}
	}
}

// TestRewritePackumentMembers: only the documented top-level members pass;
// the rest (policyRestrictions, stagedVersions, anything else) are dropped
// (given twice, they are refused as any name given twice is).
func TestRewritePackumentMembers(t *testing.T) {
	base, _ := url.Parse("https://registry.example/")
	rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "is-x"}, public: "http://p:1"}
	in := `{"name":"is-x","policyRestrictions":{"versions":{"1.1.0":{"dist":{"tarball":"https://evil.example/x.tgz"}}}},` +
		`"stagedVersions":{"versions":{}},"_attachments":{},"Versions":{},"readme":"r","modified":"m"}`
	out, err := rewritePackument([]byte(in), base, rw)
	if want := `{"name":"is-x","readme":"r","modified":"m"}`; err != nil || string(out) != want {
		t.Errorf("got %s, %v\nwant %s", out, err, want)
	}
}

func TestPackumentPublished(t *testing.T) {
	big := `"versions":{"1.0.0":{"readme":"` + strings.Repeat("x", 1<<20) + `"}}`
	for _, c := range []struct{ in, want string }{
		{`{` + big + `,"time":{"created":"2020-01-01T00:00:00Z","1.0.0":"2021-02-03T04:05:06.000Z"},"readme":"r"}`, "2021-02-03T04:05:06Z"},
		// Read to the end: what follows time counts too.
		{`{"time":{"1.0.0":"2021-02-03T04:05:06Z"},"readme":"`, "error"},
		// A key given twice is refused, as the rewrite refuses it.
		{`{"time":{"1.0.0":"2020-01-01T00:00:00Z","1.0.0":"2026-11-30T00:00:00Z"}}`, "error"},
		{`{"time":{"1.0.0":"2020-01-01T00:00:00Z","1.0.\u0030":"2026-11-30T00:00:00Z"}}`, "error"},
		{`{"time":{"1.0.0":"2020-01-01T00:00:00Z"},"time":{"1.0.0":"2026-11-30T00:00:00Z"}}`, "error"},
		{`{}`, "zero"},
		{`{"time":{"1.0.0":"2021-02-03T04:05:06Z"}}`, "2021-02-03T04:05:06Z"},
		{`{"time":{"1.0.1":"2021-02-03T04:05:06Z"}}`, "zero"},
		{`{"time":{"1.0.0":"yesterday"}}`, "zero"},
		{`{"time":{"1.0.0":7}}`, "zero"},
		{`{"time":null}`, "zero"},
		{`{` + big + `}`, "zero"},
		{`{"time":"x"}`, "zero"},
		{`{"time":{"1.0.1":1,}}`, "error"},
		{`[]`, "error"},
	} {
		t0, err := packumentPublished(strings.NewReader(c.in), "1.0.0")
		got := t0.Format(time.RFC3339)
		switch {
		case err != nil:
			got = "error"
		case t0.IsZero():
			got = "zero"
		}
		if got != c.want {
			t.Errorf("%.60q: %s (%v), want %s", c.in, got, err, c.want)
		}
	}
}

// BenchmarkRewritePackument rewrites a packument shaped like a popular
// package's on registry.npmjs.org: 5 MiB, 1000 versions.
func BenchmarkRewritePackument(b *testing.B) {
	base, _ := url.Parse("https://registry.example/")
	gen, _ := genPackument(base.Host, 1000, 3800, 128<<10, false)
	raw, _ := io.ReadAll(gen)
	rw := &npmRewrite{req: npmRequest{kind: npmPackument, name: "is-big"}, public: "http://p:1"}
	b.Run("stream", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := io.Copy(io.Discard, packumentReaderFor(b, raw, base, rw)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("maps", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := oraclePackument(raw, base, rw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func packumentReaderFor(tb testing.TB, raw []byte, base *url.URL, rw *npmRewrite) io.ReadCloser {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(raw))}
	if err := rewritePackumentResponse(resp, base, rw); err != nil {
		tb.Fatal(err)
	}
	return resp.Body
}
