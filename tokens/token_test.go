package tokens

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestNewParseRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		tok, err := New()
		if err != nil {
			t.Fatal(err)
		}
		s := tok.Reveal()
		if len(s) != 53 || !strings.HasPrefix(s, Prefix) {
			t.Fatalf("New gave %d characters with prefix %q, want 53 starting %q", len(s), s[:4], Prefix)
		}
		if seen[s] {
			t.Fatal("New repeated a token")
		}
		seen[s] = true
		got, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(New()): %v", err)
		}
		if got.Reveal() != s || got.Hash() != tok.Hash() || got.IsZero() {
			t.Fatal("Parse(New()) is not the same token")
		}
	}
}

func TestFormatFixedWidth(t *testing.T) {
	zero := fromRandom([32]byte{}).Reveal()
	if want := Prefix + strings.Repeat("0", 43); zero[:47] != want {
		t.Errorf("all-zero random part = %s, want %s", zero[:47], want)
	}
	var all [32]byte
	for i := range all {
		all[i] = 0xff
	}
	if got := fromRandom(all).Reveal()[4:47]; got != maxRandom {
		t.Errorf("all-ones random part = %s, want maxRandom %s", got, maxRandom)
	}
	for _, raw := range [][32]byte{{}, all, {1}, {31: 1}, {0x80, 31: 0x7f}} {
		s := fromRandom(raw).Reveal()
		if got := decodeRandom(t, s[4:47]); got != raw {
			t.Errorf("base62 of %x decodes to %x", raw, got)
		}
		if got, want := decodeBase62(t, s[47:]).Uint64(), uint64(crc32.ChecksumIEEE([]byte(s[4:47]))); got != want {
			t.Errorf("checksum of %s = %d, want CRC32 %d", s[4:47], got, want)
		}
	}
}

// malformed returns strings that differ from a valid token in one way each.
func malformed(t testing.TB) map[string]string {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	s := tok.Reveal()
	flip := func(i int) string {
		b := []byte(s)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		return string(b)
	}
	outOfRange := strings.Repeat("z", 43)
	var sum [6]byte
	encodeChecksum(sum[:], checksum(outOfRange))
	return map[string]string{
		"empty":               "",
		"wrong prefix":        "ghp_" + s[4:],
		"upper-case prefix":   "CPX_" + s[4:],
		"no prefix":           s[4:],
		"one short":           s[:52],
		"one long":            s + "a",
		"trailing newline":    s + "\n",
		"leading space":       " " + s[1:],
		"dash":                s[:20] + "-" + s[21:],
		"underscore":          s[:20] + "_" + s[21:],
		"non-ascii":           s[:20] + "é" + s[22:],
		"nul":                 s[:20] + "\x00" + s[21:],
		"flipped checksum":    flip(50),
		"flipped random":      flip(10),
		"random out of range": Prefix + outOfRange + string(sum[:]),
	}
}

func TestParseRejects(t *testing.T) {
	for name, s := range malformed(t) {
		t.Run(name, func(t *testing.T) {
			tok, err := Parse(s)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if !tok.IsZero() {
				t.Error("Parse returned a non-zero token with its error")
			}
			if leaks(err.Error(), s) {
				t.Errorf("error %q quotes its input", err)
			}
		})
	}
}

// leaks reports whether text contains s or any 8-byte piece of it.
func leaks(text, s string) bool {
	if s != "" && strings.Contains(text, s) {
		return true
	}
	for i := 0; i+8 <= len(s); i++ {
		if strings.Contains(text, s[i:i+8]) {
			return true
		}
	}
	return false
}

func TestRedaction(t *testing.T) {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	type holder struct {
		Name  string
		Tok   Token
		Ptr   *Token
		Inner struct{ T Token }
	}
	h := holder{Name: "x", Tok: tok, Ptr: &tok}
	h.Inner.T = tok

	out := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s", "%-v"} {
		out["fmt "+verb] = fmt.Sprintf(verb, tok)
		out["fmt pointer "+verb] = fmt.Sprintf(verb, &tok)
		out["fmt struct "+verb] = fmt.Sprintf(verb, h)
	}
	out["Sprint"] = fmt.Sprint(tok, &tok, h)
	out["Sprintln"] = fmt.Sprintln(tok)
	extra := "%v"
	//lint:ignore SA5009 the extra argument is the point: fmt prints it through its error path
	out["fmt extra argument"] = fmt.Sprintf(extra, 1, tok)
	out["String"] = tok.String()
	out["wrapped error"] = fmt.Errorf("using %v: %w", tok, errors.New("x")).Error()
	out["slice"] = fmt.Sprintf("%v %#v", []Token{tok}, map[string]Token{"k": tok})

	for name, newHandler := range map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(newHandler(&buf))
		log.Info("issued", "token", tok, "ptr", &tok, "holder", h, slog.Group("g", slog.Any("t", tok)))
		log.Info("issued", "args", []any{tok})
		out["slog "+name] = buf.String()
	}

	for name, v := range map[string]any{"value": tok, "pointer": &tok, "struct": h, "map key": map[Token]int{tok: 1}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal %s: %v", name, err)
		}
		out["json "+name] = string(b)
	}
	text, _ := tok.MarshalText()
	out["MarshalText"] = string(text)

	for name, got := range out {
		if !strings.Contains(got, "REDACTED") {
			t.Errorf("%s: %q does not say REDACTED", name, got)
		}
	}

	// fmt's error paths skip Format and print by reflection; they may not say REDACTED, but must not leak.
	pointer, badIndex := "%p", "%[3]v"
	out["fmt %p"] = fmt.Sprintf(pointer, tok)
	//lint:ignore SA5009 a wrong verb is the point: fmt prints the struct through its error path
	out["fmt struct %p"] = fmt.Sprintf(pointer, h)
	//lint:ignore SA5009 a bad index is the point: fmt prints the arguments through its error path
	out["fmt bad index"] = fmt.Sprintf(badIndex, tok, tok)

	for name, got := range out {
		if leaks(got, tok.Reveal()[4:]) {
			t.Errorf("%s: %q contains the token", name, got)
		}
	}
	if got := fmt.Sprintf("%v|%s|%q|%#v", tok, tok, tok, tok); got != "REDACTED|REDACTED|REDACTED|REDACTED" {
		t.Errorf("verbs give %q, want exactly REDACTED each", got)
	}
	if b, _ := json.Marshal(tok); string(b) != `"REDACTED"` {
		t.Errorf("json.Marshal = %s, want \"REDACTED\"", b)
	}
}

func TestHash(t *testing.T) {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	h := tok.Hash()
	if h != sha256.Sum256([]byte(tok.Reveal())) {
		t.Error("Hash is not SHA-256 of the token")
	}
	if !regexp.MustCompile(`^tok_[0-9a-f]{12}$`).MatchString(h.ID()) {
		t.Errorf("ID = %q, want tok_ and 12 hex digits", h.ID())
	}
	if want := fmt.Sprintf("tok_%x", h[:6]); h.ID() != want {
		t.Errorf("ID = %q, want %q", h.ID(), want)
	}
	if (Token{}).Reveal() != "" || !(Token{}).IsZero() {
		t.Error("zero Token is not empty")
	}
}

func TestValidSandboxID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"0", true},
		{"conv-42", true},
		{"a-", true},
		{"a--b", true},
		{strings.Repeat("a", 63), true},
		{"9" + strings.Repeat("-", 62), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-a", false},
		{"-", false},
		{"Conv-42", false},
		{"conv_42", false},
		{"conv.42", false},
		{"conv 42", false},
		{"conv/42", false},
		{"conv\x0042", false},
		{"conv-42\n", false},
		{"ä", false},
		{"caf\u00e9", false},
		{"ｃonv", false}, // full-width c
	} {
		if got := ValidSandboxID(tc.id); got != tc.want {
			t.Errorf("ValidSandboxID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

func TestRecordCheck(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		r    Record
		want error
	}{
		{"live", Record{ExpiresAt: now.Add(time.Second)}, nil},
		{"expires now", Record{ExpiresAt: now}, ErrExpired},
		{"expired", Record{ExpiresAt: now.Add(-time.Second)}, ErrExpired},
		{"zero expiry", Record{}, ErrExpired},
		{"revoked", Record{ExpiresAt: now.Add(time.Hour), RevokedAt: now.Add(-time.Minute)}, ErrRevoked},
		{"revoked and expired", Record{ExpiresAt: now.Add(-time.Hour), RevokedAt: now.Add(-2 * time.Hour)}, ErrRevoked},
	} {
		if got := tc.r.Check(now); got != tc.want {
			t.Errorf("%s: Check = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// parseErrorShapes are every error text Parse may give, with numbers replaced by N: anything else would mean a
// piece of the input got into the message.
var parseErrorShapes = map[string]bool{
	"malformed token: N characters, want N":              true,
	"malformed token: not a cproxy token (wrong prefix)": true,
	"malformed token: invalid character at offset N":     true,
	"malformed token: random part out of range":          true,
	"malformed token: checksum mismatch":                 true,
}

func FuzzParse(f *testing.F) {
	tok, err := New()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok.Reveal())
	f.Add(fromRandom([32]byte{}).Reveal())
	for _, s := range malformed(f) {
		f.Add(s)
	}
	digits := regexp.MustCompile(`[0-9]+`)
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if shape := digits.ReplaceAllString(err.Error(), "N"); !parseErrorShapes[shape] {
				t.Fatalf("unexpected error text %q", err)
			}
			return
		}
		if tok.Reveal() != s {
			t.Fatalf("Parse accepted a token and changed it")
		}
		raw := decodeRandom(t, s[4:47])
		if again := fromRandom(raw).Reveal(); again != s {
			t.Fatalf("accepted %q but its random part renders as %q", s, again)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	tok, err := New()
	if err != nil {
		b.Fatal(err)
	}
	s := tok.Reveal()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}

func decodeBase62(t testing.TB, s string) *big.Int {
	t.Helper()
	n := new(big.Int)
	for i := 0; i < len(s); i++ {
		d := strings.IndexByte(alphabet, s[i])
		if d < 0 {
			t.Fatalf("not base62: %q", s)
		}
		n.Mul(n, big.NewInt(62))
		n.Add(n, big.NewInt(int64(d)))
	}
	return n
}

func decodeRandom(t testing.TB, s string) [32]byte {
	t.Helper()
	n := decodeBase62(t, s)
	if n.BitLen() > 256 {
		t.Fatalf("random part %s is above 2^256", s)
	}
	var raw [32]byte
	n.FillBytes(raw[:])
	return raw
}
