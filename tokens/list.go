package tokens

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// State is what a token is at a given moment.
type State string

const (
	StateLive    State = "live"
	StateRevoked State = "revoked"
	StateExpired State = "expired"
)

// States are the states a token can be in, in the order the admin API names them.
var States = []State{StateLive, StateExpired, StateRevoked}

// StateAt returns r's state at now. Revoked wins over expired, as in Check.
func (r Record) StateAt(now time.Time) State {
	switch {
	case !r.RevokedAt.IsZero():
		return StateRevoked
	case !now.Before(r.ExpiresAt):
		return StateExpired
	}
	return StateLive
}

// ErrBadCursor is List's refusal of a ListQuery.After that no page ever gave as its Next.
var ErrBadCursor = errors.New("invalid cursor")

// ListQuery asks a Store's List for one page of records.
//
// Records come in the order of their ID (which is the order of their hash, the store's own key), so that a walk
// needs no index but the key and no state but where it stopped: a record created during a walk is listed by a
// later page if its ID comes after the page it is walking, and every record there from the first page to the
// last is listed exactly once.
type ListQuery struct {
	// After is the Next of the page before. Empty: from the first record.
	After string
	// Limit is the most records a page holds, at least 1. A page may exceed it by the records that share the
	// ID of its last (IDs are a hash's first six bytes, so that is all but never), because After cannot point
	// between them.
	Limit int
	// Sandbox lists only that sandbox's records. Empty: every sandbox's.
	Sandbox string
	// State lists only the records in that state at Now. Empty: every state.
	State State
	// Now is the moment State is judged at; unused without State.
	Now time.Time
}

// Page is one page of a listing.
type Page struct {
	Records []Record
	// Next is where the next page starts: pass it as ListQuery.After. Empty: this page is the last.
	Next string
}

// idHexLen is the length of the hex part of an ID: Hash.ID's six bytes.
const idHexLen = 12

// listFrom checks q and returns the key the page starts after: the greatest hash whose ID is q.After (nil from
// the first record).
func listFrom(ctx context.Context, q ListQuery) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case q.Limit < 1:
		return nil, fmt.Errorf("list tokens: limit %d, want at least 1", q.Limit)
	case q.Sandbox != "" && !ValidSandboxID(q.Sandbox):
		return nil, errors.New("list tokens: invalid sandbox id")
	case q.State != "" && q.State != StateLive && q.State != StateRevoked && q.State != StateExpired:
		return nil, fmt.Errorf("list tokens: unknown state %q", q.State)
	case q.After == "":
		return nil, nil
	}
	_, after, ok := idRange(q.After)
	if !ok {
		return nil, fmt.Errorf("list tokens: %w", ErrBadCursor)
	}
	return after[:], nil
}

// ValidID reports whether id is a token's ID as Hash.ID writes it: "tok_" and 12 lower-case hex digits.
func ValidID(id string) bool {
	_, _, ok := idRange(id)
	return ok
}

// idRange returns the least and the greatest hash whose ID is id, or false if id is not one Hash.ID writes.
func idRange(id string) (first, last Hash, ok bool) {
	hexPart, ok := strings.CutPrefix(id, "tok_")
	prefix, err := hex.DecodeString(hexPart)
	if !ok || err != nil || len(hexPart) != idHexLen || strings.ToLower(hexPart) != hexPart {
		return Hash{}, Hash{}, false
	}
	copy(first[:], prefix)
	copy(last[:], prefix)
	for i := len(prefix); i < len(last); i++ {
		last[i] = 0xff
	}
	return first, last, true
}

// fillPage reads records from next, which yields those matching the query in ID order and false after the
// last, into a page of limit records, and past it while the ID stays the same.
func fillPage(limit int, next func() (Record, bool, error)) (Page, error) {
	var p Page
	for {
		r, ok, err := next()
		if err != nil || !ok {
			return p, err
		}
		if n := len(p.Records); n >= limit && r.ID != p.Records[n-1].ID {
			p.Next = p.Records[n-1].ID
			return p, nil
		}
		p.Records = append(p.Records, r)
	}
}

// listBatch is how many records Walk asks each page for.
const listBatch = 500

// Walk calls f with every record that q's filters match (its After and Limit are Walk's own), a page at a time,
// so that memory holds one page however many records the store holds. It stops at f's first error and returns
// it.
func Walk(ctx context.Context, s Store, q ListQuery, f func(Record) error) error {
	q.After, q.Limit = "", listBatch
	for {
		p, err := s.List(ctx, q)
		if err != nil {
			return err
		}
		for _, r := range p.Records {
			if err := f(r); err != nil {
				return err
			}
		}
		if p.Next == "" {
			return nil
		}
		q.After = p.Next
	}
}

// stateCounter is a Store that counts its records by state itself, for less than reading them costs.
type stateCounter interface {
	CountStates(ctx context.Context, now time.Time) (map[State]int, error)
}

// CountStates returns how many of s's records are in each state at now: in one query where the store can
// (PostgreSQL, which would otherwise send every row), else by walking the store a page at a time.
func CountStates(ctx context.Context, s Store, now time.Time) (map[State]int, error) {
	if c, ok := s.(stateCounter); ok {
		return c.CountStates(ctx, now)
	}
	counts := map[State]int{}
	err := Walk(ctx, s, ListQuery{}, func(r Record) error {
		counts[r.StateAt(now)]++
		return nil
	})
	return counts, err
}
