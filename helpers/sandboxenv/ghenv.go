package sandboxenv

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// ghRepoName is OWNER/REPO as GitHub spells them.
var ghRepoName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$`)

// ValidGHRepo says whether repo is OWNER/REPO as GitHub spells them.
func ValidGHRepo(repo string) bool { return ghRepoName.MatchString(repo) }

// GHHost is what gh takes as GH_HOST for cproxy at the sandbox's proxy URL:
// its host, with the port unless it is 443. gh speaks only HTTPS to a host
// that is not github.com, and calls https://GH_HOST/api/v3/ and
// /api/graphql, so only an https URL with no path (cproxy's TLS listener,
// listen.proxy_tls, as the sandbox reaches it) can be one; the error says
// why another cannot. gh drops the port from a git remote's URL before it
// matches it to GH_HOST, so a host without a port is the one a checkout's
// remotes can match.
func GHHost(proxyURL string) (string, error) {
	u, err := url.Parse(strings.TrimRight(proxyURL, "/"))
	switch {
	case err != nil || u.Host == "":
		return "", fmt.Errorf("invalid proxy URL %q", proxyURL)
	case u.Scheme != "https":
		return "", errors.New("gh speaks only HTTPS to a GitHub Enterprise host, and the proxy URL is not cproxy's TLS listener (listen.proxy_tls)")
	case u.Path != "":
		return "", fmt.Errorf("gh takes a host, not a URL with a path (%s), as GH_HOST", u.Path)
	}
	host := strings.ToLower(u.Host)
	if u.Port() == "443" {
		host = strings.TrimSuffix(host, ":443")
	}
	return host, nil
}

// sandboxGH returns the variables that send gh to cproxy's githubapi route
// as to a GitHub Enterprise host: GH_HOST, the sandbox token as
// GH_ENTERPRISE_TOKEN (which gh sends to GH_HOST alone, as "Authorization:
// token …"), no update check (it would ask api.github.com past cproxy),
// GH_REPO when repo is set, and SSL_CERT_FILE when caFile is.
func sandboxGH(base, token, repo, caFile string) (Env, error) {
	host, err := GHHost(base)
	if err != nil {
		return nil, err
	}
	e := Env{{"GH_HOST", host}, {"GH_ENTERPRISE_TOKEN", token}, {"GH_NO_UPDATE_NOTIFIER", "1"}}
	if repo != "" {
		if !ValidGHRepo(repo) {
			return nil, fmt.Errorf("invalid repository %q: give OWNER/REPO", repo)
		}
		// Qualified with the host: gh reads a bare OWNER/REPO as
		// github.com's.
		e = append(e, Var{"GH_REPO", host + "/" + repo})
	}
	if caFile != "" {
		e = append(e, Var{"SSL_CERT_FILE", caFile})
	}
	return e, nil
}
