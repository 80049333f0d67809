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
	// links says Link headers are rewritten too (RewriteLinks), with
	// linkPath, if set, mapping each link's path.
	links    bool
	linkPath func(in *http.Request, path string) string
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
// is the request as the client sent it to cproxy. An answer with more than
// one Location is refused here too, though the Forwarder refuses every
// such answer on every route before it asks (manyLocations).
func (m *Redirects) check(resp *http.Response, in *http.Request) error {
	locs := resp.Header.Values("Location")
	if len(locs) > 1 {
		return manyLocations(m.route, m.base.Host, resp.StatusCode, len(locs))
	}
	if resp.StatusCode < 300 || resp.StatusCode > 399 || len(locs) == 0 || locs[0] == "" {
		return nil
	}
	loc := locs[0]
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

// RewriteLinks has f keep its upstream's Link headers (RFC 8288; GitHub's
// REST paging, `<URL>; rel="next"`) on cproxy, as a redirect's Location
// is: a link within the upstream is rewritten to cproxy's URL for the same
// route, one to anywhere else is dropped, and a header cproxy cannot read
// is dropped whole. Only the link's URL and its rel are kept. A client
// that follows the links (gh api --paginate, Octokit's paginate) then
// stays on cproxy, where each page is checked like any request. path, if
// not nil, maps cproxy's path for a link within the upstream, given the
// request as the client sent it, to the path the link gets (GitHub's
// /repositories/ID/… form of the client's /repos/OWNER/NAME/…); "" drops
// the link. It has no effect on a Forwarder not made by Env.NewForwarder;
// call it before the first Forward.
func (f *Forwarder) RewriteLinks(path func(in *http.Request, path string) string) {
	if f.redirects != nil {
		f.redirects.links = true
		f.redirects.linkPath = path
	}
}

// maxLinks bounds the links of one Link header cproxy rewrites.
const maxLinks = 32

// rewriteLinks rewrites resp's Link headers (RewriteLinks); in is the
// request as the client sent it to cproxy.
func (m *Redirects) rewriteLinks(resp *http.Response, in *http.Request) {
	headers := resp.Header.Values("Link")
	if len(headers) == 0 {
		return
	}
	resp.Header.Del("Link")
	links, ok := parseLinks(strings.Join(headers, ","))
	if !ok {
		return
	}
	// The client's own origin on the TLS listener: a client that speaks
	// only HTTPS to cproxy (gh) must not be sent to the plain listener.
	public := strings.TrimSuffix(m.public, "/")
	if in.TLS != nil {
		public = "https://" + in.Host
	} else if public == "" {
		public = "http://" + in.Host
	}
	basePath := strings.TrimSuffix(m.base.EscapedPath(), "/")
	var out []string
	for _, l := range links {
		u, err := resp.Request.URL.Parse(l.url)
		if err != nil || !sameOrigin(u, m.base) || u.User != nil || u.Fragment != "" {
			continue
		}
		rest, ok := strings.CutPrefix(u.EscapedPath(), basePath)
		if !ok || rest != "" && rest[0] != '/' {
			continue
		}
		p := m.prefix + rest
		if m.linkPath != nil {
			if p = m.linkPath(in, p); p == "" {
				continue
			}
		}
		to := public + p
		if u.RawQuery != "" {
			to += "?" + u.RawQuery
		}
		out = append(out, "<"+to+`>; rel="`+l.rel+`"`)
	}
	if len(out) > 0 {
		resp.Header.Set("Link", strings.Join(out, ", "))
	}
}

// link is one link of a Link header: its URL (as written) and its rel.
type link struct{ url, rel string }

// parseLinks reads a Link header's value: `<URL>; param; …` links
// separated by commas, each with one rel parameter of relation types
// (lower-case letters, digits, '-', '.', and spaces between them). Any
// other shape, or more than maxLinks links, is not read (false).
func parseLinks(v string) ([]link, bool) {
	var links []link
	for s := strings.TrimSpace(v); s != ""; {
		if s[0] != '<' || len(links) == maxLinks {
			return nil, false
		}
		end := strings.IndexByte(s, '>')
		if end < 0 {
			return nil, false
		}
		l := link{url: s[1:end]}
		if strings.ContainsAny(l.url, "<> \t\"") {
			return nil, false
		}
		s = s[end+1:]
		next := strings.IndexByte(s, ',')
		params := s
		if next >= 0 {
			params, s = s[:next], strings.TrimSpace(s[next+1:])
		} else {
			s = ""
		}
		for _, p := range strings.Split(params, ";") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			name, val, ok := strings.Cut(p, "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "rel") {
				return nil, false
			}
			val = strings.Trim(strings.TrimSpace(val), `"`)
			if l.rel != "" || !relTypes(val) {
				return nil, false
			}
			l.rel = val
		}
		if l.rel == "" {
			return nil, false
		}
		links = append(links, l)
	}
	return links, true
}

// relTypes reports whether s is one or more relation types as GitHub
// writes them ("next", "last"), separated by single spaces.
func relTypes(s string) bool {
	for _, t := range strings.Split(s, " ") {
		if t == "" || len(t) > 32 {
			return false
		}
		for _, c := range []byte(t) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
				return false
			}
		}
	}
	return true
}
