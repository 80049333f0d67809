package testutil

import (
	"context"
	"log/slog"
)

// LogEvent is a slog.Handler that passes every record on to its Handler
// and then tells Seen of a record whose message is Msg, so that a test
// waits for a log line rather than for time to pass. Seen should be
// buffered: a record finding it full is not told again.
type LogEvent struct {
	slog.Handler
	Msg  string
	Seen chan<- struct{}
}

// Handle passes r on, then tells Seen if r's message is Msg.
func (h LogEvent) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Message == h.Msg {
		select {
		case h.Seen <- struct{}{}:
		default: // told already
		}
	}
	return err
}

// WithAttrs keeps watching for Msg.
func (h LogEvent) WithAttrs(attrs []slog.Attr) slog.Handler {
	return LogEvent{h.Handler.WithAttrs(attrs), h.Msg, h.Seen}
}

// WithGroup keeps watching for Msg.
func (h LogEvent) WithGroup(name string) slog.Handler {
	return LogEvent{h.Handler.WithGroup(name), h.Msg, h.Seen}
}
