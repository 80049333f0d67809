package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cproxy/cproxy/client"
	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
	"github.com/cproxy/cproxy/tokens"
)

// pruneSample bounds the tokens a dry run of POST /tokens/prune lists; it
// counts them all.
const pruneSample = 100

// pruneTokens is POST /tokens/prune[?dry_run=1][&older_than=DURATION]:
// prune now, or say what would go, with the retention in force or the
// given one.
func (s *server) pruneTokens(w http.ResponseWriter, r *http.Request) {
	q, ok := adminQuery(w, r, "dry_run", "older_than")
	if !ok {
		return
	}
	dryRun := false
	if v := q.Get("dry_run"); v != "" {
		var err error
		if dryRun, err = strconv.ParseBool(v); err != nil {
			adminError(w, http.StatusBadRequest, fmt.Sprintf("invalid dry_run %q: use dry_run=1 to see what would be pruned, without pruning", routes.Clip(v, 16)))
			return
		}
	}
	age, why := s.Retention(), "retention"
	if v := q.Get("older_than"); v != "" {
		d, err := ParseAge(v)
		if err != nil {
			adminError(w, http.StatusBadRequest, err.Error())
			return
		}
		age, why = d, "older_than"
	} else if age == 0 {
		adminError(w, http.StatusBadRequest, "store.retention is 0, which keeps every token: pass older_than=DURATION (e.g. 720h or 30d) to prune the tokens dead for longer")
		return
	}
	out := client.Pruned{DryRun: dryRun, Before: s.Now().UTC().Add(-age)}
	if dryRun {
		n, recs, err := s.Store().Prunable(r.Context(), out.Before, pruneSample)
		if err != nil {
			s.Log().Error("listing the tokens to prune failed", "err", err)
			adminError(w, http.StatusServiceUnavailable, "the token store failed")
			return
		}
		out.Count = n
		now := s.Now()
		for _, rec := range recs {
			out.Tokens = append(out.Tokens, tokenInfo(rec, now))
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	n, err := s.Prune(r.Context(), out.Before, why, age.String())
	switch {
	case errors.Is(err, tokens.ErrPruneBusy):
		adminError(w, http.StatusConflict, fmt.Sprintf("another replica is pruning the token store now (this call pruned %d tokens before it met it): retry when it is done", n))
		return
	case err != nil:
		s.Log().Error("pruning the token store failed", "pruned", n, "err", err)
		adminError(w, http.StatusServiceUnavailable, fmt.Sprintf("the token store failed after %d tokens were pruned: retry", n))
		return
	}
	out.Count = n
	writeJSON(w, http.StatusOK, out)
}

// ParseAge reads older_than, and the CLI's --older-than: a duration as
// ParseTTL reads one, zero or more: 0 prunes every token that is dead now.
// The longest is what a time.Duration holds, MaxDays days: a prune's cutoff,
// now less that, is then in the 18th century, which every store holds.
func ParseAge(v string) (time.Duration, error) {
	d, err := policy.ParseDays(v)
	if errors.Is(err, policy.ErrDurationTooLong) && !strings.HasPrefix(v, "-") {
		return 0, fmt.Errorf("older_than %s is too long: the longest is %dd (2562047h, about 292 years); give a shorter one, e.g. 30d, or 0s for every dead token", routes.Clip(v, 32), policy.MaxDays)
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid older_than %q: use a duration such as 720h or 30d (0s: every token expired or revoked by now)", routes.Clip(v, 32))
	}
	return d, nil
}
