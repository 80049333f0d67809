package routes

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cproxy/cproxy/internal/testutil"
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

// serve's pruner deletes, by itself, what has been dead for longer than the
// retention; with a retention of 0 it keeps everything.
func TestPruneInBackground(t *testing.T) {
	pruned := make(chan struct{}, 1)
	pruning := newEnv(t, func(o *testOptions) {
		o.Retention = time.Hour
		o.PruneInterval = time.Millisecond
		o.Logger = slog.New(testutil.LogEvent{Handler: o.Logger.Handler(), Msg: "tokens pruned", Seen: pruned})
	})
	keeping := newEnv(t, func(o *testOptions) { o.PruneInterval = time.Millisecond })
	var dead [2]tokens.Hash
	for i, e := range []*env{pruning, keeping} {
		dead[i] = newHashFor(t)
		now := time.Now()
		if err := e.srv.store.Create(context.Background(), dead[i], tokens.Record{Sandbox: "conv-1", CreatedAt: now.Add(-3 * time.Hour), ExpiresAt: now.Add(-2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	live, _ := idOf(t, pruning.token("conv-2"))
	// A run that deleted something ends with its log line, after its
	// deletions; the dead token is the only one a run can delete.
	<-pruned
	if _, err := pruning.srv.store.Lookup(context.Background(), dead[0]); !errors.Is(err, tokens.ErrNotFound) {
		t.Errorf("the pruner did not delete a token dead for 2h with a retention of 1h: %v", err)
	}
	if _, err := pruning.srv.store.Lookup(context.Background(), live); err != nil {
		t.Errorf("the pruner deleted a live token: %v", err)
	}
	// The other server had as long, with the same interval.
	if _, err := keeping.srv.store.Lookup(context.Background(), dead[1]); err != nil {
		t.Errorf("retention 0 deleted a token: %v", err)
	}
	if !strings.Contains(pruning.logs.String(), `"retention":"1h0m0s"`) {
		t.Errorf("the pruner's log line does not give the retention:\n%s", pruning.logs.String())
	}
}

// The first run comes pruneStartDelay after start, not a whole interval
// later: a cproxy restarted more often than its interval still prunes.
func TestPruneSoonAfterStart(t *testing.T) {
	defer func(d time.Duration) { pruneStartDelay = d }(pruneStartDelay)
	pruneStartDelay = time.Millisecond
	pruned := make(chan struct{}, 1)
	e := newEnv(t, func(o *testOptions) {
		o.Retention = time.Hour
		o.PruneInterval = 24 * time.Hour
		o.Logger = slog.New(testutil.LogEvent{Handler: o.Logger.Handler(), Msg: "tokens pruned", Seen: pruned})
		// The dead token is in the store before the Server starts.
		now := time.Now()
		if err := o.Store.Create(context.Background(), newHashFor(t), tokens.Record{Sandbox: "conv-1", CreatedAt: now.Add(-3 * time.Hour), ExpiresAt: now.Add(-2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	})
	select {
	case <-pruned:
	case <-time.After(time.Minute): // a guard against hanging, far above the millisecond expected
		t.Fatalf("no run of the pruner within a minute of start, with an interval of a day:\n%s", e.logs.String())
	}
}

func newHashFor(t *testing.T) tokens.Hash {
	t.Helper()
	tok, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	return tok.Hash()
}
