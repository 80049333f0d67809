package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/cproxy/cproxy/routes/audit"
	"github.com/cproxy/cproxy/secrets"
)

// stubAdmin stands in for the admin API: it answers the lists with one
// sandbox and one approval, and records the calls that change something.
type stubAdmin struct {
	mu    sync.Mutex
	calls []string
}

func (a *stubAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/tokens":
		io.WriteString(w, `{"tokens":[{"id":"tok_0123456789ab","sandbox":"conv-42","profile":"web","state":"live",`+
			`"expires_at":"2026-12-08T00:00:00Z","budget":{"requests":10},"usage":{"requests":4}}]}`)
	case r.Method == http.MethodGet && r.URL.Path == "/approvals":
		io.WriteString(w, `{"approvals":[{"id":"apr_0123456789abcdef","sandbox":"conv-42","route":"github","subject":"acme/app refs/heads/main","state":"pending"}]}`)
	default:
		a.mu.Lock()
		a.calls = append(a.calls, r.Method+" "+r.URL.RequestURI())
		a.mu.Unlock()
		switch r.Method {
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		default:
			io.WriteString(w, `{}`)
		}
	}
}

func (a *stubAdmin) called() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

const addr = "127.0.0.1:9001"

func newConsole(t *testing.T, o Options) (*stubAdmin, http.Handler) {
	t.Helper()
	a := &stubAdmin{}
	o.Admin, o.Addr = a, addr
	if o.Feed == nil {
		o.Feed = NewFeed()
	}
	o.Policy = func() (string, string) { return "policy.toml", "[profile.web]\nmodels = [\"*\"]\n" }
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return a, c.Handler()
}

func get(h http.Handler, host, path string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "http://"+host+path, nil)
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func post(h http.Handler, origin, path string, form url.Values, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// open loads the page as a browser would and returns its session cookie
// and CSRF token.
func open(t *testing.T, h http.Handler) (*http.Cookie, string) {
	t.Helper()
	w := get(h, addr, "/")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /: %d %s", w.Code, w.Body)
	}
	m := csrfRE.FindStringSubmatch(w.Body.String())
	cookies := w.Result().Cookies()
	if m == nil || len(cookies) != 1 {
		t.Fatalf("no CSRF token or session cookie: %v\n%s", cookies, w.Body)
	}
	return cookies[0], m[1]
}

func TestConsolePageShowsWithoutSecrets(t *testing.T) {
	feed := NewFeed()
	feed.Watch(&audit.Record{Time: "2026-12-07T01:00:00.000Z", Sandbox: "conv-42", TokenID: "tok_0123456789ab", Route: "model",
		Method: "POST", Target: "claude-x", Decision: audit.Warn, Status: 200, Reason: "model claude-x is not allowed"})
	_, h := newConsole(t, Options{Feed: feed})
	w := get(h, addr, "/")
	body := w.Body.String()
	for _, want := range []string{"conv-42", "tok_0123456789ab", `<progress value="4" max="10">`, "apr_0123456789abcdef",
		"acme/app refs/heads/main", `<tr class="warn">`, "warned", "[profile.web]", "2026-12-07T01:00:00.000Z"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for k, v := range securityHeaders {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if !strings.Contains(w.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Error("the CSP lets a frame hold the page")
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " style=") {
		t.Error("the page has an inline script or style, which its CSP refuses")
	}
	if w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Error("the console answers with CORS")
	}
}

func TestConsoleRefusesOtherHosts(t *testing.T) {
	_, h := newConsole(t, Options{Hosts: []string{"cproxy.internal:9001"}})
	for host, want := range map[string]int{
		addr: http.StatusOK, "localhost:9001": http.StatusOK, "cproxy.internal:9001": http.StatusOK,
		"evil.example:9001": http.StatusMisdirectedRequest, "127.0.0.1:9002": http.StatusMisdirectedRequest, "localhost": http.StatusMisdirectedRequest,
	} {
		for _, path := range []string{"/", "/console/events", "/console/static/console.css"} {
			if w := get(h, host, path); (w.Code == http.StatusMisdirectedRequest) != (want == http.StatusMisdirectedRequest) {
				t.Errorf("Host %s, GET %s: %d, want %d", host, path, w.Code, want)
			}
		}
	}
}

func TestConsoleActionsNeedOriginAndCSRF(t *testing.T) {
	a, h := newConsole(t, Options{})
	cookie, csrf := open(t, h)
	form := url.Values{"csrf": {csrf}, "sandbox": {"conv-42"}}
	for _, c := range []struct {
		name   string
		origin string
		form   url.Values
		cookie *http.Cookie
	}{
		{"another site", "http://evil.example", form, cookie},
		{"no Origin", "", form, cookie},
		{"a rebinding name", "http://evil.example:9001", form, cookie},
		{"no CSRF token", "http://" + addr, url.Values{"sandbox": {"conv-42"}}, cookie},
		{"a wrong CSRF token", "http://" + addr, url.Values{"csrf": {"x" + csrf}, "sandbox": {"conv-42"}}, cookie},
		{"no session", "http://" + addr, form, nil},
	} {
		var cookies []*http.Cookie
		if c.cookie != nil {
			cookies = append(cookies, c.cookie)
		}
		if w := post(h, c.origin, "/console/revoke", c.form, cookies...); w.Code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.name, w.Code)
		}
	}
	if calls := a.called(); len(calls) != 0 {
		t.Fatalf("a refused action reached the admin API: %v", calls)
	}
	w := post(h, "http://"+addr, "/console/revoke", form, cookie)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", w.Code, w.Body)
	}
	post(h, "http://"+addr, "/console/approve", url.Values{"csrf": {csrf}, "id": {"apr_0123456789abcdef"}}, cookie)
	post(h, "http://"+addr, "/console/deny", url.Values{"csrf": {csrf}, "id": {"apr_0123456789abcdef"}}, cookie)
	want := []string{"DELETE /tokens?sandbox=conv-42", "POST /approvals/apr_0123456789abcdef/approve?by=console", "POST /approvals/apr_0123456789abcdef/deny?by=console"}
	if got := a.called(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("admin API calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if body := get(h, addr, "/", cookie).Body.String(); !strings.Contains(body, "denied apr_0123456789abcdef") {
		t.Error("the page does not say what the last action did")
	}
}

func TestConsoleAdminAPIRefusesPages(t *testing.T) {
	a, h := newConsole(t, Options{})
	for _, hdr := range []map[string]string{{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}} {
		r := httptest.NewRequest(http.MethodPost, "http://"+addr+"/approvals/apr_0123456789abcdef/approve", nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusForbidden {
			t.Errorf("%v: %d, want 403", hdr, w.Code)
		}
	}
	if calls := a.called(); len(calls) != 0 {
		t.Fatalf("a page's request reached the admin API: %v", calls)
	}
	// A harness's request, with neither header, is served as before.
	r := httptest.NewRequest(http.MethodPost, "http://"+addr+"/tokens?sandbox=conv-42", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || len(a.called()) != 1 {
		t.Errorf("a harness's request: %d, calls %v", w.Code, a.called())
	}
}

func TestConsoleLogin(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a, h := newConsole(t, Options{PasswordHash: secrets.New(string(hash))})
	w := get(h, addr, "/")
	if !strings.Contains(w.Body.String(), `type="password"`) || strings.Contains(w.Body.String(), "conv-42") || len(w.Result().Cookies()) != 0 {
		t.Fatalf("without a login, the page is not the login form:\n%s", w.Body)
	}
	if w := get(h, addr, "/console/events"); w.Code != http.StatusUnauthorized {
		t.Errorf("events without a login: %d", w.Code)
	}
	if w := post(h, "http://"+addr, "/console/login", url.Values{"password": {"wrong"}}); w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
		t.Errorf("a wrong password: %d, cookies %v", w.Code, w.Result().Cookies())
	}
	if w := post(h, "http://evil.example", "/console/login", url.Values{"password": {"correct horse"}}); w.Code != http.StatusForbidden {
		t.Errorf("a login from another site: %d", w.Code)
	}
	w = post(h, "http://"+addr, "/console/login", url.Values{"password": {"correct horse"}})
	if w.Code != http.StatusSeeOther || len(w.Result().Cookies()) != 1 {
		t.Fatalf("login: %d %v", w.Code, w.Result().Cookies())
	}
	cookie := w.Result().Cookies()[0]
	body := get(h, addr, "/", cookie).Body.String()
	if !strings.Contains(body, "conv-42") {
		t.Fatalf("after the login, the page does not list the sandbox:\n%s", body)
	}
	if strings.Contains(body, string(hash)) {
		t.Error("the page holds the password's hash")
	}
	csrf := csrfRE.FindStringSubmatch(body)[1]
	post(h, "http://"+addr, "/console/logout", url.Values{"csrf": {csrf}}, cookie)
	if w := post(h, "http://"+addr, "/console/revoke", url.Values{"csrf": {csrf}, "sandbox": {"conv-42"}}, cookie); w.Code != http.StatusForbidden {
		t.Errorf("an action after logging out: %d", w.Code)
	}
	if len(a.called()) != 0 {
		t.Errorf("calls: %v", a.called())
	}
}

func TestConsoleNeedsLoginOffLoopback(t *testing.T) {
	for _, addr := range []string{"10.0.0.5:9001", "0.0.0.0:9001", "[::]:9001", "unix:/run/cproxy/admin.sock"} {
		if _, err := New(Options{Admin: &stubAdmin{}, Feed: NewFeed(), Addr: addr}); err != ErrNoLogin {
			t.Errorf("%s without a login: %v", addr, err)
		}
		if _, err := New(Options{Admin: &stubAdmin{}, Feed: NewFeed(), Addr: addr, UserHeader: "X-Forwarded-User"}); err != nil {
			t.Errorf("%s with a user header: %v", addr, err)
		}
	}
	if _, err := New(Options{Admin: &stubAdmin{}, Feed: NewFeed(), Addr: addr, PasswordHash: secrets.New("hunter2")}); err == nil {
		t.Error("a password that is not a bcrypt hash was taken")
	}
}

func TestConsoleUserHeader(t *testing.T) {
	a, h := newConsole(t, Options{UserHeader: "X-Forwarded-User"})
	if w := get(h, addr, "/"); w.Code != http.StatusUnauthorized {
		t.Errorf("without the proxy's header: %d", w.Code)
	}
	r := httptest.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	r.Header.Set("X-Forwarded-User", "alice")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	cookie, csrf := w.Result().Cookies()[0], csrfRE.FindStringSubmatch(w.Body.String())[1]
	r = httptest.NewRequest(http.MethodPost, "http://"+addr+"/console/approve", strings.NewReader(url.Values{"csrf": {csrf}, "id": {"apr_0123456789abcdef"}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", "http://"+addr)
	r.Header.Set("X-Forwarded-User", "alice")
	r.AddCookie(cookie)
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got := a.called(); len(got) != 1 || got[0] != "POST /approvals/apr_0123456789abcdef/approve?by=console%3Aalice" {
		t.Errorf("calls: %v", got)
	}
}

func TestConsoleFeedKeepsTheLastRows(t *testing.T) {
	f := NewFeed()
	for i := range recentRows + 5 {
		f.Watch(&audit.Record{Time: string(rune('a' + i%26)), TokenID: "tok_0123456789ab", Status: i})
	}
	rows := f.Recent()
	if len(rows) != recentRows || rows[0].Status != recentRows+4 || rows[len(rows)-1].Status != 5 {
		t.Fatalf("%d rows, first %d, last %d", len(rows), rows[0].Status, rows[len(rows)-1].Status)
	}
	if f.LastSeen("tok_0123456789ab") != rows[0].Time {
		t.Error("the token's last request is not the last row's")
	}
}
