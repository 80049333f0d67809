package routes

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// target is where one validated request goes: a path and query rebuilt from
// the parts the route checked, never the raw request URI.
type target struct {
	path  string
	query string
}

type targetKey struct{}

// errHeaderTimeout is the cause given to a request's context when the
// upstream sends no response headers in time, so the error handler can tell
// a 504 from a 502.
var errHeaderTimeout = errors.New("no response headers in time")

// forwarder sends validated requests to one upstream.
type forwarder struct {
	up        Upstream
	proxy     *httputil.ReverseProxy
	transport *http.Transport
}

// newForwarder builds the reverse proxy for up. setCredential runs after
// every client credential header has been deleted.
func newForwarder(up Upstream, setCredential func(http.Header)) *forwarder {
	f := &forwarder{up: up}
	f.transport = &http.Transport{
		Proxy: nil, // never through an environment proxy: credentials go to the upstream alone
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 15 * time.Second,
		// Bytes pass untouched: without this the transport would ask for
		// gzip itself and decompress what the client did not ask to be.
		DisableCompression: true,
	}
	base := up.URL
	f.proxy = &httputil.ReverseProxy{
		// Rewrite, not Director: hop-by-hop headers (including any the
		// client named in Connection) are gone before it runs, and
		// X-Forwarded-* from the client are dropped.
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(target)
			pr.Out.URL = &url.URL{
				Scheme:   base.Scheme,
				Host:     base.Host,
				Path:     joinPath(base.Path, t.path),
				RawQuery: t.query,
			}
			pr.Out.Host = ""
			for _, h := range credentialHeaders {
				pr.Out.Header.Del(h)
			}
			setCredential(pr.Out.Header)
		},
		Transport:     f.transport,
		FlushInterval: -1,
		ErrorLog:      nil,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// Filled in per request by forward, which knows the route's
			// error format.
			r.Context().Value(errorHandlerKey{}).(func(error))(err)
		},
		ModifyResponse: func(resp *http.Response) error {
			if stop, ok := resp.Request.Context().Value(stopTimerKey{}).(func() bool); ok {
				stop()
			}
			return nil
		},
	}
	return f
}

type errorHandlerKey struct{}
type stopTimerKey struct{}

// forward sends r to the upstream at t, streaming both ways. Failures are
// written with writeErr, in the route's format.
func (f *forwarder) forward(a *audit, r *http.Request, t target, writeErr func(http.ResponseWriter, error) int) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	ctx = context.WithValue(ctx, targetKey{}, t)
	if f.up.HeaderTimeout > 0 {
		timer := time.AfterFunc(f.up.HeaderTimeout, func() { cancel(errHeaderTimeout) })
		defer timer.Stop()
		ctx = context.WithValue(ctx, stopTimerKey{}, timer.Stop)
	}
	ctx = context.WithValue(ctx, errorHandlerKey{}, func(err error) {
		switch {
		case context.Cause(ctx) == errHeaderTimeout:
			a.fail(writeErr, refuse(ErrTimeout, "the upstream sent no response within %s; try again later", f.up.HeaderTimeout))
		case r.Context().Err() != nil:
			// The client went away; there is no one to answer.
			a.reason = "client disconnected"
		default:
			a.log.Warn("upstream request failed", "route", a.route, "err", err)
			a.fail(writeErr, refuse(ErrUpstream, "the upstream %s could not be reached; try again later", f.up.URL.Host))
		}
	})
	f.proxy.ServeHTTP(a.w, r.WithContext(ctx))
}

func joinPath(base, p string) string {
	if base == "" || base == "/" {
		return p
	}
	if base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	return base + p
}
