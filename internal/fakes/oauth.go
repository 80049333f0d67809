package fakes

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
)

// OAuthServerOptions configures a fake OAuth token endpoint.
type OAuthServerOptions struct {
	// ClientID and ClientSecret are the one client the endpoint knows; it
	// takes the secret in an Authorization: Basic header or in the form,
	// as RFC 6749 2.3.1 allows. An empty ClientSecret makes it a public
	// client, which sends its client_id alone.
	ClientID, ClientSecret string
	// RefreshToken is the refresh token the endpoint first accepts.
	RefreshToken string
	// Rotate gives a new refresh token with each exchange and ends the
	// one used, as OAuth 2.1 asks of servers for public clients.
	Rotate bool
	// ExpiresIn is the access tokens' expires_in, in seconds; zero: 3600.
	ExpiresIn int
}

// OAuthExchange is one request the endpoint answered, recorded whatever
// its answer.
type OAuthExchange struct {
	GrantType, RefreshToken, Resource, Scope string
	// Status is the endpoint's answer.
	Status int
}

// OAuthServer is an OAuth 2.0 token endpoint (RFC 6749 section 3.2) on a
// loopback port: the refresh_token and client_credentials grants, access
// tokens at_1, at_2, … and rotated refresh tokens rt_1, rt_2, …, and
// errors in the RFC's JSON shape (invalid_client with 401, invalid_grant
// with 400). Its methods are safe for concurrent use.
type OAuthServer struct {
	// URL is the token endpoint, http://127.0.0.1:port/oauth/token.
	URL string

	opts OAuthServerOptions
	srv  *httptest.Server

	mu        sync.Mutex
	refresh   string          // the refresh token in force
	access    map[string]bool // access tokens issued and not ended
	issued    int
	exchanges []OAuthExchange
}

// NewOAuthServer starts a fake token endpoint. Close it when done.
func NewOAuthServer(o OAuthServerOptions) *OAuthServer {
	if o.ExpiresIn == 0 {
		o.ExpiresIn = 3600
	}
	s := &OAuthServer{opts: o, refresh: o.RefreshToken, access: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /oauth/token", s.token)
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL + "/oauth/token"
	return s
}

// Close stops the endpoint.
func (s *OAuthServer) Close() { s.srv.Close() }

// Valid reports whether token is an access token the endpoint issued and
// has not ended: what a resource server asks its authorization server.
func (s *OAuthServer) Valid(token string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.access[token]
}

// EndAccessTokens ends every access token issued so far, as a server
// that revokes them before their expires_in does.
func (s *OAuthServer) EndAccessTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.access)
}

// RefreshToken is the refresh token the endpoint accepts now.
func (s *OAuthServer) RefreshToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refresh
}

// Exchanges returns every request the endpoint answered, in order.
func (s *OAuthServer) Exchanges() []OAuthExchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.exchanges)
}

func (s *OAuthServer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	x := OAuthExchange{GrantType: r.PostForm.Get("grant_type"), RefreshToken: r.PostForm.Get("refresh_token"),
		Resource: r.PostForm.Get("resource"), Scope: r.PostForm.Get("scope")}
	x.Status = s.answer(w, r, x)
	s.exchanges = append(s.exchanges, x)
}

// answer checks the client and the grant and writes the answer, under mu.
func (s *OAuthServer) answer(w http.ResponseWriter, r *http.Request, x OAuthExchange) int {
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != s.opts.ClientID || secret != s.opts.ClientSecret {
		w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
		return oauthError(w, http.StatusUnauthorized, "invalid_client")
	}
	answer := map[string]any{"token_type": "Bearer", "expires_in": s.opts.ExpiresIn}
	switch x.GrantType {
	case "refresh_token":
		if s.refresh == "" || x.RefreshToken != s.refresh {
			return oauthError(w, http.StatusBadRequest, "invalid_grant")
		}
		if s.opts.Rotate {
			s.refresh = fmt.Sprintf("rt_%d", s.issued+1)
			answer["refresh_token"] = s.refresh
		}
	case "client_credentials":
		if s.opts.ClientSecret == "" {
			return oauthError(w, http.StatusUnauthorized, "invalid_client")
		}
	default:
		return oauthError(w, http.StatusBadRequest, "unsupported_grant_type")
	}
	s.issued++
	token := fmt.Sprintf("at_%d", s.issued)
	s.access[token] = true
	answer["access_token"] = token
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(answer)
	return http.StatusOK
}

func oauthError(w http.ResponseWriter, status int, code string) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":%q}`, code)
	return status
}
