package tokens

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are the PostgreSQL schema, one file per version: NNNN_what.sql, applied in order, each once.
//
//go:embed migrations/*.sql
var migrations embed.FS

const (
	// migrationLock is the pg_advisory_xact_lock key that serialises migrations, so replicas starting together
	// apply each one once: ASCII "cproxymg".
	migrationLock = 0x6370726f78796d67
	// pruneLock is the pg_try_advisory_xact_lock key that keeps replicas from pruning at once: ASCII "cproxypr".
	pruneLock = 0x6370726f78797072

	// RevokedChannel is the NOTIFY channel RevokeSandbox announces each revocation on, with the sandbox id as the
	// payload, in the revoking transaction (so only a committed revocation is announced). PostgresCache listens
	// to it; so may operators' tools.
	RevokedChannel = "cproxy_revoked"
	// RevokedTokenChannel is the NOTIFY channel RevokeToken announces each revocation of one token on, with the
	// token's id as the payload, in the revoking transaction. It is a channel of its own so that RevokedChannel's
	// payload stays a sandbox id, for the listeners that read it so.
	RevokedTokenChannel = "cproxy_revoked_token"

	// pgConnectTimeout bounds a connection attempt when the DSN sets no connect_timeout, so an unreachable
	// database fails a request (503) instead of holding it until the operating system gives up.
	pgConnectTimeout = 5 * time.Second
	// pgOpTimeout bounds each store call, so a database that stops answering on an open connection fails
	// requests closed too.
	pgOpTimeout = 10 * time.Second
)

// PostgresStore is the Store that several cproxy replicas share: every token hash, record, revocation and usage
// counter is a row in one PostgreSQL database.
//
// It does not cache look-ups. A revocation made through any replica is then in force on every replica for the
// very next request, with no propagation delay and nothing to go wrong when a notification is missed. The price
// is one primary-key SELECT per proxied request, a fraction of a millisecond on a nearby database
// (BenchmarkStoreLookup measures it), which is small beside the upstream round trip every request makes anyway.
// PostgresCache, opt-in, saves that SELECT at the cost of a window (a notification's delivery) in which another
// replica still serves a revoked token.
type PostgresStore struct {
	pool     *pgxpool.Pool
	password string // scrubbed from every error, in case a driver message ever quotes it
	where    string
}

var (
	_ Store        = (*PostgresStore)(nil)
	_ SharedLimits = (*PostgresStore)(nil)
)

// OpenPostgres connects to the database named by dsn (a libpq connection string or postgres:// URL), applies
// the migrations this cproxy knows and the database lacks, and returns the store. It refuses a database whose
// schema is newer than this cproxy knows. Its errors name the host and database, never the password.
func OpenPostgres(ctx context.Context, dsn string) (*PostgresStore, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the string, password and all.
		return nil, errors.New("open token store: the PostgreSQL connection string cannot be parsed (want postgres://USER:PASSWORD@HOST:PORT/DATABASE or key=value pairs)")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = pgConnectTimeout
	}
	s := &PostgresStore{password: cfg.ConnConfig.Password, where: describe(cfg.ConnConfig)}
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, s.wrap("open token store "+s.where, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

// describe names a database for errors and logs: "postgres HOST:PORT/DATABASE as USER".
func describe(c *pgx.ConnConfig) string {
	host := c.Host
	if !strings.HasPrefix(host, "/") {
		host = net.JoinHostPort(host, strconv.Itoa(int(c.Port)))
	}
	return fmt.Sprintf("postgres %s/%s as %s", host, c.Database, c.User)
}

// String describes the database (host, port, database, user), never the password.
func (s *PostgresStore) String() string { return s.where }

// wrap adds op to err, with the password removed should the driver ever quote it.
func (s *PostgresStore) wrap(op string, err error) error {
	if s.password != "" && strings.Contains(err.Error(), s.password) {
		return fmt.Errorf("%s: %s", op, strings.ReplaceAll(err.Error(), s.password, "REDACTED"))
	}
	return fmt.Errorf("%s: %w", op, err)
}

type migration struct {
	version int
	name    string
	sql     string
}

// knownMigrations reads the embedded migrations in version order. A misnamed file or a gap is a build mistake.
func knownMigrations() []migration {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		panic(err)
	}
	var ms []migration
	for _, f := range files {
		name := path.Base(f)
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil || v != len(ms)+1 {
			panic(fmt.Sprintf("tokens: migration %s is out of sequence (want version %d)", name, len(ms)+1))
		}
		b, err := migrations.ReadFile(f)
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{v, name, string(b)})
	}
	return ms
}

// PostgresSchemaVersion is the newest schema this cproxy knows.
func PostgresSchemaVersion() int { return len(knownMigrations()) }

// migrate brings the schema up to date in one transaction, under an advisory lock so that replicas starting
// together wait for each other instead of racing: either every missing migration is applied or none is.
func (s *PostgresStore) migrate(ctx context.Context) error {
	ms := knownMigrations()
	var inside error // what went wrong inside the transaction, as opposed to beginning it
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		inside = s.migrateTx(ctx, tx, ms)
		return inside
	})
	switch {
	case err == nil:
		return nil
	case inside != nil:
		return inside
	default:
		return s.wrap("open token store: cannot reach "+s.where, err)
	}
}

func (s *PostgresStore) migrateTx(ctx context.Context, tx pgx.Tx, ms []migration) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
		return s.wrap("open token store "+s.where, err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return s.wrap("open token store "+s.where+": create schema_version", err)
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_version").Scan(&current); err != nil {
		return s.wrap("open token store "+s.where+": read schema_version", err)
	}
	if current > len(ms) {
		return fmt.Errorf("%w: %s is at schema %d; this cproxy knows up to %d", ErrNewerSchema, s.where, current, len(ms))
	}
	for _, m := range ms[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return s.wrap("open token store "+s.where+": migration "+m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_version (version) VALUES ($1)", m.version); err != nil {
			return s.wrap("open token store "+s.where+": migration "+m.name, err)
		}
	}
	return nil
}

// call runs f with the store's per-call timeout.
func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	return f(ctx)
}

// read runs a read-only query f, once more if the first attempt failed on the connection (a pooled connection
// the database closed when it restarted): reading twice is harmless, and a look-up should not fail for that. Both
// attempts share one timeout.
func read[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, pgOpTimeout)
	defer cancel()
	v, err := f(ctx)
	var pgErr *pgconn.PgError
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotFound) && !errors.As(err, &pgErr) {
		return f(ctx)
	}
	return v, err
}

func (s *PostgresStore) Create(ctx context.Context, h Hash, r Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !ValidSandboxID(r.Sandbox) {
		return errors.New("create token: invalid sandbox id")
	}
	tag, err := call(ctx, func(ctx context.Context) (pgconn.CommandTag, error) {
		return s.pool.Exec(ctx, `INSERT INTO tokens
			(hash, id, sandbox, profile, source, bind, token_values, budget, created_at, expires_at, revoked_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (hash) DO NOTHING`,
			h[:], h.ID(), r.Sandbox, r.Profile, r.Source, r.Bind, nilIfEmpty(r.Values), nilIfEmpty(r.Budget),
			r.CreatedAt.UTC(), r.ExpiresAt.UTC(), nullTime(r.RevokedAt))
	})
	if err != nil {
		return s.wrap("create token "+h.ID(), err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("create token %s: already exists", h.ID())
	}
	return nil
}

const recordColumns = `id, sandbox, profile, source, bind, token_values, budget, created_at, expires_at, revoked_at`

func scanRecord(row pgx.Row) (Record, error) {
	var r Record
	var budget []byte
	var revoked *time.Time
	if err := row.Scan(&r.ID, &r.Sandbox, &r.Profile, &r.Source, &r.Bind, &r.Values, &budget, &r.CreatedAt, &r.ExpiresAt, &revoked); err != nil {
		return Record{}, err
	}
	fixRecord(&r, budget, revoked)
	return r, nil
}

// fixRecord completes a record scanned from a row: its budget and revocation from their nullable columns, its
// times in UTC.
func fixRecord(r *Record, budget []byte, revoked *time.Time) {
	if budget != nil {
		r.Budget = json.RawMessage(budget)
	}
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	if revoked != nil {
		r.RevokedAt = revoked.UTC()
	}
}

func (s *PostgresStore) Lookup(ctx context.Context, h Hash) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	r, err := read(ctx, func(ctx context.Context) (Record, error) {
		r, err := scanRecord(s.pool.QueryRow(ctx, "SELECT "+recordColumns+" FROM tokens WHERE hash = $1", h[:]))
		if errors.Is(err, pgx.ErrNoRows) {
			return Record{}, ErrNotFound
		}
		return r, err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Record{}, s.wrap("look up token "+h.ID(), err)
	}
	return r, err
}

func (s *PostgresStore) RevokeSandbox(ctx context.Context, sandbox string, at time.Time) (int, error) {
	if err := checkRevoke(ctx, sandbox, at); err != nil {
		return 0, err
	}
	// One transaction: the rows and the notification commit together or not at all.
	n, err := call(ctx, func(ctx context.Context) (int, error) {
		var n int64
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, "UPDATE tokens SET revoked_at = $2 WHERE sandbox = $1 AND revoked_at IS NULL", sandbox, at.UTC())
			if err != nil {
				return err
			}
			n = tag.RowsAffected()
			_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", RevokedChannel, sandbox)
			return err
		})
		return int(n), err
	})
	if err != nil {
		return 0, s.wrap("revoke tokens of sandbox "+sandbox, err)
	}
	return n, nil
}

// RevokeToken revokes the rows whose hash lies in the range of id's (the primary key finds them) and announces it,
// in one transaction. coalesce keeps an earlier revocation's time.
func (s *PostgresStore) RevokeToken(ctx context.Context, id string, at time.Time) ([]Record, error) {
	first, last, err := checkRevokeToken(ctx, id, at)
	if err != nil {
		return nil, err
	}
	recs, err := call(ctx, func(ctx context.Context) ([]Record, error) {
		var recs []Record
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "UPDATE tokens SET revoked_at = coalesce(revoked_at, $3) WHERE hash BETWEEN $1 AND $2 RETURNING "+recordColumns,
				first[:], last[:], at.UTC())
			if err != nil {
				return err
			}
			if recs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanRecord(row) }); err != nil {
				return err
			}
			if len(recs) == 0 {
				return nil
			}
			_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", RevokedTokenChannel, id)
			return err
		})
		return recs, err
	})
	if err != nil {
		return nil, s.wrap("revoke token "+id, err)
	}
	if len(recs) == 0 {
		return nil, ErrNotFound
	}
	return recs, nil
}

// List reads the page by keyset on the primary key (hash > where q.After points, ORDER BY hash), or on the
// (sandbox, hash) index for one sandbox: each page costs what its rows do, however deep into the table it is.
func (s *PostgresStore) List(ctx context.Context, q ListQuery) (Page, error) {
	after, err := listFrom(ctx, q)
	if err != nil {
		return Page{}, err
	}
	var where []string
	var args []any
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.Sandbox != "" {
		arg("sandbox = $%d", q.Sandbox)
	}
	switch q.State {
	case StateLive:
		arg("revoked_at IS NULL AND expires_at > $%d", q.Now.UTC())
	case StateExpired:
		arg("revoked_at IS NULL AND expires_at <= $%d", q.Now.UTC())
	case StateRevoked:
		where = append(where, "revoked_at IS NOT NULL")
	}
	args = append(args, nil, 0) // the key to start after and the row limit, set for each batch
	where = append(where, fmt.Sprintf("hash > $%d", len(args)-1))
	query := "SELECT hash, " + recordColumns + " FROM tokens WHERE " + strings.Join(where, " AND ") +
		fmt.Sprintf(" ORDER BY hash LIMIT $%d", len(args))
	p, err := read(ctx, func(ctx context.Context) (Page, error) {
		// A first batch of a page and one row more, which tells whether there is a next page. Another, small
		// batch only if the page ends on two records of one ID (all but never).
		var batch []keyedRecord
		from, size, last := append([]byte{}, after...), q.Limit+1, false
		next := func() (Record, bool, error) {
			if len(batch) == 0 {
				if last {
					return Record{}, false, nil
				}
				args[len(args)-2], args[len(args)-1] = from, size
				rows, err := s.pool.Query(ctx, query, args...)
				if err != nil {
					return Record{}, false, err
				}
				if batch, err = pgx.CollectRows(rows, scanKeyed); err != nil {
					return Record{}, false, err
				}
				last, size = len(batch) < size, 2
				if len(batch) == 0 {
					return Record{}, false, nil
				}
				from = batch[len(batch)-1].hash
			}
			r := batch[0].Record
			batch = batch[1:]
			return r, true, nil
		}
		return fillPage(q.Limit, next)
	})
	if err != nil {
		return Page{}, s.wrap("list tokens", err)
	}
	return p, nil
}

// CountStates counts the records by state at now in one query, as Record.StateAt judges them.
func (s *PostgresStore) CountStates(ctx context.Context, now time.Time) (map[State]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	counts, err := read(ctx, func(ctx context.Context) (map[State]int, error) {
		var live, revoked, expired int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE revoked_at IS NULL AND expires_at > $1),
				count(*) FILTER (WHERE revoked_at IS NOT NULL),
				count(*) FILTER (WHERE revoked_at IS NULL AND expires_at <= $1)
			FROM tokens`, now.UTC()).Scan(&live, &revoked, &expired)
		return map[State]int{StateLive: live, StateRevoked: revoked, StateExpired: expired}, err
	})
	if err != nil {
		return nil, s.wrap("count tokens", err)
	}
	return counts, nil
}

// keyedRecord is a record with its hash, where a batch of List stops.
type keyedRecord struct {
	hash []byte
	Record
}

func scanKeyed(row pgx.CollectableRow) (keyedRecord, error) {
	var k keyedRecord
	var budget []byte
	var revoked *time.Time
	r := &k.Record
	if err := row.Scan(&k.hash, &r.ID, &r.Sandbox, &r.Profile, &r.Source, &r.Bind, &r.Values, &budget, &r.CreatedAt, &r.ExpiresAt, &revoked); err != nil {
		return keyedRecord{}, err
	}
	fixRecord(r, budget, revoked)
	return k, nil
}

// LoadUsage returns the usage saved under key; zero when there is none.
func (s *PostgresStore) LoadUsage(ctx context.Context, key string) (Usage, error) {
	if err := ctx.Err(); err != nil {
		return Usage{}, err
	}
	u, err := read(ctx, func(ctx context.Context) (Usage, error) {
		u, err := scanUsage(s.pool.QueryRow(ctx, `SELECT `+usageColumns+` FROM usage WHERE key = $1`, key))
		if errors.Is(err, pgx.ErrNoRows) {
			return Usage{}, nil
		}
		return u, err
	})
	if err != nil {
		return Usage{}, s.wrap("load usage "+key, err)
	}
	return u, nil
}

// SaveUsage stores u under key; durable when it returns.
func (s *PostgresStore) SaveUsage(ctx context.Context, key string, u Usage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := call(ctx, func(ctx context.Context) (pgconn.CommandTag, error) {
		return s.pool.Exec(ctx, `INSERT INTO usage (key, `+usageColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (key) DO UPDATE SET requests = $2, input_tokens = $3, output_tokens = $4,
				cache_read_tokens = $5, cache_write_tokens = $6, mcp_calls = $7`,
			key, u.Requests, u.Input, u.Output, u.CacheRead, u.CacheWrite, u.MCPCalls)
	})
	if err != nil {
		return s.wrap("save usage "+key, err)
	}
	return nil
}

const usageColumns = "requests, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, mcp_calls"

func scanUsage(row pgx.Row) (Usage, error) {
	var u Usage
	err := row.Scan(&u.Requests, &u.Input, &u.Output, &u.CacheRead, &u.CacheWrite, &u.MCPCalls)
	return u, err
}

// ReserveUsage adds want to the usage under key if it fits limit, in one
// statement: the upsert locks the key's row, so reservations through every
// replica at once are applied one after another, each checked against what
// the one before left.
func (s *PostgresStore) ReserveUsage(ctx context.Context, key string, want, limit Usage) (Usage, error) {
	if err := ctx.Err(); err != nil {
		return Usage{}, err
	}
	if !want.Fits(limit) {
		// The first reservation of a window inserts its row unchecked, so
		// a want that fits no window is refused here.
		u, err := s.LoadUsage(ctx, key)
		if err != nil {
			return Usage{}, err
		}
		return u, ErrOverBudget
	}
	u, err := call(ctx, func(ctx context.Context) (Usage, error) {
		return scanUsage(s.pool.QueryRow(ctx, `INSERT INTO usage AS u (key, `+usageColumns+`)
			VALUES ($1, $2::bigint, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint)
			ON CONFLICT (key) DO UPDATE SET
				requests = u.requests + $2, input_tokens = u.input_tokens + $3, output_tokens = u.output_tokens + $4,
				cache_read_tokens = u.cache_read_tokens + $5, cache_write_tokens = u.cache_write_tokens + $6,
				mcp_calls = u.mcp_calls + $7
			WHERE ($8::bigint = 0 OR u.requests + $2 <= $8) AND ($9::bigint = 0 OR u.input_tokens + $3 <= $9)
				AND ($10::bigint = 0 OR u.output_tokens + $4 <= $10) AND ($11::bigint = 0 OR u.cache_read_tokens + $5 <= $11)
				AND ($12::bigint = 0 OR u.cache_write_tokens + $6 <= $12) AND ($13::bigint = 0 OR u.mcp_calls + $7 <= $13)
			RETURNING `+usageColumns,
			key, want.Requests, want.Input, want.Output, want.CacheRead, want.CacheWrite, want.MCPCalls,
			limit.Requests, limit.Input, limit.Output, limit.CacheRead, limit.CacheWrite, limit.MCPCalls))
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// The row is there and the sum would pass a cap: nothing changed.
		u, err := s.LoadUsage(ctx, key)
		if err != nil {
			return Usage{}, err
		}
		return u, ErrOverBudget
	}
	if err != nil {
		return Usage{}, s.wrap("reserve usage "+key, err)
	}
	return u, nil
}

// AdjustUsage adds delta to the usage under key, no count below zero, in
// one statement.
func (s *PostgresStore) AdjustUsage(ctx context.Context, key string, delta Usage) (Usage, error) {
	if err := ctx.Err(); err != nil {
		return Usage{}, err
	}
	fresh := delta.floor()
	u, err := call(ctx, func(ctx context.Context) (Usage, error) {
		return scanUsage(s.pool.QueryRow(ctx, `INSERT INTO usage AS u (key, `+usageColumns+`)
			VALUES ($1, $8::bigint, $9::bigint, $10::bigint, $11::bigint, $12::bigint, $13::bigint)
			ON CONFLICT (key) DO UPDATE SET
				requests = greatest(u.requests + $2, 0), input_tokens = greatest(u.input_tokens + $3, 0),
				output_tokens = greatest(u.output_tokens + $4, 0), cache_read_tokens = greatest(u.cache_read_tokens + $5, 0),
				cache_write_tokens = greatest(u.cache_write_tokens + $6, 0), mcp_calls = greatest(u.mcp_calls + $7, 0)
			RETURNING `+usageColumns,
			key, delta.Requests, delta.Input, delta.Output, delta.CacheRead, delta.CacheWrite, delta.MCPCalls,
			fresh.Requests, fresh.Input, fresh.Output, fresh.CacheRead, fresh.CacheWrite, fresh.MCPCalls))
	})
	if err != nil {
		return Usage{}, s.wrap("adjust usage "+key, err)
	}
	return u, nil
}

// rateStep is how long one event of perMinute a minute fills a bucket for.
func rateStep(perMinute int64) time.Duration { return time.Minute / time.Duration(max(perMinute, 1)) }

// TakeRate is the generic cell rate algorithm in one statement, timed by
// the database's clock (so replicas' clocks need not agree): the upsert
// moves the key's theoretical arrival time one step ahead of max(itself,
// now) only if that stays within perMinute steps of now; the row lock
// orders events from every replica.
func (s *PostgresStore) TakeRate(ctx context.Context, key string, perMinute int64) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	step, burst := rateStep(perMinute), time.Duration(max(perMinute, 1))*rateStep(perMinute)
	wait, err := call(ctx, func(ctx context.Context) (time.Duration, error) {
		var us int64
		err := s.pool.QueryRow(ctx, `WITH taken AS (
				INSERT INTO rates AS r (key, tat) VALUES ($1, now() + $2::bigint * interval '1 microsecond')
				ON CONFLICT (key) DO UPDATE SET tat = greatest(r.tat, now()) + $2::bigint * interval '1 microsecond'
				WHERE greatest(r.tat, now()) + $2::bigint * interval '1 microsecond' <= now() + $3::bigint * interval '1 microsecond'
				RETURNING 0::bigint AS wait)
			SELECT wait FROM taken
			UNION ALL
			SELECT greatest(1, (extract(epoch FROM greatest(r.tat, now()) + $2::bigint * interval '1 microsecond' - now()) * 1e6)::bigint - $3::bigint)
				FROM rates r WHERE r.key = $1 AND NOT EXISTS (SELECT FROM taken)`,
			key, step.Microseconds(), burst.Microseconds()).Scan(&us)
		return time.Duration(us) * time.Microsecond, err
	})
	if err != nil {
		return 0, s.wrap("take rate "+key, err)
	}
	return wait, nil
}

// AcquireSlot counts the key's live slots and takes one if there is room,
// under a transaction-scoped advisory lock on the key, so that replicas
// acquiring at once are counted one after another; expired slots (their
// replica died) are deleted on the way.
func (s *PostgresStore) AcquireSlot(ctx context.Context, key string, limit int64, lease time.Duration) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	slot, err := call(ctx, func(ctx context.Context) (Slot, error) {
		var slot Slot
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('cproxy slot ' || $1, 0))", key); err != nil {
				return err
			}
			var held int64
			if err := tx.QueryRow(ctx, `WITH gone AS (DELETE FROM slots WHERE key = $1 AND expires_at <= now())
				SELECT count(*) FROM slots WHERE key = $1 AND expires_at > now()`, key).Scan(&held); err != nil {
				return err
			}
			if held >= limit {
				return ErrOverBudget
			}
			return tx.QueryRow(ctx, "INSERT INTO slots (key, expires_at) VALUES ($1, now() + $2::bigint * interval '1 microsecond') RETURNING id",
				key, lease.Microseconds()).Scan(&slot)
		})
		return slot, err
	})
	if errors.Is(err, ErrOverBudget) {
		return 0, err
	}
	if err != nil {
		return 0, s.wrap("acquire slot "+key, err)
	}
	return slot, nil
}

func (s *PostgresStore) RenewSlots(ctx context.Context, slots []Slot, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(slots) == 0 {
		return nil
	}
	ids := make([]int64, len(slots))
	for i, id := range slots {
		ids[i] = int64(id)
	}
	_, err := call(ctx, func(ctx context.Context) (pgconn.CommandTag, error) {
		return s.pool.Exec(ctx, `UPDATE slots SET expires_at = now() + $2::bigint * interval '1 microsecond'
			WHERE id = ANY($1) AND expires_at > now()`, ids, lease.Microseconds())
	})
	if err != nil {
		return s.wrap("renew slots", err)
	}
	return nil
}

func (s *PostgresStore) ReleaseSlot(ctx context.Context, slot Slot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := call(ctx, func(ctx context.Context) (pgconn.CommandTag, error) {
		return s.pool.Exec(ctx, "DELETE FROM slots WHERE id = $1", int64(slot))
	})
	if err != nil {
		return s.wrap("release slot", err)
	}
	return nil
}

func (s *PostgresStore) Close() error {
	s.pool.Close()
	return nil
}

// nilIfEmpty stores an empty slice as NULL, which reads back as nil: "none", as in the embedded store.
func nilIfEmpty[T ~[]byte](b T) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC()
}

// Prune's and Prunable's statements. least() passes over a NULL, so least(expires_at, revoked_at) is
// Record.DeadSince, and an index on it (migration 4) finds the dead tokens without reading the live ones; the
// usage rows of a token are found by their id through another (see Prune).
const (
	deadBy          = "least(expires_at, revoked_at) <= $1"
	pruneCandidates = "SELECT hash FROM tokens WHERE " + deadBy + " LIMIT $2"
	pruneUsage      = "DELETE FROM usage WHERE split_part(key, '/', 1) = ANY($1)"
)

// Prune deletes a batch in one transaction that first takes pruneLock with pg_try_advisory_xact_lock, so that
// replicas whose prune runs meet do not both scan for and delete the same rows: the second is told at once
// (ErrPruneBusy), rather than queueing behind the first to find nothing left. The lock is the transaction's,
// not the session's: it ends with the transaction, whatever happens to it or to the replica, and a pooled
// connection never goes back to the pool still holding it.
//
// A token's usage, rates and slots rows are keyed by its id alone (UsageKey; TakeRate and AcquireSlot are
// called with the token id): there is no budget shared by a profile or a sandbox in the store, each token of
// a profile counts under its own id. So the rows whose key is the id, or starts with the id and "/", are the
// pruned token's and no live token's. A budget shared between tokens, should one come, needs its own key
// space and is not for Prune to delete.
func (s *PostgresStore) Prune(ctx context.Context, cutoff time.Time, limit int) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	recs, err := call(ctx, func(ctx context.Context) ([]Record, error) {
		var recs []Record
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var mine bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", int64(pruneLock)).Scan(&mine); err != nil {
				return err
			}
			if !mine {
				return ErrPruneBusy
			}
			rows, err := tx.Query(ctx, "DELETE FROM tokens WHERE hash IN ("+pruneCandidates+" FOR UPDATE) RETURNING "+recordColumns,
				cutoff.UTC(), limit)
			if err != nil {
				return err
			}
			recs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanRecord(row) })
			if err != nil || len(recs) == 0 {
				return err
			}
			ids := make([]string, len(recs))
			for i, r := range recs {
				ids[i] = r.ID
			}
			// split_part(key, '/', 1) is the id of UsageKey(id, day) and of UsageKey(id, "").
			for _, q := range []string{pruneUsage,
				"DELETE FROM rates WHERE key = ANY($1)", "DELETE FROM slots WHERE key = ANY($1)"} {
				if _, err := tx.Exec(ctx, q, ids); err != nil {
					return err
				}
			}
			return nil
		})
		return recs, err
	})
	if errors.Is(err, ErrPruneBusy) {
		return nil, err
	}
	if err != nil {
		return nil, s.wrap("prune tokens", err)
	}
	sortRecords(recs)
	return recs, nil
}

func (s *PostgresStore) Prunable(ctx context.Context, cutoff time.Time, limit int) (int, []Record, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	type prunable struct {
		n    int
		recs []Record
	}
	p, err := read(ctx, func(ctx context.Context) (prunable, error) {
		var p prunable
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM tokens WHERE "+deadBy, cutoff.UTC()).Scan(&p.n); err != nil {
			return p, err
		}
		rows, err := s.pool.Query(ctx, "SELECT "+recordColumns+" FROM tokens WHERE "+deadBy+` ORDER BY created_at, id COLLATE "C" LIMIT $2`,
			cutoff.UTC(), limit)
		if err != nil {
			return p, err
		}
		p.recs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanRecord(row) })
		return p, err
	})
	if err != nil {
		return 0, nil, s.wrap("list prunable tokens", err)
	}
	sortRecords(p.recs)
	return p.n, p.recs, nil
}
