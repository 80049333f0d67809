package tokens

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestStoreApprovals(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, reopen func(Store) Store) {
		t0 := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
		ask := func(subject string, at time.Time) (Approval, bool) {
			t.Helper()
			a, created, err := s.RequestApproval(ctx, Approval{ID: NewApprovalID(), Sandbox: "conv-1", Route: "github", Subject: subject,
				Detail: []byte(`{"repository":"acme/app"}`), TokenID: "tok_1", CreatedAt: at, ExpiresAt: at.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			return a, created
		}
		a, created := ask("acme/app refs/heads/main 0 1", t0)
		if !created || a.State != ApprovalPending || !ValidApprovalID(a.ID) {
			t.Fatalf("first request: %+v, created %v", a, created)
		}
		again, created := ask("acme/app refs/heads/main 0 1", t0.Add(time.Minute))
		if created || again.ID != a.ID {
			t.Fatalf("the same request asked again made %s (created %v), want %s", again.ID, created, a.ID)
		}
		if _, err := s.UseGrant(ctx, "conv-1", "github", a.Subject, t0.Add(time.Minute)); !errors.Is(err, ErrNoGrant) {
			t.Fatalf("a pending request used as a grant: %v", err)
		}
		dec, err := s.DecideApproval(ctx, a.ID, true, "ops", t0.Add(2*time.Minute), 10*time.Minute)
		if err != nil || dec.State != ApprovalApproved || !dec.ExpiresAt.Equal(t0.Add(12*time.Minute)) || dec.DecidedBy != "ops" {
			t.Fatalf("approve: %+v, %v", dec, err)
		}
		if _, err := s.DecideApproval(ctx, a.ID, false, "", t0.Add(3*time.Minute), 0); !errors.Is(err, ErrNotPending) {
			t.Fatalf("deciding twice: %v", err)
		}
		// An approved, unused grant answers the same request again.
		if got, created := ask(a.Subject, t0.Add(3*time.Minute)); created || got.State != ApprovalApproved {
			t.Fatalf("asked while approved: %+v, created %v", got, created)
		}
		for _, other := range []struct{ sandbox, route, subject string }{
			{"conv-2", "github", a.Subject}, {"conv-1", "npm", a.Subject}, {"conv-1", "github", "acme/app refs/heads/main 0 2"},
		} {
			if _, err := s.UseGrant(ctx, other.sandbox, other.route, other.subject, t0.Add(4*time.Minute)); !errors.Is(err, ErrNoGrant) {
				t.Fatalf("grant used by %v: %v", other, err)
			}
		}
		s = reopen(s)
		// Used once, by one of many at once.
		var wg sync.WaitGroup
		var mu sync.Mutex
		used := 0
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.UseGrant(ctx, "conv-1", "github", a.Subject, t0.Add(5*time.Minute))
				switch {
				case err == nil:
					mu.Lock()
					used++
					mu.Unlock()
				case !errors.Is(err, ErrNoGrant):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if used != 1 {
			t.Fatalf("grant used %d times, want once", used)
		}
		got, err := s.Approval(ctx, a.ID)
		if err != nil || got.State != ApprovalUsed || !got.UsedAt.Equal(t0.Add(5*time.Minute)) || string(got.Detail) != `{"repository":"acme/app"}` {
			t.Fatalf("after use: %+v, %v", got, err)
		}
		// Used, it no longer answers: the same request asks anew.
		next, created := ask(a.Subject, t0.Add(6*time.Minute))
		if !created || next.ID == a.ID {
			t.Fatalf("asked after use: %+v, created %v", next, created)
		}
		if d, err := s.DecideApproval(ctx, next.ID, false, "", t0.Add(7*time.Minute), time.Hour); err != nil || d.State != ApprovalDenied {
			t.Fatalf("deny: %+v, %v", d, err)
		}
		if _, err := s.UseGrant(ctx, "conv-1", "github", a.Subject, t0.Add(8*time.Minute)); !errors.Is(err, ErrNoGrant) {
			t.Fatalf("denied request used: %v", err)
		}
		// A denial stands until the request would have lapsed.
		if got, created := ask(a.Subject, t0.Add(9*time.Minute)); created || got.ID != next.ID || got.State != ApprovalDenied {
			t.Fatalf("asked after a denial: %+v, created %v", got, created)
		}
		// A pending request past its time is expired: it cannot be
		// decided, and the same request asks anew.
		third, _ := ask(a.Subject, t0.Add(70*time.Minute))
		if third.ID == next.ID {
			t.Fatal("a denial outlived its request's time")
		}
		if _, err := s.DecideApproval(ctx, third.ID, true, "", t0.Add(140*time.Minute), time.Hour); !errors.Is(err, ErrNotPending) {
			t.Fatalf("expired request approved: %v", err)
		}
		if fourth, created := ask(a.Subject, t0.Add(141*time.Minute)); !created || fourth.ID == third.ID {
			t.Fatalf("asked after expiry: %+v, created %v", fourth, created)
		}
		// An approved grant past its time is not used.
		fifth, _ := ask("acme/app refs/heads/main 0 3", t0)
		if _, err := s.DecideApproval(ctx, fifth.ID, true, "", t0.Add(time.Minute), time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UseGrant(ctx, "conv-1", "github", fifth.Subject, t0.Add(2*time.Minute)); !errors.Is(err, ErrNoGrant) {
			t.Fatalf("expired grant used: %v", err)
		}
		if _, err := s.Approval(ctx, "apr_0000000000000000"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown approval: %v", err)
		}
		if _, err := s.DecideApproval(ctx, "apr_0000000000000000", true, "", t0, time.Hour); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deciding an unknown approval: %v", err)
		}
		all, err := s.Approvals(ctx)
		if err != nil || len(all) != 5 {
			t.Fatalf("list: %d approvals, %v; want 5", len(all), err)
		}
		for i := 1; i < len(all); i++ {
			if all[i].CreatedAt.Before(all[i-1].CreatedAt) {
				t.Fatalf("list not oldest first: %v after %v", all[i].CreatedAt, all[i-1].CreatedAt)
			}
		}
		// A sandbox's revocation withdraws what waits or is approved, not
		// its denials, nor another sandbox's.
		w1, _ := ask("acme/app refs/heads/w 0 1", t0.Add(142*time.Minute))
		w2, _ := ask("acme/app refs/heads/w 0 2", t0.Add(142*time.Minute))
		if _, err := s.DecideApproval(ctx, w2.ID, true, "", t0.Add(143*time.Minute), time.Hour); err != nil {
			t.Fatal(err)
		}
		if n, err := s.WithdrawApprovals(ctx, "conv-2", t0.Add(144*time.Minute)); err != nil || n != 0 {
			t.Fatalf("withdraw another sandbox's: %d, %v", n, err)
		}
		if n, err := s.WithdrawApprovals(ctx, "conv-1", t0.Add(144*time.Minute)); err != nil || n != 3 {
			t.Fatalf("withdraw: %d, %v; want 3 (two pending, one approved)", n, err)
		}
		if _, err := s.UseGrant(ctx, "conv-1", "github", w2.Subject, t0.Add(145*time.Minute)); !errors.Is(err, ErrNoGrant) {
			t.Fatalf("withdrawn grant used: %v", err)
		}
		if got, created := ask(w1.Subject, t0.Add(145*time.Minute)); !created || got.ID == w1.ID {
			t.Fatalf("asked after withdrawal: %+v, created %v", got, created)
		}
		if d, _ := s.Approval(ctx, next.ID); d.State != ApprovalDenied {
			t.Fatalf("a denial withdrawn: %+v", d)
		}
		// Pruned once they have ended: the used one (at +5m), the denied
		// (until +66m) and the expired; not those still open at the cutoff.
		if n, err := s.PruneApprovals(ctx, t0.Add(5*time.Minute)); err != nil || n != 2 {
			t.Fatalf("prune at +5m: %d, %v; want 2 (the used one, the expired grant)", n, err)
		}
		if n, err := s.PruneApprovals(ctx, t0.Add(24*time.Hour)); err != nil || n != 6 {
			t.Fatalf("prune at +24h: %d, %v; want the 6 left", n, err)
		}
		if all, err := s.Approvals(ctx); err != nil || len(all) != 0 {
			t.Fatalf("after pruning: %d approvals, %v", len(all), err)
		}
	})
}
