package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cproxy/cproxy/config"
	"github.com/cproxy/cproxy/helpers/sandboxenv"
	"github.com/cproxy/cproxy/tokens"
)

// The defaults of cproxy verify: what a sandbox must not reach by itself.
// api.anthropic.com's address is Anthropic's own (160.79.104.0/23), so it
// is dialled by IP: a sandbox without DNS must still fail to connect.
const (
	defaultDirect     = "api.anthropic.com=160.79.104.10:443"
	defaultPublicName = "api.anthropic.com"
	defaultVerifyGit  = "https://github.com/cproxy/verify"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check, from inside a sandbox, that its environment sends everything through cproxy and nothing around it",
		Description: `Run it inside the sandbox with the environment cproxy env gives a command.
Each check prints PASS, FAIL or SKIP with its reason; the exit status is 1 if any failed.
The model API is dialled by IP address, so a sandbox without DNS cannot pass for one
without a route out.

Examples:

   cproxy exec --sandbox conv-42 -- cproxy verify --revoked-token "$OLD"
   eval "$(cproxy env --sandbox conv-42)"; cproxy verify
   cproxy verify --format json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "revoked-token", Usage: "a revoked sandbox `TOKEN`, which cproxy must refuse with 401"},
			&cli.StringFlag{Name: "model", Value: "claude-sonnet-4-5", Usage: "the `MODEL` of the count_tokens call (one the sandbox's profile allows)"},
			&cli.StringSliceFlag{Name: "direct", Value: cli.NewStringSlice(defaultDirect), Usage: "`NAME=IP:PORT` (or NAME=unix:PATH, a Unix socket) the sandbox must not be able to connect to (repeatable; replaces the one shown, so give it again to keep it)"},
			&cli.StringSliceFlag{Name: "public-name", Value: cli.NewStringSlice(defaultPublicName), Usage: "a public host `NAME` that must not resolve (repeatable; replaces the one shown, so give it again to keep it)"},
			&cli.StringFlag{Name: "dns-server", Usage: "ask this `IP:PORT` instead of the system's resolver"},
			&cli.DurationFlag{Name: "timeout", Value: 3 * time.Second, Usage: "how long each check may take"},
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "text or json"},
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			if err := checkFormat(format, textOrJSON); err != nil {
				return err
			}
			v, err := newVerifier(c)
			if err != nil {
				return err
			}
			checks := v.run(c.Context)
			if err := printChecks(c.App.Writer, format, checks); err != nil {
				return err
			}
			for _, ch := range checks {
				if ch.Status == statusFail {
					return exitCode(1)
				}
			}
			return nil
		},
	}
}

const (
	statusPass = "pass"
	statusFail = "fail"
	statusSkip = "skip"
)

// check is one line of the checklist.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

func pass(name, format string, args ...any) check {
	return check{name, statusPass, fmt.Sprintf(format, args...)}
}

func failed(name, format string, args ...any) check {
	return check{name, statusFail, fmt.Sprintf(format, args...)}
}

// verifier holds what the checks need, read from the environment and flags.
type verifier struct {
	proxyURL, token, revoked, model string
	direct                          []directTarget
	publicNames                     []string
	resolver                        *net.Resolver
	timeout                         time.Duration
	client                          *http.Client
	problems                        []check // found while reading the environment
}

// directTarget is one --direct: addr as given, dialled as network and
// dial say (a Unix socket's path for unix:PATH).
type directTarget struct{ name, addr, network, dial string }

func newVerifier(c *cli.Context) (*verifier, error) {
	v := &verifier{
		revoked:     c.String("revoked-token"),
		model:       c.String("model"),
		publicNames: c.StringSlice("public-name"),
		timeout:     c.Duration("timeout"),
		resolver:    net.DefaultResolver,
	}
	for _, d := range c.StringSlice("direct") {
		name, addr, ok := strings.Cut(d, "=")
		if !ok {
			name, addr = d, d
		}
		if path := config.SocketPath(addr); path != "" {
			// A Unix socket, such as the admin listener's: the sandbox
			// must not have it mounted.
			v.direct = append(v.direct, directTarget{name, addr, "unix", path})
			continue
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil || net.ParseIP(host) == nil {
			return nil, fail("give an IP address and port, e.g. --direct api.anthropic.com=160.79.104.10:443 (a name would need DNS, and a sandbox without DNS would pass for one without a route), or unix:PATH for a Unix socket such as the admin listener's", "--direct %q is not NAME=IP:PORT or NAME=unix:PATH", d)
		}
		v.direct = append(v.direct, directTarget{name, addr, "tcp", addr})
	}
	if s := c.String("dns-server"); s != "" {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fail("e.g. --dns-server 10.0.0.2:53", "--dns-server %q is not IP:PORT", s)
		}
		v.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, s)
		}}
	}
	if v.revoked != "" {
		if _, err := tokens.Parse(v.revoked); err != nil {
			return nil, fail("copy the whole token, as it was minted", "--revoked-token is not a cproxy sandbox token")
		}
	}
	// Never through an environment proxy: the point is where this
	// sandbox's own connections go.
	v.client = &http.Client{Timeout: v.timeout, Transport: &http.Transport{Proxy: nil}, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	v.readEnv()
	return v, nil
}

// readEnv finds cproxy's URL and the sandbox token where cproxy env puts
// them, and notes any real credential the sandbox should not have.
func (v *verifier) readEnv() {
	v.proxyURL = strings.TrimSuffix(firstEnv("CPROXY_URL", "ANTHROPIC_BASE_URL"), "/")
	v.token = firstEnv("CPROXY_TOKEN", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
	switch {
	case v.proxyURL == "":
		v.problems = append(v.problems, failed("environment", "neither CPROXY_URL nor ANTHROPIC_BASE_URL is set: run verify with the environment cproxy env prints"))
	case v.token == "":
		v.problems = append(v.problems, failed("environment", "no sandbox token in CPROXY_TOKEN, ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN: run verify with the environment cproxy env prints"))
	}
	var foreign []string
	for _, name := range sandboxenv.CredentialVars {
		val, ok := os.LookupEnv(name)
		if !ok || val == "" {
			continue
		}
		if _, err := tokens.Parse(val); err == nil {
			continue // a sandbox token, where Claude Code reads it
		}
		foreign = append(foreign, name)
	}
	if len(foreign) > 0 {
		v.problems = append(v.problems, failed("environment", "%s set to something other than a sandbox token: a real credential must never be in the sandbox", strings.Join(foreign, ", ")))
	}
	if len(v.problems) == 0 {
		v.problems = append(v.problems, pass("environment", "cproxy at %s, a sandbox token, no real credential variables", v.proxyURL))
	}
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// run performs every check, in the checklist's order.
func (v *verifier) run(ctx context.Context) []check {
	checks := append([]check(nil), v.problems...)
	if v.proxyURL != "" && v.token != "" {
		checks = append(checks, v.checkToken(ctx))
	}
	if v.revoked != "" && v.proxyURL != "" {
		checks = append(checks, v.checkRevoked(ctx))
	}
	for _, d := range v.direct {
		checks = append(checks, v.checkDirect(ctx, d))
	}
	defaultName, _, _ := strings.Cut(defaultDirect, "=")
	if !slices.ContainsFunc(v.direct, func(d directTarget) bool { return d.name == defaultName }) {
		checks = append(checks, replacedDefault("no direct route to "+defaultName, "--direct "+defaultDirect))
	}
	for _, n := range v.publicNames {
		checks = append(checks, v.checkDNS(ctx, n))
	}
	if !slices.Contains(v.publicNames, defaultPublicName) {
		checks = append(checks, replacedDefault("no DNS for "+defaultPublicName, "--public-name "+defaultPublicName))
	}
	return append(checks, v.checkGit(ctx), v.checkNPM(ctx))
}

// replacedDefault is the SKIP of a default check that a --direct or
// --public-name replaced, so the output says it did not run and how to
// keep it beside the caller's own.
func replacedDefault(name, flag string) check {
	return check{name, statusSkip, "not checked: the flags given replace this default; add " + flag + " to keep it"}
}

// countTokens makes the cheapest model call there is with token.
func (v *verifier) countTokens(ctx context.Context, token string) (int, string, error) {
	body, _ := json.Marshal(map[string]any{"model": v.model, "messages": []map[string]string{{"role": "user", "content": "cproxy verify"}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.proxyURL+"/v1/messages/count_tokens", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := v.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Message, nil
}

func (v *verifier) checkToken(ctx context.Context) check {
	const name = "token"
	status, msg, err := v.countTokens(ctx, v.token)
	switch {
	case err != nil:
		return failed(name, "count_tokens through %s failed: %v", v.proxyURL, scrubErr(err, v.token))
	case status != http.StatusOK:
		return failed(name, "count_tokens through %s answered %d: %s", v.proxyURL, status, msg)
	}
	return pass(name, "count_tokens through %s answered 200", v.proxyURL)
}

func (v *verifier) checkRevoked(ctx context.Context) check {
	const name = "revoked token"
	status, msg, err := v.countTokens(ctx, v.revoked)
	switch {
	case err != nil:
		return failed(name, "count_tokens through %s failed: %v", v.proxyURL, scrubErr(err, v.revoked))
	case status != http.StatusUnauthorized:
		return failed(name, "cproxy answered %d to the revoked token, not 401: %s", status, msg)
	}
	return pass(name, "refused with 401: %s", msg)
}

func (v *verifier) checkDirect(ctx context.Context, d directTarget) check {
	name := "no direct route to " + d.name
	dialer := net.Dialer{Timeout: v.timeout}
	conn, err := dialer.DialContext(ctx, d.network, d.dial)
	if err == nil {
		conn.Close()
		return failed(name, "connected to %s directly: the sandbox can reach it without cproxy", d.addr)
	}
	return pass(name, "connecting to %s failed: %v", d.addr, dialReason(err))
}

// dialReason says why a connection failed in a few words.
func dialReason(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case strings.Contains(err.Error(), "refused"):
		return "refused"
	case strings.Contains(err.Error(), "unreachable"):
		return "unreachable"
	case errors.Is(err, os.ErrNotExist):
		return "no such socket"
	}
	return err.Error()
}

func (v *verifier) checkDNS(ctx context.Context, host string) check {
	name := "no DNS for " + host
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	addrs, err := v.resolver.LookupHost(ctx, host)
	if err == nil {
		return failed(name, "%s resolves to %s: the sandbox can look up public names", host, strings.Join(addrs, ", "))
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return pass(name, "looking up %s failed: %s", host, de.Err)
	}
	return pass(name, "looking up %s failed: %v", host, err)
}

// checkGit asks git itself where a GitHub remote goes, as the sandbox's
// git settings rewrite it.
func (v *verifier) checkGit(ctx context.Context) check {
	const name = "git through cproxy"
	if _, err := exec.LookPath("git"); err != nil {
		return check{name, statusSkip, "git is not installed"}
	}
	out, err := v.command(ctx, "git", "ls-remote", "--get-url", defaultVerifyGit)
	if err != nil {
		return failed(name, "git ls-remote --get-url failed: %v", err)
	}
	want := v.proxyURL + "/github/"
	if v.proxyURL == "" || !strings.HasPrefix(out, want) {
		return failed(name, "git sends %s to %s, not to cproxy (%s…)", defaultVerifyGit, out, want)
	}
	return pass(name, "git sends %s to %s", defaultVerifyGit, out)
}

// checkNPM asks npm itself for its registry.
func (v *verifier) checkNPM(ctx context.Context) check {
	const name = "npm through cproxy"
	if _, err := exec.LookPath("npm"); err != nil {
		return check{name, statusSkip, "npm is not installed"}
	}
	out, err := v.command(ctx, "npm", "config", "get", "registry")
	if err != nil {
		return failed(name, "npm config get registry failed: %v", err)
	}
	want := sandboxenv.NPMRegistry(v.proxyURL)
	if v.proxyURL == "" || strings.TrimSuffix(out, "/") != strings.TrimSuffix(want, "/") {
		return failed(name, "npm's registry is %s, not cproxy's %s", out, want)
	}
	return pass(name, "npm's registry is %s", out)
}

// command runs a client with the sandbox's environment and returns its
// first line of output.
func (v *verifier) command(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*v.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if s := strings.TrimSpace(stderr.String()); s != "" {
			return "", fmt.Errorf("%v: %s", err, firstLine(s))
		}
		return "", err
	}
	return firstLine(strings.TrimSpace(string(out))), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// scrubErr keeps a token out of an error's text (a URL error can quote a
// request).
func scrubErr(err error, token string) string {
	return strings.ReplaceAll(err.Error(), token, "cpx_…")
}

func printChecks(w io.Writer, format string, checks []check) error {
	if format == "json" {
		ok := true
		for _, c := range checks {
			ok = ok && c.Status != statusFail
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			OK     bool    `json:"ok"`
			Checks []check `json:"checks"`
		}{ok, checks})
	}
	var b strings.Builder
	for _, c := range checks {
		fmt.Fprintf(&b, "%-4s %s: %s\n", strings.ToUpper(c.Status), c.Name, c.Detail)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
