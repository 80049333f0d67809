package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/fakes"
)

// A revocation through one replica ends the sandbox's streams on another:
// at its next sweep of its requests in flight (routes.flightSweep, 2 s)
// without a look-up cache, at once when the revocation's notification
// arrives with one.
func TestReplicaRevocationCutsStreams(t *testing.T) {
	dsn := pgTestDatabase(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	for _, c := range []struct{ name, storeKeys string }{{"no cache", ""}, {"lookup cache", "lookup_cache = \"1m\"\n"}} {
		t.Run(c.name, func(t *testing.T) {
			fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
			t.Cleanup(fake.Close)
			fake.StallStreams(3)
			a, b := startReplicaWith(t, fake.URL, c.storeKeys, ""), startReplicaWith(t, fake.URL, c.storeKeys, "")
			tok := a.mint("conv-" + strings.ReplaceAll(c.name, " ", "-"))
			stream := openStream(t, streamingMessage(t, b.proxy), tok)
			readEvent(t, stream)
			a.revoke("conv-" + strings.ReplaceAll(c.name, " ", "-"))
			wantCut(t, "the stream on the other replica", stream)
			waitLog(t, b, "sandbox token tok_")
		})
	}
}

// A caching replica whose revocation listener lags (each notification held
// for ten minutes, while its connection looks healthy) still ends a revoked
// sandbox's stream within the sweep's 2 seconds: the sweep reads the
// database, not the cache the notification would have emptied.
func TestReplicaRevocationCutsStreamsListenerStalled(t *testing.T) {
	dsn := pgTestDatabase(t)
	t.Setenv("CPROXY_PG_DSN", dsn)
	fake := fakes.NewAnthropic(fakes.AnthropicOptions{APIKey: canaryAPIKey})
	t.Cleanup(fake.Close)
	fake.StallStreams(3)
	const cached = "lookup_cache = \"10m\"\n"
	a := startReplicaWith(t, fake.URL, cached, "")
	t.Setenv("CPROXY_TEST_NOTIFICATION_DELAY", "10m")
	b := startReplicaWith(t, fake.URL, cached, "")
	tok := a.mint("conv-stalled")
	if got := status(t, b, tok); got != 200 {
		t.Fatalf("token minted on A, used through B: %d, want 200", got)
	}
	stream := openStream(t, streamingMessage(t, b.proxy), tok)
	readEvent(t, stream)
	a.revoke("conv-stalled")
	revoked := time.Now()
	wantCut(t, "the stream on the replica whose listener lags", stream)
	// The sweep runs every 2 s; a second more for a loaded machine.
	if took := time.Since(revoked); took > 3*time.Second {
		t.Errorf("the stream on B was cut %v after the revocation through A answered, want within 2 s", took)
	} else {
		t.Logf("the stream on B cut %v after the revocation", took.Round(time.Millisecond))
	}
	waitLog(t, b, "sandbox token tok_")
	if strings.Contains(b.stderr.String(), "token store listener down") {
		t.Errorf("B's listener went down: the test did not stall it as meant:\n%s", b.stderr.String())
	}
}
