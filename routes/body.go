package routes

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
)

// readBody reads a request body of at most limit bytes, held in memory
// under h (its declared length before its buffer is allocated, or as it
// is read when it declares none). It refuses a body encoded other than in
// one of encodings (lower case): cproxy checks the bytes it sends, and
// only a route that decodes an encoding can check a body sent in it.
func readBody(r *http.Request, limit int64, h *BodyHold, encodings ...string) ([]byte, error) {
	raw := r.Header.Get("Content-Encoding")
	if ce := strings.ToLower(strings.TrimSpace(raw)); ce != "" && ce != "identity" && !slices.Contains(encodings, ce) {
		if len(encodings) > 0 {
			return nil, Refuse(ErrBadRequest, "Content-Encoding %q is not accepted (%s or none)", Clip(raw, 32), strings.Join(encodings, ", "))
		}
		return nil, Refuse(ErrBadRequest, "Content-Encoding %q is not accepted: send the body uncompressed", Clip(raw, 32))
	}
	if r.ContentLength > limit {
		return nil, Refuse(ErrTooLarge, "request body of %d bytes is over the %d MiB limit", r.ContentLength, limit>>20)
	}
	var b []byte
	var err error
	var lent *[]byte
	if r.ContentLength > 0 {
		if err := h.grow(r.Context(), r.ContentLength); err != nil {
			return nil, err
		}
		// A buffer of the declared size (net/http holds the body to it),
		// lent until the upstream has read it, instead of ReadAll's
		// doublings: on the hot path their garbage cost more CPU than
		// everything else cproxy does. ReadFull fills every byte of it.
		b, lent = getBodyBuffer(int(r.ContentLength))
		h.large = lent == nil
		_, err = io.ReadFull(r.Body, b)
	} else {
		h.large = true
		b, err = io.ReadAll(io.LimitReader(h.Reader(r.Context(), r.Body), limit+1))
	}
	if err != nil {
		return nil, bodyReadError(r, err, "the request body")
	}
	if int64(len(b)) > limit {
		return nil, Refuse(ErrTooLarge, "request body is over the %d MiB limit", limit>>20)
	}
	r.Body = &checkedBody{b: b, lent: lent, held: h}
	r.ContentLength = int64(len(b))
	r.Header.Del("Transfer-Encoding")
	return b, nil
}

// bodyReadError is the answer to a failed read of r's body (what names
// it): the request's own end when its client went away, a refusal as it is
// (the memory for bodies is full, the body came too slowly), or a 400.
func bodyReadError(r *http.Request, err error, what string) error {
	var ref *refusal
	switch {
	case r.Context().Err() != nil:
		return r.Context().Err()
	case errors.As(err, &ref):
		return err
	}
	return Refuse(ErrBadRequest, "reading %s failed", what)
}
