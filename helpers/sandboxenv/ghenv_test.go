package sandboxenv

import "testing"

func TestGHHost(t *testing.T) {
	for _, tc := range []struct{ url, host string }{
		{"https://cproxy.internal:8443", "cproxy.internal:8443"},
		{"https://cproxy.internal:8443/", "cproxy.internal:8443"},
		{"https://Cproxy.Internal:443", "cproxy.internal"},
		{"https://cproxy.internal", "cproxy.internal"},
		{"https://[::1]:8443", "[::1]:8443"},
		{"http://cproxy.internal:8080", ""},
		{"https://gw.internal/cproxy", ""},
	} {
		host, err := GHHost(tc.url)
		if host != tc.host || (err != nil) != (tc.host == "") {
			t.Errorf("GHHost(%q) = %q, %v; want %q", tc.url, host, err, tc.host)
		}
	}
}

func TestBuildGH(t *testing.T) {
	e, _, err := Build(Options{ProxyURL: "https://cproxy.internal:8443", Token: "cpx_x", NoGit: true, NoNPM: true, GH: true, GHRepo: "acme/app", SSLCertFile: "/etc/cproxy/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"GH_HOST": "cproxy.internal:8443", "GH_ENTERPRISE_TOKEN": "cpx_x", "GH_REPO": "cproxy.internal:8443/acme/app", "SSL_CERT_FILE": "/etc/cproxy/ca.pem"}
	for _, v := range e {
		if w, ok := want[v.Name]; ok {
			if v.Value != w {
				t.Errorf("%s = %q, want %q", v.Name, v.Value, w)
			}
			delete(want, v.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing %v", want)
	}
	if _, _, err := Build(Options{ProxyURL: "http://cproxy.internal:8080", Token: "cpx_x", GH: true}); err == nil {
		t.Error("gh set up on a plain http URL")
	}
	if _, _, err := Build(Options{ProxyURL: "https://cproxy.internal:8443", Token: "cpx_x", GH: true, GHRepo: "acme"}); err == nil {
		t.Error("GH_REPO without an owner accepted")
	}
}
