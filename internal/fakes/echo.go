package fakes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// EchoRequest is one request an Echo server received.
type EchoRequest struct {
	Method string      `json:"method"`
	Path   string      `json:"path"` // as sent, still percent-encoded
	Query  string      `json:"query"`
	Header http.Header `json:"-"` // recorded, never echoed: it holds the relay's credentials
	Body   string      `json:"body"`
}

// Echo is an HTTP service on loopback standing in for a service a relay
// forwards to: it answers every request with the request as it arrived
// (JSON, headers left out), and a path ending in /stream with three server-sent events, each
// flushed on its own. A path ending in /moved is redirected to …/here beside
// it, one ending in /away to another host.
type Echo struct {
	URL string
	srv *httptest.Server

	mu   sync.Mutex
	reqs []EchoRequest
}

// NewEcho starts an Echo server.
func NewEcho() *Echo {
	e := &Echo{}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	e.URL = e.srv.URL
	return e
}

// Close stops the server.
func (e *Echo) Close() { e.srv.Close() }

// Requests returns what the server received, in order.
func (e *Echo) Requests() []EchoRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]EchoRequest(nil), e.reqs...)
}

func (e *Echo) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	req := EchoRequest{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(body)}
	e.mu.Lock()
	e.reqs = append(e.reqs, req)
	e.mu.Unlock()
	switch {
	case strings.HasSuffix(r.URL.Path, "/moved"):
		// A redirect within the service, relative as many send it.
		http.Redirect(w, r, "here", http.StatusFound)
		return
	case strings.HasSuffix(r.URL.Path, "/away"):
		http.Redirect(w, r, "http://elsewhere.example/collect", http.StatusTemporaryRedirect)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/stream") {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, "event: tick\ndata: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(req)
}
