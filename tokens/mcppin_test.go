package tokens

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A tool's first definition is pinned; another is recorded as a pending
// change, the pin kept; accepting makes it the pin, rejecting keeps it out
// without asking again; the pinned definition listed again ends a change.
func TestStoreMCPPins(t *testing.T) {
	eachStore(t, func(t *testing.T, s Store, reopen func(Store) Store) {
		if _, err := s.MCPPin(ctx, "docs", "search"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("MCPPin of a tool never listed: %v; want ErrNotFound", err)
		}
		v1, v2, v3 := []byte(`{"name":"search","description":"v1"}`), []byte(`{"name":"search","description":"v2"}`), []byte(`{"name":"search","description":"v3"}`)
		p, newly, err := s.SeeMCPTool(ctx, "docs", "search", "sha256:1", v1, t0)
		if err != nil || newly || p.Digest != "sha256:1" || !p.PinnedAt.Equal(t0) || p.Withheld() || string(p.Definition) != string(v1) {
			t.Fatalf("first list: %+v, %v, %v", p, newly, err)
		}
		if p, newly, err = s.SeeMCPTool(ctx, "docs", "search", "sha256:1", v1, t0.Add(time.Second)); err != nil || newly || p.Withheld() || !p.PinnedAt.Equal(t0) {
			t.Fatalf("the pinned definition again: %+v, %v, %v", p, newly, err)
		}
		if _, err := s.AcceptMCPPin(ctx, "docs", "search", "", t0); !errors.Is(err, ErrNoPendingPin) {
			t.Errorf("accept with nothing pending: %v; want ErrNoPendingPin", err)
		}
		if _, err := s.AcceptMCPPin(ctx, "docs", "nothing", "", t0); !errors.Is(err, ErrNotFound) {
			t.Errorf("accept of a tool never listed: %v; want ErrNotFound", err)
		}
		t1 := t0.Add(time.Minute)
		if p, newly, err = s.SeeMCPTool(ctx, "docs", "search", "sha256:2", v2, t1); err != nil || !newly || p.Pending() != "sha256:2" || p.Digest != "sha256:1" || !p.ChangedAt.Equal(t1) {
			t.Fatalf("a changed definition: %+v, %v, %v", p, newly, err)
		}
		if _, newly, _ = s.SeeMCPTool(ctx, "docs", "search", "sha256:2", v2, t1.Add(time.Second)); newly {
			t.Errorf("the same change again is reported as new")
		}
		s = reopen(s)
		if p, err = s.MCPPin(ctx, "docs", "search"); err != nil || p.Pending() != "sha256:2" || string(p.ChangedDefinition) != string(v2) || !p.ChangedAt.Equal(t1) {
			t.Fatalf("after reopen: %+v, %v", p, err)
		}
		if _, err := s.AcceptMCPPin(ctx, "docs", "search", "sha256:9", t1); !errors.Is(err, ErrNoPendingPin) {
			t.Errorf("accept naming another digest: %v; want ErrNoPendingPin", err)
		}
		t2 := t1.Add(time.Minute)
		if p, err = s.AcceptMCPPin(ctx, "docs", "search", "sha256:2", t2); err != nil || p.Digest != "sha256:2" || p.Withheld() || !p.PinnedAt.Equal(t2) || string(p.Definition) != string(v2) {
			t.Fatalf("accept: %+v, %v", p, err)
		}
		if p, newly, _ = s.SeeMCPTool(ctx, "docs", "search", "sha256:3", v3, t2); !newly || p.Pending() != "sha256:3" {
			t.Fatalf("a second change: %+v, %v", p, newly)
		}
		if p, err = s.RejectMCPPin(ctx, "docs", "search", ""); err != nil || p.Pending() != "" || !p.Withheld() || p.Digest != "sha256:2" || p.ChangedDefinition != nil {
			t.Fatalf("reject: %+v, %v", p, err)
		}
		if p, newly, _ = s.SeeMCPTool(ctx, "docs", "search", "sha256:3", v3, t2); newly || !p.Withheld() || p.Pending() != "" {
			t.Errorf("the rejected definition listed again: %+v, %v; want withheld, not pending", p, newly)
		}
		if _, err := s.AcceptMCPPin(ctx, "docs", "search", "", t2); !errors.Is(err, ErrNoPendingPin) {
			t.Errorf("accept after reject: %v; want ErrNoPendingPin", err)
		}
		if p, _, _ = s.SeeMCPTool(ctx, "docs", "search", "sha256:2", v2, t2); p.Withheld() || p.Rejected {
			t.Errorf("the pinned definition listed again: %+v; want no change", p)
		}
		big := []byte(`{"description":"` + strings.Repeat("x", MaxMCPDefinition) + `"}`)
		if p, _, err = s.SeeMCPTool(ctx, "other", "huge", "sha256:4", big, t0); err != nil || p.Definition != nil || p.Digest != "sha256:4" {
			t.Errorf("a definition past MaxMCPDefinition: %v, %d bytes kept; want its digest alone", err, len(p.Definition))
		}
		s.SeeMCPTool(ctx, "docs", "get", "sha256:5", nil, t0)
		pins, err := s.MCPPins(ctx, "")
		if err != nil || len(pins) != 3 || pins[0].Tool != "get" || pins[1].Tool != "search" || pins[2].Server != "other" {
			t.Errorf("MCPPins: %+v, %v", pins, err)
		}
		if pins, err = s.MCPPins(ctx, "docs"); err != nil || len(pins) != 2 {
			t.Errorf("MCPPins(docs): %+v, %v", pins, err)
		}
		if pins, err = s.MCPPins(ctx, "doc"); err != nil || len(pins) != 0 {
			t.Errorf("MCPPins(doc) holds another server's: %+v, %v", pins, err)
		}
	})
}
