package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rogpeppe/go-internal/testscript"
	bolt "go.etcd.io/bbolt"

	"github.com/cproxy/cproxy/helpers/gitcred"
	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/routes/githubapi/gqlpolicy"
	"github.com/cproxy/cproxy/tokens"
)

// Canary credentials: the fake Anthropic API accepts exactly these, and no
// log line, error or response of the suite may contain them.
const (
	canaryAPIKey = "sk-ant-api03-CANARYapikey0123456789abcdefghijklmnopqrstuvwxyz"
	canaryOAuth  = "sk-ant-oat01-CANARYoauth0123456789abcdefghijklmnopqrstuvwxyz"
	// canaryOAuth2 is a second OAuth token, which the fake refuses: a
	// credential that changes while cproxy runs turns into it.
	canaryOAuth2 = "sk-ant-oat01-CANARYrotated9876543210ZYXWVUTSRQPONMLKJIHGFEDCBA"
	// canaryGitHub is the only token the fake GitHub git server accepts.
	canaryGitHub = "ghs_CANARYgithub0123456789abcdefghijklmnop"
	// canaryNPM is the only token the fake npm registry accepts.
	canaryNPM = "npm_CANARYnpm0123456789abcdefghijklmnopqrs"
	// canaryGoProxy is a private module proxy's token.
	canaryGoProxy = "gomod-CANARYgoproxy0123456789abcdefghijklm"
	// canaryPyPI is the only USER:PASSWORD the fake PyPI index accepts.
	canaryPyPI = "cproxy-ci:pypi-CANARYpypi0123456789abcdefghijk"
	// A relay's credential source and a per-token value (relay.txt).
	canaryHub = "hub_CANARYhub0123456789abcdefghijklmnopqrs"
	canaryMod = "mod_CANARYmod0123456789abcdefghijklmnopqrs"
	// canaryMCP is the only token the fake MCP server accepts.
	canaryMCP = "mcp_CANARYmcp0123456789abcdefghijklmnopqrs"
	// The OAuth client secret and first refresh token of the fake MCP
	// server behind OAuth.
	canaryOAuthClient  = "ocs_CANARYclient0123456789abcdefghijklmn"
	canaryOAuthRefresh = "ort_CANARYrefresh0123456789abcdefghijklm"
)

// testPolicyPollInterval is how often serve looks at its policy file in
// the scripts: often enough that no script waits on it, seldom enough to
// cost nothing.
const testPolicyPollInterval = 50 * time.Millisecond

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"cproxy": func() {
			// A script's change to a policy file is seen within a
			// tenth of a second, not one.
			policyPollInterval = testPolicyPollInterval
			if os.Getenv("CPROXY_DOC_FAKES") == "1" {
				adjustServeConfig = docFakes
				docListener = docListenerAddr
			}
			// A revocation listener that lags (replicas_inflight_test.go).
			if d, err := time.ParseDuration(os.Getenv("CPROXY_TEST_NOTIFICATION_DELAY")); err == nil {
				tokens.TestNotificationDelay = d
			}
			os.Exit(run(os.Args, os.Stdout, os.Stderr))
		},
		"git-credential-cproxy": func() {
			os.Exit(gitcred.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, scriptParams(t, "../../testdata/script"))
}

func scriptParams(t *testing.T, dir string) testscript.Params {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gobuild := goBuilder(t, repo)
	// The go command's caches, for a script that builds with go
	// (install.sh in install_version.txt): the test's own, so that nothing
	// is downloaded or built again.
	caches, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	goCache, goModCache, _ := strings.Cut(strings.TrimSpace(string(caches)), "\n")
	return testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Condition:           condition,
		Setup: func(env *testscript.Env) error {
			fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey, OAuthToken: canaryOAuth})
			env.Defer(fake.Close)
			env.Values["anthropic"] = fake
			env.Values["anthropicgate"] = new(*fakes.Gate) // holdheaders' gate, for http -leave held
			rest := fakes.NewGitHubREST(fakes.GitHubRESTOptions{Token: canaryGitHub, Repos: []string{"acme/app", "acme/other"}})
			env.Defer(rest.Close)
			// The git server needs git; scripts that use it skip without.
			fakeGitHub, fakeGitHubAPI, appKeyFile := "", "", ""
			if _, err := exec.LookPath("git"); err == nil {
				gs, err := fakes.NewGitServer(env.WorkDir, fakes.GitServerOptions{Token: canaryGitHub})
				if err != nil {
					return err
				}
				env.Defer(gs.Close)
				env.Values["github"] = gs
				env.Values["githubseen"] = new(int)
				fakeGitHub = gs.URL
				// A GitHub App whose tokens gs takes, each for one
				// repository of acme: its key is made per test process,
				// never committed.
				key, keyPEM, err := testAppKey()
				if err != nil {
					return err
				}
				app := fakes.NewGitHubApp(fakes.GitHubAppOptions{AppID: testAppID, Key: key, Installation: testAppInstallation, Account: "acme", Git: gs, API: rest})
				env.Defer(app.Close)
				env.Values["githubapp"] = app
				env.Values["githubappseen"] = new(int)
				fakeGitHubAPI = app.URL
				appKeyFile = filepath.Join(env.WorkDir, "github-app.pem")
				if err := os.WriteFile(appKeyFile, keyPEM, 0o600); err != nil {
					return err
				}
			}
			mcpServer := fakes.NewMCPServer(fakes.MCPServerOptions{Token: canaryMCP})
			env.Defer(mcpServer.Close)
			env.Values["mcp"] = mcpServer
			env.Values["mcpseen"] = new(int)
			// A second MCP server, behind an OAuth token endpoint that
			// rotates its refresh tokens, for mcp_oauth.txt.
			oauth := fakes.NewOAuthServer(fakes.OAuthServerOptions{ClientID: "cproxy", ClientSecret: canaryOAuthClient,
				RefreshToken: canaryOAuthRefresh, Rotate: true})
			env.Defer(oauth.Close)
			mcpOAuth := fakes.NewMCPServer(fakes.MCPServerOptions{Authorize: oauth.Valid})
			env.Defer(mcpOAuth.Close)
			env.Values["oauth"] = oauth
			env.Values["oauthseen"] = new(int)
			env.Values["mcpoauth"] = mcpOAuth
			env.Values["mcpoauthseen"] = new(int)
			// A third, speaking only the stateless 2026-07-28 revision,
			// for mcp_stateless.txt.
			mcpStateless := fakes.NewMCPServer(fakes.MCPServerOptions{Token: canaryMCP, Stateless: true, Versions: []string{"2026-07-28"}})
			env.Defer(mcpStateless.Close)
			env.Values["mcpstateless"] = mcpStateless
			env.Values["mcpstatelessseen"] = new(int)
			relay := fakes.NewEcho()
			env.Defer(relay.Close)
			env.Values["relay"] = relay
			env.Values["relayseen"] = new(int)
			env.Values["githubrest"] = rest
			env.Values["githubrestseen"] = new(int)
			env.Values["githubmutationsseen"] = new(int)
			goProxy, err := fakes.NewGoProxy(fakes.GoProxyOptions{Token: canaryGoProxy, Anonymous: true})
			if err != nil {
				return err
			}
			env.Defer(goProxy.Close)
			env.Values["goproxy"] = goProxy
			env.Values["goproxyseen"] = new(int)
			pypiIndex := fakes.NewPyPIIndex(fakes.PyPIIndexOptions{Credential: canaryPyPI, Anonymous: true})
			env.Defer(pypiIndex.Close)
			env.Values["pypi"] = pypiIndex
			env.Values["pypiseen"] = new(int)
			npmReg := fakes.NewNPMRegistry(fakes.NPMRegistryOptions{Token: canaryNPM, Gzip: true})
			env.Defer(npmReg.Close)
			env.Values["npm"] = npmReg
			env.Values["npmseen"] = new(int)
			home := filepath.Join(env.WorkDir, "home")
			// Unix sockets go under $SOCKDIR, short whatever TMPDIR is
			// ($WORK is under TMPDIR, and a socket's path has 108 bytes).
			sockDir, err := testutil.NewSocketDir("cpx")
			if err != nil {
				return err
			}
			env.Defer(func() { os.RemoveAll(sockDir) })
			for k, v := range map[string]string{
				"FAKE_ANTHROPIC": fake.URL,
				"CANARY_API_KEY": canaryAPIKey,
				"CANARY_OAUTH":   canaryOAuth,
				"CANARY_OAUTH_2": canaryOAuth2,
				"FAKE_GITHUB":    fakeGitHub,
				"CANARY_GITHUB":  canaryGitHub,
				// The fake GitHub App's API, its id, installation and
				// private key file, for github_app*.txt.
				"FAKE_GITHUB_API":         fakeGitHubAPI,
				"GITHUB_APP_ID":           strconv.Itoa(testAppID),
				"GITHUB_APP_INSTALLATION": strconv.Itoa(testAppInstallation),
				"GITHUB_APP_KEY":          appKeyFile,
				// The fake GitHub REST API, for github_api*.txt.
				"FAKE_GITHUBAPI": rest.URL,
				"FAKE_NPM":       npmReg.URL,
				// The fake module proxy, its token, and its checksum
				// database's key, for gomod_*.txt (GOSUMDB=$GOSUMDB_KEY).
				"FAKE_GOMOD":     goProxy.URL,
				"CANARY_GOPROXY": canaryGoProxy,
				"GOSUMDB_KEY":    goProxy.VerifierKey,
				"CANARY_NPM":     canaryNPM,
				// The fake PyPI index, its files host and its credential,
				// for pypi_*.txt.
				"FAKE_PYPI":       pypiIndex.URL,
				"FAKE_PYPI_FILES": pypiIndex.FilesURL,
				"CANARY_PYPI":     canaryPyPI,
				"FAKE_RELAY":      relay.URL,
				"CANARY_HUB":      canaryHub,
				"CANARY_MOD":      canaryMod,
				// The fake MCP server (the official Go SDK's) and its
				// token, for mcp_*.txt.
				"FAKE_MCP":           mcpServer.URL,
				"FAKE_MCP_STATELESS": mcpStateless.URL,
				"CANARY_MCP":         canaryMCP,
				// The MCP server behind OAuth, its token endpoint and its
				// client's secret and first refresh token.
				"FAKE_MCP_OAUTH":       mcpOAuth.URL,
				"FAKE_OAUTH_TOKEN":     oauth.URL,
				"CANARY_OAUTH_CLIENT":  canaryOAuthClient,
				"CANARY_OAUTH_REFRESH": canaryOAuthRefresh,
				// The embedded default credential of [upstream.github], as an
				// operator sets it; serve_defaults.txt clears it.
				"GITHUB_TOKEN":        canaryGitHub,
				"HOME":                home,
				"SOCKDIR":             sockDir,
				"XDG_STATE_HOME":      filepath.Join(env.WorkDir, "state"),
				"XDG_CONFIG_HOME":     filepath.Join(home, ".config"),
				"XDG_CACHE_HOME":      filepath.Join(home, ".cache"),
				"GIT_CONFIG_GLOBAL":   filepath.Join(home, ".gitconfig"),
				"GIT_CONFIG_NOSYSTEM": "1",
				"CI":                  os.Getenv("CI"),
				"CPROXY_TEST_CLAUDE":  os.Getenv("CPROXY_TEST_CLAUDE"),
				// The pnpm and yarn (berry) executables for npm_pnpm.txt and
				// npm_yarn.txt; empty when not installed ([pnpm], [yarn]).
				"PNPM": pnpmBinary(),
				"YARN": yarnBinary(),
				// The repository, for the integration examples under
				// docs/integrations (integration_*.txt).
				"REPO": repo,
				// TypeScript's compiler for integration_hatchet.txt;
				// empty when not installed ([tsc]).
				"TSC":        os.Getenv("CPROXY_TEST_TSC"),
				"GOCACHE":    goCache,
				"GOMODCACHE": goModCache,
			} {
				env.Setenv(k, v)
			}
			return os.MkdirAll(home, 0o700)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitready":  cmdWaitReady,
			"http":       cmdHTTP,
			"upstream":   cmdUpstream,
			"nosecrets":  cmdNoSecrets,
			"needclaude": cmdNeedClaude,
			"holdheaders": func(ts *testscript.TestScript, neg bool, args []string) {
				*ts.Value("anthropicgate").(**fakes.Gate) = ts.Value("anthropic").(*fakes.Anthropic).HoldHeaders()
			},
			"fakeanswers": cmdFakeAnswers,
			"faketooluse": cmdFakeToolUse,
			"mcpcalls":    cmdMCPCalls,
			"mcpcaps":     cmdMCPCaps,
			"oauth":       cmdOAuth,
			"mcpsearch":   cmdMCPSearch,
			"mcpclient":   cmdMCPClient,
			"stallstreams": func(ts *testscript.TestScript, neg bool, args []string) {
				// stallstreams: the fake Anthropic API's later streams stop after their first
				// three events until the client goes away, as a long answer would.
				ts.Value("anthropic").(*fakes.Anthropic).StallStreams(3)
			},
			"capture":       cmdCapture,
			"filltokens":    cmdFillTokens,
			"sighup":        cmdSighup,
			"waitlog":       cmdWaitLog,
			"bigbody":       cmdBigBody,
			"envsubst":      cmdEnvsubst,
			"gitrepo":       cmdGitRepo,
			"gitref":        cmdGitRef,
			"gitsetref":     cmdGitSetRef,
			"gitcommit":     cmdGitCommit,
			"gitrequests":   cmdGitRequests,
			"gitmoved":      cmdGitMoved,
			"appmints":      cmdAppMints,
			"randfile":      cmdRandFile,
			"npmpkg":        cmdNPMPkg,
			"gomodule":      cmdGoModule,
			"gorequests":    cmdGoRequests,
			"pypipkg":       cmdPyPIPkg,
			"pypisha":       cmdPyPISHA,
			"pypirequests":  cmdPyPIRequests,
			"npmdeps":       cmdNPMDeps,
			"npmadvisory":   cmdNPMAdvisory,
			"fakedns":       cmdFakeDNS,
			"relayrequests": cmdRelayRequests,
			"npmforeign":    cmdNPMForeign,
			"npmtime":       cmdNPMTime,
			"npmrequests":   cmdNPMRequests,
			"apirequests":   cmdAPIRequests,
			"apimutations":  cmdAPIMutations,
			"npmhostile":    cmdNPMHostile,
			"unixbridge":    cmdUnixBridge,
			"gobuild":       gobuild,
			"storeschema":   cmdStoreSchema,
			"pgdatabase":    cmdPGDatabase,
			"storechurn":    cmdStoreChurn,
		},
	}
}

// fakeanswers normal|without-usage|huge|negative-usage: make the fake
// Anthropic API's later answers to /v1/messages report usage as the real
// one does, end streams without a usage report, carry
// fakes.HugeAnswerBytes more text, or report negative counts.
func cmdFakeAnswers(ts *testscript.TestScript, neg bool, args []string) {
	modes := map[string]fakes.AnswerMode{"normal": fakes.AnswerNormally, "without-usage": fakes.AnswerWithoutUsage, "huge": fakes.AnswerHuge,
		"negative-usage": fakes.AnswerNegativeUsage}
	mode, ok := modes[strings.Join(args, " ")]
	if neg || !ok {
		ts.Fatalf("usage: fakeanswers normal|without-usage|huge|negative-usage")
	}
	ts.Value("anthropic").(*fakes.Anthropic).SetAnswers(mode)
}

// waitready FILE: wait for cproxy serve's ready file, then set PROXY and
// ADMIN to its listeners' URLs, PROXY_ADDR and ADMIN_ADDR to their
// host:port and SERVE_PID to its process id.
// A TLS proxy listener sets PROXY_TLS to its https URL and PROXY_TLS_ADDR
// to its host:port.
// A proxy on a Unix socket sets PROXY_SOCKET to its path instead of PROXY;
// an admin listener on one sets ADMIN to unix:PATH, as --admin takes it,
// and ADMIN_SOCKET to its path, for http -unix.
func cmdWaitReady(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: waitready FILE")
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var ready struct {
				Proxy, Admin string
				ProxyTLS     string `json:"proxy_tls"`
				PID          int
			}
			if err := json.Unmarshal(b, &ready); err != nil {
				ts.Fatalf("ready file: %v", err)
			}
			if sock, ok := strings.CutPrefix(ready.Proxy, "unix:"); ok {
				ts.Setenv("PROXY_SOCKET", sock)
			}
			ts.Setenv("PROXY", "http://"+ready.Proxy)
			ts.Setenv("PROXY_ADDR", ready.Proxy)
			ts.Setenv("ADMIN", "http://"+ready.Admin)
			ts.Setenv("ADMIN_ADDR", ready.Admin)
			if sock, ok := strings.CutPrefix(ready.Admin, "unix:"); ok {
				ts.Setenv("ADMIN", ready.Admin)
				ts.Setenv("ADMIN_SOCKET", sock)
			}
			if ready.ProxyTLS != "" {
				ts.Setenv("PROXY_TLS", "https://"+ready.ProxyTLS)
				ts.Setenv("PROXY_TLS_ADDR", ready.ProxyTLS)
			}
			ts.Setenv("SERVE_PID", strconv.Itoa(ready.PID))
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no ready file %s after 30s", args[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// http [-H 'Name: value']... [-d BODY | -f FILE] [-from ADDR | -unix PATH |
// -cacert FILE] METHOD URL: send one request, from the local address ADDR
// or over the Unix socket PATH if given, or to an https URL whose
// certificate the CA certificates in FILE sign; stdout gets "HTTP <status>", the response
// headers cproxy or the upstream set that a test asserts on, a blank line
// and the body. Every response is checked for the canary credentials.
func cmdHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("http does not fail; assert on its stdout")
	}
	var headers []string
	var body io.Reader
	transport := http.DefaultTransport
	leave := false
	for len(args) > 2 {
		switch args[0] {
		case "-leave":
			// The client goes away once the fake Anthropic API holds the
			// request at the gate of the last holdheaders (which must not
			// have held one yet): the upstream has it, unanswered.
			if args[1] != "held" {
				ts.Fatalf("http: -leave takes only held")
			}
			leave = true
		case "-from":
			// Linux routes all of 127.0.0.0/8 to loopback, so a script can
			// be a client at 127.0.0.2.
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(args[1])}}
			transport = &http.Transport{DialContext: d.DialContext}
		case "-unix":
			path := ts.MkAbs(args[1])
			transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", path)
			}}
		case "-cacert":
			// An https URL, the server's certificate checked against the
			// PEM certificates in the file alone.
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM([]byte(ts.ReadFile(args[1]))) {
				ts.Fatalf("http -cacert: no PEM certificate in %s", args[1])
			}
			transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
		case "-H":
			headers = append(headers, args[1])
		case "-d":
			body = strings.NewReader(args[1])
		case "-f":
			body = strings.NewReader(ts.ReadFile(args[1]))
		default:
			ts.Fatalf("http: unknown option %q", args[0])
		}
		args = args[2:]
	}
	if len(args) != 2 {
		ts.Fatalf("usage: http [-H 'Name: value'] [-d BODY | -f FILE] [-from ADDR | -unix PATH | -cacert FILE] [-leave held] METHOD URL")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, args[0], args[1], body)
	ts.Check(err)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if leave {
		gate := *ts.Value("anthropicgate").(**fakes.Gate)
		if gate == nil {
			ts.Fatalf("http -leave held: no holdheaders before it")
		}
		done := make(chan string, 1)
		go func() {
			resp, err := transport.RoundTrip(req)
			if err != nil {
				done <- fmt.Sprintf("HTTP error: %v", err)
				return
			}
			resp.Body.Close()
			done <- fmt.Sprintf("HTTP %d (answered before the upstream held it)", resp.StatusCode)
		}()
		select {
		case <-gate.Reached():
			cancel()
			<-done
			fmt.Fprintln(ts.Stdout(), "HTTP left: the client went away while the upstream held the request")
		case answer := <-done:
			fmt.Fprintln(ts.Stdout(), answer)
		}
		return
	}
	resp, err := transport.RoundTrip(req)
	if t, ok := transport.(*http.Transport); ok && t != http.DefaultTransport {
		defer t.CloseIdleConnections()
	}
	if err != nil {
		fmt.Fprintf(ts.Stdout(), "HTTP error: %v\n", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ts.Check(err)
	var out bytes.Buffer
	fmt.Fprintf(&out, "HTTP %d\n", resp.StatusCode)
	for _, k := range []string{"Content-Type", "Retry-After", "X-Should-Retry", "Anthropic-Ratelimit-Requests-Limit", "Request-Id", "WWW-Authenticate", "Location"} {
		if v := resp.Header.Get(k); v != "" {
			fmt.Fprintf(&out, "%s: %s\n", k, v)
		}
	}
	out.WriteString("\n")
	out.Write(b)
	checkNoSecrets(ts, "response to "+args[0]+" "+args[1], out.String())
	ts.Stdout().Write(out.Bytes())
}

// upstream [HEADER...]: print every request the fake Anthropic API
// received, one line each: method, path and query, the credential and
// version headers it carried, and the named extra headers. It fails if any
// request carried a sandbox token.
func cmdUpstream(ts *testscript.TestScript, neg bool, args []string) {
	fake := ts.Value("anthropic").(*fakes.Anthropic)
	out := ts.Stdout() // even with no request: stdout is then empty, not the last command's
	for _, r := range fake.Requests() {
		noSandboxToken(ts, "the upstream", r.Header)
		line := r.Method + " " + r.Path
		if r.RawQuery != "" {
			line += "?" + r.RawQuery
		}
		for _, k := range append([]string{"X-Api-Key", "Authorization", "Anthropic-Beta", "Anthropic-Version"}, args...) {
			if v := r.Header.Get(k); v != "" {
				line += fmt.Sprintf(" %s=%s", strings.ToLower(k), v)
			}
		}
		fmt.Fprintln(out, line)
	}
}

// nosecrets [FILE...]: fail if the last command's stdout or stderr, or the
// named files, hold a canary credential (raw, base64 or URL-encoded), or,
// when $SECRET_FILE names a file (such as the local CA's key), any of its
// lines of 16 characters or more.
func cmdNoSecrets(ts *testscript.TestScript, neg bool, args []string) {
	var secretLines []string
	if f := ts.Getenv("SECRET_FILE"); f != "" {
		for line := range strings.Lines(ts.ReadFile(f)) {
			if line = strings.TrimSpace(line); len(line) >= 16 && !strings.HasPrefix(line, "-----") {
				secretLines = append(secretLines, line)
			}
		}
		if len(secretLines) == 0 {
			ts.Fatalf("nosecrets: $SECRET_FILE %s has no line to look for", f)
		}
	}
	check := func(where, s string) {
		checkNoSecrets(ts, where, s)
		for _, line := range secretLines {
			if strings.Contains(s, line) {
				ts.Fatalf("%s holds a line of %s", where, ts.Getenv("SECRET_FILE"))
			}
		}
	}
	check("stdout", ts.ReadFile("stdout"))
	check("stderr", ts.ReadFile("stderr"))
	for _, f := range args {
		check(f, ts.ReadFile(f))
	}
}

func checkNoSecrets(ts *testscript.TestScript, where, s string) {
	canaries := []string{canaryAPIKey, canaryOAuth, canaryOAuth2, canaryGitHub, canaryNPM, canaryHub, canaryMod, canaryGoProxy, canaryMCP, canaryPyPI, strings.SplitN(canaryPyPI, ":", 2)[1]}
	// The GitHub App's private key (a line of its PEM), and every token
	// the fake App minted.
	if app, ok := ts.Value("githubapp").(*fakes.GitHubApp); ok {
		_, keyPEM, _ := testAppKey()
		canaries = append(canaries, strings.Split(string(keyPEM), "\n")[2])
		for _, m := range app.Mints() {
			canaries = append(canaries, m.Token)
		}
	}
	for _, c := range canaries {
		for _, form := range []string{c, base64.StdEncoding.EncodeToString([]byte(c)), url.QueryEscape(c), c[len(c)-24:]} {
			if strings.Contains(s, form) {
				ts.Fatalf("%s holds a canary credential", where)
			}
		}
	}
}

// faketooluse NAME INPUT: make the fake Anthropic API's later answers call
// the tool NAME with INPUT (a JSON object), except to a tool's result;
// faketooluse with no argument stops it.
func cmdFakeToolUse(ts *testscript.TestScript, neg bool, args []string) {
	fake := ts.Value("anthropic").(*fakes.Anthropic)
	switch {
	case !neg && len(args) == 0:
		fake.AnswerToolUse("", nil)
	case !neg && len(args) == 2 && json.Valid([]byte(args[1])):
		fake.AnswerToolUse(args[0], json.RawMessage(args[1]))
	default:
		ts.Fatalf("usage: faketooluse [NAME INPUT]")
	}
}

// mcpcalls [oauth|stateless]: print each request the fake MCP server
// (with oauth: the one behind OAuth; with stateless: the one speaking only
// the 2026-07-28 revision) received since the last mcpcalls, one line each:
// the HTTP method, the JSON-RPC method and the tool, prompt or resource it
// names, and the credential it came with (mcp: the server's token; none;
// an OAuth access token by its name, at_1, at_2…; other). It fails if any
// carried a sandbox token.
func cmdMCPCalls(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 1 || len(args) == 1 && args[0] != "oauth" && args[0] != "stateless" {
		ts.Fatalf("usage: mcpcalls [oauth|stateless]")
	}
	server := "mcp" + strings.Join(args, "")
	calls := ts.Value(server).(*fakes.MCPServer).Calls()
	seen := ts.Value(server + "seen").(*int)
	w := ts.Stdout()
	for _, c := range calls[*seen:] {
		if strings.Contains(c.Authorization, "cpx_") || bytes.Contains(c.Body, []byte("cpx_")) {
			ts.Fatalf("the MCP server received a sandbox token")
		}
		cred, ok := map[string]string{"": "none", "Bearer " + canaryMCP: "mcp"}[c.Authorization]
		if at, isAccess := strings.CutPrefix(c.Authorization, "Bearer at_"); !ok && isAccess {
			cred, ok = "at_"+at, true
		}
		if !ok {
			cred = "other"
		}
		fmt.Fprintln(w, strings.Join(strings.Fields(c.HTTPMethod+" "+c.Method+" "+c.Name), " ")+" auth="+cred)
	}
	*seen = len(calls)
}

// mcpcaps [oauth|stateless]: print, for each request the fake MCP server
// (as mcpcalls) received whose _meta declares the client's capabilities
// (the 2026-07-28 revision's), its JSON-RPC method and those capabilities
// as JSON, one line each: what the server was told it may ask of the
// client.
func cmdMCPCaps(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 1 || len(args) == 1 && args[0] != "oauth" && args[0] != "stateless" {
		ts.Fatalf("usage: mcpcaps [oauth|stateless]")
	}
	for _, c := range ts.Value("mcp" + strings.Join(args, "")).(*fakes.MCPServer).Calls() {
		var m struct {
			Params struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(c.Body, &m) != nil {
			continue
		}
		if caps, ok := m.Params.Meta["io.modelcontextprotocol/clientCapabilities"]; ok {
			fmt.Fprintf(ts.Stdout(), "%s caps=%s\n", c.Method, caps)
		}
	}
}

// oauth exchanges | oauth end: print each exchange the fake OAuth token
// endpoint answered since the last, one line each (the grant, the
// refresh token it carried, the resource, the status; "none" for none), or end every access
// token it issued, as a server that revokes them early.
func cmdOAuth(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 || args[0] != "exchanges" && args[0] != "end" {
		ts.Fatalf("usage: oauth exchanges | oauth end")
	}
	o := ts.Value("oauth").(*fakes.OAuthServer)
	if args[0] == "end" {
		o.EndAccessTokens()
		return
	}
	seen := ts.Value("oauthseen").(*int)
	xs := o.Exchanges()
	if len(xs) == *seen {
		fmt.Fprintln(ts.Stdout(), "none")
	}
	for _, x := range xs[*seen:] {
		refresh := strings.Replace(x.RefreshToken, canaryOAuthRefresh, "CANARY", 1)
		fmt.Fprintf(ts.Stdout(), "%s refresh=%s resource=%s %d\n", x.GrantType, refresh, x.Resource, x.Status)
	}
	*seen = len(xs)
}

// needclaude: set CLAUDE to the Claude Code binary. Scripts guard it with
// [!claude] skip.
func cmdNeedClaude(ts *testscript.TestScript, neg bool, args []string) {
	path := fakes.ClaudeBinary()
	if path == "" {
		ts.Fatalf("Claude Code is not installed: .ci/test installs it and sets CPROXY_TEST_CLAUDE")
	}
	ts.Setenv("CLAUDE", path)
}

// condition answers [claude], [git], [npm], [gh], [pip] (Debian's Python
// with venv and its pip), [pnpm], [yarn], [tsc], [tmux],
// [dash], [zsh] and [fish]: whether that client or shell is installed,
// [pg]: whether a PostgreSQL server is there (CPROXY_TEST_PG_DSN), and
// [root]: whether the tests run as root, as CI does. In CI a missing one is
// an error, not a reason to skip.
func condition(cond string) (bool, error) {
	found, install := false, ""
	switch cond {
	case "claude":
		found, install = fakes.ClaudeBinary() != "", ".ci/test installs it and sets CPROXY_TEST_CLAUDE"
	case "pnpm":
		found, install = pnpmBinary() != "", ".ci/test installs it and sets CPROXY_TEST_PNPM"
	case "yarn":
		found, install = yarnBinary() != "", ".ci/test installs yarn berry and sets CPROXY_TEST_YARN"
	case "tsc":
		found, install = os.Getenv("CPROXY_TEST_TSC") != "", ".ci/test installs typescript and sets CPROXY_TEST_TSC"
	case "pg":
		found, install = os.Getenv("CPROXY_TEST_PG_DSN") != "", "install PostgreSQL (apt-get install postgresql) and run bash .ci/test, which starts a throwaway server and sets CPROXY_TEST_PG_DSN"
	case "pip":
		found, install = exec.Command(debianPython, "-c", "import ensurepip, venv").Run() == nil, "apt-get install python3-venv python3-pip, or run the tests through .ci/run, which installs them"
	case "root":
		if uid := os.Geteuid(); uid != 0 && os.Getenv("CI") == "true" {
			return false, fmt.Errorf("the tests run as uid %d: CI runs them as root", uid)
		}
		return os.Geteuid() == 0, nil
	case "git", "npm", "gh", "tmux", "dash", "zsh", "fish":
		_, err := exec.LookPath(cond)
		found, install = err == nil, installHint(cond)
	default:
		return false, fmt.Errorf("unknown condition %q", cond)
	}
	if !found && os.Getenv("CI") == "true" {
		return false, fmt.Errorf("%s is not installed: %s", cond, install)
	}
	return found, nil
}

// debianPython is Debian's Python, whose venv module brings Debian's pip
// into a venv (python3-venv): the pip the PyPI scripts run.
const debianPython = "/usr/bin/python3"

// installHint says how to install a client that comes from Debian's
// packages (.ci/clients lists them; .ci/run installs them).
func installHint(client string) string {
	return "apt-get install " + client + ", or run the tests through .ci/run, which installs it"
}

// pnpmBinary is the pnpm to test with: $CPROXY_TEST_PNPM, else pnpm on
// PATH, else "".
func pnpmBinary() string {
	if p := os.Getenv("CPROXY_TEST_PNPM"); p != "" {
		return p
	}
	p, _ := exec.LookPath("pnpm")
	return p
}

// yarnBinary is the yarn berry (2 or later) to test with:
// $CPROXY_TEST_YARN, else yarn on PATH if it is berry (yarn 1, classic,
// is another client), else "". Asked once: Setup runs for every script.
var yarnBinary = sync.OnceValue(func() string {
	if p := os.Getenv("CPROXY_TEST_YARN"); p != "" {
		return p
	}
	p, err := exec.LookPath("yarn")
	if err != nil {
		return ""
	}
	// Outside any project, and with corepack kept off the network, so
	// that asking for the version downloads nothing.
	cmd := exec.Command(p, "--version")
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "YARN_IGNORE_PATH=1", "COREPACK_ENABLE_NETWORK=0", "COREPACK_ENABLE_DOWNLOAD_PROMPT=0")
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	major, _, _ := strings.Cut(strings.TrimSpace(string(out)), ".")
	if n, err := strconv.Atoi(major); err != nil || n < 2 {
		return ""
	}
	return p
})

// goBuilder returns the gobuild command. gobuild DIR VAR: build the main
// package in DIR, a folder of this module such as
// docs/integrations/go-harness, with the go command that runs the tests,
// and set VAR to the binary. Each package is built once per test run.
func goBuilder(t *testing.T, repo string) func(ts *testscript.TestScript, neg bool, args []string) {
	bin := t.TempDir()
	var builds sync.Map // DIR → func() (string, error)
	return func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 2 {
			ts.Fatalf("usage: gobuild DIR VAR")
		}
		dir := filepath.Clean(args[0])
		build, _ := builds.LoadOrStore(dir, sync.OnceValues(func() (string, error) {
			out := filepath.Join(bin, strings.ReplaceAll(dir, string(filepath.Separator), "_"))
			cmd := exec.Command("go", "build", "-o", out, "./"+dir)
			cmd.Dir = repo
			if b, err := cmd.CombinedOutput(); err != nil {
				return "", fmt.Errorf("go build ./%s: %v\n%s", dir, err, b)
			}
			return out, nil
		}))
		path, err := build.(func() (string, error))()
		ts.Check(err)
		ts.Setenv(args[1], path)
	}
}

// filltokens FILE N: write N tokens into a new embedded store FILE, before
// serve opens it. Token i's id is tok_ and i as four hex digits then eight
// zeros (tok_00ff00000000 is token 255), except token 1000's, which is
// token 999's, so that a page of 1,000 ends on two tokens of one id. It is
// in sandbox bulk-(i%4), revoked when i%3 is 1, expired when i%3 is 2,
// else live for an hour.
func cmdFillTokens(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: filltokens FILE N")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	now := time.Now().UTC()
	ts.Check(fillStore(ts.MkAbs(args[0]), n, func(i int) (tokens.Hash, tokens.Record) {
		r := tokens.Record{Sandbox: fmt.Sprintf("bulk-%d", i%4), CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}
		switch i % 3 {
		case 1:
			r.RevokedAt = now.Add(-time.Minute)
		case 2:
			r.ExpiresAt = now.Add(-time.Minute)
		}
		if i == 1000 {
			return tokens.Hash{0x03, 0xe7, 6: 1}, r
		}
		return tokens.Hash{byte(i >> 8), byte(i)}, r
	}))
}

// capture VAR [REGEXP]: set VAR to the last command's stdout, trimmed, or
// to the first group of REGEXP in it. Scripts use it to hold a token.
func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: capture VAR [REGEXP]")
	}
	out := ts.ReadFile("stdout")
	if len(args) == 1 {
		ts.Setenv(args[0], strings.TrimSpace(out))
		return
	}
	m := regexp.MustCompile(args[1]).FindStringSubmatch(out)
	if len(m) < 2 {
		ts.Fatalf("capture: no match for %s in stdout", args[1])
	}
	ts.Setenv(args[0], m[1])
}

// sighup PID: send SIGHUP to a process, e.g. $SERVE_PID. testscript's kill
// knows only INT and KILL.
func cmdSighup(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sighup PID")
	}
	pid, err := strconv.Atoi(args[0])
	ts.Check(err)
	ts.Check(syscall.Kill(pid, syscall.SIGHUP))
}

// waitlog [-count=N] FILE REGEXP: wait until FILE (a log a background
// command writes) matches REGEXP at least N times (default 1), so a script
// acts once a server has done something rather than after a sleep.
func cmdWaitLog(ts *testscript.TestScript, neg bool, args []string) {
	want := 1
	if len(args) > 0 && strings.HasPrefix(args[0], "-count=") {
		n, err := strconv.Atoi(strings.TrimPrefix(args[0], "-count="))
		ts.Check(err)
		want, args = n, args[1:]
	}
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitlog [-count=N] FILE REGEXP")
	}
	re := regexp.MustCompile(args[1])
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(ts.MkAbs(args[0])); err == nil && len(re.FindAll(b, -1)) >= want {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s does not match %s %d times after 30s", args[0], args[1], want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bigbody FILE MIB: write a Messages API request of MIB MiB and one byte
// more, for the body limit.
func cmdBigBody(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: bigbody FILE MIB")
	}
	mib, err := strconv.Atoi(args[1])
	ts.Check(err)
	head := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"`
	tail := `"}]}`
	pad := (mib<<20 + 1) - len(head) - len(tail)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(head+strings.Repeat("x", pad)+tail), 0o644))
}

// envsubst FILE...: replace $NAME and ${NAME} in each file with the
// script's variables, so an inline config can name $FAKE_ANTHROPIC and a
// credential file can hold $CANARY_API_KEY.
func cmdEnvsubst(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: envsubst FILE...")
	}
	for _, f := range args {
		path := ts.MkAbs(f)
		st, err := os.Stat(path)
		ts.Check(err)
		ts.Check(os.WriteFile(path, []byte(os.Expand(ts.ReadFile(f), ts.Getenv)), st.Mode().Perm()))
	}
}

func gitServer(ts *testscript.TestScript) *fakes.GitServer {
	gs, ok := ts.Value("github").(*fakes.GitServer)
	if !ok {
		ts.Fatalf("no fake GitHub: git is not installed (guard the script with [!exec:git] skip)")
	}
	return gs
}

// gitrepo OWNER/NAME [BRANCH...]: create a repository on the fake GitHub,
// main with one commit, and a branch with a commit of its own per name.
func cmdGitRepo(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: gitrepo OWNER/NAME [BRANCH...]")
	}
	ts.Check(gitServer(ts).CreateRepo(args[0], args[1:]...))
}

// gitcommit OWNER/NAME BRANCH MESSAGE: add a commit to BRANCH on the fake
// GitHub, as if someone else had pushed it, and print its object id.
func cmdGitCommit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: gitcommit OWNER/NAME BRANCH MESSAGE")
	}
	id, err := gitServer(ts).Commit(args[0], args[1], args[2])
	ts.Check(err)
	fmt.Fprintln(ts.Stdout(), id)
}

// gitmoved OWNER/NAME TO: the fake GitHub answers every request for the
// repository with a 301 to the same request of TO: OWNER/NAME, a rename on
// the same host as github.com does, or a URL (on another host) ending in
// the new OWNER/NAME.
func cmdGitMoved(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: gitmoved OWNER/NAME TO")
	}
	if strings.Contains(args[1], "://") {
		gitServer(ts).MoveTo(args[0], args[1])
		return
	}
	gitServer(ts).Rename(args[0], args[1])
}

// The fake GitHub App of every script: its id and installation, and its
// key, made once per test process.
const (
	testAppID           = 424242
	testAppInstallation = 777
)

var testAppKey = func() func() (*rsa.PrivateKey, []byte, error) {
	var once sync.Once
	var key *rsa.PrivateKey
	var pemText []byte
	var err error
	return func() (*rsa.PrivateKey, []byte, error) {
		once.Do(func() { key, pemText, err = fakes.NewAppKey() })
		return key, pemText, err
	}
}()

// appmints: print the installation tokens the fake GitHub App minted since
// the last appmints, one line each: the repositories and permissions asked
// for ("repositories=app contents=read"). Never the token.
func cmdAppMints(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: appmints")
	}
	app, ok := ts.Value("githubapp").(*fakes.GitHubApp)
	if !ok {
		ts.Fatalf("no fake GitHub App: git is not installed (guard the script with [!git] skip)")
	}
	seen := ts.Value("githubappseen").(*int)
	mints := app.Mints()
	w := ts.Stdout() // empty, not the last command's, when nothing was minted
	for _, line := range fakes.MintLines(mints[*seen:]) {
		fmt.Fprintln(w, line)
	}
	*seen = len(mints)
	for _, why := range app.Refused() {
		ts.Logf("the fake GitHub App refused a request: %s", why)
	}
}

// gitref OWNER/NAME REF: print the object id REF names on the fake GitHub;
// nothing if there is no such ref.
func cmdGitRef(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: gitref OWNER/NAME REF")
	}
	if id := gitServer(ts).Ref(args[0], args[1]); id != "" {
		fmt.Fprintln(ts.Stdout(), id)
	}
}

// gitsetref OWNER/NAME REF ID: point a ref of a repository of the fake
// GitHub at an object id, as another pusher would.
func cmdGitSetRef(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: gitsetref OWNER/NAME REF ID")
	}
	ts.Check(gitServer(ts).SetRef(args[0], args[1], args[2]))
}

// gitrequests [-body] [HEADER...]: print the requests the fake GitHub received
// since the last gitrequests, one line each: method, path and query;
// auth=real when the request carried the real token as GitHub takes it
// (Basic x-access-token), auth=none or auth=other otherwise; git-protocol
// and content-encoding and the named headers when present; "chunked" for a
// streamed body; with -body, body=N, the bytes read, for a POST (sizes vary
// with git's version, so only scripts that need them ask). It fails if any
// request carried a sandbox token anywhere in its headers.
func cmdGitRequests(ts *testscript.TestScript, neg bool, args []string) {
	gs := gitServer(ts)
	seen := ts.Value("githubseen").(*int)
	body := len(args) > 0 && args[0] == "-body"
	if body {
		args = args[1:]
	}
	reqs := gs.Requests()
	out := ts.Stdout()
	real := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+canaryGitHub))
	for _, r := range reqs[*seen:] {
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, "cpx_") || strings.Contains(decodeBasic(v), "cpx_") {
					ts.Fatalf("the git server received a sandbox token in %s", k)
				}
			}
		}
		line := r.Method + " " + r.Path
		if r.RawQuery != "" {
			line += "?" + r.RawQuery
		}
		switch a := r.Header.Get("Authorization"); a {
		case real:
			line += " auth=real"
		case "":
			line += " auth=none"
		default:
			line += " auth=other"
		}
		for _, k := range append([]string{"Git-Protocol", "Content-Encoding"}, args...) {
			if v := r.Header.Get(k); v != "" {
				line += fmt.Sprintf(" %s=%s", strings.ToLower(k), v)
			}
		}
		if len(r.TransferEncoding) > 0 {
			line += " " + strings.Join(r.TransferEncoding, ",")
		}
		if body && r.Method == http.MethodPost {
			line += fmt.Sprintf(" body=%d", r.BodyBytes)
		}
		fmt.Fprintln(out, line)
	}
	*seen = len(reqs)
}

// decodeBasic returns the user:password of a Basic authorization, or "".
func decodeBasic(v string) string {
	scheme, rest, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	b, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	return string(b)
}

// randfile FILE BYTES: write BYTES random bytes (which no compression
// shrinks, so a pack holding them is as large).
func cmdRandFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: randfile FILE BYTES")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	b := make([]byte, n)
	rand.Read(b)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), b, 0o644))
}

// pypipkg [-sdist] [-age AGO|none] PROJECT VERSION [REQUIREMENT...]:
// publish a wheel (or with -sdist a source distribution) of PROJECT at
// VERSION on the fake PyPI index, uploaded AGO ago (a duration; default
// 720h) or with no upload time (none), requiring each REQUIREMENT.
func cmdPyPIPkg(ts *testscript.TestScript, neg bool, args []string) {
	sdist, uploaded := false, time.Now().Add(-720*time.Hour)
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch {
		case args[0] == "-sdist":
			sdist, args = true, args[1:]
		case args[0] == "-age" && len(args) > 1:
			uploaded = time.Time{}
			if args[1] != "none" {
				d, err := time.ParseDuration(args[1])
				ts.Check(err)
				uploaded = time.Now().Add(-d)
			}
			args = args[2:]
		default:
			ts.Fatalf("pypipkg: unknown flag %s", args[0])
		}
	}
	if neg || len(args) < 2 {
		ts.Fatalf("usage: pypipkg [-sdist] [-age AGO|none] PROJECT VERSION [REQUIREMENT...]")
	}
	idx := ts.Value("pypi").(*fakes.PyPIIndex)
	if sdist {
		ts.Check(idx.AddSdist(args[0], args[1], uploaded, args[2:]...))
		return
	}
	ts.Check(idx.AddWheel(args[0], args[1], uploaded, args[2:]...))
}

// pypisha PROJECT FILENAME: print the sha256 of one of PROJECT's files on
// the fake index, as a lock made outside the sandbox holds it.
func cmdPyPISHA(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: pypisha PROJECT FILENAME")
	}
	sum := ts.Value("pypi").(*fakes.PyPIIndex).FileSHA256(args[0], args[1])
	if sum == "" {
		ts.Fatalf("pypisha: the index has no file %s of %s", args[1], args[0])
	}
	fmt.Fprintln(ts.Stdout(), sum)
}

// pypirequests: print the requests the fake PyPI index and its files host
// received since the last call, sorted, one a line: HOST PATH auth=real
// (the index's credential), auth=none or auth=other. The files host's
// content-addressed folders are shown as "…". It fails the script if a
// request carried a sandbox token.
func cmdPyPIRequests(ts *testscript.TestScript, neg bool, args []string) {
	idx := ts.Value("pypi").(*fakes.PyPIIndex)
	seen := ts.Value("pypiseen").(*int)
	reqs := idx.Requests()
	var lines []string
	for _, r := range reqs[*seen:] {
		noSandboxToken(ts, "the PyPI index", http.Header{"Authorization": {r.Authorization}})
		path := r.Path
		if rest, ok := strings.CutPrefix(path, "/packages/"); ok {
			path = "/packages/…/" + rest[strings.LastIndexByte(rest, '/')+1:]
		}
		auth := "auth=other"
		switch r.Authorization {
		case "Basic " + base64.StdEncoding.EncodeToString([]byte(canaryPyPI)):
			auth = "auth=real"
		case "":
			auth = "auth=none"
		}
		lines = append(lines, r.Host+" "+path+" "+auth)
	}
	*seen = len(reqs)
	sort.Strings(lines)
	w := ts.Stdout()
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// npmpkg NAME VERSION...: publish versions of NAME on the fake registry.
func cmdNPMPkg(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: npmpkg NAME VERSION...")
	}
	ts.Check(ts.Value("npm").(*fakes.NPMRegistry).AddPackage(args[0], args[1:]...))
}

// npmtime NAME VERSION AGO|RFC3339|none: set NAME@VERSION's publish time in
// the packument's time: a duration ago ("1h", "30m"), an RFC 3339 time, or
// none to leave it out.
func cmdNPMTime(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: npmtime NAME VERSION AGO|RFC3339|none")
	}
	var t time.Time
	if args[2] != "none" {
		if d, err := time.ParseDuration(args[2]); err == nil {
			t = time.Now().Add(-d)
		} else if t, err = time.Parse(time.RFC3339, args[2]); err != nil {
			ts.Fatalf("npmtime: %q is neither a duration nor an RFC 3339 time", args[2])
		}
	}
	ts.Check(ts.Value("npm").(*fakes.NPMRegistry).SetPublishTime(args[0], args[1], t))
}

// npmdeps [-member MEMBER] NAME VERSION DEP=SPEC...: make NAME@VERSION on
// the fake registry depend on each DEP (a package name) at SPEC (a range, or
// a URL, git, …), in its dependencies or in MEMBER (optionalDependencies,
// peerDependencies).
func cmdNPMDeps(ts *testscript.TestScript, neg bool, args []string) {
	member := "dependencies"
	if len(args) > 1 && args[0] == "-member" {
		member, args = args[1], args[2:]
	}
	if neg || len(args) < 3 {
		ts.Fatalf("usage: npmdeps [-member MEMBER] NAME VERSION DEP=SPEC...")
	}
	deps := map[string]string{}
	for _, a := range args[2:] {
		dep, rng, ok := strings.Cut(a, "=")
		if !ok {
			ts.Fatalf("npmdeps: %q is not DEP=SPEC", a)
		}
		deps[dep] = rng
	}
	ts.Check(ts.Value("npm").(*fakes.NPMRegistry).SetDependencyMember(args[0], args[1], member, deps))
}

// npmadvisory NAME RANGE SEVERITY TITLE: the fake registry's audit
// endpoint reports TITLE for the versions of NAME in RANGE.
func cmdNPMAdvisory(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: npmadvisory NAME RANGE SEVERITY TITLE")
	}
	ts.Value("npm").(*fakes.NPMRegistry).AddAdvisory(args[0], args[1], args[2], args[3])
}

// relayrequests: print each request the fake relay upstream ($FAKE_RELAY)
// received since the last call: method, path and query as sent, and its
// Authorization and X-Mod-Token headers, named by which canary they hold;
// with -headers, the names (never the values) of every header it received
// too. A sandbox token in any header fails the script.
func cmdRelayRequests(ts *testscript.TestScript, neg bool, args []string) {
	names := len(args) == 1 && args[0] == "-headers"
	if neg || len(args) > 0 && !names {
		ts.Fatalf("usage: relayrequests [-headers]")
	}
	reqs := ts.Value("relay").(*fakes.Echo).Requests()
	seen := ts.Value("relayseen").(*int)
	name := map[string]string{"": "none", "Bearer " + canaryHub: "hub", canaryMod: "mod"}
	w := ts.Stdout()
	for _, r := range reqs[*seen:] {
		noSandboxToken(ts, "the relay upstream", r.Header)
		label := func(h string) string {
			if n, ok := name[r.Header.Get(h)]; ok {
				return n
			}
			return "other"
		}
		line := r.Method + " " + r.Path
		if r.Query != "" {
			line += "?" + r.Query
		}
		line += " authorization=" + label("Authorization") + " x-mod-token=" + label("X-Mod-Token")
		if names {
			line += " headers=" + strings.Join(slices.Sorted(maps.Keys(r.Header)), ",")
		}
		fmt.Fprintln(w, line)
	}
	*seen = len(reqs)
}

// fakedns: start a DNS server on loopback that resolves every name to
// 127.0.0.1, at $FAKE_DNS, until the script ends.
func cmdFakeDNS(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: fakedns")
	}
	d, err := fakes.NewDNS(net.IPv4(127, 0, 0, 1))
	ts.Check(err)
	ts.Defer(d.Close)
	ts.Setenv("FAKE_DNS", d.Addr)
}

// npmforeign NAME VERSION URL: point the packument's tarball of
// NAME@VERSION at URL, another host.
func cmdNPMForeign(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: npmforeign NAME VERSION URL")
	}
	ts.Check(ts.Value("npm").(*fakes.NPMRegistry).SetTarballURL(args[0], args[1], args[2]))
}

// npmhostile makes the fake registry answer as a hostile one would:
//
//	npmhostile status CODE: every packument and tarball answered with CODE
//	npmhostile elsewhere NAME MEMBER VERSION...: those versions offered under
//	  the top-level MEMBER (policyRestrictions, stagedVersions) instead of
//	  versions, each with a dist-tag hostile-VERSION
//	npmhostile earliertime NAME VERSION AGO: time names VERSION twice, first
//	  as published AGO (a duration) ago
//	npmhostile ignorecase: package names looked up in any case
//	npmhostile redirect PATH CODE LOCATION: PATH answered with a redirect
func cmdNPMHostile(ts *testscript.TestScript, neg bool, args []string) {
	reg := ts.Value("npm").(*fakes.NPMRegistry)
	usage := func() {
		ts.Fatalf("usage: npmhostile status CODE | elsewhere NAME MEMBER VERSION... | earliertime NAME VERSION AGO | ignorecase | redirect PATH CODE LOCATION")
	}
	if neg || len(args) == 0 {
		usage()
	}
	switch a := args[1:]; {
	case args[0] == "status" && len(a) == 1:
		code, err := strconv.Atoi(a[0])
		ts.Check(err)
		reg.SetStatus(code)
	case args[0] == "elsewhere" && len(a) >= 3:
		ts.Check(reg.OfferElsewhere(a[0], a[1], a[2:]...))
	case args[0] == "earliertime" && len(a) == 3:
		d, err := time.ParseDuration(a[2])
		ts.Check(err)
		ts.Check(reg.SetEarlierTime(a[0], a[1], time.Now().Add(-d)))
	case args[0] == "ignorecase" && len(a) == 0:
		reg.SetIgnoreCase(true)
	case args[0] == "redirect" && len(a) == 3:
		code, err := strconv.Atoi(a[1])
		ts.Check(err)
		reg.SetRedirect(a[0], code, a[2])
	default:
		usage()
	}
}

// npmrequests: print the fake registry's requests since the last call, one
// "METHOD PATH auth=real|none|other" line each, sorted (npm fetches in
// parallel); fail on any request that carries a sandbox token.
func cmdNPMRequests(ts *testscript.TestScript, neg bool, args []string) {
	reg := ts.Value("npm").(*fakes.NPMRegistry)
	seen := ts.Value("npmseen").(*int)
	reqs := reg.Requests()
	var lines []string
	for _, r := range reqs[*seen:] {
		noSandboxToken(ts, "the npm registry", r.Header)
		line := r.Method + " " + r.Path
		switch a := r.Header.Get("Authorization"); a {
		case "Bearer " + canaryNPM:
			line += " auth=real"
		case "":
			line += " auth=none"
		default:
			line += " auth=other"
		}
		lines = append(lines, line)
	}
	*seen = len(reqs)
	sort.Strings(lines)
	// Taken even when there is nothing to print, so that stdout is this
	// command's (empty) output, not the previous command's.
	w := ts.Stdout()
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// noSandboxToken fails the script if h, a header who received, carries a
// sandbox token.
func noSandboxToken(ts *testscript.TestScript, who string, h http.Header) {
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, "cpx_") {
				ts.Fatalf("%s received a sandbox token in %s", who, k)
			}
		}
	}
}

// apirequests: print the requests the fake GitHub REST API received since
// the last apirequests, one "METHOD PATH[?QUERY] auth=real|app|none|other" a
// line, in order; it fails the script if one carried a sandbox token.
func cmdAPIRequests(ts *testscript.TestScript, neg bool, args []string) {
	seen := ts.Value("githubrestseen").(*int)
	reqs := ts.Value("githubrest").(*fakes.GitHubREST).Requests()
	w := ts.Stdout()
	for _, r := range reqs[*seen:] {
		noSandboxToken(ts, "the GitHub API", r.Header)
		line := r.Method + " " + r.Path
		if r.Query != "" {
			line += "?" + r.Query
		}
		switch a := r.Header.Get("Authorization"); a {
		case "Bearer " + canaryGitHub:
			line += " auth=real"
		case "Bearer " + appToken(ts, a):
			line += " auth=app"
		case "":
			line += " auth=none"
		default:
			line += " auth=other"
		}
		if r.Path == "/graphql" {
			line += graphQLSummary(r.Body)
		}
		fmt.Fprintln(w, line)
	}
	*seen = len(reqs)
}

// appToken is the token of auth, an Authorization header's "Bearer
// TOKEN", when the fake GitHub App minted it; else a value no header holds.
func appToken(ts *testscript.TestScript, auth string) string {
	t, ok := strings.CutPrefix(auth, "Bearer ")
	if app, isApp := ts.Value("githubapp").(*fakes.GitHubApp); ok && isApp && t != "" {
		for _, m := range app.Mints() {
			if m.Token == t {
				return t
			}
		}
	}
	return "\x00"
}

// graphQLSummary is what a GraphQL body asks, for apirequests: " KIND
// FIELD…" for each operation (query repository, mutation
// createPullRequest), or " (unreadable)".
func graphQLSummary(body []byte) string {
	ops, err := gqlpolicy.Analyze(body)
	if err != nil {
		return " (unreadable)"
	}
	var s string
	for _, op := range ops {
		s += " " + op.Kind + " " + strings.Join(op.Fields, ",")
	}
	return s
}

// apimutations: print the GraphQL mutations the fake GitHub API ran since
// the last apimutations, one "NAME INPUT" a line, the input as JSON with
// its keys sorted.
func cmdAPIMutations(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: apimutations")
	}
	seen := ts.Value("githubmutationsseen").(*int)
	muts := ts.Value("githubrest").(*fakes.GitHubREST).GraphQLMutations()
	w := ts.Stdout()
	for _, m := range muts[*seen:] {
		in, err := json.Marshal(m.Input)
		ts.Check(err)
		fmt.Fprintf(w, "%s %s\n", m.Name, in)
	}
	*seen = len(muts)
}

// unixbridge VAR SOCKET: listen on a free loopback port and forward each
// connection to the Unix socket SOCKET, until the script ends; set VAR to
// the bridge's URL. It stands for what a harness runs inside a VM
// (socat TCP-LISTEN:8080,bind=127.0.0.1,fork UNIX-CONNECT:/run/cproxy.sock),
// so clients without Unix-socket support (git, npm) reach a sandbox socket.
func cmdUnixBridge(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: unixbridge VAR SOCKET")
	}
	socket := ts.MkAbs(args[1])
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	// Closed at the end with the connections still open (a client's idle
	// keep-alive ones), so nothing outlives the script.
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn) {
		mu.Lock()
		conns[c] = true
		mu.Unlock()
	}
	ts.Defer(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			go func() {
				defer c.Close()
				u, err := net.Dial("unix", socket)
				if err != nil {
					return
				}
				track(u)
				defer u.Close()
				go func() {
					io.Copy(u, c)
					u.(*net.UnixConn).CloseWrite()
				}()
				io.Copy(c, u)
			}()
		}
	}()
	ts.Setenv(args[0], "http://"+ln.Addr().String())
}

// storeschema FILE newer: mark the embedded token store FILE (not in use) as
// written at the schema after the newest this cproxy knows, as a newer
// cproxy would have left it; set SCHEMA_KNOWN and SCHEMA_NEWER to the two
// versions.
// pgdatabase: create an empty database on CPROXY_TEST_PG_DSN's server,
// dropped when the script ends; PG_DSN is its connection string and
// PG_WHERE its HOST:PORT/NAME, as cproxy names it. Use it after [pg].
func cmdPGDatabase(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: pgdatabase")
	}
	admin := os.Getenv("CPROXY_TEST_PG_DSN")
	u, err := url.Parse(admin)
	ts.Check(err)
	var id [6]byte
	rand.Read(id[:])
	name := fmt.Sprintf("cproxy_test_%x", id)
	run := func(sql string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		ts.Check(err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		ts.Check(err)
	}
	run("CREATE DATABASE " + name)
	ts.Defer(func() { run("DROP DATABASE " + name + " WITH (FORCE)") })
	u.Path = "/" + name
	ts.Setenv("PG_DSN", u.String())
	ts.Setenv("PG_WHERE", u.Host+"/"+name)
}

func cmdStoreSchema(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 || args[1] != "newer" {
		ts.Fatalf("usage: storeschema FILE newer")
	}
	db, err := bolt.Open(ts.MkAbs(args[0]), 0o600, &bolt.Options{Timeout: time.Second})
	ts.Check(err)
	defer db.Close()
	newer := strconv.Itoa(tokens.BoltSchemaVersion() + 1)
	ts.Check(db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if meta == nil {
			return errors.New("no meta bucket: not a cproxy token store")
		}
		return meta.Put([]byte("schema_version"), []byte(newer))
	}))
	ts.Setenv("SCHEMA_KNOWN", strconv.Itoa(tokens.BoltSchemaVersion()))
	ts.Setenv("SCHEMA_NEWER", newer)
}

// storechurn FILE N: in the embedded token store FILE (not in use), mint N
// tokens that have expired, each with 8 KiB of values, then prune them: the
// file grows by their size and keeps it.
func cmdStoreChurn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: storechurn FILE N")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	s, err := tokens.OpenBolt(ts.MkAbs(args[0]))
	ts.Check(err)
	defer s.Close()
	ctx := context.Background()
	dead := time.Now().Add(-time.Hour)
	for range n {
		tok, err := tokens.New()
		ts.Check(err)
		ts.Check(s.Create(ctx, tok.Hash(), tokens.Record{Sandbox: "churn", CreatedAt: dead, ExpiresAt: dead, Values: make([]byte, 8<<10)}))
	}
	pruned, err := s.Prune(ctx, time.Now(), n)
	ts.Check(err)
	if len(pruned) != n {
		ts.Fatalf("pruned %d of %d tokens", len(pruned), n)
	}
}

// gomodule PATH VERSION AGO|none: publish PATH@VERSION on the fake module
// proxy, released AGO ("720h") before now or with no time, holding one
// package at its root whose Hello says which module and version it is.
func cmdGoModule(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: gomodule PATH VERSION AGO|none")
	}
	var t time.Time
	if args[2] != "none" {
		d, err := time.ParseDuration(args[2])
		ts.Check(err)
		t = time.Now().Add(-d)
	}
	elems := strings.Split(args[0], "/")
	pkg := strings.ToLower(strings.NewReplacer("-", "", ".", "").Replace(elems[len(elems)-1]))
	src := fmt.Sprintf("package %s\n\n// Hello says which module this is.\nfunc Hello() string { return %q }\n", pkg, "hello from "+args[0]+"@"+args[1])
	ts.Check(ts.Value("goproxy").(*fakes.GoProxy).AddModule(args[0], args[1], t, map[string]string{pkg + ".go": src}))
}

// gorequests: print the requests the fake module proxy received since the
// last gorequests, sorted, one "GET /PATH auth=real|other|none" a line.
func cmdGoRequests(ts *testscript.TestScript, neg bool, args []string) {
	reqs := ts.Value("goproxy").(*fakes.GoProxy).Requests()
	seen := ts.Value("goproxyseen").(*int)
	lines := slices.Clone(reqs[*seen:])
	*seen = len(reqs)
	sort.Strings(lines)
	w := ts.Stdout()
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
