package tokens

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
)

// Prefix starts every sandbox token, so secret scanners and people can tell a leaked one apart from other secrets.
const Prefix = "cpx_"

const (
	randomBytes = 32
	// randomLen is the fixed width of the base62 random part: 62^43 is the smallest power of 62 above 2^256.
	randomLen = 43
	// checksumLen is the fixed width of the base62 CRC32: 62^6 is the smallest power of 62 above 2^32.
	checksumLen = 6
	tokenLen    = len(Prefix) + randomLen + checksumLen

	// The alphabet is in ASCII order, so fixed-width base62 strings compare like the numbers they encode.
	alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

	redacted = "REDACTED"
)

var (
	// ErrMalformed means a string is not a sandbox token at all, so no store look-up is needed to refuse it.
	ErrMalformed = errors.New("malformed token")
	ErrNotFound  = errors.New("unknown token")
	ErrRevoked   = errors.New("token revoked")
	ErrExpired   = errors.New("token expired")
	// ErrLocked means another process holds the store file; bbolt allows a single writer process.
	ErrLocked = errors.New("token store locked")
	// ErrNewerSchema means the store (the embedded file, or the PostgreSQL database) is at a schema version newer
	// than this cproxy knows, which it would misread.
	ErrNewerSchema = errors.New("token store written by a newer cproxy")
)

var (
	// maxRandom encodes 2^256-1: random parts above it cannot come from New, so Parse refuses them and every
	// accepted token has exactly one spelling.
	maxRandom = func() string {
		var all [randomBytes]byte
		for i := range all {
			all[i] = 0xff
		}
		var dst [randomLen]byte
		encodeRandom(&dst, all)
		return string(dst[:])
	}()

	crcTable = crc32.MakeTable(crc32.IEEE)
)

// Token is a sandbox token. It redacts itself in every formatting, logging and encoding path so that a stray
// log line or error cannot leak it; only Reveal gives the value, for the code that hands it to the sandbox.
//
// Compare tokens by Hash or Reveal, not ==: two parses of one string are different Token values.
type Token struct {
	// s is a pointer because fmt's error paths (a %p verb, for one) bypass Format and print fields by reflection,
	// which shows a pointer field as an address but a string field in full.
	s *string
}

// New returns a fresh random token.
func New() (Token, error) {
	var raw [randomBytes]byte
	if _, err := io.ReadFull(rand.Reader, raw[:]); err != nil {
		return Token{}, fmt.Errorf("generate token: %w", err)
	}
	return fromRandom(raw), nil
}

func fromRandom(raw [randomBytes]byte) Token {
	var buf [tokenLen]byte
	copy(buf[:], Prefix)
	var random [randomLen]byte
	encodeRandom(&random, raw)
	copy(buf[len(Prefix):], random[:])
	encodeChecksum(buf[len(Prefix)+randomLen:], checksum(string(random[:])))
	s := string(buf[:])
	return Token{s: &s}
}

// Parse checks a token's shape and checksum without touching the store. Its errors never quote the input, which
// may be a real secret pasted in the wrong place.
func Parse(s string) (Token, error) {
	if len(s) != tokenLen {
		return Token{}, fmt.Errorf("%w: %d characters, want %d", ErrMalformed, len(s), tokenLen)
	}
	if s[:len(Prefix)] != Prefix {
		return Token{}, fmt.Errorf("%w: not a cproxy token (wrong prefix)", ErrMalformed)
	}
	for i := len(Prefix); i < len(s); i++ {
		if !isBase62(s[i]) {
			return Token{}, fmt.Errorf("%w: invalid character at offset %d", ErrMalformed, i)
		}
	}
	random := s[len(Prefix) : len(Prefix)+randomLen]
	if random > maxRandom {
		return Token{}, fmt.Errorf("%w: random part out of range", ErrMalformed)
	}
	var want [checksumLen]byte
	encodeChecksum(want[:], checksum(random))
	if s[len(Prefix)+randomLen:] != string(want[:]) {
		return Token{}, fmt.Errorf("%w: checksum mismatch", ErrMalformed)
	}
	return Token{s: &s}, nil
}

// Reveal returns the token itself. Call it only where the token must leave the process: the admin API's answer
// and the environment handed to a sandbox.
func (t Token) Reveal() string {
	if t.s == nil {
		return ""
	}
	return *t.s
}

// Hash is what the store keys on, so the store never holds a usable token.
func (t Token) Hash() Hash { return sha256.Sum256([]byte(t.Reveal())) }

func (t Token) IsZero() bool { return t.s == nil }

func (Token) String() string { return redacted }

// Format covers every verb, including %#v and %q, which would otherwise bypass String.
func (Token) Format(f fmt.State, _ rune) { io.WriteString(f, redacted) }

func (Token) LogValue() slog.Value { return slog.StringValue(redacted) }

func (Token) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

func (Token) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Hash is the SHA-256 of a token. It is not a secret: knowing it does not let anyone authenticate.
type Hash [sha256.Size]byte

// ID names a token in logs, audit records and the admin API without revealing it. Six bytes keep it short while
// collisions stay negligible for the number of tokens one proxy issues.
func (h Hash) ID() string { return "tok_" + hex.EncodeToString(h[:6]) }

// encodeRandom writes raw as fixed-width base62, most significant digit first, left-padded with '0'.
func encodeRandom(dst *[randomLen]byte, raw [randomBytes]byte) {
	for i := len(dst) - 1; i >= 0; i-- {
		var rem uint
		for j := range raw {
			acc := rem<<8 | uint(raw[j])
			raw[j] = byte(acc / 62)
			rem = acc % 62
		}
		dst[i] = alphabet[rem]
	}
}

func encodeChecksum(dst []byte, sum uint32) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = alphabet[sum%62]
		sum /= 62
	}
}

// checksum is CRC32 (IEEE) of the base62 random part. It works on the string directly so Parse does not
// allocate.
func checksum(random string) uint32 {
	crc := ^uint32(0)
	for i := 0; i < len(random); i++ {
		crc = crcTable[byte(crc)^random[i]] ^ crc>>8
	}
	return ^crc
}

func isBase62(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}
