package gomod

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/secrets"
)

// BenchmarkRequest is the in-process cost of the route
// (docs/benchmarks/go-mod-download.md): each request go mod download sends
// for a module, directly to the fake module proxy and through the route
// with the sandbox token as go sends it (Basic auth's password), over
// plain HTTP, and over HTTPS (HTTP/1.1, as go reaches cproxy's TLS
// listener) to cproxy and to the fake, cproxy reaching the fake over plain
// HTTP either way; age is the route under a min_release_age whose .info
// time is already held; floor is a do-nothing httputil.ReverseProxy (the
// URL and the credential set, nothing checked, nothing logged), what any
// proxy of Go's costs. cpu-µs/op is the process's CPU per request
// (client, proxy and fake): cproxy's less direct's is the route's.
func BenchmarkRequest(b *testing.B) {
	p, err := fakes.NewGoProxy(fakes.GoProxyOptions{Token: canaryProxy, TLS: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	files := map[string]string{"go.mod": "module example.com/lib\n\ngo 1.22\n", "lib.go": "package lib\n\nfunc Version() string { return \"v1.1.0\" }\n"}
	if err := p.AddModule("example.com/lib", "v1.1.0", time.Now().Add(-30*24*time.Hour), files); err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(p.URL)
	env := func(policy string) (*routetest.Env, string) {
		e := routetest.New(b, routetest.Serve(Kind, routes.Upstream{URL: u, Credential: secrets.New(canaryProxy), HeaderTimeout: 10 * time.Second}),
			routetest.WithPolicy(b, policy), func(o *routetest.Options) {
				o.Limits = map[string]routes.RouteLimits{name: {Limits: routes.Limits{RequestsPerMinute: 1 << 30}}}
			})
		return e, "Basic " + base64.StdEncoding.EncodeToString([]byte("cproxy:"+e.Token("bench-1", "ttl=366d")))
	}
	plain, plainAuth := env("[profile.default.go]\nmodules = [\"example.com/*\"]\n")
	aged, agedAuth := env("[profile.default.go]\nmodules = [\"example.com/*\"]\nmin_release_age = \"1d\"\n")
	floor := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Header.Set("Authorization", "Bearer "+canaryProxy)
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
	})
	b.Cleanup(floor.Close)
	listener := httptest.NewTLSServer(plain.Server.ProxyHandler())
	b.Cleanup(listener.Close)
	fakeCA := x509.NewCertPool()
	fakeCA.AppendCertsFromPEM(p.CertPEM)
	trusting := func(pool *x509.CertPool) *tls.Config { return &tls.Config{RootCAs: pool} }
	ways := []struct {
		name, base, auth string
		tls              *tls.Config
	}{
		{"direct", p.URL, "Bearer " + canaryProxy, nil},
		{"direct-tls", p.TLSURL, "Bearer " + canaryProxy, trusting(fakeCA)},
		{"floor", floor.URL, "", nil},
		{"cproxy", plain.Proxy.URL + "/gomod", plainAuth, nil},
		{"cproxy-tls", listener.URL + "/gomod", plainAuth, listener.Client().Transport.(*http.Transport).TLSClientConfig},
		{"age", aged.Proxy.URL + "/gomod", agedAuth, nil},
	}
	for _, path := range []string{
		"/example.com/lib/@v/v1.1.0.info",
		"/example.com/lib/@v/v1.1.0.mod",
		"/example.com/lib/@v/v1.1.0.zip",
		"/sumdb/sum.golang.org/lookup/example.com/lib@v1.1.0",
	} {
		for _, w := range ways {
			if w.name == "age" && strings.HasPrefix(path, "/sumdb/") {
				continue // the same as cproxy: no version is checked
			}
			kind := path[strings.LastIndexAny(path, "./"):]
			if strings.HasPrefix(path, "/sumdb/") {
				kind = "lookup"
			}
			b.Run(kind+"/"+w.name, func(b *testing.B) { benchGet(b, w.base+path, w.auth, w.tls) })
		}
	}
}

// benchGet sends GET url b.N times over kept-alive connections (over TLS
// with tlsConfig, when not nil) and checks each answer is a 200.
func benchGet(b *testing.B, url, auth string, tlsConfig *tls.Config) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, TLSClientConfig: tlsConfig}}
	b.Cleanup(client.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d %s", url, resp.StatusCode, out)
		}
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the CPU time (user and system) the process has used: on a
// shared machine a steadier measure than wall time of what the route costs,
// the client's and the fake's CPU being the same both ways.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
