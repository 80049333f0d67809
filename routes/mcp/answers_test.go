package mcp

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// The requests a server has waiting are bounded per session and in time,
// each is answered once, only by its own session's sandbox, and an id is
// one whatever its spelling.
func TestAskedRequestsAreBounded(t *testing.T) {
	rt := &route{sessions: map[sessionKey]string{{"docs", "s"}: "conv-1", {"docs", "t"}: "conv-2"}, asked: map[sessionKey]map[string]asked{}}
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	for i := range maxAsked {
		if !rt.ask("docs", "s", "conv-1", jsontext.Value(fmt.Sprint(i)), "ping", now) {
			t.Fatalf("request %d was not recorded", i)
		}
	}
	if rt.ask("docs", "s", "conv-1", jsontext.Value("1000"), "ping", now) {
		t.Error("a request beyond the bound was recorded")
	}
	if !rt.ask("docs", "t", "conv-2", jsontext.Value(`"\u0031"`), "ping", now) || rt.ask("docs", "t", "conv-2", jsontext.Value(`"1"`), "ping", now) {
		t.Error("an id was recorded twice")
	}
	if rt.ask("docs", "s", "conv-2", jsontext.Value("1001"), "ping", now) || rt.ask("docs", "u", "conv-1", jsontext.Value("1"), "ping", now) {
		t.Error("a request of a session another sandbox's, or unknown, was recorded")
	}
	if m := rt.answer("docs", "t", "conv-2", jsontext.Value("1"), now); m != "" {
		t.Errorf("another session's answer took %s", m)
	}
	if m := rt.answer("docs", "s", "conv-1", jsontext.Value("1.0"), now); m != "ping" {
		t.Errorf("answer(1.0) = %q", m)
	}
	if m := rt.answer("docs", "s", "conv-1", jsontext.Value("1"), now); m != "" {
		t.Errorf("a second answer took %s", m)
	}
	later := now.Add(askedTTL)
	if m := rt.answer("docs", "s", "conv-1", jsontext.Value("2"), later); m != "" {
		t.Errorf("an answer after %v took %s", askedTTL, m)
	}
	if !rt.ask("docs", "s", "conv-1", jsontext.Value("2000"), "ping", later) || len(rt.asked[sessionKey{"docs", "s"}]) != 1 {
		t.Errorf("the requests that waited too long still count: %d", len(rt.asked[sessionKey{"docs", "s"}]))
	}
}
