package tokens

import (
	"bytes"
	"errors"
	"testing"
)

func TestSealValues(t *testing.T) {
	tok, _ := New()
	other, _ := New()
	values := map[string]string{"mod_token": "mod_CANARY_value", "tier": "b"}
	sealed, err := SealValues(tok, values)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("mod_CANARY_value")) || bytes.Contains(sealed, []byte("mod_token")) {
		t.Fatal("the sealed blob shows a value or its name")
	}
	got, err := OpenValues(tok, sealed)
	if err != nil || len(got) != 2 || got["mod_token"] != "mod_CANARY_value" {
		t.Fatalf("OpenValues = %v, %v", got, err)
	}
	if _, err := OpenValues(other, sealed); !errors.Is(err, ErrValues) {
		t.Errorf("another token opened them: %v", err)
	}
	damaged := bytes.Clone(sealed)
	damaged[len(damaged)-1] ^= 1
	if _, err := OpenValues(tok, damaged); !errors.Is(err, ErrValues) {
		t.Errorf("a damaged blob opened: %v", err)
	}
	if _, err := OpenValues(tok, []byte{9, 1, 2}); !errors.Is(err, ErrValues) {
		t.Errorf("an unknown format opened: %v", err)
	}
	again, _ := SealValues(tok, values)
	if bytes.Equal(again, sealed) {
		t.Error("two seals of the same values are the same bytes: the nonce is not random")
	}
	if s, err := SealValues(tok, nil); s != nil || err != nil {
		t.Errorf("no values sealed to %v, %v", s, err)
	}
	if v, err := OpenValues(tok, nil); v != nil || err != nil {
		t.Errorf("nothing opened to %v, %v", v, err)
	}
}
