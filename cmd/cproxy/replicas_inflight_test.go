package main

import (
	"strings"
	"testing"

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
