package tokens

import (
	"math/rand/v2"
	"strings"
	"testing"
)

const mark = "[W]"

// TestWithhold: only the token-shaped part of a string is replaced; the text
// around it stays, so a sandbox cannot hide what it asked for behind a
// token.
func TestWithhold(t *testing.T) {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	full := tok.Reveal()
	bare := full[len(Prefix):]
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"claude-sonnet-4-5", "claude-sonnet-4-5"},
		{"/mod/github.com/x/y/@v/list", "/mod/github.com/x/y/@v/list"},
		{full, mark},
		{"/mod/" + full + "/@v/list", "/mod/" + mark + "/@v/list"},
		{"model " + full + " is not allowed", "model " + mark + " is not allowed"},
		{"x" + full + "y", "x" + mark},                 // the run goes on after the token: withheld with it
		{"abc" + full, "abc" + mark},                   // a token inside a longer word
		{"CPX_" + bare, mark},                          // any case of the prefix
		{"Cpx_" + bare[:10] + "-rest", mark + "-rest"}, // a fragment: the prefix and what follows
		{"cpx_a", mark},                                          // however short
		{"cpx_", "cpx_"},                                         // a bare prefix holds nothing
		{"cpx_-x cpx_/y", "cpx_-x cpx_/y"},                       // nor does one followed by nothing base62
		{"ref:" + bare + ":end", "ref:" + mark + ":end"},         // no prefix, but a valid checksum
		{"q" + bare + "z", mark},                                 // inside a longer run
		{bare[:len(bare)-1] + "0", bare[:len(bare)-1] + "0"},     // a wrong checksum is just text
		{strings.Repeat("f", 64), strings.Repeat("f", 64)},       // a sha256 in hex is kept
		{"cpx_" + bare + "cpx_" + bare, mark},                    // runs on into a second one
		{"a cpx_x b cpx_y c", "a " + mark + " b " + mark + " c"}, // each one
		{"cpx_" + bare + "_cpx_" + bare, mark + "_" + mark},
	} {
		got, withheld := Withhold(c.in, mark)
		if got != c.want || withheld != (c.in != c.want) {
			t.Errorf("Withhold(%q) = %q, %v; want %q", c.in, got, withheld, c.want)
		}
	}
}

// TestWithholdNeverLeaks: tokens in random surroundings never come out,
// in part or whole, and the text around them does.
func TestWithholdNeverLeaks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"", "/", " ", "-", "_", ".", "@", "a", "Z9", "é", "\x00", "cpx", "CPX_", "%5F", "\u202e", "refs/heads/"}
	for range 2000 {
		tok, err := New()
		if err != nil {
			t.Fatal(err)
		}
		secret := tok.Reveal()[len(Prefix):]
		var in strings.Builder
		for range 1 + rng.IntN(3) {
			in.WriteString(pieces[rng.IntN(len(pieces))])
			if rng.IntN(2) == 0 {
				in.WriteString(Prefix)
			}
			in.WriteString(secret)
			in.WriteString(pieces[rng.IntN(len(pieces))])
		}
		got, withheld := Withhold(in.String(), mark)
		if !withheld || strings.Contains(got, secret[:20]) || strings.Contains(got, secret[len(secret)-20:]) {
			t.Fatalf("Withhold(%q) = %q, %v", in.String(), got, withheld)
		}
		if again, _ := Withhold(got, mark); again != got {
			t.Fatalf("not idempotent: %q then %q", got, again)
		}
	}
}

// FuzzWithhold: whatever the text, what Withhold leaves holds no token and
// nothing that starts like one.
func FuzzWithhold(f *testing.F) {
	f.Add("cpx_abc/def", 3)
	f.Add("/mod/x", 0)
	f.Fuzz(func(t *testing.T, s string, at int) {
		tok, err := New()
		if err != nil {
			t.Fatal(err)
		}
		if at < 0 || at > len(s) {
			at = len(s)
		}
		in := s[:at] + tok.Reveal() + s[at:]
		got, _ := Withhold(in, mark)
		if strings.Contains(got, tok.Reveal()[len(Prefix):len(Prefix)+10]) {
			t.Fatalf("Withhold(%q) = %q keeps the token", in, got)
		}
		for i := 0; i+len(Prefix) < len(got); i++ {
			if strings.EqualFold(got[i:i+len(Prefix)], Prefix) && isBase62(got[i+len(Prefix)]) {
				t.Fatalf("Withhold(%q) = %q keeps a token's start", in, got)
			}
		}
	})
}
