package main

// End-to-end tests that drive the real `cproxy serve` process (the test
// binary, linked onto PATH as cproxy by testscript.Main) with the Anthropic
// Go SDK as the client: streaming and not, SIGTERM with a stream open, and
// revocation across SIGKILL and restart.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/routes/admin"
	"github.com/cproxy/cproxy/tokens"
)

// served is one running `cproxy serve`.
type served struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *testutil.Buffer
	proxy  string // http://host:port
	admin  string
	done   chan error
}

// writeServeConfig writes a config in dir whose Anthropic upstream is the
// fake, with the canary API key as a 0600 file.
func writeServeConfig(t *testing.T, dir, upstream string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "anthropic.key"), []byte(canaryAPIKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`[listen]
proxy = "127.0.0.1:0"
admin = "127.0.0.1:0"
ready_file = "ready.json"
drain = "20s"

[store]
path = "cproxy.db"

[upstream.anthropic]
url = %q
credential = "file:anthropic.key"
`, upstream)
	if err := os.WriteFile(filepath.Join(dir, "cproxy.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// appendFile appends text to the file at path.
func appendFile(t *testing.T, path, text string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, text...), 0o600); err != nil {
		t.Fatal(err)
	}
}

func startServe(t *testing.T, dir string) *served {
	t.Helper()
	return startServeUnder(t, dir)
}

// startServeUnder is startServe with cproxy run by the command wrap names
// (prlimit with its options, say); no wrap runs it directly.
func startServeUnder(t *testing.T, dir string, wrap ...string) *served {
	t.Helper()
	ready := filepath.Join(dir, "ready.json")
	os.Remove(ready)
	s := &served{t: t, stderr: &testutil.Buffer{}, done: make(chan error, 1)}
	argv := append(wrap, "cproxy", "serve", "--config", filepath.Join(dir, "cproxy.toml"))
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY=")
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
		checkLogs(t, s.stderr.String())
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			var r struct{ Proxy, Admin string }
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			s.proxy, s.admin = "http://"+r.Proxy, "http://"+r.Admin
			return s
		}
		select {
		case err := <-s.done:
			s.done <- err // for the cleanup, which waits on it too
			t.Fatalf("cproxy serve exited: %v\n%s", err, s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cproxy serve did not become ready:\n%s", s.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serveWithFake starts cproxy serve in a new directory, in front of a new
// fake Anthropic API that takes the canary key.
func serveWithFake(t *testing.T) (*served, *fakes.Anthropic, string) {
	t.Helper()
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	writeServeConfig(t, dir, fake.URL)
	return startServe(t, dir), fake, dir
}

// checkLogs fails the test if serve's log holds a credential or a token.
func checkLogs(t *testing.T, logs string) {
	for _, c := range []string{canaryAPIKey, canaryOAuth, "cpx_"} {
		if strings.Contains(logs, c) {
			t.Errorf("serve's log holds a secret (%.8s…):\n%s", c, logs)
		}
	}
}

func (s *served) mint(sandbox string) string {
	s.t.Helper()
	return s.mintTTL(sandbox, "")
}

// mintTTL mints a token for sandbox that lives ttl; "": the default.
func (s *served) mintTTL(sandbox, ttl string) string {
	s.t.Helper()
	q := "sandbox=" + sandbox
	if ttl != "" {
		q += "&ttl=" + ttl
	}
	return s.mintQuery(q)
}

// mintQuery mints a token with POST /tokens?q.
func (s *served) mintQuery(q string) string {
	s.t.Helper()
	resp, err := http.Post(s.admin+"/tokens?"+q, "", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admin.TokenCreated
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 201 {
		s.t.Fatalf("POST /tokens: %s %v", resp.Status, err)
	}
	return out.Value
}

func (s *served) revoke(sandbox string) {
	s.t.Helper()
	req, _ := http.NewRequest("DELETE", s.admin+"/tokens?sandbox="+sandbox, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		s.t.Fatalf("DELETE /tokens: %v %v", err, resp)
	}
	resp.Body.Close()
}

// revokeToken revokes tok alone, through DELETE /tokens/ID, and returns
// its id.
func (s *served) revokeToken(tok string) string {
	s.t.Helper()
	parsed, err := tokens.Parse(tok)
	if err != nil {
		s.t.Fatal(err)
	}
	id := parsed.Hash().ID()
	req, _ := http.NewRequest("DELETE", s.admin+"/tokens/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		s.t.Fatalf("DELETE /tokens/%s: %v %v", id, err, resp)
	}
	resp.Body.Close()
	return id
}

func sdkClient(base string, auth option.RequestOption) *anthropic.Client {
	c := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(base), option.WithMaxRetries(0), auth)
	return &c
}

func helloParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 256,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("say hi"))},
	}
}

func checkUpstreamGotCredential(t *testing.T, fake *fakes.Anthropic) {
	t.Helper()
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream received nothing")
	}
	for _, r := range reqs {
		if r.Header.Get("X-Api-Key") != canaryAPIKey {
			t.Errorf("%s %s: the upstream did not get the real API key", r.Method, r.Path)
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, "cpx_") {
					t.Errorf("%s %s: the upstream got the sandbox token in %s", r.Method, r.Path, k)
				}
			}
		}
	}
}

func TestSDKThroughCproxy(t *testing.T) {
	s, fake, _ := serveWithFake(t)
	tok := s.mint("conv-42")

	for name, auth := range map[string]option.RequestOption{
		"auth token": option.WithAuthToken(tok),
		"api key":    option.WithAPIKey(tok),
		"x-api-key":  option.WithHeader("X-Api-Key", tok),
	} {
		t.Run(name, func(t *testing.T) {
			c := sdkClient(s.proxy, auth)
			msg, err := c.Messages.New(t.Context(), helloParams())
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.Content) != 1 || msg.Content[0].Text != fakes.DefaultReply || msg.StopReason != anthropic.StopReasonEndTurn {
				t.Fatalf("non-streaming answer: %+v", msg)
			}

			stream := c.Messages.NewStreaming(t.Context(), helloParams())
			var acc anthropic.Message
			events := 0
			for stream.Next() {
				events++
				if err := acc.Accumulate(stream.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			stream.Close()
			if events < 6 || acc.Content[0].Text != fakes.DefaultReply || acc.Usage.OutputTokens == 0 {
				t.Fatalf("stream: %d events, %+v", events, acc)
			}

			count, err := c.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
				Model:    "claude-sonnet-4-5",
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("count these"))},
			})
			if err != nil || count.InputTokens == 0 {
				t.Fatalf("count_tokens: %v %+v", err, count)
			}
			if _, err := c.Models.List(t.Context(), anthropic.ModelListParams{Limit: anthropic.Int(2)}); err != nil {
				t.Fatalf("models: %v", err)
			}
		})
	}
	checkUpstreamGotCredential(t, fake)

	// Revoked: the SDK sees cproxy's 401 in Anthropic's shape.
	s.revoke("conv-42")
	n := len(fake.Requests())
	_, err := sdkClient(s.proxy, option.WithAuthToken(tok)).Messages.New(t.Context(), helloParams())
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || !strings.Contains(apiErr.Error(), "revoked") {
		t.Fatalf("after revocation: %v", err)
	}
	if len(fake.Requests()) != n {
		t.Fatal("a revoked token's request reached the upstream")
	}
}

func TestSIGTERMDrainsOpenStream(t *testing.T) {
	s, fake, _ := serveWithFake(t)
	tok := s.mint("conv-1")
	gate := fake.StallStreams(3)
	defer gate.Release()

	type result struct {
		text string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		stream := sdkClient(s.proxy, option.WithAuthToken(tok)).Messages.NewStreaming(t.Context(), helloParams())
		defer stream.Close()
		var acc anthropic.Message
		for stream.Next() {
			acc.Accumulate(stream.Current())
		}
		text := ""
		if len(acc.Content) > 0 {
			text = acc.Content[0].Text
		}
		got <- result{text, stream.Err()}
	}()
	<-gate.Reached()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused once serve has stopped accepting...
	addr := strings.TrimPrefix(s.proxy, "http://")
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("serve still accepts connections after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-s.done:
		t.Fatalf("serve exited with a stream open: %v", err)
	default:
	}
	// ...while the open stream finishes whole.
	gate.Release()
	r := <-got
	if r.err != nil || r.text != fakes.DefaultReply {
		t.Fatalf("the open stream did not finish: %q %v", r.text, r.err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("serve exited with %v, want 0\n%s", err, s.stderr.String())
		}
		s.done <- nil // for Cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit after its last stream ended")
	}
}

func TestRevocationSurvivesKill(t *testing.T) {
	s, _, dir := serveWithFake(t)
	revoked, kept := s.mint("conv-1"), s.mint("conv-2")
	s.revoke("conv-1")
	// SIGKILL: no chance to flush anything. The revocation was durable
	// before DELETE answered.
	s.cmd.Process.Kill()
	<-s.done
	s.done <- nil

	s = startServe(t, dir)
	_, err := sdkClient(s.proxy, option.WithAuthToken(revoked)).Messages.New(t.Context(), helloParams())
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("revoked token after restart: %v", err)
	}
	if _, err := sdkClient(s.proxy, option.WithAuthToken(kept)).Messages.New(t.Context(), helloParams()); err != nil {
		t.Fatalf("live token after restart: %v", err)
	}
}

// A second SIGTERM during the drain stops serve at once, open stream or not.
func TestSecondSignalEndsTheDrain(t *testing.T) {
	s, fake, _ := serveWithFake(t)
	tok := s.mint("conv-1")
	gate := fake.StallStreams(3)
	defer gate.Release()

	streamErr := make(chan error, 1)
	go func() {
		stream := sdkClient(s.proxy, option.WithAuthToken(tok)).Messages.NewStreaming(t.Context(), helloParams())
		defer stream.Close()
		for stream.Next() {
		}
		streamErr <- stream.Err()
	}()
	<-gate.Reached()
	s.cmd.Process.Signal(syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.stderr.String(), "shutting down"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no shutdown after SIGTERM")
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("serve exited with %v, want 0", err)
		}
		s.done <- nil
	case <-time.After(15 * time.Second): // far below the config's 20s drain
		t.Fatal("a second SIGTERM did not end the drain")
	}
	if err := <-streamErr; err == nil {
		t.Fatal("the held stream ended as if complete")
	}
	if !strings.Contains(s.stderr.String(), "second signal") {
		t.Fatalf("no word of the second signal in the log:\n%s", s.stderr.String())
	}
}
