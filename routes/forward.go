package routes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/bits"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cproxy/cproxy/routes/metrics"
	"github.com/cproxy/cproxy/secrets"
)

// Target is where one validated request goes: a path and query rebuilt from
// the parts the route checked, never the raw request URI.
type Target struct {
	Path  string
	Query string
	// RawPath, when set, is path's encoded form (npm's "@scope%2fname").
	RawPath string
	// Credential, when not zero, is this request's upstream credential,
	// sent in place of the upstream's own (a GitHub App installation token
	// minted for the request's repository and access). Zero: the
	// upstream's credential, read once by Forward.
	Credential secrets.Secret
	// cred is the upstream credential for this request, read once by
	// forward; zero means none.
	cred secrets.Secret
	// Header are set on the forwarded request after the credential (a
	// relay's, per token); nil means none.
	Header http.Header
}

// outboundKey keys a forwarded request's *call in its context.
type outboundKey struct{}

// outbound is one forwarded request as ReverseProxy's hooks see it: where it
// goes, its header timer, and how a failure is answered. One value in the
// context, allocated once, instead of one context layer for each.
type outbound struct {
	t        Target
	f        *Forwarder
	a        *Call
	r        *http.Request // as the route handed it to forward
	ctx      context.Context
	cancel   context.CancelCauseFunc
	writeErr func(http.ResponseWriter, error) int
	timer    headerTimer // unused when the upstream has no HeaderTimeout
	body     sentBody    // r's body, when something waits for its end
	// refused is why sentBody withheld the end of the body, if it did.
	refused atomic.Pointer[error]
	// series are the route's metrics, nil without metrics; sent is when
	// the request was handed to the upstream, for the time to its answer.
	series *metrics.RouteSeries
	sent   time.Time
}

func outboundOf(r *http.Request) *outbound { return r.Context().Value(outboundKey{}).(*outbound) }

// fail answers a request ReverseProxy could not complete.
func (c *outbound) fail(err error) {
	var ref *refusal
	if cause := c.a.flight.ended(); cause != nil {
		err = cause // revoked or expired while it was being forwarded
	} else if r := c.refused.Load(); r != nil {
		err = *r
	}
	switch {
	case errors.As(err, &ref):
		c.a.fail(c.writeErr, err)
	case context.Cause(c.ctx) == errHeaderTimeout:
		c.a.fail(c.writeErr, Refuse(ErrTimeout, "the upstream sent no response within %s (header_timeout)", c.f.up.HeaderTimeout))
	case c.r.Context().Err() != nil:
		// The client went away; there is no one to answer.
		c.a.reason = "client disconnected"
	default:
		c.a.log.Warn("upstream request failed", "route", c.a.route, "err", err)
		c.a.fail(c.writeErr, Refuse(ErrUpstream, "the upstream %s could not be reached; try again later", c.f.up.URL.Host))
	}
}

func (c *outbound) timedOut() { c.cancel(errHeaderTimeout) }

// answered observes the time to the upstream's response headers.
// ReverseProxy calls ModifyResponse once per request, so each is observed
// once; a request the upstream never answered is not.
func (c *outbound) answered() {
	if c.series != nil {
		c.series.Answered(time.Since(c.sent))
	}
}

// clientAddressHeaders claim a client's address to an upstream behind a
// proxy; a sandbox must not make cproxy's requests claim one.
var clientAddressHeaders = []string{"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Cf-Connecting-Ip", "X-Cluster-Client-Ip", "Fastly-Client-Ip", "X-Original-Forwarded-For"}

// overrideHeaders ask an upstream (or a proxy or framework in front of it)
// to serve another method or path than the request line's: Google APIs,
// Symfony, Rails and OData honour the method ones, IIS's URL Rewrite and
// Symfony the URL ones, nginx's auth_request and Traefik's forward-auth the
// X-Original-* and X-Forwarded-Method/Uri ones. cproxy checked the request
// line, so a GET-only relay must not carry a DELETE this way.
var overrideHeaders = []string{"X-Http-Method-Override", "X-Method-Override", "X-Http-Method", "X-Original-Method", "X-Forwarded-Method",
	"X-Original-Url", "X-Rewrite-Url", "X-Original-Uri", "X-Forwarded-Uri", "X-Forwarded-Path", "X-Forwarded-Prefix"}

// droppedNames are the headers no upstream gets from a client, folded
// (folded) and filed by length: credentialHeaders, clientAddressHeaders,
// overrideHeaders, and Forwarded, which ReverseProxy drops before Rewrite
// only as spelled. droppedHeader drops X-Forwarded-* by its prefix.
var droppedNames = func() (byLen [maxDroppedName + 1][]string) {
	for _, list := range [][]string{credentialHeaders, clientAddressHeaders, overrideHeaders, {"Forwarded"}} {
		for _, h := range list {
			f := []byte(h)
			for i, c := range f {
				f[i] = folded[c]
			}
			byLen[len(f)] = append(byLen[len(f)], string(f))
		}
	}
	return byLen
}()

// maxDroppedName bounds the names in droppedNames; the longest,
// X-Original-Forwarded-For, has 24 bytes.
const maxDroppedName = 32

// forwardedPrefix is X-Forwarded-*, folded: the de facto proxy headers
// (-For, -Host, -Proto, -Port, -Server, -Ssl, …) claim what a proxy in front
// saw, and cproxy is that proxy.
const forwardedPrefix = "x-forwarded-"

// folded is each byte of a header name as droppedHeader compares it: a
// letter in lower case, a digit as itself, anything else as '-'.
var folded = func() (t [256]byte) {
	for c := range t {
		switch {
		case 'A' <= c && c <= 'Z':
			t[c] = byte(c) + 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			t[c] = byte(c)
		default:
			t[c] = '-'
		}
	}
	return t
}()

// droppedHeader reports whether a client's header name is a dropped one
// (droppedNames, X-Forwarded-*) in any spelling: any case, and any
// separator. CGI, WSGI (gunicorn before 22), Rack (Puma) and PHP's FastCGI
// turn a header into a variable by upper-casing it and folding '-' to '_',
// so X_Forwarded_For or X_HTTP_METHOD_OVERRIDE reads there as the header
// cproxy dropped, and X_Api_Key would reach an upstream beside the real
// key. It runs for every header of every request, so it allocates nothing
// and gives up on a name at its first byte that differs.
func droppedHeader(name string) bool {
	if len(name) >= len(forwardedPrefix) && foldsTo(name[:len(forwardedPrefix)], forwardedPrefix) {
		return true
	}
	if len(name) > maxDroppedName {
		return false
	}
	for _, d := range droppedNames[len(name)] {
		if foldsTo(name, d) {
			return true
		}
	}
	return false
}

// foldsTo reports whether name, folded, is f, a name of the same length.
func foldsTo(name, f string) bool {
	for i := range len(f) {
		if folded[name[i]] != f[i] {
			return false
		}
	}
	return true
}

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

// SetCopy sets how f copies an upstream's answers to the client: the pool
// its copy buffers come from (nil: the core's own, of 32 KiB), and how
// often a copied answer is flushed (ReverseProxy's FlushInterval: -1, the
// default, flushes each write; 0 flushes only an answer of unknown length
// or a stream). Call it before the first Forward.
func (f *Forwarder) SetCopy(pool httputil.BufferPool, flushInterval time.Duration) {
	if pool == nil {
		pool = copyBuffers
	}
	f.proxy.BufferPool, f.proxy.FlushInterval = pool, flushInterval
}

// PassRedirects has f pass the upstream's redirects to the client as sent,
// for an upstream that sends none a client should follow elsewhere (the
// model API). Call it before the first Forward.
func (f *Forwarder) PassRedirects() { f.redirects = nil }

// Forwarder sends validated requests to one upstream.
type Forwarder struct {
	up            Upstream
	proxy         *httputil.ReverseProxy
	transport     *http.Transport
	setCredential func(http.Header, secrets.Secret)
	// redirects, if set, keeps the upstream's redirects on cproxy; nil
	// passes them as sent.
	redirects *Redirects
}

// credential is the upstream credential to send now: an OAuth access
// token, Live's current value, or the fixed one. An error says why there
// is none to send.
func (f *Forwarder) credential(ctx context.Context) (secrets.Secret, error) {
	if f.up.OAuth != nil {
		return f.up.OAuth.Token(ctx)
	}
	if f.up.Live != nil {
		return f.up.Live.Current()
	}
	return f.up.Credential, nil
}

// credentialRefusal is the answer to a request with no credential to
// send: the refusal the source gave (an OAuth exchange that failed), the
// request's own end, or any other error as 503.
func credentialRefusal(err error) error {
	if IsRefusal(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return Refuse(ErrUnavailable, "%v", err)
}

// Close releases the forwarder's idle upstream connections.
func (f *Forwarder) Close() { f.transport.CloseIdleConnections() }

// Sources is the upstream credential's source, named name, when it has
// one (for a Route's Sources).
func (f *Forwarder) Sources(name string) []Source {
	if f.up.OAuth != nil {
		return f.up.OAuth.Sources()
	}
	if f.up.Live == nil {
		return nil
	}
	return []Source{{Name: name, Live: f.up.Live}}
}

// Upstream is the forwarder's upstream.
func (f *Forwarder) Upstream() Upstream { return f.up }

// CredentialRefused is the first check of an upstream's answer for a
// route that sends cproxy's own credential: a 401 is the operator's
// problem, not the sandbox's, and becomes a 502 that names the key to fix,
// upstream.NAME.credential (passed through, a client would take it for its
// sandbox token's fault and ask for another). what names the credential in
// the words ("GitHub", "npm"). It is nil for any other answer.
func CredentialRefused(resp *http.Response, name, what string) error {
	if resp.StatusCode != http.StatusUnauthorized {
		return nil
	}
	if resp.Request.Header.Get("Authorization") == "" {
		// No credential is configured (anonymous access), and the
		// upstream wants one here.
		return Refuse(ErrUpstream, "the upstream %s asks for a credential and cproxy has none for it; the operator must set upstream.%s.credential", resp.Request.URL.Host, name)
	}
	return Refuse(ErrUpstream, "the upstream %s refused cproxy's %s credential; the operator must fix upstream.%s.credential", resp.Request.URL.Host, what, name)
}

// NewForwarder builds the reverse proxy for up. setCredential runs after
// every client credential header has been deleted, with the request's
// credential (zero when the upstream has none). checkResponse, if not
// nil, sees each upstream response before it is passed on; an error (a
// refusal) replaces the response with cproxy's answer in the route's format.
func NewForwarder(up Upstream, setCredential func(http.Header, secrets.Secret), checkResponse func(*http.Response) error) *Forwarder {
	f := &Forwarder{up: up, setCredential: setCredential}
	f.transport = &http.Transport{
		Proxy:               nil, // never through an environment proxy: credentials go to the upstream alone
		DialContext:         dialUpstream,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 15 * time.Second,
		// Bytes pass untouched: without this the transport would ask for
		// gzip itself and decompress what the client did not ask to be.
		DisableCompression: true,
	}
	f.proxy = &httputil.ReverseProxy{
		// Rewrite, not Director: hop-by-hop headers (including any the
		// client named in Connection) are gone before it runs, and
		// X-Forwarded-* from the client are dropped.
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := &outboundOf(pr.In).t
			// pr.Out's URL is its own copy (ReverseProxy clones the request).
			*pr.Out.URL = f.url(t)
			pr.Out.Host = ""
			// No protocol switch: ReverseProxy puts a client's Upgrade back
			// after removing the hop-by-hop headers, and an upstream's 101
			// would turn this one checked request into a raw tunnel past
			// every later check. The upstream gets an ordinary request.
			delete(pr.Out.Header, "Connection")
			delete(pr.Out.Header, "Upgrade")
			// Request trailers arrive after the body, unchecked, and can
			// carry the sandbox token (Authorization: Bearer cpx_…) where
			// credentialHeaders do not reach: none is forwarded.
			pr.Out.Trailer = nil
			// The credential, client-address and override headers go, in
			// every spelling (droppedHeader); deleting while ranging is
			// safe in Go.
			for k := range pr.Out.Header {
				if droppedHeader(k) {
					delete(pr.Out.Header, k)
				}
			}
			setCredential(pr.Out.Header, t.cred)
			for k, vs := range t.Header {
				pr.Out.Header[k] = vs
			}
		},
		Transport:     f.transport,
		FlushInterval: -1,
		BufferPool:    copyBuffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// Filled in per request by forward, which knows the route's
			// error format.
			outboundOf(r).fail(err)
		},
		ModifyResponse: func(resp *http.Response) error {
			c := outboundOf(resp.Request)
			c.answered()
			if c.f.up.HeaderTimeout > 0 {
				c.timer.stop()
			}
			// More than one Location, of any status, on any route: clients
			// differ on which one they follow (curl, and so git, skips an
			// empty one and takes the next), so no single value checked
			// would be the one followed, and no upstream sends two.
			if locs := resp.Header.Values("Location"); len(locs) > 1 {
				route := ""
				if f.redirects != nil {
					route = f.redirects.route
				}
				return manyLocations(route, f.up.URL.Host, resp.StatusCode, len(locs))
			}
			if f.redirects != nil {
				if err := f.redirects.check(resp, c.r); err != nil {
					return err
				}
				if f.redirects.links {
					f.redirects.rewriteLinks(resp, c.r)
				}
			}
			if checkResponse != nil {
				return checkResponse(resp)
			}
			return nil
		},
	}
	return f
}

// manyLocations refuses an upstream's answer with n Location headers;
// route, if not empty, names the route ("relay mod").
func manyLocations(route, host string, code, n int) error {
	if route != "" {
		route += " route: "
	}
	return Refuse(ErrUpstream, "%sthe upstream %s answered %d with %d Location headers, which cproxy does not pass on (a client could follow any of them); do not retry",
		route, host, code, n)
}

// url is t's URL on the upstream.
func (f *Forwarder) url(t *Target) url.URL {
	base := f.up.URL
	u := url.URL{
		Scheme:   base.Scheme,
		Host:     base.Host,
		Path:     joinPath(base.Path, t.Path),
		RawQuery: t.Query,
	}
	if t.RawPath != "" {
		u.RawPath = joinPath(base.EscapedPath(), t.RawPath)
	}
	return u
}

// RoundTrip sends a request of the route's own to the upstream, beside
// the one it serves (npm's fetch of a packument, for a tarball's publish
// time; the githubapi route's look-up of the repository a GraphQL node ID
// belongs to): method to t, with header and body (nil for none), over the
// forwarder's connections. The core sets the credential as on a forwarded
// request: t.Credential when not zero, else the upstream's own, through the
// route's setCredential; the route never holds it, and no error RoundTrip
// returns carries it. The upstream's header_timeout bounds the whole
// exchange, until the answer's body is closed. Nothing else of Forward
// applies: no checkResponse (the route checks the answer itself, starting
// with CredentialRefused), no redirect mapping, no audit. An error is a
// refusal (ErrUnavailable) when there is no credential to send; any other
// is the transport's, which the route words.
func (f *Forwarder) RoundTrip(ctx context.Context, method string, t Target, header http.Header, body []byte) (*http.Response, error) {
	cred := t.Credential
	if cred.IsZero() {
		var err error
		if cred, err = f.credential(ctx); err != nil {
			// The message names the reason and the fix, never the value.
			return nil, credentialRefusal(err)
		}
	}
	cancel := context.CancelFunc(func() {})
	if f.up.HeaderTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, f.up.HeaderTimeout)
	}
	u := f.url(&t)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	f.setCredential(req.Header, cred)
	resp, err := f.transport.RoundTrip(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelBody{resp.Body, cancel}
	return resp, nil
}

// cancelBody is an answer's body that ends its request's context when it
// is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// upstreamDialer opens connections to upstreams.
var upstreamDialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

// dialUpstream connects to an upstream. Over TLS the transport wraps the
// connection it returns.
func dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := upstreamDialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return upstreamConn{c}, nil
}

// upstreamConn is a plain connection to an upstream whose request bodies
// are copied through lent buffers. The HTTP/1 transport writes a body with
// io.Copy to the connection, and net.TCPConn's ReadFrom, which cannot
// splice or sendfile a body cproxy has read (or one a client is still
// sending), then allocates a buffer of up to 32 KiB for each body: on the
// model route, a Claude Code request's worth of garbage per request, most
// of what cproxy allocates, and so most of how often its collector runs.
type upstreamConn struct{ net.Conn }

func (c upstreamConn) ReadFrom(r io.Reader) (int64, error) {
	b := copyBuffers.Get()
	defer copyBuffers.Put(b)
	// writerOnly hides this ReadFrom, which io.CopyBuffer would call again.
	return io.CopyBuffer(writerOnly{c.Conn}, r, b)
}

type writerOnly struct{ io.Writer }

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
	if h.d <= 0 {
		return // no header timeout
	}
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

// sentBody is a request body as the transport sends it upstream. When the
// transport has read all of it (at EOF, or at the declared length, where the
// transport may stop), it starts the header timer, if the upstream has one;
// before that, for a body that streams from the client (recheck), it takes
// the forwarding decision again (Server.recheck): the client may have held
// the body open for as long as it liked. If the decision is now no, it
// withholds the body's end and fails the read: the transport aborts, and the
// upstream never receives a complete request. To withhold the end of a body
// of unknown length, which shows only when a read returns EOF, it keeps the
// last byte read back until the next read.
type sentBody struct {
	io.ReadCloser
	c       *outbound
	recheck bool
	left    int64 // bytes until the declared length; -1: unknown
	held    byte  // unknown length: the last byte read, not passed on yet
	holding bool
	end     error // once the end was reached: io.EOF, or why it was refused
}

func (b *sentBody) Read(p []byte) (int, error) {
	if b.end != nil {
		return 0, b.end
	}
	if !b.recheck || b.left >= 0 {
		n, err := b.ReadCloser.Read(p)
		if b.left >= 0 {
			b.left -= int64(n)
		}
		if err == nil && b.left != 0 {
			return n, nil
		}
		if err == nil || err == io.EOF {
			if rerr := b.ended(); rerr != nil {
				return 0, rerr
			}
		}
		b.c.timer.start()
		return n, err
	}
	if len(p) < 2 {
		// The transport reads with buffers of kilobytes; one byte
		// leaves no room for the one held back.
		return 0, io.ErrShortBuffer
	}
	off := 0
	if b.holding {
		p[0], off = b.held, 1
	}
	n, err := b.ReadCloser.Read(p[off:])
	n += off
	switch {
	case err == io.EOF:
		b.holding = false
		if rerr := b.ended(); rerr != nil {
			return 0, rerr
		}
		b.c.timer.start()
		return n, io.EOF
	case err != nil:
		b.c.timer.start()
		return 0, err
	case n == 0:
		return 0, nil
	}
	b.held, b.holding = p[n-1], true
	return n - 1, nil
}

// ended marks the end of the body reached and, for a streamed body, takes
// the decision again: a refusal withholds the end. Reads from then on
// return io.EOF, or the refusal.
func (b *sentBody) ended() error {
	b.end = io.EOF
	if !b.recheck {
		return nil
	}
	// Server.recheck, not audit.recheck: this runs on the transport's
	// goroutine, and the audit line is the handler's.
	if _, err := b.c.a.srv.recheck(b.c.ctx, b.c.a); err != nil {
		b.end = err
		b.c.refused.Store(&err)
		return err
	}
	return nil
}

// Forward sends r, a's request or a copy of it with its own context, to
// the upstream at t, streaming both ways. Failures are written as a's
// route writes a refusal.
//
// A request whose route asked the policy nothing (no Call.Decide or
// Call.AskAgain) is refused, not sent: deny by default holds even for a
// route that forgot to ask.
func (f *Forwarder) Forward(a *Call, r *http.Request, t Target) {
	writeErr := a.errorWriter()
	if a.decide == nil {
		a.srv.log.Error("a route forwarded a request without asking the policy; refused", "route", a.route)
		a.fail(writeErr, Refuse(ErrForbidden, "the %s route asked no policy question for this request, so cproxy does not send it; do not retry", a.route))
		return
	}
	cred := t.Credential
	if cred.IsZero() {
		var err error
		if cred, err = f.credential(r.Context()); err != nil {
			// The message names the reason and the fix, never the value.
			a.fail(writeErr, credentialRefusal(err))
			return
		}
	}
	t.cred = cred
	c := &outbound{t: t, f: f, a: a, r: r, writeErr: writeErr}
	c.ctx, c.cancel = context.WithCancelCause(r.Context())
	defer c.cancel(nil)
	ctx := context.WithValue(c.ctx, outboundKey{}, c)
	if err := a.flight.forwarding(c.cancel); err != nil {
		a.fail(writeErr, err)
		return
	}
	if err := a.recheck(r.Context()); err != nil {
		a.fail(writeErr, err)
		return
	}
	// Once the request is decided as it is sent, and not before: a
	// grant is used by the request that reaches the upstream.
	if err := a.useGrant(r.Context()); err != nil {
		a.fail(writeErr, err)
		return
	}
	if a.meter != nil && a.meter.charged {
		// A charged model request is charged once the upstream has it.
		ctx = httptrace.WithClientTrace(ctx, a.meter.clientTrace())
	}
	c.timer = headerTimer{d: f.up.HeaderTimeout, fire: c.timedOut}
	defer c.timer.stop()
	// A body cproxy has read whole was decided with; one that streams from
	// the client is decided again at its end.
	_, read := r.Body.(*checkedBody)
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		c.timer.start()
	case !read || f.up.HeaderTimeout > 0:
		c.body = sentBody{ReadCloser: r.Body, c: c, recheck: !read, left: r.ContentLength}
		r.Body = &c.body
	}
	if c.series = a.metrics.Forwarding(a.route); c.series != nil {
		defer c.series.Done()
		c.sent = time.Now()
	}
	f.proxy.ServeHTTP(a.w, r.WithContext(ctx))
}

// checkedBody is a request body cproxy has read whole (to check it), as the
// upstream gets it. It lets go of its buffer as soon as the upstream has read
// every byte, giving it back to bodyBuffers: a stream stays open for minutes
// after the upstream has its request, and keeping each open stream's request
// (tens of KB from Claude Code) until its answer ends would be a large part
// of cproxy's memory with many streams open. (Close comes too late for that:
// ReverseProxy keeps the transport from closing the body, and closes it
// itself when the answer ends.) Nothing reads a body twice: the transport
// retries a request whose body it has read only with GetBody, which a
// proxied request does not have.
type checkedBody struct {
	b   []byte
	off int
	// lent, when b came from bodyBuffers, is what goes back there.
	lent *[]byte
	// held is b's share of the memory for bodies, given back with b; nil
	// for none.
	held *BodyHold
}

func (rb *checkedBody) Read(p []byte) (int, error) {
	if rb.off >= len(rb.b) {
		return 0, io.EOF
	}
	n := copy(p, rb.b[rb.off:])
	rb.off += n
	if rb.off == len(rb.b) {
		// The last byte has been copied out: the buffer is no longer this
		// request's. Only Read touches it, so no other read can be under way.
		if rb.lent != nil {
			putBodyBuffer(rb.lent)
		}
		held := rb.held
		rb.b, rb.off, rb.lent, rb.held = nil, 0, nil, nil
		held.release() // after b is let go: it may return b's memory to the OS
	}
	return n, nil
}

// Close does nothing: the buffer goes back when its last byte is read, by
// the goroutine that reads it; ReverseProxy may close a body while the
// transport is still reading it.
func (rb *checkedBody) Close() error { return nil }

// Request body buffers are lent by size, in powers of two from 16 KiB to
// 2 MiB; a body that fits none is allocated for itself. A body of n bytes
// takes a buffer of the smallest class that holds it, so a lent buffer is
// never more than twice its body.
const (
	minBodyBufferShift = 14 // 16 KiB
	maxBodyBufferShift = 21 // 2 MiB
)

var bodyBuffers [maxBodyBufferShift - minBodyBufferShift + 1]sync.Pool

// bodyBufferClass is the pool a body of n bytes takes its buffer from, or
// -1 for none.
func bodyBufferClass(n int) int {
	if n <= 0 || n > 1<<maxBodyBufferShift {
		return -1
	}
	c := max(bits.Len(uint(n-1)), minBodyBufferShift)
	return c - minBodyBufferShift
}

// getBodyBuffer returns a buffer of n bytes for a request body and, when
// it is lent, what to give back to putBodyBuffer once the body has been
// read (nil when it was allocated for this body alone). A lent buffer holds
// an earlier request's bytes: the caller must fill all n before anything
// reads them.
func getBodyBuffer(n int) ([]byte, *[]byte) {
	c := bodyBufferClass(n)
	if c < 0 {
		return make([]byte, n), nil
	}
	lent, ok := bodyBuffers[c].Get().(*[]byte)
	if !ok {
		b := make([]byte, 1<<(c+minBodyBufferShift))
		lent = &b
	}
	return (*lent)[:n], lent
}

// putBodyBuffer gives back what getBodyBuffer lent; nil (a buffer of its
// own) gives back nothing.
func putBodyBuffer(lent *[]byte) {
	if lent == nil {
		return
	}
	if c := bodyBufferClass(cap(*lent)); c >= 0 && cap(*lent) == 1<<(c+minBodyBufferShift) {
		bodyBuffers[c].Put(lent)
	}
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
