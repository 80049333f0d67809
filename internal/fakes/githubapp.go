package fakes

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// GitHubAppOptions configures a fake GitHub App token endpoint.
type GitHubAppOptions struct {
	// AppID is the App's id, the JWT's iss it accepts. Required.
	AppID int64
	// Key is the App's key: the fake checks JWTs against its public half.
	// Required; NewAppKey makes one.
	Key *rsa.PrivateKey
	// Installation is the installation id it mints tokens of, on the
	// account Account (the owner of the repositories it names). Required.
	Installation int64
	Account      string
	// Git is the git server that accepts the tokens it mints, each for
	// its repository and access alone. Required.
	Git *GitServer
	// API, if set, is the REST API that accepts the tokens it mints, each
	// for its repository alone.
	API *GitHubREST
	// TTL is how long a token lives (expires_at); zero means an hour, as
	// GitHub's do.
	TTL time.Duration
	// Now is the clock JWTs are checked and tokens dated by; nil means
	// time.Now.
	Now func() time.Time
}

// AppMint is one mint the App endpoint answered with a token.
type AppMint struct {
	Repositories []string          // as requested
	Permissions  map[string]string // as requested
	Token        string
}

// GitHubApp is a stand-in for GitHub's REST API endpoint that mints App
// installation tokens, POST /app/installations/ID/access_tokens, on a
// loopback port, and GET /repos/OWNER/NAME/installation, which finds the
// installation of a repository. It checks the JWT as GitHub does (RS256 signed with the
// App's key, iss the App's id, iat and exp present, exp at most ten
// minutes after iat and not past), records each mint, and hands each token
// to Git, narrowed to the one repository and contents access asked for.
// Its methods are safe for concurrent use.
type GitHubApp struct {
	// URL is the API's base URL, http://127.0.0.1:port.
	URL string

	o   GitHubAppOptions
	srv *httptest.Server

	mu      sync.Mutex
	mints   []AppMint
	lookups int
	refused []string // why each refused request was refused
}

// NewAppKey makes an RSA key for a test's GitHub App, and its PEM form as
// GitHub hands it out ("RSA PRIVATE KEY").
func NewAppKey() (*rsa.PrivateKey, []byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
}

// NewGitHubApp starts the fake App endpoint. Close it when done.
func NewGitHubApp(o GitHubAppOptions) *GitHubApp {
	if o.TTL == 0 {
		o.TTL = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &GitHubApp{o: o}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	a.URL = a.srv.URL
	return a
}

// Close stops the server.
func (a *GitHubApp) Close() { a.srv.Close() }

// Mints returns every mint answered so far, in order.
func (a *GitHubApp) Mints() []AppMint {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]AppMint(nil), a.mints...)
}

// Refused returns why each refused request was refused, in order.
func (a *GitHubApp) Refused() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.refused...)
}

func (a *GitHubApp) refuse(w http.ResponseWriter, status int, why string) {
	a.mu.Lock()
	a.refused = append(a.refused, why)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"message": why})
}

func (a *GitHubApp) serve(w http.ResponseWriter, r *http.Request) {
	lookup := r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/repos/") && strings.HasSuffix(r.URL.Path, "/installation")
	if !lookup && (r.Method != http.MethodPost || r.URL.Path != "/app/installations/"+strconv.FormatInt(a.o.Installation, 10)+"/access_tokens") {
		a.refuse(w, http.StatusNotFound, "Not Found")
		return
	}
	if why := a.checkJWT(r.Header.Get("Authorization")); why != "" {
		a.refuse(w, http.StatusUnauthorized, why)
		return
	}
	if lookup {
		a.lookup(w, strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/repos/"), "/installation"))
		return
	}
	var req struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		a.refuse(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	// The fake's installation has the contents permission (read and
	// write), the API's permissions that cproxy asks for, and every
	// repository of its account that Git holds.
	write := false
	for k, v := range req.Permissions {
		switch {
		case k == "contents" && (v == "read" || v == "write"):
			write = v == "write"
		case k == "metadata" && v == "read":
		case (k == "pull_requests" || k == "issues") && (v == "read" || v == "write"):
		case (k == "checks" || k == "statuses" || k == "actions") && v == "read":
		default:
			a.refuse(w, http.StatusUnprocessableEntity, "The permissions requested are not granted to this installation.")
			return
		}
	}
	if len(req.Repositories) == 0 {
		// The fake mints only narrowed tokens: one for the whole
		// installation is what cproxy must never ask for.
		a.refuse(w, http.StatusUnprocessableEntity, "fake: a token for every repository of the installation was asked for")
		return
	}
	token := "ghs_" + randomBase62(36)
	type repo struct {
		Name     string `json:"name"`
		FullName string `json:"full_name"`
	}
	var repos []repo
	for _, name := range req.Repositories {
		full := a.o.Account + "/" + name
		if a.o.Git.Ref(full, "HEAD") == "" {
			a.refuse(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
		repos = append(repos, repo{name, full})
	}
	for _, rp := range repos {
		a.o.Git.AddScopedToken(token, rp.FullName, write)
		if a.o.API != nil {
			a.o.API.AddScopedToken(token, rp.FullName)
		}
	}
	a.mu.Lock()
	a.mints = append(a.mints, AppMint{Repositories: req.Repositories, Permissions: req.Permissions, Token: token})
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{
		"token":        token,
		"expires_at":   a.o.Now().Add(a.o.TTL).UTC().Format(time.RFC3339),
		"permissions":  req.Permissions,
		"repositories": repos,
	})
}

// lookup answers GET /repos/OWNER/NAME/installation: the installation, for
// a repository of its account that Git holds.
func (a *GitHubApp) lookup(w http.ResponseWriter, ownerName string) {
	owner, _, _ := strings.Cut(ownerName, "/")
	if !strings.EqualFold(owner, a.o.Account) || a.o.Git.Ref(ownerName, "HEAD") == "" {
		a.refuse(w, http.StatusNotFound, "Not Found")
		return
	}
	a.mu.Lock()
	a.lookups++
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	json.NewEncoder(w).Encode(map[string]any{"id": a.o.Installation, "account": map[string]string{"login": a.o.Account}})
}

// Lookups counts the installation look-ups answered.
func (a *GitHubApp) Lookups() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lookups
}

// checkJWT says why auth is not a valid JWT of the App, or "".
func (a *GitHubApp) checkJWT(auth string) string {
	text, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return "A JSON web token could not be decoded"
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(text, &claims, func(*jwt.Token) (any, error) { return &a.o.Key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuedAt(), jwt.WithTimeFunc(a.o.Now), jwt.WithExpirationRequired(), jwt.WithIssuer(strconv.FormatInt(a.o.AppID, 10)))
	if err != nil {
		return "fake: JWT refused: " + err.Error()
	}
	if claims.IssuedAt == nil {
		return "fake: JWT has no iat"
	}
	if life := claims.ExpiresAt.Sub(claims.IssuedAt.Time); life > 10*time.Minute {
		return fmt.Sprintf("'Expiration time' claim ('exp') is too far in the future (%s after iat)", life)
	}
	if claims.IssuedAt.After(a.o.Now().Add(time.Minute)) {
		return "'Issued at' claim ('iat') must be an Integer representing a time in the past"
	}
	return ""
}

// MintLines words the mints for a test's comparison, one line each:
// "repositories=app contents=read".
func MintLines(mints []AppMint) []string {
	var lines []string
	for _, m := range mints {
		var perms []string
		for k, v := range m.Permissions {
			perms = append(perms, k+"="+v)
		}
		sort.Strings(perms)
		lines = append(lines, "repositories="+strings.Join(m.Repositories, ",")+" "+strings.Join(perms, " "))
	}
	return lines
}

func randomBase62(n int) string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	for i := range b {
		d, _ := rand.Int(rand.Reader, big.NewInt(int64(len(digits))))
		b[i] = digits[d.Int64()]
	}
	return string(b)
}
