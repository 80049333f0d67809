package helpers

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// ErrNotOurs is returned by GitCredential for a host that is not cproxy's:
// the helper then exits non-zero without a word, and git asks its next
// helper.
var ErrNotOurs = errors.New("not a cproxy host")

// credentialInputLimit bounds what git may send; git sends a few short lines.
const credentialInputLimit = 64 << 10

// GitCredential answers one git credential helper call (see
// gitcredentials(7)). For "get" it hands git the sandbox token as the
// password for cproxy's own address, taken from CPROXY_URL and CPROXY_TOKEN
// through getenv, and for nothing else.
func GitCredential(op string, in io.Reader, out io.Writer, getenv func(string) string) error {
	switch op {
	case "get":
	case "store", "erase":
		// git tells helpers about credentials that worked or failed. The
		// token lives in the environment, not in a store, so there is
		// nothing to save or forget; read the input so git is not left
		// writing into a closed pipe.
		_, _ = io.Copy(io.Discard, io.LimitReader(in, credentialInputLimit))
		return nil
	default:
		// gitcredentials(7): a helper silently ignores operations it does
		// not know, so a newer git can add some.
		_, _ = io.Copy(io.Discard, io.LimitReader(in, credentialInputLimit))
		return nil
	}
	attrs, err := readCredentialAttrs(io.LimitReader(in, credentialInputLimit))
	if err != nil {
		return err
	}
	proxy, token := getenv("CPROXY_URL"), getenv("CPROXY_TOKEN")
	if proxy == "" || token == "" {
		return ErrNotOurs
	}
	u, err := url.Parse(proxy)
	if err != nil || u.Host == "" {
		return ErrNotOurs
	}
	if !strings.EqualFold(attrs["protocol"], u.Scheme) || !strings.EqualFold(attrs["host"], u.Host) {
		return ErrNotOurs
	}
	if strings.ContainsAny(token, "\n\x00") {
		return fmt.Errorf("CPROXY_TOKEN holds a line break or NUL")
	}
	_, err = fmt.Fprintf(out, "username=cproxy\npassword=%s\n", token)
	return err
}

// readCredentialAttrs reads key=value lines up to the first blank line or
// EOF, as git writes them.
func readCredentialAttrs(r io.Reader) (map[string]string, error) {
	attrs := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			break
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("malformed credential line (want key=value)")
		}
		attrs[k] = v
	}
	return attrs, sc.Err()
}
