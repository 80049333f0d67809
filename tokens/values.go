package tokens

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
)

// Per-token values (a relay's per-sandbox header, such as the sandbox's mod
// token) are sealed with a key derived from the token itself: the store
// holds only the token's hash and the sealed values, so neither a copy of the
// store nor the admin API can read them back. They are opened only when the
// sandbox presents its token.

// sealVersion is the first byte of a sealed blob: HKDF-SHA256 key, AES-256-GCM.
const sealVersion = 1

// valuesInfo separates this key from anything else derived from a token.
const valuesInfo = "cproxy per-token values v1"

// ErrValues is wrapped by OpenValues's errors: the blob was not sealed for
// this token, or is damaged.
var ErrValues = errors.New("per-token values cannot be opened")

func valuesAEAD(t Token) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, []byte(t.Reveal()), nil, valuesInfo, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// SealValues seals values for t: version, nonce, then the AES-GCM
// ciphertext of their JSON, with the token's hash as additional data.
func SealValues(t Token, values map[string]string) ([]byte, error) {
	if len(values) == 0 {
		return nil, nil
	}
	aead, err := valuesAEAD(t)
	if err != nil {
		return nil, err
	}
	plain, err := json.Marshal(values)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	h := t.Hash()
	return aead.Seal(out, out[1:], plain, h[:]), nil
}

// OpenValues opens what SealValues sealed for t; nil for no values.
func OpenValues(t Token, sealed []byte) (map[string]string, error) {
	if len(sealed) == 0 {
		return nil, nil
	}
	aead, err := valuesAEAD(t)
	if err != nil {
		return nil, err
	}
	if sealed[0] != sealVersion || len(sealed) < 1+aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: unknown format", ErrValues)
	}
	nonce, box := sealed[1:1+aead.NonceSize()], sealed[1+aead.NonceSize():]
	h := t.Hash()
	plain, err := aead.Open(nil, nonce, box, h[:])
	if err != nil {
		return nil, fmt.Errorf("%w: not sealed for this token, or damaged", ErrValues)
	}
	var values map[string]string
	if err := json.Unmarshal(plain, &values); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrValues, err)
	}
	return values, nil
}
