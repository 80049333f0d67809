package fakes

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultReply is the assistant's answer when AnthropicOptions.Reply is empty.
const DefaultReply = "Hello from the fake Anthropic API."

const (
	// maxRequestBody is the Messages API's request size limit (32 MB); larger bodies get 413 request_too_large.
	maxRequestBody = 32 << 20
	// oauthBeta is the anthropic-beta flag without which the real API refuses an OAuth bearer token.
	oauthBeta = "oauth-2025-04-20"
	// organizationID is what the fake sends as anthropic-organization-id, as the real API does on success.
	organizationID = "00000000-0000-4000-8000-00000000fa6e"
)

// AnthropicOptions configures a fake Anthropic API. With neither credential set, every request is let in.
type AnthropicOptions struct {
	// APIKey, if set, is accepted in x-api-key. Zero means no API key is accepted (unless neither credential is
	// set). A wrong x-api-key gets the real 401 "invalid x-api-key"; no credential at all gets "x-api-key header
	// is required".
	APIKey string
	// OAuthToken, if set, is accepted as Authorization: Bearer, but only with oauth-2025-04-20 in anthropic-beta
	// (else the real 401 "OAuth authentication is currently not supported."). Any other bearer gets the real 401
	// "Invalid bearer token". Zero means no bearer is accepted (unless neither credential is set).
	OAuthToken string
	// Reply is the text of every assistant answer. Zero means DefaultReply. It is sent as one text_delta per
	// word when streaming, and counts one output token per word; a max_tokens below that cuts it short with
	// stop_reason "max_tokens".
	Reply string
}

// Request is one request the fake received, recorded before any check, so refused requests are there too.
type Request struct {
	Method   string
	Path     string // the URL path, e.g. /v1/messages
	RawQuery string // the query without "?", e.g. beta=true; empty when there is none
	Header   http.Header
	Body     []byte // the whole body, at most 32 MB; empty when there is none
}

// Anthropic is a fake api.anthropic.com on a loopback port: POST /v1/messages (streaming or not),
// POST /v1/messages/count_tokens and GET /v1/models, with the real framing, headers and error bodies. Every
// other path gets the real 404 not_found_error. Any model name is accepted and echoed back. Its methods are safe
// for concurrent use.
type Anthropic struct {
	// URL is the base URL, http://127.0.0.1:port, without a trailing slash.
	URL string

	opts     AnthropicOptions
	srv      *http.Server
	closed   chan struct{}
	closing  sync.Once
	handlers sync.WaitGroup

	mu          sync.Mutex
	requests    []Request
	headerGate  *Gate
	streamGate  *Gate
	streamAfter int
	answers     AnswerMode
	toolUse     *toolUse
}

// toolUse is the tool call AnswerToolUse scripts.
type toolUse struct {
	name  string
	input json.RawMessage
}

// AnswerMode is how the fake answers /v1/messages, to test how a proxy meters answers that do not report usage
// the usual way.
type AnswerMode int

const (
	// AnswerNormally is the real API's answer: usage in the JSON message, or in a stream's message_start (input)
	// and message_delta (output).
	AnswerNormally AnswerMode = iota
	// AnswerWithoutUsage ends each stream with a message_delta that carries no usage, so the stream never reports
	// its output (the first token message_start counts aside). JSON answers are not affected.
	AnswerWithoutUsage
	// AnswerHuge adds HugeAnswerBytes of text to each answer, in one more text_delta event when streaming (one
	// event larger than any line a proxy should hold), with the usage reported as usual.
	AnswerHuge
	// AnswerNegativeUsage reports output_tokens -5 and cache_read_input_tokens -5, counts no real answer has: in
	// the JSON message's usage, and in a stream's message_start and message_delta (message_start's output count
	// stays the first token).
	AnswerNegativeUsage
)

// negativeCount is the count AnswerNegativeUsage reports.
const negativeCount = -5

// HugeAnswerBytes is the text AnswerHuge adds to each answer: over 4 MiB, more than a proxy should hold to find
// an answer's usage.
const HugeAnswerBytes = 5 << 20

// NewAnthropic starts a fake Anthropic API on 127.0.0.1 at a free port. It panics if it cannot listen, as
// httptest.NewServer does. Close it when done.
func NewAnthropic(o AnthropicOptions) *Anthropic {
	if o.Reply == "" {
		o.Reply = DefaultReply
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fakes: anthropic: listen: %v", err))
	}
	a := &Anthropic{URL: "http://" + ln.Addr().String(), opts: o, closed: make(chan struct{})}
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(ln) // returns ErrServerClosed after Close; nothing to report
	return a
}

// Close stops the fake. Responses still held by a Gate are cut off mid-way (the connection drops, as when an
// upstream dies); Close returns once every handler has finished.
func (a *Anthropic) Close() {
	a.closing.Do(func() {
		a.mu.Lock()
		close(a.closed)
		a.mu.Unlock()
		a.srv.Close()
		a.handlers.Wait()
	})
}

// enter counts a handler in, unless the fake is closing: every Add must happen before Close's Wait.
func (a *Anthropic) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.closed:
		return false
	default:
		a.handlers.Add(1)
		return true
	}
}

// Requests returns every request received so far, in the order they arrived.
func (a *Anthropic) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.requests)
}

// HoldHeaders makes every response to a request that arrives after the call wait, before it sends its status
// line and headers, until the returned gate is released, the client goes away, or the fake is closed. It tests a
// proxy's upstream timeout (hold and never release: the proxy should answer 504) and requests in flight. A
// later call replaces the gate for later requests; requests already held stay on the gate they met.
func (a *Anthropic) HoldHeaders() *Gate {
	g := newGate()
	a.mu.Lock()
	a.headerGate = g
	a.mu.Unlock()
	return g
}

// StallStreams makes every streamed answer that starts after the call send and flush its status, headers and
// first n events (message_start, content_block_start and ping are the first three; n = 0 stalls before any
// event) and then wait until the returned gate is
// released, the client goes away, or the fake is closed; once released the stream finishes normally. It tests
// draining an open stream on shutdown. Non-streaming answers and errors are not affected. A later call
// replaces the gate for later streams.
func (a *Anthropic) StallStreams(n int) *Gate {
	g := newGate()
	a.mu.Lock()
	a.streamGate, a.streamAfter = g, n
	a.mu.Unlock()
	return g
}

// SetAnswers makes the answers to /v1/messages requests that arrive after the call follow mode.
func (a *Anthropic) SetAnswers(mode AnswerMode) {
	a.mu.Lock()
	a.answers = mode
	a.mu.Unlock()
}

// AnswerToolUse makes later answers to /v1/messages call the tool name with input (a JSON object), as a model
// does that wants a tool: one tool_use block and stop_reason "tool_use" (streamed as the real API streams it, the
// input in input_json_delta events). A request whose last message carries a tool_result gets the text answer
// instead, so that a client running the tool ends its turn with it. An empty name stops tool calls.
func (a *Anthropic) AnswerToolUse(name string, input json.RawMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if name == "" {
		a.toolUse = nil
		return
	}
	a.toolUse = &toolUse{name, input}
}

// A Gate holds responses at one point until it is released.
type Gate struct {
	reached, released      chan struct{}
	reachOnce, releaseOnce sync.Once
}

func newGate() *Gate {
	return &Gate{reached: make(chan struct{}), released: make(chan struct{})}
}

// Reached is closed when the first response arrives at the gate, so a test can act while it is held.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets held responses go on, and later ones pass without stopping. It may be called more than once.
func (g *Gate) Release() { g.releaseOnce.Do(func() { close(g.released) }) }

// wait holds until the gate is released and reports true, or reports false when ctx ends or closed is closed.
func (g *Gate) wait(ctx context.Context, closed <-chan struct{}) bool {
	g.reachOnce.Do(func() { close(g.reached) })
	select {
	case <-g.released:
		return true
	case <-ctx.Done():
	case <-closed:
	}
	return false
}

// serve answers one request the way api.anthropic.com would.
func (a *Anthropic) serve(w http.ResponseWriter, r *http.Request) {
	if !a.enter() {
		panic(http.ErrAbortHandler)
	}
	defer a.handlers.Done()

	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	a.mu.Lock()
	a.requests = append(a.requests, Request{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body,
	})
	hold, mode := a.headerGate, a.answers
	a.mu.Unlock()

	if hold != nil && !hold.wait(r.Context(), a.closed) {
		panic(http.ErrAbortHandler) // drop the connection without a response
	}
	w.Header().Set("request-id", newID("req_011C", 20))

	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(readErr, &maxBytes):
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
	case readErr != nil:
		panic(http.ErrAbortHandler) // the client went away mid-body
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		a.messages(w, r, body, mode)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		a.countTokens(w, r, body)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		a.models(w, r)
	default:
		writeError(w, http.StatusNotFound, "not_found_error", "Not Found")
	}
}

// credential is how a request authenticated, which decides the rate-limit headers it gets back.
type credential int

const (
	apiKeyCredential credential = iota // x-api-key, or nothing when the fake checks nothing
	oauthCredential                    // Authorization: Bearer with the oauth beta
)

// admit checks the credential and anthropic-version the way the real API does, writing the error if they fail.
func (a *Anthropic) admit(w http.ResponseWriter, r *http.Request) (credential, bool) {
	key := r.Header.Get("X-Api-Key")
	authz := r.Header.Get("Authorization")
	bearer, isBearer := strings.CutPrefix(authz, "Bearer ")
	oauth := isBearer && hasBeta(r.Header, oauthBeta)
	cred := apiKeyCredential
	if key == "" && oauth {
		cred = oauthCredential
	}

	switch {
	case a.opts.APIKey == "" && a.opts.OAuthToken == "":
		// No credential configured: let everything in.
	case key != "":
		if !equal(key, a.opts.APIKey) {
			writeError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
			return cred, false
		}
	case authz != "":
		if !isBearer || !equal(bearer, a.opts.OAuthToken) {
			writeError(w, http.StatusUnauthorized, "authentication_error", "Invalid bearer token")
			return cred, false
		}
		if !oauth {
			writeError(w, http.StatusUnauthorized, "authentication_error", "OAuth authentication is currently not supported.")
			return cred, false
		}
	default:
		writeError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
		return cred, false
	}

	if r.Header.Get("Anthropic-Version") == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return cred, false
	}
	return cred, true
}

// equal compares a presented credential with the configured one in constant time; an unset one matches nothing.
func equal(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// hasBeta reports whether any anthropic-beta header lists flag (the header is a comma-separated list).
func hasBeta(h http.Header, flag string) bool {
	for _, v := range h.Values("Anthropic-Beta") {
		for f := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(f) == flag {
				return true
			}
		}
	}
	return false
}

// messagesRequest is the part of a Messages API body the fake looks at.
type messagesRequest struct {
	Model     string
	MaxTokens int64
	Stream    bool
	// toolResult is whether the last message carries a tool_result block: the answer to a tool call.
	toolResult bool
	// inputTokens is a rough count of the prompt: a token per four bytes of messages, system and tools.
	inputTokens int64
}

// parseMessages validates a /v1/messages or count_tokens body like the real API, returning the error message of a
// 400 invalid_request_error if it is not acceptable.
func parseMessages(body []byte, needMaxTokens bool) (messagesRequest, string) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return messagesRequest{}, "Invalid JSON: the request body must be a JSON object"
	}
	var m messagesRequest
	raw, ok := fields["model"]
	if !ok {
		return m, "model: Field required"
	}
	if json.Unmarshal(raw, &m.Model) != nil {
		return m, "model: Input should be a valid string"
	}
	if raw, ok := fields["max_tokens"]; ok {
		if json.Unmarshal(raw, &m.MaxTokens) != nil {
			return m, "max_tokens: Input should be a valid integer"
		}
		if m.MaxTokens < 1 {
			return m, "max_tokens: Input should be greater than or equal to 1"
		}
	} else if needMaxTokens {
		return m, "max_tokens: Field required"
	}
	raw, ok = fields["messages"]
	if !ok {
		return m, "messages: Field required"
	}
	var messages []json.RawMessage
	if json.Unmarshal(raw, &messages) != nil {
		return m, "messages: Input should be a valid list"
	}
	if len(messages) == 0 {
		return m, "messages: at least one message is required"
	}
	if raw, ok := fields["stream"]; ok && json.Unmarshal(raw, &m.Stream) != nil {
		return m, "stream: Input should be a valid boolean"
	}
	var last struct {
		Content json.RawMessage `json:"content"`
	}
	var blocks []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(messages[len(messages)-1], &last) == nil && json.Unmarshal(last.Content, &blocks) == nil {
		for _, b := range blocks {
			m.toolResult = m.toolResult || b.Type == "tool_result"
		}
	}
	m.inputTokens = max(1, int64(len(fields["messages"])+len(fields["system"])+len(fields["tools"]))/4)
	return m, ""
}

// answer is the assistant's reply cut to max_tokens: its chunks (one token each) and why it stopped.
func (a *Anthropic) answer(maxTokens int64) (chunks []string, stopReason string) {
	for c := range strings.SplitAfterSeq(a.opts.Reply, " ") {
		if c != "" {
			chunks = append(chunks, c)
		}
	}
	if int64(len(chunks)) > maxTokens {
		return chunks[:maxTokens], "max_tokens"
	}
	return chunks, "end_turn"
}

// usage is the usage object of a message; the real API sends every field, zeros included.
type usage struct {
	InputTokens              int64         `json:"input_tokens"`
	CacheCreationInputTokens int64         `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64         `json:"cache_read_input_tokens"`
	CacheCreation            cacheCreation `json:"cache_creation"`
	OutputTokens             int64         `json:"output_tokens"`
	ServiceTier              string        `json:"service_tier"`
}

type cacheCreation struct {
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// toolUseBlock is a tool call of the assistant.
type toolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

type message struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	Content      []any   `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        usage   `json:"usage"`
}

func (a *Anthropic) messages(w http.ResponseWriter, r *http.Request, body []byte, mode AnswerMode) {
	cred, ok := a.admit(w, r)
	if !ok {
		return
	}
	req, problem := parseMessages(body, true)
	if problem != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", problem)
		return
	}
	setRateLimitHeaders(w.Header(), cred)
	a.mu.Lock()
	tool := a.toolUse
	a.mu.Unlock()
	if tool != nil && !req.toolResult {
		a.callTool(w, r, req, tool)
		return
	}
	chunks, stopReason := a.answer(req.MaxTokens)
	tokens := int64(len(chunks))
	if mode == AnswerHuge {
		chunks = append(chunks, strings.Repeat("x", HugeAnswerBytes))
	}
	msg := message{
		ID: newID("msg_01", 22), Type: "message", Role: "assistant", Model: req.Model, Content: []any{},
		Usage: usage{InputTokens: req.inputTokens, ServiceTier: "standard"},
	}
	cacheRead := int64(0)
	if mode == AnswerNegativeUsage {
		cacheRead, msg.Usage.CacheReadInputTokens = negativeCount, negativeCount
	}
	if !req.Stream {
		msg.Content = append(msg.Content, textBlock{Type: "text", Text: strings.Join(chunks, "")})
		msg.StopReason = &stopReason
		msg.Usage.OutputTokens = tokens
		if mode == AnswerNegativeUsage {
			msg.Usage.OutputTokens = negativeCount
		}
		writeJSON(w, http.StatusOK, msg)
		return
	}

	a.mu.Lock()
	stall, stallAfter := a.streamGate, a.streamAfter
	a.mu.Unlock()
	s := &eventStream{w: w, rc: http.NewResponseController(w), ctx: r.Context(), closed: a.closed, stall: stall, stallAfter: stallAfter}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.flush()

	msg.Usage.OutputTokens = 1 // the real message_start counts the first token already
	s.send("message_start", map[string]any{"type": "message_start", "message": msg})
	s.send("content_block_start", map[string]any{
		"type": "content_block_start", "index": 0, "content_block": textBlock{Type: "text", Text: ""},
	})
	s.sendRaw("ping", []byte(`{"type": "ping"}`)) // spelled as the real API spells it
	for _, c := range chunks {
		s.send("content_block_delta", map[string]any{
			"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "text_delta", "text": c},
		})
	}
	s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	delta := map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": stopReason, "stop_sequence": nil},
		"usage": map[string]int64{
			"input_tokens": req.inputTokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cacheRead,
			"output_tokens": tokens,
		},
	}
	switch mode {
	case AnswerWithoutUsage:
		delete(delta, "usage")
	case AnswerNegativeUsage:
		delta["usage"].(map[string]int64)["output_tokens"] = negativeCount
	}
	s.send("message_delta", delta)
	s.send("message_stop", map[string]any{"type": "message_stop"})
}

// callTool answers with a call of tool, JSON or streamed.
func (a *Anthropic) callTool(w http.ResponseWriter, r *http.Request, req messagesRequest, tool *toolUse) {
	block := toolUseBlock{Type: "tool_use", ID: newID("toolu_01", 22), Name: tool.name, Input: tool.input}
	stopReason := "tool_use"
	tokens := max(1, int64(len(tool.input))/4)
	msg := message{
		ID: newID("msg_01", 22), Type: "message", Role: "assistant", Model: req.Model, Content: []any{},
		Usage: usage{InputTokens: req.inputTokens, ServiceTier: "standard"},
	}
	if !req.Stream {
		msg.Content = append(msg.Content, block)
		msg.StopReason = &stopReason
		msg.Usage.OutputTokens = tokens
		writeJSON(w, http.StatusOK, msg)
		return
	}
	s := &eventStream{w: w, rc: http.NewResponseController(w), ctx: r.Context(), closed: a.closed}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.flush()
	msg.Usage.OutputTokens = 1
	s.send("message_start", map[string]any{"type": "message_start", "message": msg})
	start := block
	start.Input = json.RawMessage("{}")
	s.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": start})
	s.sendRaw("ping", []byte(`{"type": "ping"}`))
	// The input arrives in pieces, as the real API streams it.
	for in := string(tool.input); in != ""; {
		n := min(len(in), 16)
		s.send("content_block_delta", map[string]any{
			"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "input_json_delta", "partial_json": in[:n]},
		})
		in = in[n:]
	}
	s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	s.send("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": stopReason, "stop_sequence": nil},
		"usage": map[string]int64{"input_tokens": req.inputTokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": tokens},
	})
	s.send("message_stop", map[string]any{"type": "message_stop"})
}

// eventStream writes server-sent events, flushing each, and holds at its stall gate after stallAfter events.
type eventStream struct {
	w          http.ResponseWriter
	rc         *http.ResponseController
	ctx        context.Context
	closed     <-chan struct{}
	stall      *Gate
	stallAfter int
	sent       int
}

func (s *eventStream) send(event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("fakes: anthropic: encode %s: %v", event, err))
	}
	s.sendRaw(event, b)
}

// sendRaw writes one event. When the client is gone or the fake closes while stalled, it drops the connection
// without the chunked terminator, so the client sees a cut stream rather than a clean end.
func (s *eventStream) sendRaw(event string, data []byte) {
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		panic(http.ErrAbortHandler)
	}
	s.sent++
	s.flush()
}

// flush sends what is written so far, then holds at the stall gate if this is where the stream stalls.
func (s *eventStream) flush() {
	if err := s.rc.Flush(); err != nil {
		panic(http.ErrAbortHandler)
	}
	if s.stall != nil && s.sent == s.stallAfter && !s.stall.wait(s.ctx, s.closed) {
		panic(http.ErrAbortHandler)
	}
}

func (a *Anthropic) countTokens(w http.ResponseWriter, r *http.Request, body []byte) {
	if _, ok := a.admit(w, r); !ok {
		return
	}
	req, problem := parseMessages(body, false)
	if problem != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", problem)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{"input_tokens": req.inputTokens})
}

// modelInfo is one entry of GET /v1/models.
type modelInfo struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

// fakeModels is what GET /v1/models lists, newest first as the real API orders them.
var fakeModels = []modelInfo{
	{Type: "model", ID: "claude-opus-4-6", DisplayName: "Claude Opus 4.6", CreatedAt: "2026-02-05T00:00:00Z"},
	{Type: "model", ID: "claude-sonnet-4-5-20250929", DisplayName: "Claude Sonnet 4.5", CreatedAt: "2025-09-29T00:00:00Z"},
	{Type: "model", ID: "claude-haiku-4-5-20251001", DisplayName: "Claude Haiku 4.5", CreatedAt: "2025-10-15T00:00:00Z"},
}

// models answers GET /v1/models with the real page shape, honouring limit (1–1000, default 20) and after_id.
func (a *Anthropic) models(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.admit(w, r); !ok {
		return
	}
	q := r.URL.Query()
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "limit: Input should be between 1 and 1000")
			return
		}
		limit = n
	}
	page := fakeModels
	if after := q.Get("after_id"); after != "" {
		i := slices.IndexFunc(page, func(m modelInfo) bool { return m.ID == after })
		page = page[i+1:] // an unknown id (i == -1) starts from the top
	}
	hasMore := len(page) > limit
	page = page[:min(limit, len(page))]
	var firstID, lastID *string
	if len(page) > 0 {
		firstID, lastID = &page[0].ID, &page[len(page)-1].ID
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": page, "has_more": hasMore, "first_id": firstID, "last_id": lastID})
}

// setRateLimitHeaders sets the anthropic-ratelimit-* headers the real API sends: per-minute request and token
// limits for API keys, the subscription's "unified" windows for OAuth.
func setRateLimitHeaders(h http.Header, cred credential) {
	now := time.Now().UTC()
	h.Set("anthropic-organization-id", organizationID)
	if cred == oauthCredential {
		fiveHours := strconv.FormatInt(now.Add(5*time.Hour).Unix(), 10)
		h.Set("anthropic-ratelimit-unified-status", "allowed")
		h.Set("anthropic-ratelimit-unified-5h-status", "allowed")
		h.Set("anthropic-ratelimit-unified-5h-reset", fiveHours)
		h.Set("anthropic-ratelimit-unified-5h-utilization", "0.02")
		h.Set("anthropic-ratelimit-unified-7d-status", "allowed")
		h.Set("anthropic-ratelimit-unified-7d-reset", strconv.FormatInt(now.Add(7*24*time.Hour).Unix(), 10))
		h.Set("anthropic-ratelimit-unified-7d-utilization", "0.01")
		h.Set("anthropic-ratelimit-unified-representative-claim", "five_hour")
		h.Set("anthropic-ratelimit-unified-fallback-percentage", "0.5")
		h.Set("anthropic-ratelimit-unified-reset", fiveHours)
		h.Set("anthropic-ratelimit-unified-overage-status", "rejected")
		h.Set("anthropic-ratelimit-unified-overage-disabled-reason", "org_level_disabled")
		return
	}
	reset := now.Add(time.Second).Format(time.RFC3339)
	for _, l := range []struct{ name, limit string }{
		{"requests", "4000"}, {"input-tokens", "2000000"}, {"output-tokens", "400000"}, {"tokens", "2400000"},
	} {
		h.Set("anthropic-ratelimit-"+l.name+"-limit", l.limit)
		h.Set("anthropic-ratelimit-"+l.name+"-remaining", l.limit)
		h.Set("anthropic-ratelimit-"+l.name+"-reset", reset)
	}
}

// writeError writes the real API's error body, {"type":"error","error":{…},"request_id":…}, with
// x-should-retry: false, which the SDKs honour.
func writeError(w http.ResponseWriter, status int, errType, msg string) {
	type detail struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	w.Header().Set("x-should-retry", "false")
	writeJSON(w, status, struct {
		Type      string `json:"type"`
		Error     detail `json:"error"`
		RequestID string `json:"request_id"`
	}{"error", detail{errType, msg}, w.Header().Get("request-id")})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fakes: anthropic: encode response: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b) // a client that went away is not the fake's problem
}

// newID returns prefix followed by n random base62 characters, the shape of the real API's ids
// (req_011C…, msg_01…).
func newID(prefix string, n int) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	rand.Read(b) // never fails: it crashes the program instead
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b)
}
