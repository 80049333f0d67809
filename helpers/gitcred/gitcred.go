package gitcred

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
)

// ErrNotOurs is returned by Answer for a request that is not for
// cproxy: the helper then exits non-zero without a word, and git asks its
// next helper.
var ErrNotOurs = errors.New("not a cproxy host")

const (
	// credentialInputLimit and credentialLineLimit bound what git may send;
	// git sends a few short lines.
	credentialInputLimit = 64 << 10
	credentialLineLimit  = 16 << 10
	// tokenFileLimit bounds what is read from CPROXY_TOKEN_FILE: a token is
	// a few dozen bytes, so anything near this is not one.
	tokenFileLimit = 4 << 10
)

// Answer answers one git credential helper call (gitcredentials(7),
// git-credential(1)). For "get" it hands git the sandbox token for cproxy's
// own address, CPROXY_URL, and for nothing else. The token is
// CPROXY_TOKEN_FILE's content, read on every call so that a token the
// harness rotates is picked up by the next git command, or else
// CPROXY_TOKEN. getenv is os.Getenv outside tests.
//
// A git that offers capability[]=authtype (2.46 and later) gets the token
// as a Bearer credential; an older one gets it as the password of user
// cproxy, which git sends as Basic auth and cproxy accepts as well.
func Answer(op string, in io.Reader, out io.Writer, getenv func(string) string) error {
	in = io.LimitReader(in, credentialInputLimit)
	switch op {
	case "get":
	case "store", "erase":
		// git reports a credential that worked (store) or was refused
		// (erase) to every helper. The token is the harness's to issue and
		// rotate, not ours to keep or forget, so there is nothing to do,
		// and a word on stdout or stderr would only confuse git. Reading
		// the input keeps git from writing into a closed pipe.
		_, _ = io.Copy(io.Discard, in)
		return nil
	default:
		// gitcredentials(7): a helper ignores operations it does not know,
		// silently, so that a newer git can add some.
		_, _ = io.Copy(io.Discard, in)
		return nil
	}
	req, err := readCredentialRequest(in)
	if err != nil {
		return err
	}
	if !req.forProxy(getenv("CPROXY_URL")) {
		return ErrNotOurs
	}
	token, err := credentialToken(getenv)
	if err != nil {
		return err
	}
	if token == "" {
		return ErrNotOurs
	}
	if req.capabilities["authtype"] {
		// git joins authtype and credential with a space into the
		// Authorization header. capability[] lines come first, as
		// git-credential(1) asks, so a reader can parse in one pass.
		_, err = fmt.Fprintf(out, "capability[]=authtype\nauthtype=Bearer\ncredential=%s\n", token)
	} else {
		_, err = fmt.Fprintf(out, "username=cproxy\npassword=%s\n", token)
	}
	return err
}

// credentialRequest is what git tells a helper about the credential it
// wants.
type credentialRequest struct {
	protocol, host string
	// path is set only when git is told to send it (credential.useHttpPath,
	// which cproxy env sets for cproxy's URL).
	path    string
	hasPath bool
	// capabilities git understands in the answer (capability[]=…).
	capabilities map[string]bool
}

// readCredentialRequest reads key=value lines up to the first blank line or
// EOF, as git writes them. Keys git may add later, wwwauth[] and state[]
// among them, are ignored, as git-credential(1) asks.
func readCredentialRequest(r io.Reader) (credentialRequest, error) {
	req := credentialRequest{capabilities: map[string]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), credentialLineLimit)
	for sc.Scan() {
		// git's own reader (strbuf_getline) drops a CR before the LF.
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			break
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			// No quoting of the line: it could hold a password.
			return credentialRequest{}, fmt.Errorf("malformed credential line (want key=value)")
		}
		switch k {
		case "protocol":
			req.protocol = v
		case "host":
			req.host = v
		case "path":
			req.path, req.hasPath = v, true
		case "url":
			// git itself expands url= before it calls a helper; take it
			// anyway, as git credential does.
			u, err := url.Parse(v)
			if err != nil {
				return credentialRequest{}, fmt.Errorf("malformed url attribute")
			}
			req.protocol, req.host = u.Scheme, u.Host
			if p := strings.TrimPrefix(u.Path, "/"); p != "" {
				req.path, req.hasPath = p, true
			}
		case "capability[]":
			if v == "" {
				// An empty multi-valued attribute clears the list.
				clear(req.capabilities)
			} else {
				req.capabilities[v] = true
			}
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return credentialRequest{}, fmt.Errorf("credential line over %d bytes", credentialLineLimit)
	}
	return req, sc.Err()
}

// forProxy reports whether the request is for cproxy at proxyURL: the same
// scheme, the same host and port, and, if cproxy is served under a path and
// git sent one, a path under it.
func (req credentialRequest) forProxy(proxyURL string) bool {
	u, err := url.Parse(proxyURL)
	if proxyURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	if !strings.EqualFold(req.protocol, u.Scheme) || !strings.EqualFold(hostPort(u.Scheme, req.host), hostPort(u.Scheme, u.Host)) {
		return false
	}
	prefix := strings.Trim(u.Path, "/")
	if !req.hasPath || prefix == "" {
		// Nothing to check. git sends a path only with
		// credential.useHttpPath, which cproxy env sets for cproxy's URL;
		// and the helper it sets, credential.<url>.helper, is only asked
		// for URLs under that URL, prefix and all.
		return true
	}
	for _, seg := range strings.Split(req.path, "/") {
		// curl squashes dot segments, so prefix/../elsewhere would reach
		// elsewhere with cproxy's token.
		if seg == "." || seg == ".." {
			return false
		}
	}
	p := strings.Trim(req.path, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// hostPort spells a host with its port, the scheme's default if none is
// given, so http://h and http://h:80 are the same address.
func hostPort(scheme, host string) string {
	u := url.URL{Host: host}
	if u.Port() != "" {
		return host
	}
	if scheme == "https" {
		return host + ":443"
	}
	return host + ":80"
}

// credentialToken returns the sandbox token: CPROXY_TOKEN_FILE's content if
// that is set, else CPROXY_TOKEN. The file wins because it is the one a
// harness can rotate under running processes, and cproxy env sets
// CPROXY_TOKEN in any case. It returns "" when neither is set.
//
// A file readable by group or others is still used: it lives inside the
// sandbox, whose every process already has the token in its environment,
// so refusing it would protect nothing and break git.
func credentialToken(getenv func(string) string) (string, error) {
	path := getenv("CPROXY_TOKEN_FILE")
	if path == "" {
		token := getenv("CPROXY_TOKEN")
		if token != "" && !validToken(token) {
			return "", fmt.Errorf("CPROXY_TOKEN is not a token (want one word of printable ASCII)")
		}
		return token, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("CPROXY_TOKEN_FILE: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, tokenFileLimit+1))
	if err != nil {
		return "", fmt.Errorf("CPROXY_TOKEN_FILE: %w", err)
	}
	// Errors name the file, never its content, which may be a secret.
	if len(b) > tokenFileLimit {
		return "", fmt.Errorf("CPROXY_TOKEN_FILE %s: not a token (over %d bytes)", path, tokenFileLimit)
	}
	token := strings.TrimRight(string(b), "\r\n")
	if token == "" {
		return "", fmt.Errorf("CPROXY_TOKEN_FILE %s is empty", path)
	}
	if !validToken(token) {
		return "", fmt.Errorf("CPROXY_TOKEN_FILE %s: not a token (want one line of printable ASCII)", path)
	}
	return token, nil
}

// validToken accepts what can go on a credential line and into an HTTP
// header unchanged: printable ASCII without spaces. It does not check the
// token's own format, which is cproxy's to judge.
func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return s != ""
}
