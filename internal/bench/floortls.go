package bench

import (
	"crypto/tls"
	"maps"
	"net"
	"path/filepath"
	"time"

	"github.com/cproxy/cproxy/internal/localca"
)

// The do-nothing proxy over TLS (role "goproxy-tls"): the floor for a route
// its clients reach over cproxy's TLS listener, as go reaches the Go module
// route. It is NewGoProxy, setting Authorization to the real credential as
// a Bearer token, listening as cproxy's TLS listener does (TLS 1.2 and
// later, HTTP/2 and HTTP/1.1, a server certificate from a local CA made in
// caDirEnv). It checks nothing: what cproxy costs beyond it is cproxy's own.
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

// floorTLSConfig is the floor's TLS: its certificate from the local CA in
// caDir, made there the first time.
func floorTLSConfig(caDir string) (*tls.Config, error) {
	ca, err := localca.LoadOrCreate(caDir, time.Now())
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: (&localca.Issuer{CA: ca, Names: []string{"127.0.0.1", "localhost"}}).Certificate,
	}, nil
}

// startTLSFloor starts the floor from exe (benchproxy) with env added,
// forwarding to upstream with the credential key; it returns its address
// and the PEM file of the CA its certificate is from.
func (e *Env) startTLSFloor(name, exe, upstream, key string, env map[string]string) (addr, caFile string, err error) {
	caDir := filepath.Join(e.dir, name+"-ca")
	vars := map[string]string{headerEnv: "Authorization", keyEnv: "Bearer " + key, upstreamEnv: upstream, caDirEnv: caDir}
	maps.Copy(vars, env)
	p, addr, err := e.startRole(exe, roleGoProxyTLS, vars)
	if err != nil {
		return "", "", err
	}
	e.Targets = append(e.Targets, &Target{Name: name, URL: "https://" + addr, proc: p})
	return addr, filepath.Join(caDir, localca.CertFile), nil
}

// tlsListener is ln serving TLS with cfg, or ln itself when cfg is nil.
func tlsListener(ln net.Listener, cfg *tls.Config) net.Listener {
	if cfg == nil {
		return ln
	}
	return tls.NewListener(ln, cfg)
}
