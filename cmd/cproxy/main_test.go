package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/cproxy/cproxy/helpers"
	"github.com/cproxy/cproxy/internal/fakes"
)

// Canary credentials: the fake Anthropic API accepts exactly these, and no
// log line, error or response of the suite may contain them.
const (
	canaryAPIKey = "sk-ant-api03-CANARYapikey0123456789abcdefghijklmnopqrstuvwxyz"
	canaryOAuth  = "sk-ant-oat01-CANARYoauth0123456789abcdefghijklmnopqrstuvwxyz"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"cproxy": func() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) },
		"git-credential-cproxy": func() {
			os.Exit(helpers.GitCredentialMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, scriptParams(t, "../../testdata/script"))
}

func scriptParams(t *testing.T, dir string) testscript.Params {
	return testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Condition:           condition,
		Setup: func(env *testscript.Env) error {
			fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey, OAuthToken: canaryOAuth})
			env.Defer(fake.Close)
			env.Values["anthropic"] = fake
			home := filepath.Join(env.WorkDir, "home")
			for k, v := range map[string]string{
				"FAKE_ANTHROPIC":      fake.URL,
				"CANARY_API_KEY":      canaryAPIKey,
				"CANARY_OAUTH":        canaryOAuth,
				"HOME":                home,
				"XDG_STATE_HOME":      filepath.Join(env.WorkDir, "state"),
				"XDG_CONFIG_HOME":     filepath.Join(home, ".config"),
				"XDG_CACHE_HOME":      filepath.Join(home, ".cache"),
				"GIT_CONFIG_GLOBAL":   filepath.Join(home, ".gitconfig"),
				"GIT_CONFIG_NOSYSTEM": "1",
				"CI":                  os.Getenv("CI"),
				"CPROXY_TEST_CLAUDE":  os.Getenv("CPROXY_TEST_CLAUDE"),
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
				ts.Value("anthropic").(*fakes.Anthropic).HoldHeaders()
			},
		},
	}
}

// waitready FILE: wait for cproxy serve's ready file, then set PROXY and
// ADMIN to its listeners' URLs.
func cmdWaitReady(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: waitready FILE")
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var ready struct{ Proxy, Admin string }
			if err := json.Unmarshal(b, &ready); err != nil {
				ts.Fatalf("ready file: %v", err)
			}
			ts.Setenv("PROXY", "http://"+ready.Proxy)
			ts.Setenv("ADMIN", "http://"+ready.Admin)
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no ready file %s after 30s", args[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// http [-H 'Name: value']... [-d BODY | -f FILE] METHOD URL: send one
// request; stdout gets "HTTP <status>", the response headers cproxy or the
// upstream set that a test asserts on, a blank line and the body. Every
// response is checked for the canary credentials.
func cmdHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("http does not fail; assert on its stdout")
	}
	var headers []string
	var body io.Reader
	for len(args) > 2 {
		switch args[0] {
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
		ts.Fatalf("usage: http [-H 'Name: value'] [-d BODY | -f FILE] METHOD URL")
	}
	req, err := http.NewRequest(args[0], args[1], body)
	ts.Check(err)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		fmt.Fprintf(ts.Stdout(), "HTTP error: %v\n", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ts.Check(err)
	var out bytes.Buffer
	fmt.Fprintf(&out, "HTTP %d\n", resp.StatusCode)
	for _, k := range []string{"Content-Type", "Retry-After", "Anthropic-Ratelimit-Requests-Limit", "Request-Id"} {
		if v := resp.Header.Get(k); v != "" {
			fmt.Fprintf(&out, "%s: %s\n", k, v)
		}
	}
	out.WriteString("\n")
	out.Write(b)
	checkNoSecrets(ts, "response to "+args[0]+" "+args[1], out.String())
	ts.Stdout().Write(out.Bytes())
}

// upstream: print every request the fake Anthropic API received, one line
// each: method, path and query, and the credential headers it carried. It
// fails if any request carried a sandbox token.
func cmdUpstream(ts *testscript.TestScript, neg bool, args []string) {
	fake := ts.Value("anthropic").(*fakes.Anthropic)
	for _, r := range fake.Requests() {
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, "cpx_") {
					ts.Fatalf("the upstream received a sandbox token in %s", k)
				}
			}
		}
		line := r.Method + " " + r.Path
		if r.RawQuery != "" {
			line += "?" + r.RawQuery
		}
		for _, k := range []string{"X-Api-Key", "Authorization", "Anthropic-Beta", "Anthropic-Version"} {
			if v := r.Header.Get(k); v != "" {
				line += fmt.Sprintf(" %s=%s", strings.ToLower(k), v)
			}
		}
		fmt.Fprintln(ts.Stdout(), line)
	}
}

// nosecrets [FILE...]: fail if the last command's stdout or stderr, or the
// named files, hold a canary credential (raw, base64 or URL-encoded).
func cmdNoSecrets(ts *testscript.TestScript, neg bool, args []string) {
	checkNoSecrets(ts, "stdout", ts.ReadFile("stdout"))
	checkNoSecrets(ts, "stderr", ts.ReadFile("stderr"))
	for _, f := range args {
		checkNoSecrets(ts, f, ts.ReadFile(f))
	}
}

func checkNoSecrets(ts *testscript.TestScript, where, s string) {
	for _, c := range []string{canaryAPIKey, canaryOAuth} {
		for _, form := range []string{c, base64.StdEncoding.EncodeToString([]byte(c)), url.QueryEscape(c), c[len(c)-24:]} {
			if strings.Contains(s, form) {
				ts.Fatalf("%s holds a canary credential", where)
			}
		}
	}
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

// condition answers [claude]: whether Claude Code is installed. In CI a
// missing client is an error, not a reason to skip.
func condition(cond string) (bool, error) {
	switch cond {
	case "claude":
		if fakes.ClaudeBinary() != "" {
			return true, nil
		}
		if os.Getenv("CI") == "true" {
			return false, fmt.Errorf("Claude Code is not installed: .ci/test installs it and sets CPROXY_TEST_CLAUDE")
		}
		return false, nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}
