// Package webhook tells an operator of each new approval request: a POST
// of a JSON body to the URL of the config's approvals.webhook, in cproxy's
// own form or a Slack incoming webhook's (docs/approvals.md). The core
// calls Notify as it files a request; sending happens apart from the
// request, which has been refused by then and waits for nothing.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/cproxy/cproxy/tokens"
)

// Limits of the webhook: how long one POST may take, and how many may be
// under way at once (past it a notice is dropped and logged: an endpoint
// that hangs must not pile up goroutines while agents keep asking).
const (
	sendTimeout = 10 * time.Second
	maxInFlight = 16
)

// The formats of a webhook's body.
const (
	// JSON is cproxy's own body: {"event", "approval", "text"}.
	JSON = "json"
	// Slack is a Slack incoming webhook's body: {"text"}.
	Slack = "slack"
)

// Body is the JSON body of a webhook in cproxy's own form.
type Body struct {
	// Event is "approval.requested".
	Event string `json:"event"`
	// Approval is the request as the store holds it. It holds no token or
	// credential: its token_id is a token's public id.
	Approval tokens.Approval `json:"approval"`
	// Text is the same in one line, and what to run to decide it.
	Text string `json:"text"`
}

// Sender posts each new approval request to one URL.
type Sender struct {
	url    *url.URL
	format string
	client *http.Client
	log    *slog.Logger
	slots  chan struct{}
	wg     sync.WaitGroup
}

// New is a Sender to rawURL (an absolute http or https URL, checked by
// the config) in format (JSON or Slack). Its log names the URL's host,
// never the URL: the path of a Slack webhook is its secret.
func New(rawURL, format string, log *slog.Logger) (*Sender, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("approvals.webhook is not an absolute http or https URL")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sender{url: u, format: format, log: log, slots: make(chan struct{}, maxInFlight),
		client: &http.Client{Timeout: sendTimeout, CheckRedirect: func(*http.Request, []*http.Request) error {
			// A redirect could take the body somewhere else.
			return http.ErrUseLastResponse
		}}}, nil
}

// Text is an approval request in one line, with what to run to decide it.
func Text(a tokens.Approval) string {
	return fmt.Sprintf("cproxy: sandbox %s asks for approval %s (%s route): %s; approve with `cproxy approvals approve %s` or deny with `cproxy approvals deny %s`, until %s",
		a.Sandbox, a.ID, a.Route, a.Subject, a.ID, a.ID, a.ExpiresAt.UTC().Format(time.RFC3339))
}

// Notify sends a's notice in the background. It does not block: with
// maxInFlight notices under way, a's is dropped and logged.
func (s *Sender) Notify(a tokens.Approval) {
	select {
	case s.slots <- struct{}{}:
	default:
		s.log.Warn("approval webhook not sent: too many under way", "approval", a.ID, "host", s.url.Host)
		return
	}
	s.wg.Add(1)
	go func() {
		defer func() { <-s.slots; s.wg.Done() }()
		if err := s.send(context.Background(), a); err != nil {
			s.log.Warn("approval webhook failed", "approval", a.ID, "host", s.url.Host, "err", err)
			return
		}
		s.log.Info("approval webhook sent", "approval", a.ID, "host", s.url.Host)
	}()
}

// Wait waits for the notices under way, at most until ctx ends.
func (s *Sender) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// body is a's notice in s's format.
func (s *Sender) body(a tokens.Approval) ([]byte, error) {
	if s.format == Slack {
		return json.Marshal(struct {
			Text string `json:"text"`
		}{Text(a)})
	}
	return json.Marshal(Body{Event: "approval.requested", Approval: a, Text: Text(a)})
}

func (s *Sender) send(ctx context.Context, a tokens.Approval) error {
	b, err := s.body(a)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url.String(), bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("the request cannot be made")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cproxy")
	resp, err := s.client.Do(req)
	if err != nil {
		// url.Error's text holds the URL: say only what failed.
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the endpoint answered %s", resp.Status)
	}
	return nil
}
