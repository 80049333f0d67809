package model

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/routes/routetest"
)

// A model ask_models names is refused with an approval request's id, in
// the Anthropic API's shape; a token count of it is a request of its own,
// which never uses the message's grant; approved, one message goes
// through, and the next asks again.
func TestModelAsk(t *testing.T) {
	e, fake := newModelEnv(t, nil, routetest.WithPolicy(t, `
[profile.default]
models = ["claude-*"]
ask_models = ["claude-opus-*"]
`))
	tok := e.Token("conv-42")
	opus := strings.Replace(hello, "claude-sonnet-4-5", "claude-opus-4-6", 1)
	id := regexp.MustCompile(`\(request (apr_[0-9a-f]{16})\)`)
	ask := func(path, what string) string {
		t.Helper()
		r := e.Do("POST", path, bearer(tok), opus)
		typ, msg := errorType(t, r)
		m := id.FindStringSubmatch(msg)
		if r.Status != 403 || typ != "permission_error" || m == nil || !strings.HasPrefix(msg, "cproxy: "+what+" needs approval (request apr_") {
			t.Fatalf("%s: %d %s %s", path, r.Status, typ, msg)
		}
		return m[1]
	}
	message := ask("/v1/messages", "model claude-opus-4-6")
	count := ask("/v1/messages/count_tokens", "a token count of model claude-opus-4-6")
	if message == count {
		t.Fatalf("a token count and a message are one request: %s", message)
	}
	ctx := context.Background()
	if _, err := e.Server.Store().DecideApproval(ctx, message, true, "", time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := ask("/v1/messages/count_tokens", "a token count of model claude-opus-4-6"); got != count {
		t.Errorf("the token count asked again is %s, want %s", got, count)
	}
	if r := e.Do("POST", "/v1/messages", bearer(tok), opus); r.Status != 200 {
		t.Fatalf("approved: %d %s", r.Status, r.Body)
	}
	if got := ask("/v1/messages", "model claude-opus-4-6"); got == message {
		t.Errorf("the grant was used twice")
	}
	if r := e.Do("POST", "/v1/messages", bearer(tok), hello); r.Status != 200 {
		t.Errorf("a model ask_models does not name: %d %s", r.Status, r.Body)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("the upstream got %d requests, want the approved one and the one allowed", n)
	}
	all, _ := e.Server.Store().Approvals(ctx)
	for _, ap := range all {
		if ap.ID == message && (ap.Subject != "claude-opus-4-6" || string(ap.Detail) != `{"model":"claude-opus-4-6","endpoint":"/v1/messages"}`) {
			t.Errorf("the message's approval: %q %s", ap.Subject, ap.Detail)
		}
	}
}
