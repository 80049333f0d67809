package secrets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Claude Code's own login ("claude-code"), read-only. Claude Code keeps it in
// $CLAUDE_CONFIG_DIR/.credentials.json (else ~/.claude/.credentials.json), and
// on macOS in the login Keychain instead:
//
//	{"claudeAiOauth": {"accessToken": "sk-ant-oat01-…", "refreshToken": "sk-ant-ort01-…",
//	  "expiresAt": 1767225600000, "scopes": [...], "subscriptionType": "max"}}
//
// cproxy reads accessToken and expiresAt (milliseconds since the epoch) and
// nothing else. It never writes the file and never uses the refresh token:
// refresh tokens rotate, so a refresh by cproxy would sign Claude Code out.
// The access token lasts about 8 hours; Claude Code on the host refreshes it
// when it runs, and Live picks the new one up.

// ErrExpired reports a claude-code access token past its expiresAt.
var ErrExpired = errors.New("expired")

// claudeCodeSizeLimit bounds the credentials file: Claude Code keeps other
// logins there too (MCP servers'), but never megabytes.
const claudeCodeSizeLimit = 1 << 20

// claudeCodeKeychainService is the macOS Keychain item (generic password)
// Claude Code keeps its login in, when CLAUDE_CONFIG_DIR is not set.
const claudeCodeKeychainService = "Claude Code-credentials"

// keychainTimeout bounds one `security` run: it may wait on a Keychain
// prompt that nobody answers.
const keychainTimeout = 10 * time.Second

// loginHint is the fix for a missing or unusable login.
const loginHint = "run claude on this machine, as the user cproxy runs as, and log in with your Claude account; or create a long-lived token with claude setup-token and point the credential at it (file:PATH or keyring:NAME, with auth = \"oauth\")"

// expiredHint is the fix for an expired access token.
const expiredHint = "run claude on this machine (it refreshes its login, and cproxy picks the new token up), or use a long-lived token from claude setup-token"

// claudeCodeLogin is one reading of Claude Code's login.
type claudeCodeLogin struct {
	token   Secret
	expires time.Time // zero: Claude Code did not say
	where   string    // the file, or the Keychain item, for messages
}

// claudeCodeFile is the part of Claude Code's credentials cproxy reads.
type claudeCodeFile struct {
	ClaudeAiOauth *struct {
		AccessToken string `json:"accessToken"`
		ExpiresAt   int64  `json:"expiresAt"`
	} `json:"claudeAiOauth"`
}

// ClaudeCodeFile is the file Claude Code keeps its login in:
// $CLAUDE_CONFIG_DIR/.credentials.json, else ~/.claude/.credentials.json.
func ClaudeCodeFile() (string, error) {
	if dir := os.Getenv("CLAUDE_CONFIG_DIR"); dir != "" {
		return filepath.Join(dir, ".credentials.json"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("claude-code: cannot find Claude Code's login: %w (set CLAUDE_CONFIG_DIR to Claude Code's config folder)", err)
	}
	return filepath.Join(home, ".claude", ".credentials.json"), nil
}

// readClaudeCode reads Claude Code's login: on macOS from the Keychain
// first, then the file. An expired token is returned with an error wrapping
// ErrExpired; every other error means there is no token.
func readClaudeCode(now time.Time) (claudeCodeLogin, error) {
	path, err := ClaudeCodeFile()
	if err != nil {
		return claudeCodeLogin{}, err
	}
	if runtime.GOOS == "darwin" {
		data, where, err := readClaudeCodeKeychain()
		if err == nil {
			return parseClaudeCode(data, where, now)
		}
		if !errors.Is(err, ErrNotFound) {
			return claudeCodeLogin{}, err
		}
		if _, serr := os.Stat(path); errors.Is(serr, fs.ErrNotExist) {
			return claudeCodeLogin{}, fmt.Errorf("claude-code: no Claude Code login in %s nor at %s: %s", where, path, loginHint)
		}
	}
	data, err := readClaudeCodeFile(path)
	if err != nil {
		return claudeCodeLogin{}, err
	}
	return parseClaudeCode(data, path, now)
}

func readClaudeCodeFile(path string) ([]byte, error) {
	// Opened without blocking: a FIFO's open waits for a writer, and SIGHUP
	// rereads credentials on the signal loop. Its kind is checked below.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("claude-code: no Claude Code login at %s: %s", path, loginHint)
		}
		return nil, fmt.Errorf("claude-code: cannot read %s: %w: run cproxy as the user who runs claude, or set CLAUDE_CONFIG_DIR", path, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("claude-code: %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("claude-code: %s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, claudeCodeSizeLimit+1))
	if err != nil {
		return nil, fmt.Errorf("claude-code: reading %s: %w", path, err)
	}
	if len(b) > claudeCodeSizeLimit {
		return nil, fmt.Errorf("claude-code: %s is over %d bytes: not Claude Code's credentials file", path, claudeCodeSizeLimit)
	}
	return b, nil
}

// parseClaudeCode reads the login out of Claude Code's credentials JSON.
// No error quotes the data: it holds the refresh token.
func parseClaudeCode(data []byte, where string, now time.Time) (claudeCodeLogin, error) {
	var f claudeCodeFile
	if err := json.Unmarshal(data, &f); err != nil {
		return claudeCodeLogin{}, fmt.Errorf("claude-code: %s is not the JSON Claude Code writes (Claude Code may be writing it right now; if it stays so, log in again): %s", where, loginHint)
	}
	if f.ClaudeAiOauth == nil {
		return claudeCodeLogin{}, fmt.Errorf("claude-code: %s holds no claude.ai login (no claudeAiOauth: Claude Code is logged out, or uses an API key): %s", where, loginHint)
	}
	tok := strings.TrimSpace(f.ClaudeAiOauth.AccessToken)
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return claudeCodeLogin{}, fmt.Errorf("claude-code: %s has no usable access token: %s", where, loginHint)
	}
	l := claudeCodeLogin{token: Secret{v: tok}, where: where}
	if ms := f.ClaudeAiOauth.ExpiresAt; ms > 0 {
		l.expires = time.UnixMilli(ms)
	}
	if !l.expires.IsZero() && !now.Before(l.expires) {
		return l, fmt.Errorf("claude-code: the access token in %s %w (at %s): %s", where, ErrExpired, l.expires.UTC().Format(time.RFC3339), expiredHint)
	}
	return l, nil
}

// claudeCodeKeychainItem is the Keychain service Claude Code uses: with
// CLAUDE_CONFIG_DIR set, it adds the first 8 hex digits of the folder's
// SHA-256, so that two config folders keep two logins.
func claudeCodeKeychainItem() string {
	if dir := os.Getenv("CLAUDE_CONFIG_DIR"); dir != "" {
		sum := sha256.Sum256([]byte(dir))
		return claudeCodeKeychainService + "-" + hex.EncodeToString(sum[:])[:8]
	}
	return claudeCodeKeychainService
}

// readClaudeCodeKeychain reads the Keychain item with macOS's security
// tool rather than a keychain library: it needs no cgo, and it is what
// Claude Code runs itself. It is not exercised by the test suite (Linux);
// a missing item is ErrNotFound.
func readClaudeCodeKeychain() (data []byte, where string, err error) {
	service := claudeCodeKeychainItem()
	where = fmt.Sprintf("the macOS Keychain item %q", service)
	ctx, cancel := context.WithTimeout(context.Background(), keychainTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/security", "find-generic-password", "-s", service, "-w").Output()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 44: // errSecItemNotFound
		return nil, where, fmt.Errorf("claude-code: %w: %s", ErrNotFound, where)
	case ctx.Err() != nil:
		return nil, where, fmt.Errorf("claude-code: reading %s: no answer within %s (a Keychain prompt nobody answered?)", where, keychainTimeout)
	case err != nil:
		// security's stderr says why; its stdout may hold the secret.
		return nil, where, fmt.Errorf("claude-code: reading %s: security find-generic-password failed: %v: unlock the login keychain, or allow cproxy to read the item", where, err)
	}
	return out, where, nil
}
