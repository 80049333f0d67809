package fakes_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/cproxy/cproxy/internal/fakes"
)

const (
	testKey   = "sk-ant-api03-test-key"
	testToken = "sk-ant-oat01-test-token"
	testModel = "claude-sonnet-4-5-20250929"
)

var requestIDPattern = regexp.MustCompile(`^req_011C[0-9A-Za-z]{20}$`)

func newFake(t *testing.T, o fakes.AnthropicOptions) *fakes.Anthropic {
	t.Helper()
	f := fakes.NewAnthropic(o)
	t.Cleanup(f.Close)
	return f
}

// sdk returns an SDK client for f that reads nothing from the environment and never retries. The SDK sends
// WithAPIKey as a bearer token, so the API-key client sets x-api-key itself, as Claude Code does.
func sdk(f *fakes.Anthropic, cred string) *anthropic.Client {
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithBaseURL(f.URL), option.WithMaxRetries(0)}
	switch cred {
	case "api-key":
		opts = append(opts, option.WithHeader("X-Api-Key", testKey))
	case "oauth":
		opts = append(opts, option.WithAuthToken(testToken), option.WithHeaderAdd("Anthropic-Beta", "oauth-2025-04-20"))
	}
	c := anthropic.NewClient(opts...)
	return &c
}

func hello() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     testModel,
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("say hi"))},
	}
}

func TestSDKMessage(t *testing.T) {
	for _, cred := range []string{"api-key", "oauth"} {
		t.Run(cred, func(t *testing.T) {
			f := newFake(t, fakes.AnthropicOptions{APIKey: testKey, OAuthToken: testToken})
			msg, err := sdk(f, cred).Messages.New(t.Context(), hello())
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != fakes.DefaultReply {
				t.Errorf("content = %+v, want one text block %q", msg.Content, fakes.DefaultReply)
			}
			if !strings.HasPrefix(msg.ID, "msg_01") || msg.Role != "assistant" || msg.Model != testModel {
				t.Errorf("id, role, model = %q, %q, %q", msg.ID, msg.Role, msg.Model)
			}
			if msg.StopReason != anthropic.StopReasonEndTurn {
				t.Errorf("stop_reason = %q, want end_turn", msg.StopReason)
			}
			if msg.Usage.InputTokens < 1 || msg.Usage.OutputTokens != 6 {
				t.Errorf("usage = %d in, %d out; want some in, 6 out (a token per word)", msg.Usage.InputTokens, msg.Usage.OutputTokens)
			}
		})
	}
}

func TestSDKStream(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{OAuthToken: testToken, Reply: "Streams arrive in pieces."})
	stream := sdk(f, "oauth").Messages.NewStreaming(t.Context(), hello())
	defer stream.Close()
	var msg anthropic.Message
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if !slices.Equal(types, want) {
		t.Errorf("events = %v\nwant %v", types, want)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "Streams arrive in pieces." {
		t.Errorf("accumulated content = %+v", msg.Content)
	}
	if msg.StopReason != anthropic.StopReasonEndTurn || msg.Usage.OutputTokens != 4 || msg.Model != testModel {
		t.Errorf("stop_reason %q, output_tokens %d, model %q", msg.StopReason, msg.Usage.OutputTokens, msg.Model)
	}
}

func TestSDKCountTokensAndModels(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{APIKey: testKey})
	c := sdk(f, "api-key")
	count, err := c.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
		Model:    testModel,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("count these words please"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if count.InputTokens < 1 {
		t.Errorf("input_tokens = %d", count.InputTokens)
	}

	page, err := c.Models.List(t.Context(), anthropic.ModelListParams{Limit: anthropic.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || !page.HasMore || page.FirstID != page.Data[0].ID || page.LastID != page.Data[1].ID {
		t.Fatalf("first page = %+v", page)
	}
	next, err := page.GetNextPage()
	if err != nil {
		t.Fatal(err)
	}
	if len(next.Data) != 1 || next.HasMore || next.Data[0].ID == page.Data[1].ID || next.Data[0].Type != "model" {
		t.Errorf("second page = %+v", next)
	}
}

func TestSDKSeesAPIErrors(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{APIKey: testKey})
	c := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(f.URL), option.WithMaxRetries(0),
		option.WithHeader("X-Api-Key", "sk-wrong"))
	_, err := c.Messages.New(t.Context(), hello())
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want an *anthropic.Error", err)
	}
	if apiErr.StatusCode != http.StatusUnauthorized || apiErr.Type() != "authentication_error" ||
		apiErr.Message != "invalid x-api-key" || !requestIDPattern.MatchString(apiErr.RequestID) {
		t.Errorf("status %d, type %q, message %q, request id %q", apiErr.StatusCode, apiErr.Type(), apiErr.Message, apiErr.RequestID)
	}
}

// post sends body to the fake with the given headers; anthropic-version is added unless headers name it.
func post(t *testing.T, url, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if req.Header.Get("Anthropic-Version") == "-" {
		req.Header.Del("Anthropic-Version")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const helloBody = `{"model":"` + testModel + `","max_tokens":64,"messages":[{"role":"user","content":"say hi"}]}`

// TestStreamWireFormat reads the raw bytes a streaming client gets: each event is "event: NAME\ndata: JSON\n\n",
// in the real order, with a ping after content_block_start and the reply split over several deltas.
func TestStreamWireFormat(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{APIKey: testKey})
	body := strings.Replace(helloBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	resp := post(t, f.URL+"/v1/messages?beta=true", body, "X-Api-Key", testKey)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !requestIDPattern.MatchString(resp.Header.Get("Request-Id")) {
		t.Errorf("request-id = %q", resp.Header.Get("Request-Id"))
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(raw, []byte("\n\n")) {
		t.Errorf("stream does not end with a blank line: %q", raw)
	}
	var names []string
	var text strings.Builder
	for block := range strings.SplitSeq(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		eventLine, dataLine, ok := strings.Cut(block, "\n")
		name, okEvent := strings.CutPrefix(eventLine, "event: ")
		data, okData := strings.CutPrefix(dataLine, "data: ")
		if !ok || !okEvent || !okData || strings.Contains(data, "\n") {
			t.Fatalf("malformed event block %q", block)
		}
		var ev struct {
			Type  string
			Index *int
			Delta struct{ Type, Text string }
			Usage struct {
				OutputTokens int `json:"output_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != name {
			t.Fatalf("event %q carries %q (%v)", name, data, err)
		}
		if name == "content_block_delta" {
			if ev.Delta.Type != "text_delta" || ev.Index == nil || *ev.Index != 0 {
				t.Errorf("delta %s", data)
			}
			text.WriteString(ev.Delta.Text)
		}
		if name == "message_delta" && ev.Usage.OutputTokens != 6 {
			t.Errorf("message_delta usage %s", data)
		}
		names = append(names, name)
	}
	want := []string{"message_start", "content_block_start", "ping"}
	want = append(want, slices.Repeat([]string{"content_block_delta"}, 6)...)
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if !slices.Equal(names, want) {
		t.Errorf("events = %v\nwant %v", names, want)
	}
	if text.String() != fakes.DefaultReply {
		t.Errorf("deltas spell %q", text.String())
	}
}

func TestMaxTokensCutsTheReply(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{})
	msg, err := sdk(f, "").Messages.New(t.Context(), anthropic.MessageNewParams{
		Model: testModel, MaxTokens: 2,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("say hi"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != "Hello from " || msg.StopReason != anthropic.StopReasonMaxTokens || msg.Usage.OutputTokens != 2 {
		t.Errorf("text %q, stop_reason %q, output_tokens %d", msg.Content[0].Text, msg.StopReason, msg.Usage.OutputTokens)
	}
}

func TestErrors(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{APIKey: testKey, OAuthToken: testToken})
	key := []string{"X-Api-Key", testKey}
	for _, tc := range []struct {
		name            string
		path, body      string
		headers         []string
		status          int
		errType, errMsg string
	}{
		{"no credential", "/v1/messages", helloBody, nil,
			401, "authentication_error", "x-api-key header is required"},
		{"wrong api key", "/v1/messages", helloBody, []string{"X-Api-Key", "sk-wrong"},
			401, "authentication_error", "invalid x-api-key"},
		{"api key as bearer", "/v1/messages", helloBody, []string{"Authorization", "Bearer " + testKey},
			401, "authentication_error", "Invalid bearer token"},
		{"wrong bearer", "/v1/messages", helloBody, []string{"Authorization", "Bearer sk-ant-oat01-wrong", "Anthropic-Beta", "oauth-2025-04-20"},
			401, "authentication_error", "Invalid bearer token"},
		{"oauth without the beta", "/v1/messages", helloBody, []string{"Authorization", "Bearer " + testToken},
			401, "authentication_error", "OAuth authentication is currently not supported."},
		{"oauth with other betas only", "/v1/messages", helloBody, []string{"Authorization", "Bearer " + testToken, "Anthropic-Beta", "claude-code-20250219,oauth-2025-04-21"},
			401, "authentication_error", "OAuth authentication is currently not supported."},
		{"no anthropic-version", "/v1/messages", helloBody, []string{"X-Api-Key", testKey, "Anthropic-Version", "-"},
			400, "invalid_request_error", "anthropic-version: header is required"},
		{"not json", "/v1/messages", `{"model":`, key,
			400, "invalid_request_error", "Invalid JSON: the request body must be a JSON object"},
		{"no model", "/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, key,
			400, "invalid_request_error", "model: Field required"},
		{"no max_tokens", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, key,
			400, "invalid_request_error", "max_tokens: Field required"},
		{"no messages", "/v1/messages", `{"model":"m","max_tokens":5}`, key,
			400, "invalid_request_error", "messages: Field required"},
		{"empty messages", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[]}`, key,
			400, "invalid_request_error", "messages: at least one message is required"},
		{"count_tokens without model", "/v1/messages/count_tokens", `{"messages":[{"role":"user","content":"hi"}]}`, key,
			400, "invalid_request_error", "model: Field required"},
		{"unknown path", "/v1/complete", helloBody, key,
			404, "not_found_error", "Not Found"},
		{"unknown path without credential", "/api/hello", "", nil,
			404, "not_found_error", "Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, f.URL+tc.path, tc.body, tc.headers...)
			checkError(t, resp, tc.status, tc.errType, tc.errMsg)
		})
	}
	t.Run("GET messages", func(t *testing.T) {
		resp, err := http.Get(f.URL + "/v1/messages")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		checkError(t, resp, 404, "not_found_error", "Not Found")
	})
}

// checkError asserts the real error body, exactly {"type":"error","error":{"type","message"},"request_id"}, with
// the request id also in the request-id header.
func checkError(t *testing.T, resp *http.Response, status int, errType, errMsg string) {
	t.Helper()
	var body struct {
		Type  string
		Error struct {
			Type, Message string
		}
		RequestID string `json:"request_id"`
	}
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("error body: %v", err)
	}
	if resp.StatusCode != status || body.Type != "error" || body.Error.Type != errType || body.Error.Message != errMsg {
		t.Errorf("got %d %+v\nwant %d %s %q", resp.StatusCode, body, status, errType, errMsg)
	}
	if id := resp.Header.Get("Request-Id"); !requestIDPattern.MatchString(id) || body.RequestID != id {
		t.Errorf("request-id header %q, body %q", id, body.RequestID)
	}
	if resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("content-type %q, x-should-retry %q", resp.Header.Get("Content-Type"), resp.Header.Get("X-Should-Retry"))
	}
}

func TestNoCredentialConfiguredLetsEveryoneIn(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{})
	if resp := post(t, f.URL+"/v1/messages", helloBody, "Authorization", "Bearer anything"); resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
	if resp := post(t, f.URL+"/v1/messages", helloBody); resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestRateLimitHeaders(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{APIKey: testKey, OAuthToken: testToken})
	byKey := post(t, f.URL+"/v1/messages", helloBody, "X-Api-Key", testKey)
	if byKey.Header.Get("Anthropic-Ratelimit-Requests-Limit") == "" || byKey.Header.Get("Anthropic-Ratelimit-Output-Tokens-Reset") == "" {
		t.Errorf("API-key answer lacks the per-minute limits: %v", byKey.Header)
	}
	byOAuth := post(t, f.URL+"/v1/messages", helloBody, "Authorization", "Bearer "+testToken, "Anthropic-Beta", "claude-code-20250219, oauth-2025-04-20")
	if byOAuth.Header.Get("Anthropic-Ratelimit-Unified-Status") != "allowed" || byOAuth.Header.Get("Anthropic-Ratelimit-Unified-5h-Reset") == "" {
		t.Errorf("OAuth answer lacks the unified limits: %v", byOAuth.Header)
	}
	for _, resp := range []*http.Response{byKey, byOAuth} {
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Anthropic-Organization-Id") == "" {
			t.Errorf("status %d, organization %q", resp.StatusCode, resp.Header.Get("Anthropic-Organization-Id"))
		}
	}
}

func TestRequestsAreRecordedInOrder(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{APIKey: testKey})
	post(t, f.URL+"/v1/messages?beta=true", helloBody, "X-Api-Key", testKey, "Anthropic-Beta", "claude-code-20250219")
	post(t, f.URL+"/v1/messages/count_tokens", helloBody, "X-Api-Key", "sk-wrong")
	post(t, f.URL+"/elsewhere", "")

	got := f.Requests()
	if len(got) != 3 {
		t.Fatalf("%d requests recorded, want 3", len(got))
	}
	first := got[0]
	if first.Method != http.MethodPost || first.Path != "/v1/messages" || first.RawQuery != "beta=true" ||
		string(first.Body) != helloBody || first.Header.Get("Anthropic-Beta") != "claude-code-20250219" {
		t.Errorf("first request = %+v", first)
	}
	if got[1].Path != "/v1/messages/count_tokens" || got[1].Header.Get("X-Api-Key") != "sk-wrong" || got[2].Path != "/elsewhere" {
		t.Errorf("later requests = %+v", got[1:])
	}
}

// TestHoldHeaders holds a response before its status line, as a slow upstream would, and lets it go on release.
func TestHoldHeaders(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{})
	gate := f.HoldHeaders()
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(f.URL+"/v1/models", "", nil)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-gate.Reached()
	select {
	case status := <-done:
		t.Fatalf("answered %d while held", status)
	default:
	}
	gate.Release()
	if status := <-done; status != http.StatusNotFound {
		t.Errorf("status after release = %d", status)
	}
	// A released gate no longer holds anything.
	if resp := post(t, f.URL+"/v1/messages", helloBody); resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// TestHoldHeadersUntilTheClientGivesUp is the 504 case: the client's deadline passes while the fake is silent.
func TestHoldHeadersUntilTheClientGivesUp(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{})
	gate := f.HoldHeaders()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.URL+"/v1/messages", strings.NewReader(helloBody))
		_, err := http.DefaultClient.Do(req)
		errc <- err
	}()
	<-gate.Reached()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// TestStallStreams stops a stream after its first events, as a long answer would, then finishes it on release.
func TestStallStreams(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{})
	gate := f.StallStreams(3)
	body := strings.Replace(helloBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	resp := post(t, f.URL+"/v1/messages", body)
	events := eventNames(resp.Body)
	for _, want := range []string{"message_start", "content_block_start", "ping"} {
		if got := <-events; got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	}
	<-gate.Reached()
	select {
	case got := <-events:
		t.Fatalf("event %q arrived while stalled", got)
	default:
	}
	gate.Release()
	var rest []string
	for name := range events {
		rest = append(rest, name)
	}
	if len(rest) != 9 || rest[len(rest)-1] != "message_stop" {
		t.Errorf("after release: %v", rest)
	}
}

// TestStallStreamsBeforeAnyEvent stalls a stream whose status and headers are out but no event yet.
func TestStallStreamsBeforeAnyEvent(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{})
	gate := f.StallStreams(0)
	body := strings.Replace(helloBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	resp := post(t, f.URL+"/v1/messages", body) // returns once the headers are in
	<-gate.Reached()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := eventNames(resp.Body)
	select {
	case got := <-events:
		t.Fatalf("event %q arrived while stalled", got)
	default:
	}
	gate.Release()
	n := 0
	for range events {
		n++
	}
	if n != 12 {
		t.Errorf("%d events after release, want 12", n)
	}
}

// eventNames sends the name of each event read from r, closing the channel at the end of r.
func eventNames(r io.Reader) <-chan string {
	names := make(chan string, 64)
	go func() {
		defer close(names)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				names <- name
			}
		}
	}()
	return names
}

// TestCloseCutsHeldResponses checks that Close does not wait for gates that are never released, and that a
// stalled stream is cut off rather than ended cleanly.
func TestCloseCutsHeldResponses(t *testing.T) {
	f := fakes.NewAnthropic(fakes.AnthropicOptions{})
	stalled := f.StallStreams(1)
	body := strings.Replace(helloBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	resp := post(t, f.URL+"/v1/messages", body)
	<-stalled.Reached()

	held := f.HoldHeaders()
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(f.URL+"/v1/models", "", nil)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-held.Reached()

	f.Close()
	if err := <-errc; err == nil {
		t.Error("held request got an answer after Close")
	}
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("reading a stream cut by Close: %v, want unexpected EOF", err)
	}
}

func TestSDKToolUse(t *testing.T) {
	f := newFake(t, fakes.AnthropicOptions{APIKey: testKey})
	f.AnswerToolUse("mcp__docs__search", json.RawMessage(`{"query":"how are tokens revoked?"}`))
	c := sdk(f, "api-key")
	stream := c.Messages.NewStreaming(t.Context(), hello())
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	if msg.StopReason != anthropic.StopReasonToolUse || len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" ||
		msg.Content[0].Name != "mcp__docs__search" || string(msg.Content[0].Input) != `{"query":"how are tokens revoked?"}` {
		t.Fatalf("tool call = %+v", msg)
	}
	// The tool's result ends the turn with text.
	p := hello()
	p.Messages = append(p.Messages, msg.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(msg.Content[0].ID, "found", false)))
	ans, err := c.Messages.New(t.Context(), p)
	if err != nil || ans.StopReason != anthropic.StopReasonEndTurn || ans.Content[0].Text != fakes.DefaultReply {
		t.Fatalf("after the result = %+v, %v", ans, err)
	}
	f.AnswerToolUse("", nil)
	if ans, err := c.Messages.New(t.Context(), hello()); err != nil || ans.Content[0].Type != "text" {
		t.Fatalf("after AnswerToolUse(\"\") = %+v, %v", ans, err)
	}
}
