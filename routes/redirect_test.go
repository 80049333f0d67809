package routes

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestRedirectMap(t *testing.T) {
	base, _ := url.Parse("https://up.example/hub/")
	m := &Redirects{route: "relay mod", base: base, prefix: "/mod"}
	for _, c := range []struct {
		code     int
		location string
		want     string // the Location sent on, or "refused"
	}{
		{302, "https://up.example/hub/sessions/1?x=1#f", "http://proxy.test:8080/mod/sessions/1?x=1"},
		{301, "https://UP.example:443/hub/a", "http://proxy.test:8080/mod/a"},
		{307, "here", "http://proxy.test:8080/mod/sessions/here"},
		{308, "/hub", "http://proxy.test:8080/mod"},
		{303, "http://proxy.test:8080/mod/other", "http://proxy.test:8080/mod/other"},
		{302, "/hubx/a", "refused"},
		{302, "/other", "refused"},
		{302, "http://up.example/hub/a", "refused"},
		{302, "https://up.example:8443/hub/a", "refused"},
		{302, "https://user:pw@up.example/hub/a", "refused"},
		{302, "https://elsewhere.example/hub/a", "refused"},
		{302, "//elsewhere.example/hub/a", "refused"},
		{302, "http://proxy.test:8081/mod/a", "refused"},
		{302, "https://up.example/%zz", "refused"},
		{200, "https://elsewhere.example/", "https://elsewhere.example/"},
	} {
		out, _ := url.Parse("https://up.example/hub/sessions/1")
		resp := &http.Response{StatusCode: c.code, Header: http.Header{"Location": {c.location}}, Request: &http.Request{URL: out}}
		err := m.check(resp, &http.Request{Host: "proxy.test:8080"})
		got := resp.Header.Get("Location")
		if err != nil {
			got = "refused"
			if !strings.Contains(err.Error(), "relay mod route: the upstream up.example answered") {
				t.Errorf("%s: %v", c.location, err)
			}
		}
		if got != c.want {
			t.Errorf("%d %s: %s, want %s", c.code, c.location, got, c.want)
		}
	}
}

// A Link header's links within the upstream lead to cproxy; a link to
// another host, scheme or port, with credentials in it, or a header of
// another shape is dropped.
func TestRewriteLinks(t *testing.T) {
	base, _ := url.Parse("https://api.example/")
	m := &Redirects{route: "githubapi", base: base, prefix: "/api/v3", links: true}
	for _, c := range []struct{ link, want string }{
		{`<https://api.example/repos/o/r/pulls?page=2>; rel="next", <https://api.example/repos/o/r/pulls?page=5>; rel="last"`,
			`<http://proxy.test:8080/api/v3/repos/o/r/pulls?page=2>; rel="next", <http://proxy.test:8080/api/v3/repos/o/r/pulls?page=5>; rel="last"`},
		{`<https://evil.example/repos/o/r/pulls?page=2>; rel="next", <https://api.example/repos/o/r/pulls?page=5>; rel="last"`,
			`<http://proxy.test:8080/api/v3/repos/o/r/pulls?page=5>; rel="last"`},
		{`<http://api.example/repos/o/r/pulls?page=2>; rel="next"`, ""},
		{`<https://api.example:8443/repos/o/r/pulls?page=2>; rel="next"`, ""},
		{`<https://u:p@api.example/repos/o/r/pulls?page=2>; rel="next"`, ""},
		{`<//evil.example/x>; rel="next"`, ""},
		{`</repos/o/r/pulls?page=2>; rel=next`, `<http://proxy.test:8080/api/v3/repos/o/r/pulls?page=2>; rel="next"`},
		{`<https://api.example/a>; rel="next"; title="x"`, ""},
		{`<https://api.example/a>; rel="next" <https://evil.example/>`, ""},
		{`<https://api.example/a>`, ""},
		{`https://api.example/a; rel="next"`, ""},
		{`<https://api.example/a>; rel="next\r\nSet-Cookie: x"`, ""},
	} {
		out, _ := url.Parse("https://api.example/repos/o/r/pulls")
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Link": {c.link}}, Request: &http.Request{URL: out}}
		m.rewriteLinks(resp, &http.Request{Host: "proxy.test:8080"})
		if got := resp.Header.Get("Link"); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.link, got, c.want)
		}
	}
}

// FuzzRewriteLinks: whatever the upstream's Link header holds, what is
// sent on leads only to cproxy, with no byte that could end the header.
func FuzzRewriteLinks(f *testing.F) {
	f.Add(`<https://api.example/repos/o/r/pulls?page=2>; rel="next", <https://api.example/x>; rel="last"`)
	f.Add(`<https://evil.example/>; rel="next"`)
	f.Add(`<a>;rel=next,<b>;rel="prev first"`)
	base, _ := url.Parse("https://api.example/")
	m := &Redirects{route: "githubapi", base: base, prefix: "/api/v3", links: true}
	f.Fuzz(func(t *testing.T, link string) {
		out, _ := url.Parse("https://api.example/repos/o/r/pulls")
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Link": {link}}, Request: &http.Request{URL: out}}
		m.rewriteLinks(resp, &http.Request{Host: "proxy.test:8080"})
		got := resp.Header.Get("Link")
		if strings.ContainsAny(got, "\r\n\x00") {
			t.Fatalf("Link %q", got)
		}
		for _, l := range strings.Split(got, ", ") {
			if got != "" && !strings.HasPrefix(l, "<http://proxy.test:8080/api/v3") {
				t.Fatalf("a link off cproxy: %q from %q", got, link)
			}
		}
	})
}

// TestRedirectTwoLocations: an answer with more than one Location is
// refused whatever the values, an empty one included (curl, and so git,
// skips it and follows the next), and whatever the status.
func TestRedirectTwoLocations(t *testing.T) {
	base, _ := url.Parse("https://up.example/hub/")
	m := &Redirects{route: "relay mod", base: base, prefix: "/mod"}
	for _, c := range []struct {
		code int
		locs []string
	}{
		{302, []string{"", "https://elsewhere.example/collect"}},
		{302, []string{"https://elsewhere.example/collect", ""}},
		{301, []string{"", ""}},
		{307, []string{"https://up.example/hub/a", "https://up.example/hub/b"}},
		{302, []string{"here", "https://elsewhere.example/collect", "there"}},
		{201, []string{"https://up.example/hub/a", "https://elsewhere.example/collect"}},
	} {
		out, _ := url.Parse("https://up.example/hub/sessions/1")
		resp := &http.Response{StatusCode: c.code, Header: http.Header{"Location": c.locs}, Request: &http.Request{URL: out}}
		err := m.check(resp, &http.Request{Host: "proxy.test:8080"})
		if err == nil || !strings.Contains(err.Error(), "relay mod route: the upstream up.example answered") || !strings.Contains(err.Error(), "Location headers") {
			t.Errorf("%d %q: %v, want refused", c.code, c.locs, err)
		}
	}
}
