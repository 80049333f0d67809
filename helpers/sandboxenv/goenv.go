package sandboxenv

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// GoUser is the user name of GOPROXY's userinfo; cproxy reads the
// password alone, as it does git's.
const GoUser = "cproxy"

// GoProxy is what go takes as GOPROXY for cproxy at the sandbox's proxy
// URL: the Go modules route, with the sandbox token as the password of its
// userinfo, which go sends as Basic auth. go sends a GOPROXY's userinfo
// only over HTTPS ("refusing to pass credentials to insecure URL"), so
// only an https URL (cproxy's TLS listener, listen.proxy_tls, as the
// sandbox reaches it) can be one; the error says why another cannot. The
// list has cproxy alone, with no ",direct" after it: a module cproxy
// refuses is never fetched from its origin instead.
func GoProxy(proxyURL, token string) (string, error) {
	u, err := url.Parse(strings.TrimRight(proxyURL, "/"))
	switch {
	case err != nil || u.Host == "":
		return "", fmt.Errorf("invalid proxy URL %q", proxyURL)
	case u.Scheme != "https":
		return "", errors.New("go sends a module proxy's credentials only over HTTPS (it refuses to pass credentials to insecure URL), and the proxy URL is not cproxy's TLS listener (listen.proxy_tls)")
	case token == "":
		return "", errors.New("no sandbox token")
	}
	u.User = url.UserPassword(GoUser, token)
	u.Path += "/gomod/"
	u.RawPath = ""
	return u.String(), nil
}

// sandboxGo returns the variables that send go's module downloads to
// cproxy: GOPROXY alone. GOSUMDB keeps its default, sum.golang.org, which
// go then reads through GOPROXY (cproxy proxies it), so modules are still
// verified; GONOSUMDB, GONOPROXY, GOPRIVATE and GOFLAGS are not set, as
// each would let go skip verification or fetch a module from its origin.
func sandboxGo(base, token string) (Env, error) {
	p, err := GoProxy(base, token)
	if err != nil {
		return nil, err
	}
	return Env{{"GOPROXY", p}}, nil
}
