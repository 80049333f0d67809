package routes

import (
	"net/http"
	"time"
)

// A request answered before its body has all arrived (refused before its
// body was read, or while it came) gives its connection back with the
// answer. Left to itself, net/http would read what remains of the body
// (up to 256 KiB of it, at whatever pace the client chooses) before it
// sent the answer, and again before it closed the connection: a client
// trickling the body of a refused request held its connection until
// listen.body_timeout, or for good when it was not authenticated.

// refusalLinger is how long the connection of a request answered with its
// body still arriving goes on reading, and dropping, what the client sends
// once the answer is out, before it is closed: what lets a client that
// writes its whole body before it reads get the answer, instead of a reset
// that would arrive before it (net/http's own delay for that case is the
// same).
const refusalLinger = 500 * time.Millisecond

// unauthenticatedBodyTimeout bounds how long the connection of a request
// not (yet) authenticated waits for its body: cproxy reads no body before
// its request is authenticated, which takes a token look-up, and a request
// refused then is closed after refusalLinger. SECURITY.md names it.
const unauthenticatedBodyTimeout = 10 * time.Second

// closeUnread makes the answer about to be written to w the connection's
// last: it says Connection: close, so net/http writes it at once instead
// of first reading the rest of the body, and the connection's reads end
// refusalLinger from now, so net/http's read of what the client still
// sends stops then and the connection closes.
func closeUnread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	setReadDeadline(w, time.Now().Add(refusalLinger))
}

// setReadDeadline sets the deadline of the reads of w's connection.
func setReadDeadline(w http.ResponseWriter, t time.Time) {
	_ = http.NewResponseController(w).SetReadDeadline(t)
}
