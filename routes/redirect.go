package routes

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Redirects keeps an upstream's redirects on cproxy. cproxy never follows
// a redirect itself, but its client (git, npm, whatever calls a relay) does:
// one it passed on as sent would take the client to the upstream directly,
// or to any host, outside every check. So a redirect within the upstream is
// rewritten to cproxy's URL for the same route, where the request the client
// then makes is checked like any other; one to cproxy's own URL passes; any
// other is refused with a 502.
type Redirects struct {
	// route names the route in refusals: "npm", "github", "relay mod".
	route string
	// base is the upstream's base URL; prefix is cproxy's path for it
	// ("/npm", "/github", a relay's prefix without its trailing slash).
	base   *url.URL
	prefix string
	// public is cproxy's public URL; "" means http:// and the Host the
	// request came with.
	public string
	// within, if set, decides a redirect within the upstream, given the
	// request as the client sent it and cproxy's path and query for the
	// Location: an error refuses it. nil lets each through, rewritten.
	within func(in *http.Request, path, query string) error
}

// CheckRedirects has f ask within about each redirect within its
// upstream before rewriting it onto cproxy, given the request as the
// client sent it and cproxy's path and query for the Location; an error
// (a refusal) refuses the redirect. For a route whose client must not be
// sent elsewhere within the upstream (GitHub's redirect of a renamed
// repository). It has no effect on a Forwarder not made by
// Env.NewForwarder, which passes redirects as sent; call it before the
// first Forward.
func (f *Forwarder) CheckRedirects(within func(in *http.Request, path, query string) error) {
	if f.redirects != nil {
		f.redirects.within = within
	}
}

// check rewrites or refuses resp when it is a redirect with a Location; in
// is the request as the client sent it to cproxy.
func (m *Redirects) check(resp *http.Response, in *http.Request) error {
	loc := resp.Header.Get("Location")
	if resp.StatusCode < 300 || resp.StatusCode > 399 || loc == "" {
		return nil
	}
	u, err := resp.Request.URL.Parse(loc)
	if err != nil {
		return Refuse(ErrUpstream, "%s route: the upstream %s answered %d with a Location cproxy cannot read; do not retry", m.route, m.base.Host, resp.StatusCode)
	}
	public := strings.TrimSuffix(m.public, "/")
	if public == "" {
		public = "http://" + in.Host
	}
	if pu, err := url.Parse(public); err == nil && sameOrigin(u, pu) {
		return nil
	}
	basePath := strings.TrimSuffix(m.base.EscapedPath(), "/")
	rest, ok := strings.CutPrefix(u.EscapedPath(), basePath)
	if !sameOrigin(u, m.base) || u.User != nil || !ok || rest != "" && rest[0] != '/' {
		return Refuse(ErrUpstream, "%s route: the upstream %s answered %d, a redirect to %s, which cproxy does not pass on (only redirects within %s, which lead back through cproxy); do not retry",
			m.route, m.base.Host, resp.StatusCode, Clip(u.Scheme+"://"+u.Host, 256), m.base.Scheme+"://"+m.base.Host+m.base.EscapedPath())
	}
	if m.within != nil {
		if err := m.within(in, m.prefix+rest, u.RawQuery); err != nil {
			return err
		}
	}
	to := public + m.prefix + rest
	if u.RawQuery != "" {
		to += "?" + u.RawQuery
	}
	resp.Header.Set("Location", to)
	return nil
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(hostPort(a), hostPort(b))
}

// hostPort is u's host with its port, the scheme's default when none is
// given.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[strings.ToLower(u.Scheme)]
	}
	return net.JoinHostPort(u.Hostname(), port)
}
