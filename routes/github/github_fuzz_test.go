package github

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes/routetest"
)

// gitProfile is gitPolicy's profile for conv-42.
func gitProfile(tb testing.TB) *policy.Profile {
	tb.Helper()
	prof, err := routetest.MustPolicy(tb, gitPolicy).ProfileFor("conv-42", "")
	if err != nil {
		tb.Fatal(err)
	}
	return prof
}

// FuzzParseGitPath: an accepted path names one GitHub repository by valid
// names, the upstream path is that repository's, rebuilt with .git and
// nothing from the client but the two names, and the policy is asked about
// the repository the upstream will serve.
func FuzzParseGitPath(f *testing.F) {
	f.Add("GET", "/github/acme/app.git/info/refs", "service=git-upload-pack")
	f.Add("POST", "/github/acme/app/git-receive-pack", "")
	f.Add("POST", "/github/acme/app.GIT.git/git-upload-pack", "")
	f.Add("POST", "/github/acme/../x/git-upload-pack", "")
	f.Add("GET", "/github/a/b/info/refs/x", "service=git-receive-pack")
	clean := regexp.MustCompile(`^/[A-Za-z0-9-]{1,39}/[A-Za-z0-9._-]{1,100}\.git/(info/refs|git-upload-pack|git-receive-pack)$`)
	f.Fuzz(func(t *testing.T, method, path, query string) {
		g, err := parseGitPath(method, path, query)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "cproxy: ") {
				t.Fatalf("error without prefix: %v", err)
			}
			return
		}
		tg := g.target()
		if !clean.MatchString(tg.Path) || strings.Contains(tg.Path, "//") || strings.Contains(tg.Path, "/../") || strings.Contains(tg.Path, "/./") {
			t.Fatalf("%q → upstream path %q", path, tg.Path)
		}
		if g.name == "." || g.name == ".." || strings.HasSuffix(strings.ToLower(g.name), ".git") {
			t.Fatalf("%q → repository name %q", path, g.name)
		}
		if !strings.HasPrefix(tg.Path, "/"+g.repo()+".git/") {
			t.Fatalf("policy asked about %q, upstream serves %q", g.repo(), tg.Path)
		}
		// The client's path differs from the upstream's only by the base
		// and an optional .git, in any case.
		sent := strings.TrimPrefix(path, "/github")
		if !strings.EqualFold(sent, tg.Path) && !strings.EqualFold(sent, strings.Replace(tg.Path, ".git/", "/", 1)) {
			t.Fatalf("sent %q, forwarded %q", path, tg.Path)
		}
		switch {
		case g.advertise && (method != "GET" || query != "service="+g.service):
			t.Fatalf("%s %s?%s accepted as info/refs", method, path, query)
		case !g.advertise && (method != "POST" || query != ""):
			t.Fatalf("%s %s?%s accepted as a POST", method, path, query)
		}
	})
}

// FuzzReadPush: the body forwarded is always the body received, byte for
// byte; and when a push is accepted, its commands are exactly those git's
// receive-pack will read from it (so the policy decides every ref the
// upstream will update), each a valid full ref name, and pushDenials allows
// the push only if the policy allows every one of them on its own.
func FuzzReadPush(f *testing.F) {
	f.Add(pushBody("report-status side-band-64k", []byte("PACK...."), oldID+" "+newID+" refs/heads/agent/x"))
	f.Add(pushBody("report-status", nil, zeroID+" "+newID+" refs/heads/main", oldID+" "+zeroID+" refs/tags/v1"))
	f.Add([]byte(pkt("shallow "+oldID) + string(pushBody("report-status", nil, oldID+" "+newID+" refs/heads/agent/x"))))
	f.Add([]byte("0000"))
	f.Add([]byte("0000PACK"))
	f.Add(pushBody("report-status", nil, oldID+" "+newID+" refs/heads/agent/x y"))
	prof := gitProfile(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := readPush(bytes.NewReader(body))
		got, rerr := io.ReadAll(p.body)
		if rerr != nil || !bytes.Equal(got, body) {
			t.Fatalf("forwarded %q, received %q", got, body)
		}
		if err != nil || p.probe {
			if p.probe && string(body) != "0000" {
				t.Fatalf("%q taken for the probe", body)
			}
			return
		}
		want := receivePackCommands(t, body)
		if len(want) != len(p.commands) {
			t.Fatalf("decoded %d commands, receive-pack reads %d", len(p.commands), len(want))
		}
		for i, c := range p.commands {
			if w := want[i]; c.Old.String() != w[0] || c.New.String() != w[1] || c.Name.String() != w[2] {
				t.Fatalf("command %d decoded as %s %s %s, receive-pack reads %q", i, c.Old, c.New, c.Name, w)
			}
			if !validRefName(c.Name.String()) {
				t.Fatalf("accepted ref name %q", c.Name)
			}
		}
		reasons := pushDenials(askPush(prof, "acme/app", p.commands), p.commands, pusher{prof, "conv-42", "acme/app"})
		allAllowed := true
		for _, c := range p.commands {
			ref := c.Name.String()
			allAllowed = allAllowed && prof.Ref("acme/app", ref, strings.HasPrefix(ref, "refs/tags/"), c.New == plumbing.ZeroHash).Allow
		}
		if (reasons == nil) != allAllowed {
			t.Fatalf("pushDenials allowed=%v, the policy per command %v", reasons == nil, allAllowed)
		}
	})
}

// receivePackCommands reads the commands the way git's receive-pack does
// (read_head_info): pkt-lines up to a flush, an optional shallow line
// first, "OLD SP NEW SP REFNAME" with everything after the second space
// the ref name, capabilities after a NUL on the first command.
func receivePackCommands(t *testing.T, body []byte) [][3]string {
	var cmds [][3]string
	for len(body) >= 4 {
		var n int
		for _, c := range body[:4] {
			n <<= 4
			switch {
			case c >= '0' && c <= '9':
				n |= int(c - '0')
			case c >= 'a' && c <= 'f':
				n |= int(c-'a') + 10
			case c >= 'A' && c <= 'F':
				n |= int(c-'A') + 10
			default:
				t.Fatalf("accepted a body with a bad pkt-line length")
			}
		}
		if n == 0 {
			return cmds
		}
		if n < 4 || n > len(body) {
			t.Fatalf("accepted a body with a bad pkt-line length")
		}
		line := body[4:n]
		body = body[n:]
		if len(cmds) == 0 && bytes.HasPrefix(line, []byte("shallow ")) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(cmds) == 0 {
			line, _, _ = bytes.Cut(line, []byte{0})
		}
		if len(line) < 83 || line[40] != ' ' || line[81] != ' ' {
			t.Fatalf("accepted %q, which receive-pack refuses", line)
		}
		cmds = append(cmds, [3]string{string(line[:40]), string(line[41:81]), string(line[82:])})
	}
	t.Fatalf("accepted a body without a flush-pkt after its commands")
	return nil
}
