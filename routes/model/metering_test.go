package model

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/tokens"
)

// tightPolicy gives sandboxes tight-* a budget of 100 output tokens a UTC
// day, which the model route reserves from max_tokens and settles from the
// usage the answer reports.
const tightPolicy = `
[profile.default]
models = ["claude-*"]

[profile.tight]
models = ["claude-*"]
budget = { output_tokens = 100, window = "day" }

[[sandbox]]
match = "tight-*"
profile = "tight"
`

func messageBody(maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, maxTokens, stream)
}

// The usage an answer reports, in its JSON message or in a stream's
// message_start and message_delta events, is the usage its audit record
// gives, reported.
func TestUsageInTheAuditRecord(t *testing.T) {
	sink := &testutil.Buffer{}
	e, _ := newModelEnv(t, nil, func(o *routetest.Options) { o.AuditLog = sink })
	tok := e.Token("conv-1")
	var answer struct {
		Usage struct {
			InputTokens  float64 `json:"input_tokens"`
			OutputTokens float64 `json:"output_tokens"`
		}
	}
	for _, stream := range []bool{false, true} {
		r := e.Do("POST", "/v1/messages", bearer(tok), messageBody(50, stream))
		if r.Status != 200 {
			t.Fatalf("stream=%v: %d %s", stream, r.Status, r.Body)
		}
		if !stream {
			json.Unmarshal([]byte(r.Body), &answer)
		}
	}
	e.Proxy.Close() // every audit record is written
	if answer.Usage.InputTokens == 0 || answer.Usage.OutputTokens == 0 {
		t.Fatalf("the answer reports no usage: %+v", answer)
	}
	lines := strings.Split(strings.TrimSpace(sink.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d audit records, want 2:\n%s", len(lines), sink)
	}
	for i, line := range lines {
		var rec struct{ Usage map[string]any }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Usage["input_tokens"] != answer.Usage.InputTokens || rec.Usage["output_tokens"] != answer.Usage.OutputTokens || rec.Usage["not_reported"] != nil {
			t.Errorf("record %d (stream=%v): usage %v, the answer reported %+v", i, i == 1, rec.Usage, answer.Usage)
		}
	}
}

// Output is reserved from max_tokens and settled from the usage the
// upstream reports, streamed or not; a day window resets at midnight UTC,
// which retry-after says.
func TestBudgetOutputTokens(t *testing.T) {
	now := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
	e, fake := newModelEnv(t, nil, routetest.WithPolicy(t, tightPolicy), func(o *routetest.Options) { o.Now = func() time.Time { return now } })
	auth := bearer(e.Token("tight-1"))
	r := e.Do("POST", "/v1/messages", auth, messageBody(200, false))
	if r.Status != 429 || !strings.Contains(r.Body, "output_tokens: 0 of 100 used or held by requests in flight, and this request may use 200 (its max_tokens; a lower max_tokens may fit)") ||
		r.Header.Get("Retry-After") != "3600" || r.Header.Get("X-Should-Retry") != "true" {
		t.Fatalf("max_tokens over the budget = %d %v %s", r.Status, r.Header, r.Body)
	}
	if len(fake.Requests()) != 0 {
		t.Fatal("a refused request reached the upstream")
	}
	for _, stream := range []bool{false, true} {
		if r := e.Do("POST", "/v1/messages", auth, messageBody(50, stream)); r.Status != 200 {
			t.Fatalf("stream=%v: %d %s", stream, r.Status, r.Body)
		}
	}
	// The fake answers six words, one token each: 12 of 100 spent.
	if u := e.Usage("tight-1"); u != (tokens.Usage{Requests: 2, Output: 12, Input: u.Input}) || u.Input == 0 {
		t.Errorf("usage %+v", u)
	}
	if r := e.Do("POST", "/v1/messages", auth, messageBody(88, false)); r.Status != 200 {
		t.Errorf("88 of the 88 left = %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/v1/messages", auth, messageBody(90, false)); r.Status != 429 {
		t.Errorf("90 more = %d", r.Status)
	}
	now = now.Add(2 * time.Hour) // the next UTC day
	if r := e.Do("POST", "/v1/messages", auth, messageBody(100, false)); r.Status != 200 {
		t.Errorf("a new day = %d %s", r.Status, r.Body)
	}
}

// A model request the upstream had, and whose usage it did not report, is
// charged what it reserved: max_tokens of output, and the body's size for
// the input counts it did not report. Each is audited as not reported and
// counted in cproxy_usage_not_reported_total.
func TestBudgetChargesWhatIsNotReported(t *testing.T) {
	// A stream that ends without its usage: two streams with max_tokens 40
	// spend 80 of the 100 output tokens, so a third cannot start.
	t.Run("stream without usage", func(t *testing.T) {
		e, fake := newModelEnv(t, nil, routetest.WithPolicy(t, tightPolicy))
		fake.SetAnswers(fakes.AnswerWithoutUsage)
		tok := e.Token("tight-1")
		for i := range 2 {
			if r := e.Do("POST", "/v1/messages", bearer(tok), messageBody(40, true)); r.Status != 200 || !strings.Contains(r.Body, "event: message_stop") {
				t.Fatalf("stream %d = %d %s", i, r.Status, r.Body)
			}
		}
		if r := e.Do("POST", "/v1/messages", bearer(tok), messageBody(40, true)); r.Status != 429 || !strings.Contains(r.Body, "output_tokens: 80 of 100 used") {
			t.Errorf("a third stream = %d %s", r.Status, r.Body)
		}
		if u := e.Usage("tight-1"); u.Requests != 2 || u.Output != 80 || u.Input == 0 {
			t.Errorf("usage %+v, want 2 requests and 80 output tokens", u)
		}
		e.Proxy.Close() // every audit line is written
		checkNotReported(t, e, "tight", 2)
	})

	// An answer over what cproxy reads to find its usage (4 MiB): its 40
	// reserved output tokens, not the 0 it could not read, and its input
	// counts as reserved, the body's size.
	t.Run("answer too large to read", func(t *testing.T) {
		e, fake := newModelEnv(t, nil, routetest.WithPolicy(t, tightPolicy))
		fake.SetAnswers(fakes.AnswerHuge)
		tok := e.Token("tight-1")
		body := messageBody(40, false)
		if r := e.Do("POST", "/v1/messages", bearer(tok), body); r.Status != 200 || len(r.Body) < fakes.HugeAnswerBytes {
			t.Fatalf("huge answer = %d, %d bytes", r.Status, len(r.Body))
		}
		n := int64(len(body))
		if u := e.Usage("tight-1"); u != (tokens.Usage{Requests: 1, Input: n, Output: 40, CacheRead: n, CacheWrite: n}) {
			t.Errorf("usage %+v, want the reservation: 1 request, 40 output, %d of each input kind", u, n)
		}
		e.Proxy.Close()
		checkNotReported(t, e, "tight", 1)
	})

	// A client that leaves inside one huge streamed event, before the
	// message_delta that reports the output.
	t.Run("client leaves inside a huge event", func(t *testing.T) {
		e, fake := newModelEnv(t, nil, routetest.WithPolicy(t, tightPolicy))
		fake.SetAnswers(fakes.AnswerHuge)
		// The stream stops after the huge event (message_start,
		// content_block_start, ping, one event per word of the reply, then
		// the huge one) until the client has gone: loopback buffers can
		// hold all 5 MiB, so without the stall the message_delta could
		// pass before the client leaves.
		fake.StallStreams(3 + len(strings.Fields(fakes.DefaultReply)) + 1)
		tok := e.Token("tight-1")
		req, _ := http.NewRequest("POST", e.Proxy.URL+"/v1/messages", strings.NewReader(messageBody(40, true)))
		for k, v := range bearer(tok) {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 2<<20)); err != nil {
			t.Fatalf("reading into the huge event: %v", err)
		}
		resp.Body.Close() // leaves: the rest of the event and message_delta are never read
		e.Proxy.Close()   // waits for cproxy to settle the request
		if u := e.Usage("tight-1"); u.Requests != 1 || u.Output != 40 {
			t.Errorf("usage %+v, want 1 request and the 40 output tokens reserved", u)
		}
		checkNotReported(t, e, "tight", 1)
	})
}

// checkNotReported checks that n requests of profile were audited with
// usage not reported and counted in cproxy_usage_not_reported_total.
func checkNotReported(t *testing.T, e *routetest.Env, profile string, n int) {
	t.Helper()
	if got := strings.Count(e.Logs.String(), `"not_reported":true`); got != n {
		t.Errorf("%d audit lines say the usage was not reported, want %d:\n%s", got, n, e.Logs)
	}
	want := `cproxy_usage_not_reported_total{profile="` + profile + `",route="model"} ` + strconv.Itoa(n)
	if !strings.Contains(e.Metrics(), want+"\n") {
		t.Errorf("metrics lack %s", want)
	}
}
