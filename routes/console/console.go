// Package console is the operator console (docs/console.md): pages served
// on the admin listener at /, for a person in a browser, that list the
// sandboxes and their tokens with their usage, the requests as they end
// (server-sent events from the audit records), the approval requests
// waiting, and the policy in force, and that revoke a sandbox and approve or
// deny a request. It is a client of the admin API, called in process: every
// action is the admin API's own endpoint, so the console cannot do what the
// harness cannot, and the API's contract is unchanged.
//
// A browser changes what the admin listener must defend against, and the
// console does: every page checks its Host (against DNS rebinding), every
// action needs the session's CSRF token and a same-origin Origin, the pages
// refuse to be framed, and off loopback the console needs a login. The admin
// API refuses requests a browser sent from another page. No page ever
// holds a token, a credential or the password's hash.
package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"

	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/secrets"
)

//go:embed templates/*.html static/*
var files embed.FS

var (
	pages  = template.Must(template.New("").Funcs(funcs).ParseFS(files, "templates/*.html"))
	static = func() fs.FS { f, _ := fs.Sub(files, "static"); return f }()
)

// Limits.
const (
	// sessionLifetime is how long a console session lasts without a new
	// login.
	sessionLifetime = 12 * time.Hour
	// maxSessions bounds the sessions kept; past it the one that ends
	// first is dropped.
	maxSessions = 256
	// maxTokensShown bounds the live tokens a page lists.
	maxTokensShown = 2000
	// keepAlive is how often an idle event stream gets a comment, so
	// that a proxy between it and the browser does not close it.
	keepAlive = 25 * time.Second
)

// cookieName is the session cookie.
const cookieName = "cproxy_console"

// securityHeaders are on every answer of the console: scripts and styles
// only from the console's own files (no inline script, no CDN), no frame
// may hold a page (against clickjacking), forms post only to the console.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
		"form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
	"X-Frame-Options":        "DENY",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "same-origin", // not no-referrer, under which a form's Origin is "null"
	"Cache-Control":          "no-store",
}

// Options say what the console shows and who may use it.
type Options struct {
	// Admin is the admin API's handler, which the console calls in
	// process for what it lists and does. Required.
	Admin http.Handler
	// Policy returns the policy file in force, its path and text; "" for
	// the built-in default policy. Required.
	Policy func() (path, text string)
	// Reload returns the last policy reload's result; a zero At: none
	// since serve started. Nil: not shown.
	Reload func() Reload
	// Feed has the requests as they end. Required.
	Feed *Feed
	// Addr is the admin listener's address as it listens: host:port, or
	// unix:PATH. The console answers a Host of this address (and of
	// localhost with its port, on a loopback address) and of Hosts.
	Addr string
	// Hosts are the other Host headers the console answers
	// (console.hosts).
	Hosts []string
	// PasswordHash is the bcrypt hash of the login password; zero: no
	// password.
	PasswordHash secrets.Secret
	// UserHeader is the header a reverse proxy names its authenticated
	// user in; "": none.
	UserHeader string
	// Log is the diagnostic log; nil: none.
	Log *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Reload is the result of the last policy reload.
type Reload struct {
	At      time.Time
	Trigger string // "watch" or "sighup"
	// Err is why the new file was refused; "": it was put in force (or
	// was the same as the policy in force).
	Err string
}

// ErrNoLogin is returned by New for an admin listener that is not on a
// loopback address when no login is configured.
var ErrNoLogin = errors.New("the admin listener is not on a loopback address, and the console has no login: set console.password or console.user_header")

// Console is the console of one serve.
type Console struct {
	o      Options
	hosts  []string
	login  *rate.Limiter // bounds password guesses, for all clients together
	done   chan struct{} // closed by Close: event streams end
	closed sync.Once

	mu       sync.Mutex
	sessions map[string]*session
}

// session is one browser's login: its CSRF token, who it is, and a message
// the next page shows once.
type session struct {
	csrf    string
	user    string
	expires time.Time
	flash   string
}

// Served reports whether a console may be served on the admin listener at
// addr: on a loopback address, or with a login (a password or a proxy's
// user header). New refuses the others with ErrNoLogin.
func Served(addr string, login bool) bool {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return login || err == nil && ip != nil && ip.IsLoopback()
}

// New returns the console. Off loopback, it needs a login (ErrNoLogin).
func New(o Options) (*Console, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Console{o: o, hosts: slices.Clone(o.Hosts), login: rate.NewLimiter(rate.Every(time.Second), 5),
		done: make(chan struct{}), sessions: map[string]*session{}}
	if !Served(o.Addr, !o.PasswordHash.IsZero() || o.UserHeader != "") {
		return nil, ErrNoLogin
	}
	if _, port, err := net.SplitHostPort(o.Addr); err == nil {
		c.hosts = append(c.hosts, o.Addr)
		if Served(o.Addr, false) {
			c.hosts = append(c.hosts, "localhost:"+port)
		}
	}
	if !o.PasswordHash.IsZero() {
		if _, err := bcrypt.Cost([]byte(o.PasswordHash.Reveal())); err != nil {
			return nil, errors.New("console.password does not hold a bcrypt hash (make one with cproxy console hash)")
		}
	}
	return c, nil
}

// Close ends the event streams open, so that serve's drain does not wait
// for pages left open.
func (c *Console) Close() { c.closed.Do(func() { close(c.done) }) }

// Handler serves the console at / and under /console/, and everything else
// with the admin API, which it shields from other sites' pages
// (RefuseBrowsers).
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.page)
	mux.HandleFunc("GET /console/events", c.events)
	mux.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	mux.HandleFunc("POST /console/login", c.postLogin)
	mux.HandleFunc("POST /console/logout", c.action(c.logout))
	mux.HandleFunc("POST /console/revoke", c.action(c.revoke))
	mux.HandleFunc("POST /console/approve", c.action(c.decide(true)))
	mux.HandleFunc("POST /console/deny", c.action(c.decide(false)))
	api := RefuseBrowsers(c.o.Admin)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && !strings.HasPrefix(r.URL.Path, "/console/") {
			api.ServeHTTP(w, r)
			return
		}
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		if !c.hostAllowed(r.Host) {
			// A name that rebinds to this address reaches the listener,
			// but its Host is the attacker's name.
			http.Error(w, "cproxy: this console is not served under the host "+fmt.Sprintf("%q", audit.Clip(r.Host, 64))+" (console.hosts names the hosts it is)", http.StatusMisdirectedRequest)
			return
		}
		if c.o.UserHeader != "" && r.Header.Get(c.o.UserHeader) == "" {
			http.Error(w, "cproxy: the console is reached through its authenticating proxy only", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// RefuseBrowsers serves the admin API to harnesses and refuses a request a
// browser sent on behalf of a page (it carries Origin or Sec-Fetch-Site
// other than none): a harness sends neither, and a page of any site could
// otherwise send the simple requests (a POST without a body) that need no
// CORS preflight.
func RefuseBrowsers(admin http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if site := r.Header.Get("Sec-Fetch-Site"); r.Header.Get("Origin") != "" || site != "" && site != "none" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"error":"cproxy: the admin API does not answer requests from web pages (use the console at /)"}` + "\n"))
			return
		}
		admin.ServeHTTP(w, r)
	})
}

func (c *Console) hostAllowed(host string) bool {
	for _, h := range c.hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// sameOrigin reports whether the request came from one of the console's
// own pages: its Origin is the host it was sent to.
func (c *Console) sameOrigin(r *http.Request) bool {
	u, err := url.Parse(r.Header.Get("Origin"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" && u.Path != "/" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host) && c.hostAllowed(u.Host)
}

// session returns the request's session, nil when it has none or it ended.
func (c *Console) session(r *http.Request) (string, *session) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return "", nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[ck.Value]
	switch {
	case s == nil:
		return "", nil
	case !c.o.Now().Before(s.expires), c.o.UserHeader != "" && s.user != r.Header.Get(c.o.UserHeader):
		delete(c.sessions, ck.Value)
		return "", nil
	}
	return ck.Value, s
}

// newSession starts a session for user and sets its cookie.
func (c *Console) newSession(w http.ResponseWriter, r *http.Request, user string) *session {
	id, csrf := randomString(), randomString()
	now := c.o.Now()
	s := &session{csrf: csrf, user: user, expires: now.Add(sessionLifetime)}
	c.mu.Lock()
	for k, old := range c.sessions {
		if !now.Before(old.expires) {
			delete(c.sessions, k)
		}
	}
	if len(c.sessions) >= maxSessions {
		first := ""
		for k, old := range c.sessions {
			if first == "" || old.expires.Before(c.sessions[first].expires) {
				first = k
			}
		}
		delete(c.sessions, first)
	}
	c.sessions[id] = s
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionLifetime / time.Second)})
	return s
}

func randomString() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// pageSession is the session a page is shown in: the request's, or, where
// no password is asked, a new one. Nil: the login page is due.
func (c *Console) pageSession(w http.ResponseWriter, r *http.Request) *session {
	if _, s := c.session(r); s != nil {
		return s
	}
	if !c.o.PasswordHash.IsZero() {
		return nil
	}
	return c.newSession(w, r, r.Header.Get(c.o.UserHeader))
}

// action wraps a state-changing POST: it needs a same-origin Origin, a
// session, and the session's CSRF token in the form. It answers with a
// redirect to the page, which shows the outcome once.
func (c *Console) action(do func(r *http.Request, s *session, id string) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.sameOrigin(r) {
			http.Error(w, "cproxy: the console's actions are taken from its own pages only (cross-origin request refused)", http.StatusForbidden)
			return
		}
		id, s := c.session(r)
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if s == nil || r.ParseForm() != nil || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
			http.Error(w, "cproxy: the page was out of date or from elsewhere (missing or wrong CSRF token): reload the console", http.StatusForbidden)
			return
		}
		msg := do(r, s, id)
		c.mu.Lock()
		s.flash = msg
		c.mu.Unlock()
		http.Redirect(w, r, "/", http.StatusSeeOther)
	}
}

func (c *Console) postLogin(w http.ResponseWriter, r *http.Request) {
	if !c.sameOrigin(r) {
		http.Error(w, "cproxy: the console's actions are taken from its own pages only (cross-origin request refused)", http.StatusForbidden)
		return
	}
	if c.o.PasswordHash.IsZero() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !c.login.Allow() {
		c.render(w, http.StatusTooManyRequests, "login.html", map[string]string{"Error": "too many attempts: wait a few seconds"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if r.ParseForm() != nil || bcrypt.CompareHashAndPassword([]byte(c.o.PasswordHash.Reveal()), []byte(r.PostForm.Get("password"))) != nil {
		c.o.Log.Warn("console login refused", "remote", r.RemoteAddr)
		c.render(w, http.StatusUnauthorized, "login.html", map[string]string{"Error": "wrong password"})
		return
	}
	c.o.Log.Info("console login", "remote", r.RemoteAddr)
	c.newSession(w, r, "")
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (c *Console) logout(_ *http.Request, _ *session, id string) string {
	c.mu.Lock()
	delete(c.sessions, id)
	c.mu.Unlock()
	return ""
}

// by is who an action is recorded as taken by.
func by(s *session) string {
	if s.user != "" {
		return "console:" + s.user
	}
	return "console"
}

func (c *Console) revoke(r *http.Request, s *session, _ string) string {
	sandbox := r.PostForm.Get("sandbox")
	code, msg := c.call(r.Context(), http.MethodDelete, "/tokens?"+url.Values{"sandbox": {sandbox}}.Encode(), nil)
	if code != http.StatusNoContent {
		return msg
	}
	c.o.Log.Info("console: sandbox revoked", "sandbox", sandbox, "by", by(s))
	return "revoked sandbox " + sandbox
}

func (c *Console) decide(approve bool) func(r *http.Request, s *session, _ string) string {
	verb, done := "deny", "denied"
	if approve {
		verb, done = "approve", "approved"
	}
	return func(r *http.Request, s *session, _ string) string {
		id := r.PostForm.Get("id")
		code, msg := c.call(r.Context(), http.MethodPost, "/approvals/"+url.PathEscape(id)+"/"+verb+"?"+url.Values{"by": {by(s)}}.Encode(), nil)
		if code != http.StatusOK {
			return msg
		}
		return done + " " + id
	}
}

// call serves one admin API request in process and decodes its JSON
// answer into out (nil: none). It returns the status, and the API's error
// message for a failure.
func (c *Console) call(ctx context.Context, method, target string, out any) (int, string) {
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return http.StatusBadRequest, err.Error()
	}
	req.RequestURI = target
	rec := &recorder{h: http.Header{}}
	c.o.Admin.ServeHTTP(rec, req)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	if rec.code >= 300 {
		var e struct{ Error string }
		json.Unmarshal(rec.body.Bytes(), &e)
		return rec.code, e.Error
	}
	if out != nil && rec.code != http.StatusNoContent {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return http.StatusInternalServerError, "cproxy: the admin API's answer could not be read"
		}
	}
	return rec.code, ""
}

// recorder is the ResponseWriter of an in-process admin API call.
type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// events streams the requests as they end, as server-sent events: one
// "request" event of a Row's JSON each.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	if _, s := c.session(r); s == nil {
		http.Error(w, "cproxy: log in to the console first", http.StatusUnauthorized)
		return
	}
	rows, ok := c.o.Feed.subscribe()
	if !ok {
		http.Error(w, "cproxy: too many console pages are open", http.StatusServiceUnavailable)
		return
	}
	defer c.o.Feed.unsubscribe(rows)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.done:
			return
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case row := <-rows:
			b, _ := json.Marshal(row)
			fmt.Fprintf(w, "event: request\ndata: %s\n\n", b)
		}
		if rc.Flush() != nil {
			return
		}
	}
}

func (c *Console) render(w http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		c.o.Log.Error("console: a page could not be rendered", "page", name, "err", err)
		http.Error(w, "cproxy: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}
