package routes

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/cproxy/cproxy/secrets"
)

// target is where one validated request goes: a path and query rebuilt from
// the parts the route checked, never the raw request URI.
type target struct {
	path  string
	query string
	// rawPath, when set, is path's encoded form (npm's "@scope%2fname").
	rawPath string
	// cred is the upstream credential for this request, read once by
	// forward; zero means none.
	cred secrets.Secret
	// headers are set on the forwarded request after the credential (a
	// relay's, per token); nil means none.
	headers http.Header
	// maxTokens is a model request's max_tokens, which its budget reserves.
	maxTokens int64
}

type targetKey struct{}

// clientAddressHeaders claim a client's address to an upstream behind a
// proxy; a sandbox must not make cproxy's requests claim one.
var clientAddressHeaders = []string{"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Cf-Connecting-Ip", "X-Cluster-Client-Ip", "Fastly-Client-Ip", "X-Original-Forwarded-For"}

// errHeaderTimeout is the cause given to a request's context when the
// upstream sends no response headers in time, so the error handler can tell
// a 504 from a 502.
var errHeaderTimeout = errors.New("no response headers in time")

// copyBuffers lends ReverseProxy its response copy buffers, so each
// response does not allocate (and the collector reclaim) a fresh 32 KiB.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte  { return *p.pool.Get().(*[]byte) }
func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// forwarder sends validated requests to one upstream.
type forwarder struct {
	up        Upstream
	proxy     *httputil.ReverseProxy
	transport *http.Transport
}

// credential is the upstream credential to send now: Live's current value,
// or the fixed one. An error says why there is none to send.
func (f *forwarder) credential() (secrets.Secret, error) {
	if f.up.Live != nil {
		return f.up.Live.Current()
	}
	return f.up.Credential, nil
}

// newForwarder builds the reverse proxy for up. setCredential runs after
// every client credential header has been deleted, with the request's
// credential (zero when the upstream has none). checkResponse, if not
// nil, sees each upstream response before it is passed on; an error (a
// refusal) replaces the response with cproxy's answer in the route's format.
func newForwarder(up Upstream, setCredential func(http.Header, secrets.Secret), checkResponse func(*http.Response) error) *forwarder {
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
			if t.rawPath != "" {
				pr.Out.URL.RawPath = joinPath(base.EscapedPath(), t.rawPath)
			}
			pr.Out.Host = ""
			// No protocol switch: ReverseProxy puts a client's Upgrade back
			// after removing the hop-by-hop headers, and an upstream's 101
			// would turn this one checked request into a raw tunnel past
			// every later check. The upstream gets an ordinary request.
			pr.Out.Header.Del("Connection")
			pr.Out.Header.Del("Upgrade")
			// Request trailers arrive after the body, unchecked, and can
			// carry the sandbox token (Authorization: Bearer cpx_…) where
			// credentialHeaders do not reach: none is forwarded.
			pr.Out.Trailer = nil
			for _, h := range credentialHeaders {
				pr.Out.Header.Del(h)
			}
			// Rewrite drops X-Forwarded-* and Forwarded; these other
			// client-address headers a sandbox could spoof go too.
			for _, h := range clientAddressHeaders {
				pr.Out.Header.Del(h)
			}
			setCredential(pr.Out.Header, t.cred)
			for k, vs := range t.headers {
				pr.Out.Header[k] = vs
			}
		},
		Transport:     f.transport,
		FlushInterval: -1,
		BufferPool:    copyBuffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// Filled in per request by forward, which knows the route's
			// error format.
			r.Context().Value(errorHandlerKey{}).(func(error))(err)
		},
		ModifyResponse: func(resp *http.Response) error {
			upstreamAnswered(resp.Request.Context())
			if t, ok := resp.Request.Context().Value(headerTimerKey{}).(*headerTimer); ok {
				t.stop()
			}
			if checkResponse != nil {
				return checkResponse(resp)
			}
			return nil
		},
	}
	return f
}

type errorHandlerKey struct{}
type headerTimerKey struct{}

// headerTimer bounds the wait for response headers. It starts once the
// request body has been sent: a large push may take minutes to upload, and
// only then does the upstream owe an answer. A response that comes earlier
// stops it for good.
type headerTimer struct {
	mu      sync.Mutex
	d       time.Duration
	fire    func()
	t       *time.Timer
	stopped bool
}

func (h *headerTimer) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped && h.t == nil {
		h.t = time.AfterFunc(h.d, h.fire)
	}
}

func (h *headerTimer) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	if h.t != nil {
		h.t.Stop()
	}
}

// timedBody starts the header timer when the transport has read the whole
// body: at EOF, or at the declared length (the transport may stop there).
type timedBody struct {
	io.ReadCloser
	timer *headerTimer
	left  int64 // bytes until the declared length; -1: unknown
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
	}
	if err != nil || b.left == 0 {
		b.timer.start()
	}
	return n, err
}

// forward sends r to the upstream at t, streaming both ways. Failures are
// written with writeErr, in the route's format.
func (f *forwarder) forward(a *audit, r *http.Request, t target, writeErr func(http.ResponseWriter, error) int) {
	cred, err := f.credential()
	if err != nil {
		// The message names the reason and the fix, never the value.
		a.fail(writeErr, refuse(ErrUnavailable, "%v", err))
		return
	}
	t.cred = cred
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	ctx = context.WithValue(ctx, targetKey{}, t)
	if f.up.HeaderTimeout > 0 {
		timer := &headerTimer{d: f.up.HeaderTimeout, fire: func() { cancel(errHeaderTimeout) }}
		defer timer.stop()
		ctx = context.WithValue(ctx, headerTimerKey{}, timer)
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			timer.start()
		} else {
			r.Body = &timedBody{ReadCloser: r.Body, timer: timer, left: r.ContentLength}
		}
	}
	ctx = context.WithValue(ctx, errorHandlerKey{}, func(err error) {
		var ref *refusal
		switch {
		case errors.As(err, &ref):
			a.fail(writeErr, err)
		case context.Cause(ctx) == errHeaderTimeout:
			a.fail(writeErr, refuse(ErrTimeout, "the upstream sent no response within %s (header_timeout)", f.up.HeaderTimeout))
		case r.Context().Err() != nil:
			// The client went away; there is no one to answer.
			a.reason = "client disconnected"
		default:
			a.log.Warn("upstream request failed", "route", a.route, "err", err)
			a.fail(writeErr, refuse(ErrUpstream, "the upstream %s could not be reached; try again later", f.up.URL.Host))
		}
	})
	ctx, done := a.metrics.forwarding(ctx, a.route)
	defer done()
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
