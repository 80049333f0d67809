package mcp

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/cproxy/cproxy/policy"
	"github.com/cproxy/cproxy/routes"
)

// A server of the 2025-11-25 revision asks the client for a completion of
// its model, the user's input or its folders by a JSON-RPC request in an
// SSE stream (the session's GET stream, or a POST's answer); the client
// answers with a JSON-RPC response, POSTed. cproxy lets a response through
// only when it answers a request it saw the server send to that sandbox's
// session, once, and whose capability the profile gives; a request whose
// capability the profile does not give never reaches the client.

// Bounds on the requests a server may have waiting for the client's
// answer: per session, and how long each waits. A request beyond them is
// dropped (and answered with an error), so a server cannot make cproxy
// hold more.
const (
	maxAsked = 32
	askedTTL = 10 * time.Minute
)

// asked is a request of the server waiting for the client's answer.
type asked struct {
	sandbox, method string
	expires         time.Time
}

// ask records that the server asked session id (of sandbox) the request
// method with the JSON-RPC id rid, and reports whether it did: not when the
// session already has maxAsked waiting, or the id again.
func (rt *route) ask(server, id, sandbox string, rid jsontext.Value, method string, now time.Time) bool {
	key, ok := idKey(rid)
	if !ok {
		return false
	}
	k := sessionKey{server, id}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.sessions[k] != sandbox {
		return false
	}
	waiting := rt.asked[k]
	maps.DeleteFunc(waiting, func(_ string, a asked) bool { return !now.Before(a.expires) })
	if _, dup := waiting[key]; dup || len(waiting) >= maxAsked {
		return false
	}
	if waiting == nil {
		waiting = map[string]asked{}
		rt.asked[k] = waiting
	}
	waiting[key] = asked{sandbox: sandbox, method: method, expires: now.Add(askedTTL)}
	return true
}

// answer takes the request of the server that a response with the
// JSON-RPC id rid, from sandbox on session id, answers, and returns its
// method; "" when the server asked no such thing of it (or it was
// answered already, or waited too long).
func (rt *route) answer(server, id, sandbox string, rid jsontext.Value, now time.Time) string {
	key, ok := idKey(rid)
	if !ok || id == "" {
		return ""
	}
	k := sessionKey{server, id}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	a, ok := rt.asked[k][key]
	if !ok || a.sandbox != sandbox || !now.Before(a.expires) {
		return ""
	}
	delete(rt.asked[k], key)
	return a.method
}

// idKey is a JSON-RPC id (a string or a number) in one spelling, so that
// "\u0031" is "1" and 1.0 is 1.
func idKey(id jsontext.Value) (string, bool) {
	if validID(id) == nil {
		return "", false
	}
	c := slices.Clone(id)
	if c.Canonicalize() != nil {
		return "", false
	}
	return string(c), true
}

// requestWatcher reads the messages of a session's answers for the
// server's requests: one whose capability the profile gives (and ping) is
// recorded for the client's answer and passed on; any other request of
// the server is dropped, so the client never sees it, and answered with
// a JSON-RPC error on the client's behalf, so the server does not wait
// for an answer that cannot come. Every message then goes through next,
// when there is one.
type requestWatcher struct {
	srv         *server
	id, sandbox string
	allowed     func(capability string) bool
	now         func() time.Time
	next        answerFilter
}

// rpcMembers are the members of a JSON-RPC message that say what it is.
var rpcMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}

func (w *requestWatcher) message(data []byte) ([]byte, error) {
	var m map[string]jsontext.Value
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if _, folds := foldsOnto(slices.Collect(maps.Keys(m)), rpcMembers); folds {
		// A client whose decoder folds case could read it as a request
		// cproxy did not see.
		return nil, errEvent
	}
	rawMethod, isRequest := m["method"]
	rid, hasID := m["id"]
	if isRequest && hasID && rid.Kind() != 'n' {
		var method string
		if json.Unmarshal(rawMethod, &method) != nil {
			return nil, errEvent
		}
		c, known := policy.MCPServerRequests[method]
		switch {
		case !known:
			w.decline(rid, -32601, "cproxy does not pass the server's "+routes.Clip(method, 64)+" on to the client")
			return nil, nil
		case c != "" && !w.allowed(c):
			w.decline(rid, -32601, "cproxy's policy does not give this server the client's "+c+", so its "+method+" is not passed on")
			return nil, nil
		case !w.srv.rt.ask(w.srv.Name, w.id, w.sandbox, rid, method, w.now()):
			w.decline(rid, -32603, fmt.Sprintf("cproxy holds at most %d requests of the server waiting for the client's answer, each once", maxAsked))
			return nil, nil
		}
	}
	if w.next != nil {
		return w.next.message(data)
	}
	return data, nil
}

// decline answers the server's request rid, in the watcher's session,
// with a JSON-RPC error saying why the client never saw it. It waits for
// the server's answer (at most endTimeout), so that one stream sends one
// at a time; a server that does not take it only waits longer.
func (w *requestWatcher) decline(rid jsontext.Value, code int, why string) {
	id, ok := idKey(rid)
	if !ok {
		return
	}
	msg, _ := json.Marshal(why)
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%s}}`, id, code, msg)
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	h := http.Header{"Mcp-Session-Id": {w.id}, "Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	resp, err := w.srv.fwd.RoundTrip(ctx, http.MethodPost, routes.Target{}, h, body)
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
}
