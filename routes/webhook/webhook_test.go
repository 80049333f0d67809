package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/tokens"
)

var approval = tokens.Approval{ID: "apr_0123456789abcdef", Sandbox: "conv-42", Route: "github",
	Subject: "acme/app refs/heads/main 0000000000000000000000000000000000000000 1111111111111111111111111111111111111111",
	Detail:  json.RawMessage(`{"repository":"acme/app"}`), TokenID: "tok_0fcbf4c69dba", State: tokens.ApprovalPending,
	CreatedAt: time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC), ExpiresAt: time.Date(2026, 12, 8, 4, 0, 0, 0, time.UTC)}

// sent starts an endpoint, sends approval's notice to it in format, and
// returns the body it received.
func sent(t *testing.T, format string) []byte {
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/secret-path" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("got %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer srv.Close()
	s, err := New(srv.URL+"/secret-path", format, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Notify(approval)
	s.Wait(t.Context())
	return <-got
}

func TestJSONBody(t *testing.T) {
	var b Body
	if err := json.Unmarshal(sent(t, JSON), &b); err != nil {
		t.Fatal(err)
	}
	if b.Event != "approval.requested" || b.Approval.ID != approval.ID || b.Approval.Subject != approval.Subject ||
		string(b.Approval.Detail) != `{"repository":"acme/app"}` || !strings.Contains(b.Text, "cproxy approvals approve "+approval.ID) {
		t.Errorf("body: %+v", b)
	}
}

func TestSlackBody(t *testing.T) {
	var b map[string]any
	if err := json.Unmarshal(sent(t, Slack), &b); err != nil {
		t.Fatal(err)
	}
	if len(b) != 1 || !strings.HasPrefix(b["text"].(string), "cproxy: sandbox conv-42 asks for approval "+approval.ID) {
		t.Errorf("slack body: %v", b)
	}
}

// A failed send is logged with the endpoint's host, never its URL (a
// Slack webhook's path is its secret), and a redirect is not followed.
func TestFailureKeepsURLSecret(t *testing.T) {
	followed := false
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed = true }))
	defer target.Close()
	srv := httptest.NewServer(http.RedirectHandler(target.URL+"/elsewhere", http.StatusTemporaryRedirect))
	defer srv.Close()
	var logs bytes.Buffer
	s, err := New(srv.URL+"/T000/B000/XXXXSECRET", Slack, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.Notify(approval)
	s.Wait(t.Context())
	if followed {
		t.Error("the redirect was followed")
	}
	if out := logs.String(); !strings.Contains(out, "approval webhook failed") || !strings.Contains(out, "307") || strings.Contains(out, "XXXXSECRET") {
		t.Errorf("log:\n%s", out)
	}
	// Unreachable: the error names no URL either.
	logs.Reset()
	srv.Close()
	s.Notify(approval)
	s.Wait(t.Context())
	if out := logs.String(); !strings.Contains(out, "approval webhook failed") || strings.Contains(out, "XXXXSECRET") {
		t.Errorf("log:\n%s", out)
	}
}
