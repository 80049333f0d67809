package tokens

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

const approvalColumns = `id, sandbox, route, subject, detail, token_id, state, created_at, expires_at, decided_at, decided_by, used_at`

func scanApproval(row pgx.Row) (Approval, error) {
	var a Approval
	var detail *string
	var decided, used *time.Time
	if err := row.Scan(&a.ID, &a.Sandbox, &a.Route, &a.Subject, &detail, &a.TokenID, &a.State, &a.CreatedAt, &a.ExpiresAt, &decided, &a.DecidedBy, &used); err != nil {
		return Approval{}, err
	}
	if detail != nil {
		a.Detail = []byte(*detail)
	}
	if decided != nil {
		a.DecidedAt = decided.UTC()
	}
	if used != nil {
		a.UsedAt = used.UTC()
	}
	a.CreatedAt, a.ExpiresAt = a.CreatedAt.UTC(), a.ExpiresAt.UTC()
	return a, nil
}

// errApprovalRace is a live approval another replica inserted between
// this one's look and its insert: the step is taken again.
var errApprovalRace = errors.New("requested meanwhile")

func (s *PostgresStore) RequestApproval(ctx context.Context, a Approval) (Approval, bool, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, false, err
	}
	if err := checkApproval(a); err != nil {
		return Approval{}, false, err
	}
	a.State, a.CreatedAt, a.ExpiresAt = ApprovalPending, a.CreatedAt.UTC(), a.ExpiresAt.UTC()
	var out Approval
	var created bool
	var err error
	for range 2 {
		out, err = call(ctx, func(ctx context.Context) (Approval, error) {
			var out Approval
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				created = false
				if _, err := tx.Exec(ctx, `UPDATE approvals SET closed = true WHERE sandbox = $1 AND route = $2 AND subject = $3
					AND NOT closed AND expires_at <= $4`, a.Sandbox, a.Route, a.Subject, a.CreatedAt); err != nil {
					return err
				}
				var err error
				out, err = scanApproval(tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE sandbox = $1 AND route = $2
					AND subject = $3 AND NOT closed`, a.Sandbox, a.Route, a.Subject))
				if !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
				tag, err := tx.Exec(ctx, `INSERT INTO approvals (`+approvalColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, '', NULL)
					ON CONFLICT (sandbox, route, subject) WHERE NOT closed DO NOTHING`,
					a.ID, a.Sandbox, a.Route, a.Subject, nullText(a.Detail), a.TokenID, a.State, a.CreatedAt, a.ExpiresAt)
				if err == nil && tag.RowsAffected() != 1 {
					return errApprovalRace
				}
				out, created = a, true
				return err
			})
			return out, err
		})
		if !errors.Is(err, errApprovalRace) {
			break
		}
	}
	if err != nil {
		return Approval{}, false, s.wrap("request approval", err)
	}
	return out, created, nil
}

func (s *PostgresStore) Approval(ctx context.Context, id string) (Approval, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, err
	}
	a, err := read(ctx, func(ctx context.Context) (Approval, error) {
		a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return Approval{}, ErrNotFound
		}
		return a, err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Approval{}, s.wrap("read approval", err)
	}
	return a, err
}

func (s *PostgresStore) Approvals(ctx context.Context) ([]Approval, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	as, err := read(ctx, func(ctx context.Context) ([]Approval, error) {
		rows, err := s.pool.Query(ctx, `SELECT `+approvalColumns+` FROM approvals ORDER BY created_at, id`)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Approval, error) { return scanApproval(row) })
	})
	if err != nil {
		return nil, s.wrap("list approvals", err)
	}
	return as, nil
}

// DecideApproval reads the approval locked (SELECT … FOR UPDATE) and
// writes the decision in the same transaction, so that two operators
// deciding at once, through any replicas, decide it once.
func (s *PostgresStore) DecideApproval(ctx context.Context, id string, approve bool, by string, at time.Time, grant time.Duration) (Approval, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, err
	}
	a, err := call(ctx, func(ctx context.Context) (Approval, error) {
		var a Approval
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			a, err = scanApproval(tx.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1 FOR UPDATE`, id))
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			if err != nil {
				return err
			}
			if err := decideApproval(&a, approve, by, at, grant); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE approvals SET state = $2, expires_at = $3, decided_at = $4, decided_by = $5 WHERE id = $1`,
				id, a.State, a.ExpiresAt, a.DecidedAt, a.DecidedBy)
			return err
		})
		return a, err
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotPending) {
		return Approval{}, s.wrap("decide approval", err)
	}
	return a, err
}

// UseGrant is one conditional update: of requests through any number of
// replicas, the first to take the row's lock marks it used, and the others
// find it no longer approved.
func (s *PostgresStore) UseGrant(ctx context.Context, sandbox, route, subject string, at time.Time) (Approval, error) {
	if err := ctx.Err(); err != nil {
		return Approval{}, err
	}
	a, err := call(ctx, func(ctx context.Context) (Approval, error) {
		a, err := scanApproval(s.pool.QueryRow(ctx, `UPDATE approvals SET state = 'used', used_at = $4, closed = true
			WHERE sandbox = $1 AND route = $2 AND subject = $3 AND NOT closed AND state = 'approved' AND expires_at > $4
			RETURNING `+approvalColumns, sandbox, route, subject, at.UTC()))
		if errors.Is(err, pgx.ErrNoRows) {
			return Approval{}, ErrNoGrant
		}
		return a, err
	})
	if err != nil && !errors.Is(err, ErrNoGrant) {
		return Approval{}, s.wrap("use grant", err)
	}
	return a, err
}

func (s *PostgresStore) PruneApprovals(ctx context.Context, cutoff time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := call(ctx, func(ctx context.Context) (int, error) {
		tag, err := s.pool.Exec(ctx, `DELETE FROM approvals WHERE CASE WHEN state = 'used' THEN used_at ELSE expires_at END <= $1`, cutoff.UTC())
		return int(tag.RowsAffected()), err
	})
	if err != nil {
		return 0, s.wrap("prune approvals", err)
	}
	return n, nil
}

func (s *PostgresStore) WithdrawApprovals(ctx context.Context, sandbox string, at time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := call(ctx, func(ctx context.Context) (int, error) {
		tag, err := s.pool.Exec(ctx, `UPDATE approvals SET expires_at = $2, closed = true
			WHERE sandbox = $1 AND NOT closed AND state IN ('pending', 'approved') AND expires_at > $2`, sandbox, at.UTC())
		return int(tag.RowsAffected()), err
	})
	if err != nil {
		return 0, s.wrap("withdraw approvals", err)
	}
	return n, nil
}
