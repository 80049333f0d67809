package routes

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
)

// readBody reads a request body of at most limit bytes, held in memory
// under h as it arrives (fillBody). It refuses a body encoded other than in
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
	b, lent, err := fillBody(r, limit, h)
	if err != nil {
		return nil, err
	}
	r.Body = &checkedBody{b: b, lent: lent, held: h}
	r.ContentLength = int64(len(b))
	r.Header.Del("Transfer-Encoding")
	return b, nil
}

// fillBody reads r's body whole into a buffer that grows as the body
// arrives, held under h: a body of declared length takes its whole buffer
// (and memory) at once only if it is at most bodyStep; a larger one, or one
// of unknown length, starts with bodyStep and doubles its buffer each time
// it is full, so that what it holds is never more than twice what has
// arrived plus bodyStep, whatever it declared. The buffer is lent
// (getBodyBuffer) while it is small enough; the old one goes back at each
// step. A body of declared length fills its buffer exactly: on the hot path
// (a small model request) it is one buffer and one take of memory, where
// ReadAll's doublings cost more CPU than everything else cproxy does.
func fillBody(r *http.Request, limit int64, h *BodyHold) ([]byte, *[]byte, error) {
	want := limit + 1 // unknown length: until EOF, and one byte to tell a body over limit
	if r.ContentLength > 0 {
		want = r.ContentLength
	}
	size := min(want, bodyStep)
	if err := h.grow(r.Context(), size); err != nil {
		return nil, nil, err
	}
	b, lent := getBodyBuffer(int(size))
	h.large = lent == nil
	off := 0
	for {
		n, err := r.Body.Read(b[off:])
		off += n
		if int64(off) == want && r.ContentLength > 0 || err == io.EOF && r.ContentLength <= 0 {
			break
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			putBodyBuffer(lent)
			return nil, nil, bodyReadError(r, err, "the request body")
		}
		if off < len(b) {
			continue
		}
		if int64(off) == want {
			break // over limit
		}
		// Full: twice the buffer, or what is left of the body.
		next := min(want, 2*int64(len(b)))
		if err := h.grow(r.Context(), next-int64(len(b))); err != nil {
			putBodyBuffer(lent)
			return nil, nil, err
		}
		nb, nlent := getBodyBuffer(int(next))
		copy(nb, b)
		putBodyBuffer(lent)
		if lent == nil && h.m != nil {
			h.m.dropped(int64(len(b)))
		}
		b, lent = nb, nlent
		h.large = lent == nil
	}
	if int64(off) > limit {
		putBodyBuffer(lent)
		return nil, nil, Refuse(ErrTooLarge, "request body is over the %d MiB limit", limit>>20)
	}
	return b[:off], lent, nil
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
