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
