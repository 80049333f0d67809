package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/internal/testutil"
	"github.com/cproxy/cproxy/routes/routetest"
	"github.com/cproxy/cproxy/tokens"
)

// idOf is the store id of token tok.
func idOf(t *testing.T, tok string) (tokens.Hash, string) {
	t.Helper()
	parsed, err := tokens.Parse(tok)
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Hash(), parsed.Hash().ID()
}

// budgetPolicy gives every token a budget, so that its requests leave
// usage in the store.
const budgetPolicy = `
[profile.default]
models = ["claude-*"]

[profile.default.budget]
requests = 10
`

// POST /tokens/prune previews and prunes the tokens dead for longer than
// older_than, with their usage, and leaves a live token's usage alone.
func TestPruneTokens(t *testing.T) {
	var clock atomic.Pointer[time.Time]
	start := time.Now()
	clock.Store(&start)
	e := newEnv(t, routetest.WithPolicy(t, budgetPolicy), func(o *routetest.Options) { o.Now = func() time.Time { return *clock.Load() } })
	store := e.Server.Store()
	old, live := e.Token("conv-old", "ttl=1h"), e.Token("conv-live", "ttl=24h")
	for _, tok := range []string{old, live} {
		if r := modelRequest(e, tok); r.Status != 200 {
			t.Fatalf("a model request: %d %s", r.Status, r.Body)
		}
	}
	oldHash, oldID := idOf(t, old)
	_, liveID := idOf(t, live)
	liveUsage, err := store.LoadUsage(context.Background(), liveID)
	if err != nil || liveUsage.Requests == 0 {
		t.Fatalf("the live token's usage in the store = %+v, %v; want some", liveUsage, err)
	}
	later := start.Add(3 * time.Hour)
	clock.Store(&later)

	if code, _, body := call(t, e, "POST", "/tokens/prune", ""); code != 400 || !strings.Contains(body, "older_than=") {
		t.Errorf("prune without a retention or older_than = %d %s; want 400 naming older_than", code, body)
	}
	code, _, body := call(t, e, "POST", "/tokens/prune?dry_run=1&older_than=1h", "")
	var dry client.Pruned
	if err := json.Unmarshal([]byte(body), &dry); code != 200 || err != nil || !dry.DryRun || dry.Count != 1 ||
		len(dry.Tokens) != 1 || dry.Tokens[0].ID != oldID || dry.Tokens[0].State != "expired" {
		t.Fatalf("dry run = %d %s; want the old token alone", code, body)
	}
	if _, err := store.Lookup(context.Background(), oldHash); err != nil {
		t.Fatalf("a dry run deleted the token: %v", err)
	}

	code, _, body = call(t, e, "POST", "/tokens/prune?older_than=1h", "")
	var done client.Pruned
	if err := json.Unmarshal([]byte(body), &done); code != 200 || err != nil || done.DryRun || done.Count != 1 || done.Tokens != nil {
		t.Fatalf("prune = %d %s; want 1 pruned", code, body)
	}
	if _, err := store.Lookup(context.Background(), oldHash); !errors.Is(err, tokens.ErrNotFound) {
		t.Errorf("the pruned token is still there: %v", err)
	}
	// A clean stop saves the usage it holds in memory: none for the pruned
	// token, whose usage went with it (and its rate and in-flight count,
	// which budget's TestForget checks).
	e.Server.Budgets().Close()
	if u, err := store.LoadUsage(context.Background(), oldID); err != nil || u != (tokens.Usage{}) {
		t.Errorf("the pruned token's usage = %+v, %v; want none", u, err)
	}
	if u, err := store.LoadUsage(context.Background(), liveID); err != nil || u.Requests != 1 {
		t.Errorf("the live token's usage = %+v, %v; want its one request", u, err)
	}
	if !strings.Contains(e.Logs.String(), `"msg":"tokens pruned","count":1`) {
		t.Errorf("no log line for the prune:\n%s", e.Logs.String())
	}
	if _, _, metrics := call(t, e, "GET", "/metrics", ""); !strings.Contains(metrics, "\ncproxy_store_pruned_total 1\n") {
		t.Error("cproxy_store_pruned_total is not 1")
	}
}

func TestPruneTokensRefusals(t *testing.T) {
	e := newEnv(t, func(o *routetest.Options) { o.Retention = time.Hour })
	for _, tt := range []struct{ method, path, want string }{
		{"POST", "/tokens/prune?older_than=soon", `invalid older_than \"soon\"`},
		{"POST", "/tokens/prune?older_than=-1h", `invalid older_than \"-1h\"`},
		{"POST", "/tokens/prune?dry_run=maybe", `invalid dry_run \"maybe\"`},
		{"POST", "/tokens/prune?sandbox=conv-1", `unknown parameter \"sandbox\"`},
	} {
		if code, _, body := call(t, e, tt.method, tt.path, ""); code != 400 || !strings.Contains(body, tt.want) {
			t.Errorf("%s %s = %d %s; want 400 with %s", tt.method, tt.path, code, body, tt.want)
		}
	}
	if code, allow, body := call(t, e, "GET", "/tokens/prune", ""); code != 405 || allow != "POST" {
		t.Errorf("GET /tokens/prune = %d, Allow %q, %s; want 405, POST", code, allow, body)
	}
	// With a retention, no older_than is needed.
	if code, _, body := call(t, e, "POST", "/tokens/prune", ""); code != 200 || !strings.Contains(body, `"count":0`) {
		t.Errorf("prune with the retention = %d %s", code, body)
	}
}

// busyStore is a store another replica is pruning: every Prune meets it.
type busyStore struct{ tokens.Store }

func (busyStore) Prune(context.Context, time.Time, int) ([]tokens.Record, error) {
	return nil, tokens.ErrPruneBusy
}

// While another replica prunes, POST /tokens/prune answers 409 and says to
// retry; serve's own runs skip quietly.
func TestPruneTokensBusy(t *testing.T) {
	skipped := make(chan struct{}, 1)
	e := newEnv(t, func(o *routetest.Options) {
		o.Store = busyStore{o.Store}
		o.Retention = time.Hour
		o.PruneInterval = time.Millisecond
		o.Logger = slog.New(testutil.LogEvent{Handler: o.Logger.Handler(), Msg: "another replica is pruning the token store; this one skips its run", Seen: skipped})
	})
	code, _, body := call(t, e, "POST", "/tokens/prune", "")
	if code != 409 || !strings.Contains(body, "another replica is pruning the token store now") || !strings.Contains(body, "retry") {
		t.Errorf("prune while another replica prunes = %d %s; want 409 saying to retry", code, body)
	}
	<-skipped // a run of serve's own met the other replica
	if strings.Contains(e.Logs.String(), `"level":"ERROR"`) {
		t.Errorf("a busy store is logged as an error:\n%s", e.Logs.String())
	}
}

// Pruning a sandbox's last tokens drops its cproxy_budget_remaining
// series, which a sandbox whose tokens only expire would otherwise keep
// for as long as cproxy runs; a sandbox with a live token keeps them.
func TestPruneForgetsBudgetSeries(t *testing.T) {
	var clock atomic.Pointer[time.Time]
	start := time.Now()
	clock.Store(&start)
	e := newEnv(t, routetest.WithPolicy(t, budgetPolicy), func(o *routetest.Options) { o.Now = func() time.Time { return *clock.Load() } })
	for _, tok := range []string{e.Token("conv-gone", "ttl=1h"), e.Token("conv-kept", "ttl=1h"), e.Token("conv-kept", "ttl=24h")} {
		if r := modelRequest(e, tok); r.Status != 200 {
			t.Fatalf("a model request: %d %s", r.Status, r.Body)
		}
	}
	series := func(sandbox string) bool {
		_, _, metrics := call(t, e, "GET", "/metrics", "")
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "cproxy_budget_remaining{") && strings.Contains(line, `sandbox="`+sandbox+`"`) {
				return true
			}
		}
		return false
	}
	if !series("conv-gone") || !series("conv-kept") {
		t.Fatal("no cproxy_budget_remaining series after the requests")
	}
	later := start.Add(3 * time.Hour)
	clock.Store(&later)
	if code, _, body := call(t, e, "POST", "/tokens/prune?older_than=1h", ""); code != 200 {
		t.Fatalf("prune = %d %s", code, body)
	}
	if series("conv-gone") {
		t.Error("a sandbox whose every token was pruned keeps its cproxy_budget_remaining series")
	}
	if !series("conv-kept") {
		t.Error("a sandbox with a live token lost its cproxy_budget_remaining series")
	}
}
