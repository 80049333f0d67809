package tokens

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// pgCacheLimit bounds the records a PostgresCache keeps; past it the cache starts again empty.
	pgCacheLimit = 100_000

	// listenHeartbeat is how long the listener waits for a notification before it checks, with a round trip of
	// at most as long again, that its connection still works: a connection that died without closing (a network
	// partition) is noticed, and the cache bypassed, within twice this.
	listenHeartbeat = 2 * time.Second

	// The listener reconnects after listenRetryMin, doubling up to listenRetryMax while the database refuses.
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second

	// listenerName is the listening connection's application_name.
	listenerName = "cproxy revocation listener"
)

// PostgresCache is a PostgresStore that keeps the records it has looked up in memory for a while, so that a
// request for a known token makes no database round trip. Every other call goes straight to the database.
//
// Another replica's revocation reaches the cache as a notification on RevokedChannel, which a dedicated
// connection LISTENs to: it drops every record of that sandbox (and, on RevokedTokenChannel, the record of that
// token). Until the notification arrives (the commit's
// delivery to this replica, a millisecond or so on a nearby database) this replica may still serve the revoked
// sandbox's tokens; that window is the price of the saved round trip, and it makes PostgresCache the one Store
// that does not hold a revocation from the very next request, which is why it is opt-in (store.lookup_cache). A
// record is kept for at most the TTL even if no notification ever comes.
//
// Notifications sent while the listening connection is down are lost, so the cache is only used while it is up:
// before it is first established and from the moment it fails, every look-up reads the database, as PostgresStore
// does, and the cache starts empty each time the connection is established again.
type PostgresCache struct {
	// Store is the PostgresStore underneath; the calls PostgresCache does not override go to it unchanged.
	Store
	pg  *PostgresStore
	ttl time.Duration
	log *slog.Logger

	limit     int // pgCacheLimit; smaller in tests
	mu        sync.RWMutex
	entries   map[Hash]cached
	gen       uint64 // bumped by every invalidation: a look-up that read the database before one does not cache
	listening bool   // the LISTEN connection is up: the cache may be used

	stop context.CancelFunc
	done chan struct{}

	onRevoke      atomic.Pointer[func(sandbox string)] // OnRevoke's
	onRevokeToken atomic.Pointer[func(id string)]      // OnRevokeToken's
}

// TestNotificationDelay holds each notification the listener receives for that long before it is handled: a
// listener that lags or stalls while its connection looks healthy. Zero in cproxy; only the CLI's test binary
// sets it (from CPROXY_TEST_NOTIFICATION_DELAY, before serve starts), to show that a replica whose listener
// stalls still ends a revoked token's requests in flight within its sweep's bound.
var TestNotificationDelay time.Duration

// Uncached is the store under s's look-up cache, or s itself when it has none: for a reader that must see the
// records as the database holds them now, whatever the cache and its listener know. The core's sweep of its
// requests in flight reads through it, so that another replica's revocation ends them within the sweep's bound
// even while this replica's notifications lag.
func Uncached(s Store) Store {
	if c, ok := s.(interface{ Uncached() Store }); ok {
		return c.Uncached()
	}
	return s
}

// Uncached is the PostgresStore underneath, which reads the database on every call.
func (c *PostgresCache) Uncached() Store { return c.pg }

// OnRevoke has f called with the sandbox of each revocation notification
// that arrives, after the sandbox's records are dropped: how a replica ends
// its requests in flight of a sandbox another replica revoked.
func (c *PostgresCache) OnRevoke(f func(sandbox string)) { c.onRevoke.Store(&f) }

// OnRevokeToken has f called with the token id of each notification of one
// token's revocation, after its record is dropped: how a replica ends the
// requests in flight of a token another replica revoked.
func (c *PostgresCache) OnRevokeToken(f func(id string)) { c.onRevokeToken.Store(&f) }

type cached struct {
	r     Record
	until time.Time // when the entry stops being trusted: the TTL after the look-up that read it began
}

// NewPostgresCache wraps pg in a look-up cache whose entries live at most ttl (more than 0). It tries to establish
// the listening connection within ctx, and keeps trying in the background, logging to log, if it cannot. Close
// closes pg too.
func NewPostgresCache(ctx context.Context, pg *PostgresStore, ttl time.Duration, log *slog.Logger) *PostgresCache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &PostgresCache{Store: pg, pg: pg, ttl: ttl, log: log, limit: pgCacheLimit, entries: make(map[Hash]cached), done: make(chan struct{})}
	conn, err := c.listen(ctx)
	if err != nil {
		log.Warn("token store listener down: look-up cache bypassed until it connects", "err", err)
	}
	var bg context.Context
	bg, c.stop = context.WithCancel(context.Background())
	go c.run(bg, conn)
	return c
}

// String describes the database and the cache, never the password.
func (c *PostgresCache) String() string {
	return c.pg.String() + ", look-up cache " + c.ttl.String()
}

// Lookup answers from the cache when the listener is up and the entry is younger than the TTL, and otherwise
// reads the database, caching a record it found unless an invalidation came in the meantime.
func (c *PostgresCache) Lookup(ctx context.Context, h Hash) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	now := time.Now()
	c.mu.RLock()
	e, ok := c.entries[h]
	gen, listening := c.gen, c.listening
	c.mu.RUnlock()
	if ok && now.Before(e.until) {
		return e.r, nil
	}
	r, err := c.Store.Lookup(ctx, h)
	if err != nil || !listening {
		return r, err
	}
	c.mu.Lock()
	if c.gen == gen {
		if len(c.entries) >= c.limit {
			c.entries = make(map[Hash]cached)
		}
		c.entries[h] = cached{r, now.Add(c.ttl)}
	}
	c.mu.Unlock()
	return r, nil
}

// RevokeSandbox revokes in the database and then drops the sandbox's records here at once, rather than when its
// own notification comes back, so that this replica refuses them from the moment the admin call answers.
func (c *PostgresCache) RevokeSandbox(ctx context.Context, sandbox string, at time.Time) (int, error) {
	n, err := c.Store.RevokeSandbox(ctx, sandbox, at)
	// Whatever happened, forget: a failed call may still have committed.
	c.drop(sandbox)
	return n, err
}

// RevokeToken revokes in the database and then drops the token's record here at once, as RevokeSandbox does.
func (c *PostgresCache) RevokeToken(ctx context.Context, id string, at time.Time) ([]Record, error) {
	recs, err := c.Store.RevokeToken(ctx, id, at)
	c.dropID(id)
	return recs, err
}

// CountStates counts in the database, in one query, as PostgresStore does.
func (c *PostgresCache) CountStates(ctx context.Context, now time.Time) (map[State]int, error) {
	return c.pg.CountStates(ctx, now)
}

// Close stops the listener and closes the database store.
func (c *PostgresCache) Close() error {
	c.stop()
	<-c.done
	return c.Store.Close()
}

// drop forgets every record of sandbox.
func (c *PostgresCache) drop(sandbox string) {
	c.forget(func(r Record) bool { return r.Sandbox == sandbox })
}

// dropID forgets the record of the token whose ID is id.
func (c *PostgresCache) dropID(id string) {
	c.forget(func(r Record) bool { return r.ID == id })
}

// forget drops every record for which match is true.
func (c *PostgresCache) forget(match func(Record) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for h, e := range c.entries {
		if match(e.r) {
			delete(c.entries, h)
		}
	}
}

// setListening empties the cache and says whether it may be used. Both ways it empties: going down, because
// notifications are about to be missed; coming up, because some were.
func (c *PostgresCache) setListening(up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.listening = up
	c.entries = make(map[Hash]cached)
}

// listen opens the dedicated connection and LISTENs on RevokedChannel and RevokedTokenChannel.
func (c *PostgresCache) listen(ctx context.Context) (*pgx.Conn, error) {
	cfg := c.pg.pool.Config().ConnConfig
	// So that an operator can tell it apart in pg_stat_activity.
	cfg.RuntimeParams["application_name"] = listenerName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, c.pg.wrap("token store listener "+c.pg.where, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+RevokedChannel+"; LISTEN "+RevokedTokenChannel); err != nil {
		closeConn(conn)
		return nil, c.pg.wrap("token store listener "+c.pg.where, err)
	}
	return conn, nil
}

// run keeps the listener up until ctx ends: it serves conn (nil: none yet) and, each time the connection fails,
// marks the cache unusable and reconnects with backoff.
func (c *PostgresCache) run(ctx context.Context, conn *pgx.Conn) {
	defer close(c.done)
	retry := listenRetryMin
	var down time.Time // since when the listener has been down; zero while it has never been up
	for {
		if conn == nil {
			var err error
			if conn, err = c.listen(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				c.log.Warn("token store listener cannot reconnect: look-up cache bypassed", "err", err, "retry_in", retry)
				select {
				case <-ctx.Done():
					return
				case <-time.After(retry):
				}
				retry = min(2*retry, listenRetryMax)
				continue
			}
			if !down.IsZero() {
				c.log.Info("token store listener reconnected: look-up cache in use again", "down_for", time.Since(down).Round(time.Millisecond))
			} else {
				c.log.Info("token store listener connected: look-up cache in use")
			}
			retry = listenRetryMin
		}
		c.setListening(true)
		err := c.serve(ctx, conn)
		c.setListening(false)
		closeConn(conn)
		conn = nil
		if ctx.Err() != nil {
			return
		}
		down = time.Now()
		c.log.Warn("token store listener down: look-up cache bypassed until it reconnects", "err", c.pg.wrap("token store listener "+c.pg.where, err))
	}
}

// serve drops the records of each revoked sandbox or token as its notification arrives, until conn fails or ctx
// ends.
func (c *PostgresCache) serve(ctx context.Context, conn *pgx.Conn) error {
	for {
		wait, cancel := context.WithTimeout(ctx, listenHeartbeat)
		n, err := conn.WaitForNotification(wait)
		cancel()
		if err == nil && TestNotificationDelay > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(TestNotificationDelay):
			}
		}
		switch {
		case err == nil && n.Channel == RevokedTokenChannel:
			c.dropID(n.Payload)
			if f := c.onRevokeToken.Load(); f != nil {
				(*f)(n.Payload)
			}
		case err == nil:
			c.drop(n.Payload)
			if f := c.onRevoke.Load(); f != nil {
				(*f)(n.Payload)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case wait.Err() != nil:
			// Quiet for a while: check that the connection still answers.
			ping, cancel := context.WithTimeout(ctx, listenHeartbeat)
			err := conn.Ping(ping)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// closeConn closes conn, waiting at most listenHeartbeat for the database to hear of it.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), listenHeartbeat)
	defer cancel()
	conn.Close(ctx)
}
