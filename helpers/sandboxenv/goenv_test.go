package sandboxenv

import "testing"

func TestGoProxy(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"https://cproxy.internal:8443", "https://cproxy:cpx_x@cproxy.internal:8443/gomod/"},
		{"https://cproxy.internal:8443/", "https://cproxy:cpx_x@cproxy.internal:8443/gomod/"},
		{"https://gw.internal/cproxy", "https://cproxy:cpx_x@gw.internal/cproxy/gomod/"},
		{"http://cproxy.internal:8080", ""},
		{"https://", ""},
	} {
		got, err := GoProxy(tc.url, "cpx_x")
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("GoProxy(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
}

func TestBuildGo(t *testing.T) {
	e, _, err := Build(Options{ProxyURL: "https://cproxy.internal:8443", Token: "cpx_x", NoGit: true, NoNPM: true, Go: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range e {
		switch v.Name {
		case "GOPROXY":
			n++
			if v.Value != "https://cproxy:cpx_x@cproxy.internal:8443/gomod/" {
				t.Errorf("GOPROXY = %q", v.Value)
			}
		case "GOSUMDB", "GONOSUMDB", "GONOPROXY", "GOPRIVATE", "GOFLAGS", "GOINSECURE":
			t.Errorf("%s set: %q", v.Name, v.Value)
		}
	}
	if n != 1 {
		t.Errorf("GOPROXY set %d times", n)
	}
	if _, _, err := Build(Options{ProxyURL: "http://cproxy.internal:8080", Token: "cpx_x", Go: true}); err == nil {
		t.Error("go set up on a plain http URL")
	}
}
