package sandboxenv

import (
	"fmt"
	"net/url"
	"strings"
)

// PyPIIndex is cproxy's PyPI index under base, as pip and uv take it.
func PyPIIndex(base string) string {
	return strings.TrimRight(base, "/") + "/pypi/simple/"
}

// sandboxPip returns the variables that send pip and uv to cproxy's PyPI
// route with the sandbox token: the index URL with the token as its
// password (pip and uv send an index URL's user info as Basic
// authentication to that host and port alone, and pip shows it as ****),
// pip's own version check off (it asks the index for pip, which a policy
// seldom allows, so each pip command would log a refusal), and, for a
// plain-http proxy URL, the proxy's host and port as trusted, without which
// pip refuses an http index.
func sandboxPip(base, token string) (Env, error) {
	u, err := url.Parse(PyPIIndex(base))
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("invalid proxy URL %q", base)
	}
	u.User = url.UserPassword("cproxy", token)
	index := u.String()
	e := Env{
		{"PIP_INDEX_URL", index},
		{"PIP_DISABLE_PIP_VERSION_CHECK", "1"},
	}
	if u.Scheme == "http" {
		e = append(e, Var{"PIP_TRUSTED_HOST", u.Host})
	}
	return append(e, Var{"UV_DEFAULT_INDEX", index}), nil
}
