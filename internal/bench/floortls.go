package bench

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	"github.com/cproxy/cproxy/internal/localca"
)

// The do-nothing proxy over TLS (role "goproxy-tls"): the floor for a route
// its clients reach over cproxy's TLS listener, as go reaches the Go module
// route. It listens as cproxy's TLS listener does (TLS 1.2 and later, HTTP/2
// and HTTP/1.1, a server certificate from a local CA made in caDirEnv) and
// forwards each request as it came, its Authorization replaced by the real
// credential as a Bearer token, through a transport keeping 64 idle upstream
// connections as cproxy's does. It checks nothing: what cproxy costs beyond
// it is cproxy's own.
const caDirEnv = "CPROXY_BENCH_CA_DIR" // goproxy-tls: where its CA is made; ca.pem is for the client

// Role and way names of the floor.
const (
	roleGoProxyTLS = "goproxy-tls"
	// wayFloor1 and wayFloor are the floor on one CPU and on all: cproxy's
	// default (runtime.cpus = 1) is judged against the first, cproxy on
	// every CPU (wayCproxyAll) against the second.
	wayFloor1    = "goproxy-1cpu"
	wayFloor     = "goproxy"
	wayCproxyAll = "cproxy-all"
)

func newTLSFloorRole() (http.Handler, *tls.Config, error) {
	u, err := url.Parse(os.Getenv(upstreamEnv))
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("bad %s %q", upstreamEnv, os.Getenv(upstreamEnv))
	}
	ca, err := localca.LoadOrCreate(os.Getenv(caDirEnv), time.Now())
	if err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: (&localca.Issuer{CA: ca, Names: []string{"127.0.0.1", "localhost"}}).Certificate,
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.DisableCompression = true
	auth := "Bearer " + os.Getenv(keyEnv)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Header.Set("Authorization", auth)
		},
		Transport: t,
	}
	return rp, cfg, nil
}

// startTLSFloor starts the floor from exe (benchproxy) with env added,
// forwarding to upstream with the credential key; it returns its address
// and the PEM file of the CA its certificate is from.
func (e *Env) startTLSFloor(name, exe, upstream, key string, env map[string]string) (addr, caFile string, err error) {
	caDir := e.dir + "/" + name + "-ca"
	vars := map[string]string{keyEnv: key, upstreamEnv: upstream, caDirEnv: caDir}
	for k, v := range env {
		vars[k] = v
	}
	p, addr, err := e.startRole(exe, roleGoProxyTLS, vars)
	if err != nil {
		return "", "", err
	}
	e.Targets = append(e.Targets, &Target{Name: name, URL: "https://" + addr, proc: p})
	return addr, caDir + "/" + localca.CertFile, nil
}

// tlsListener is ln serving TLS with cfg, or ln itself when cfg is nil.
func tlsListener(ln net.Listener, cfg *tls.Config) net.Listener {
	if cfg == nil {
		return ln
	}
	return tls.NewListener(ln, cfg)
}
