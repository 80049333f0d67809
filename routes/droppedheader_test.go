package routes

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestDroppedHeaderSpellings: every header the forwarder drops is dropped
// in any case and with any separator, as a server that folds '-' and '_'
// together reads it; other headers are kept; and the check allocates
// nothing (it runs for every header of every request).
func TestDroppedHeaderSpellings(t *testing.T) {
	spellings := func(h string) []string {
		under := strings.ReplaceAll(h, "-", "_")
		return []string{h, strings.ToLower(h), strings.ToUpper(under), under, strings.ToLower(under),
			http.CanonicalHeaderKey(under), strings.ReplaceAll(h, "-", ".")}
	}
	for _, h := range slices.Concat(credentialHeaders, clientAddressHeaders, overrideHeaders,
		[]string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Ssl",
			"X-Forwarded-" + strings.Repeat("Long-", 10)}) {
		for _, s := range spellings(h) {
			if !droppedHeader(s) {
				t.Errorf("%q (from %s) is kept", s, h)
			}
		}
	}
	for _, h := range []string{"Anthropic-Version", "Anthropic-Beta", "X-Stainless-Lang", "Content-Type", "User-Agent", "Git-Protocol",
		"X_Kept", "X-Forwarded", "Xforwarded-For", "X-Api-Keys", "Authorizations", "X-Original-Url-Extra", strings.Repeat("X-Real-Ip", 5)} {
		if droppedHeader(h) {
			t.Errorf("%q is dropped", h)
		}
	}
	names := []string{"X_Http_Method_Override", "Anthropic-Version", "X-Forwarded-Whatever", strings.Repeat("A", 100)}
	if n := testing.AllocsPerRun(100, func() {
		for _, h := range names {
			droppedHeader(h)
		}
	}); n != 0 {
		t.Errorf("droppedHeader allocates %v times a run", n)
	}
}
