package bench

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"
)

// The environment a role process reads. A role is this package's code run in
// a process of its own: the current binary (a test binary or benchreport),
// re-executed with roleEnv set.
const (
	roleEnv     = "CPROXY_BENCH_ROLE"       // "upstream", "goproxy", "goproxy-tls" or "routes"
	keyEnv      = "CPROXY_BENCH_KEY"        // the upstream's API key
	headerEnv   = "CPROXY_BENCH_HEADER"     // goproxy, goproxy-tls: the header it sets to keyEnv's value; empty: X-Api-Key
	upstreamEnv = "CPROXY_BENCH_UPSTREAM"   // goproxy, goproxy-tls, routes: the upstream's base URL
	profileEnv  = "CPROXY_BENCH_CPUPROFILE" // if set: write a CPU profile there on exit
	traceEnv    = "CPROXY_BENCH_TRACE"      // if set: write an execution trace there on exit
)

// RunRoleIfAsked runs the role that roleEnv names and exits; it returns at
// once when none is named. Call it first thing in main and TestMain: the
// benchmark starts its upstream and do-nothing proxy by re-executing the
// current binary. A role prints the address it listens on as its first line
// of stdout, and exits on SIGTERM, SIGINT, or when its stdin closes (the
// parent died).
func RunRoleIfAsked() {
	role := os.Getenv(roleEnv)
	if role == "" {
		return
	}
	if err := runRole(role); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runRole(role string) error {
	srv := &http.Server{ReadHeaderTimeout: 30 * time.Second}
	var tlsConfig *tls.Config
	switch role {
	case "upstream":
		srv.Handler = NewUpstream(os.Getenv(keyEnv))
	case "goproxy", roleGoProxyTLS:
		u, err := url.Parse(os.Getenv(upstreamEnv))
		if err != nil || u.Host == "" {
			return fmt.Errorf("bad %s %q", upstreamEnv, os.Getenv(upstreamEnv))
		}
		header := os.Getenv(headerEnv)
		if header == "" {
			header = "X-Api-Key"
		}
		srv.Handler = NewGoProxy(u, header, os.Getenv(keyEnv))
		if role == roleGoProxyTLS {
			if tlsConfig, err = floorTLSConfig(os.Getenv(caDirEnv)); err != nil {
				return err
			}
		}
	case "routes":
		hs, closeRoutes, err := newRoutesRole()
		if err != nil {
			return err
		}
		defer closeRoutes()
		srv = hs
	default:
		return fmt.Errorf("unknown %s", roleEnv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if path := os.Getenv(profileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if path := os.Getenv(traceEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := trace.Start(f); err != nil {
			return err
		}
		defer func() {
			trace.Stop()
			f.Close()
		}()
	}
	fmt.Printf("%s\n", ln.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		srv.Close()
	}()
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		srv.Close()
	}()
	if err := srv.Serve(tlsListener(ln, tlsConfig)); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// NewGoProxy is the do-nothing proxy: an httputil.ReverseProxy whose Rewrite
// only sets the URL and one header to value (the real credential: the
// model route's x-api-key, the GitHub API's Authorization), with the flush
// interval cproxy's model route has (0, the default: ReverseProxy flushes
// each write of an event stream or of an answer of unknown length anyway,
// and writes an answer of known length whole). Its transport keeps as many idle upstream
// connections as cproxy's does (64 per host), so that at 16 clients neither
// proxy pays for new upstream connections and the comparison is of the code
// on the request path. With http.DefaultTransport (2 idle per host) it would
// open a connection for most requests.
//
// It also turns on full duplex for each request. Without it, a plain
// ReverseProxy cuts streams: writing the response headers makes the HTTP/1
// server drain and close the request body, the transport's last read of that
// body (checking it is no longer than declared) then fails, and the
// transport drops the upstream connection mid-stream (golang/go#40747). On
// this machine that broke most streamed answers after their first event.
// cproxy is not exposed to it because it reads the whole body before
// forwarding.
func NewGoProxy(upstream *url.URL, header, value string) http.Handler {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.DisableCompression = true
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Header.Set(header, value)
		},
		Transport: t,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
}
