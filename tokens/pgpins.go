package tokens

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

const pinColumns = `server, tool, digest, definition, pinned_at, changed, changed_definition, changed_at, rejected`

func scanPin(row pgx.Row) (MCPPin, error) {
	var p MCPPin
	var def, changedDef *string
	var changedAt *time.Time
	if err := row.Scan(&p.Server, &p.Tool, &p.Digest, &def, &p.PinnedAt, &p.Changed, &changedDef, &changedAt, &p.Rejected); err != nil {
		return MCPPin{}, err
	}
	if def != nil {
		p.Definition = []byte(*def)
	}
	if changedDef != nil {
		p.ChangedDefinition = []byte(*changedDef)
	}
	if changedAt != nil {
		p.ChangedAt = changedAt.UTC()
	}
	p.PinnedAt = p.PinnedAt.UTC()
	return p, nil
}

func nullText(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

func (s *PostgresStore) MCPPins(ctx context.Context, server string) ([]MCPPin, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pins, err := read(ctx, func(ctx context.Context) ([]MCPPin, error) {
		rows, err := s.pool.Query(ctx, `SELECT `+pinColumns+` FROM mcp_pins WHERE $1 = '' OR server = $1 ORDER BY server, tool`, server)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (MCPPin, error) { return scanPin(row) })
	})
	if err != nil {
		return nil, s.wrap("list MCP pins", err)
	}
	return pins, nil
}

func (s *PostgresStore) MCPPin(ctx context.Context, server, tool string) (MCPPin, error) {
	if err := ctx.Err(); err != nil {
		return MCPPin{}, err
	}
	p, err := read(ctx, func(ctx context.Context) (MCPPin, error) {
		p, err := scanPin(s.pool.QueryRow(ctx, `SELECT `+pinColumns+` FROM mcp_pins WHERE server = $1 AND tool = $2`, server, tool))
		if errors.Is(err, pgx.ErrNoRows) {
			return MCPPin{}, ErrNotFound
		}
		return p, err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return MCPPin{}, s.wrap("read MCP pin", err)
	}
	return p, err
}

func (s *PostgresStore) SeeMCPTool(ctx context.Context, server, tool, digest string, def []byte, at time.Time) (MCPPin, bool, error) {
	var newly bool
	p, err := s.updatePin(ctx, server, tool, see(digest, def, at, &newly))
	return p, newly, err
}

func (s *PostgresStore) AcceptMCPPin(ctx context.Context, server, tool, digest string, at time.Time) (MCPPin, error) {
	return s.updatePin(ctx, server, tool, accept(digest, at))
}

func (s *PostgresStore) RejectMCPPin(ctx context.Context, server, tool, digest string) (MCPPin, error) {
	return s.updatePin(ctx, server, tool, reject(digest))
}

// errPinRace is a first pin another replica wrote between this one's read
// and its insert: the step is taken again on what it wrote.
var errPinRace = errors.New("pinned meanwhile")

// updatePin reads the pin, and when f changes it, reads it again locked
// (SELECT … FOR UPDATE) and writes what f makes of it, in one
// transaction; so a list that changes nothing writes nothing, and two
// replicas that see a tool at once take their steps one after the other.
func (s *PostgresStore) updatePin(ctx context.Context, server, tool string, f pinUpdate) (MCPPin, error) {
	p, err := s.MCPPin(ctx, server, tool)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return MCPPin{}, err
	}
	p.Server, p.Tool = server, tool
	if write, ferr := f(&p, err == nil); ferr != nil || !write {
		return p, ferr
	}
	for range 2 {
		p, err = call(ctx, func(ctx context.Context) (MCPPin, error) {
			var p MCPPin
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				var err error
				p, err = scanPin(tx.QueryRow(ctx, `SELECT `+pinColumns+` FROM mcp_pins WHERE server = $1 AND tool = $2 FOR UPDATE`, server, tool))
				found := err == nil
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
				p.Server, p.Tool = server, tool
				write, err := f(&p, found)
				if err != nil || !write {
					return err
				}
				if !found {
					tag, err := tx.Exec(ctx, `INSERT INTO mcp_pins (`+pinColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
						ON CONFLICT (server, tool) DO NOTHING`,
						server, tool, p.Digest, nullText(p.Definition), p.PinnedAt, p.Changed, nullText(p.ChangedDefinition), nullTime(p.ChangedAt), p.Rejected)
					if err == nil && tag.RowsAffected() != 1 {
						return errPinRace
					}
					return err
				}
				_, err = tx.Exec(ctx, `UPDATE mcp_pins SET digest = $3, definition = $4, pinned_at = $5, changed = $6,
					changed_definition = $7, changed_at = $8, rejected = $9 WHERE server = $1 AND tool = $2`,
					server, tool, p.Digest, nullText(p.Definition), p.PinnedAt, p.Changed, nullText(p.ChangedDefinition), nullTime(p.ChangedAt), p.Rejected)
				return err
			})
			return p, err
		})
		if !errors.Is(err, errPinRace) {
			break
		}
	}
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNoPendingPin) {
		return MCPPin{}, s.wrap("write MCP pin", err)
	}
	return p, err
}
