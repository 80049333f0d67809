package console

import (
	"sync"

	"github.com/cproxy/cproxy/routes/audit"
)

// Bounds of what the feed keeps in memory.
const (
	// recentRows is how many of the last requests a page opens with.
	recentRows = 50
	// subscriberQueue is how many rows a slow page may fall behind before
	// it misses some: a request never waits for a browser.
	subscriberQueue = 64
	// maxWatchers bounds the pages open at once that get the live rows.
	maxWatchers = 32
	// maxLastSeen bounds the tokens whose last request the feed remembers;
	// past it the oldest memory is dropped whole.
	maxLastSeen = 10000
)

// Row is one request as the console lists it: the fields of its audit
// record an operator reads, never a token or a credential (the record
// holds neither).
type Row struct {
	Time     string `json:"time"`
	Sandbox  string `json:"sandbox"`
	TokenID  string `json:"token_id"`
	Route    string `json:"route"`
	Method   string `json:"method"`
	Target   string `json:"target"`
	Decision string `json:"decision"`
	Status   int    `json:"status"`
	Reason   string `json:"reason"`
	Approval string `json:"approval"`
}

// Feed keeps the last requests and tells the open pages of each new one
// (Watch is the core's routes.Options.Watch).
type Feed struct {
	mu       sync.Mutex
	recent   []Row // a ring of recentRows, oldest at next once full
	next     int
	watchers map[chan Row]struct{}
	lastSeen map[string]string // token id → its last request's time
}

// NewFeed returns an empty feed.
func NewFeed() *Feed {
	return &Feed{watchers: map[chan Row]struct{}{}, lastSeen: map[string]string{}}
}

// Watch takes one finished request's record. It never blocks: a page too
// far behind misses the row.
func (f *Feed) Watch(rec *audit.Record) {
	row := Row{Time: rec.Time, Sandbox: rec.Sandbox, TokenID: rec.TokenID, Route: rec.Route, Method: rec.Method,
		Target: rec.Target, Decision: rec.Decision, Status: rec.Status, Reason: rec.Reason, Approval: rec.Approval}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.recent) < recentRows {
		f.recent = append(f.recent, row)
	} else {
		f.recent[f.next] = row
		f.next = (f.next + 1) % recentRows
	}
	if row.TokenID != "" {
		if len(f.lastSeen) >= maxLastSeen {
			clear(f.lastSeen)
		}
		f.lastSeen[row.TokenID] = row.Time
	}
	for c := range f.watchers {
		select {
		case c <- row:
		default:
		}
	}
}

// Recent returns the last requests, newest first.
func (f *Feed) Recent() []Row {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Row, 0, len(f.recent))
	for i := range f.recent {
		out = append(out, f.recent[(f.next+len(f.recent)-1-i)%len(f.recent)])
	}
	return out
}

// LastSeen is the time of the last request of the token id, "" if the
// feed has seen none since serve started.
func (f *Feed) LastSeen(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSeen[id]
}

// subscribe returns a channel of the rows to come, and false when
// maxWatchers pages watch already.
func (f *Feed) subscribe() (chan Row, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.watchers) >= maxWatchers {
		return nil, false
	}
	c := make(chan Row, subscriberQueue)
	f.watchers[c] = struct{}{}
	return c, true
}

func (f *Feed) unsubscribe(c chan Row) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.watchers, c)
}
