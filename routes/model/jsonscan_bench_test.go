package model

import (
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/cproxy/cproxy/tokens"
	"github.com/go-json-experiment/json/jsontext"
)

// BenchmarkModelScan and its comparators on jsontext's Decoder
// (requestModelJSONText, usageEventJSONText) measure the hand-written walk
// the model route reads JSON with against a maintained tokenizer.

// modelMessageStart and modelMessageDelta are the data of the SSE events
// that carry usage, as the API sends them; modelAnswer is a JSON answer.
const (
	modelMessageStart = `{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant",` +
		`"model":"claude-opus-5-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5120,` +
		`"cache_creation_input_tokens":2048,"cache_read_input_tokens":40960,"cache_creation":{"ephemeral_5m_input_tokens":2048,` +
		`"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}`
	modelMessageDelta = `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},` +
		`"usage":{"input_tokens":5120,"cache_creation_input_tokens":2048,"cache_read_input_tokens":40960,"output_tokens":503}}`
	modelAnswer = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{"type":"text","text":` +
		`"The test fails because get3 returns the wrapped error first. The test fails because get3 returns the wrapped error first. ` +
		`The test fails because get3 returns the wrapped error first."}],"stop_reason":"end_turn","stop_sequence":null,` +
		`"usage":{"input_tokens":5120,"cache_creation_input_tokens":0,"cache_read_input_tokens":4096,"output_tokens":31,"service_tier":"standard"}}`
)

// BenchmarkModelScan: the model route's JSON reads on realistic bodies, by
// the hand-written walk and by jsontext: the ~50 KB request body of Claude
// Code, and the usage in an SSE stream's two usage events and in a JSON
// answer.
func BenchmarkModelScan(b *testing.B) {
	body := claudeCodeLikeBody()
	for _, impl := range []struct {
		name    string
		request func([]byte) (string, int64, error)
		event   func(data []byte, path []string, u *tokens.Usage) bool
	}{
		{"handwritten", requestModel, usageEvent},
		{"jsontext", requestModelJSONText, usageEventJSONText},
	} {
		b.Run("request/"+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if m, _, err := impl.request(body); err != nil || m != "claude-opus-5-5" {
					b.Fatal(m, err)
				}
			}
		})
		b.Run("sse/"+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			start, delta := []byte(modelMessageStart), []byte(modelMessageDelta)
			b.SetBytes(int64(len(start) + len(delta)))
			for b.Loop() {
				var u tokens.Usage
				if !impl.event(start, []string{"message", "usage"}, &u) || !impl.event(delta, []string{"usage"}, &u) || u.Output != 503 {
					b.Fatal(u)
				}
			}
		})
		b.Run("json/"+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			answer := []byte(modelAnswer)
			b.SetBytes(int64(len(answer)))
			for b.Loop() {
				var u tokens.Usage
				if !impl.event(answer, []string{"usage"}, &u) || u.Output != 31 {
					b.Fatal(u)
				}
			}
		})
	}
}

// TestModelScanImplementations: the two sides of BenchmarkModelScan read
// the same.
func TestModelScanImplementations(t *testing.T) {
	body := claudeCodeLikeBody()
	m1, n1, err1 := requestModel(body)
	m2, n2, err2 := requestModelJSONText(body)
	if m1 != m2 || n1 != n2 || err1 != nil || err2 != nil {
		t.Errorf("requestModel %q %d %v, jsontext %q %d %v", m1, n1, err1, m2, n2, err2)
	}
	for _, c := range []struct {
		data string
		path []string
	}{{modelMessageStart, []string{"message", "usage"}}, {modelMessageDelta, []string{"usage"}}, {modelAnswer, []string{"usage"}}} {
		var u1, u2 tokens.Usage
		ok1, ok2 := usageEvent([]byte(c.data), c.path, &u1), usageEventJSONText([]byte(c.data), c.path, &u2)
		if ok1 != ok2 || u1 != u2 || !ok1 {
			t.Errorf("%.40s: walk %v %+v, jsontext %v %+v", c.data, ok1, u1, ok2, u2)
		}
	}
}

// usageEvent reads the usage at path in data as usageBody does.
func usageEvent(data []byte, path []string, u *tokens.Usage) bool {
	for _, k := range path {
		var ok bool
		if data, ok = jsonMember(data, k); !ok {
			return false
		}
	}
	_, ok := usageInto(data, u)
	return ok
}

// requestModelJSONText is requestModel's walk on jsontext's Decoder, for
// BenchmarkModelScan. It returns the same model and max_tokens on a body
// requestModel accepts; its refusals are not worded.
func requestModelJSONText(body []byte) (string, int64, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '{' {
		return "", 0, errNotJSON
	}
	var model string
	var maxTokens int64
	seen, seenMax := false, false
	for dec.PeekKind() != '}' {
		t, err := dec.ReadToken()
		if err != nil {
			return "", 0, errNotJSON
		}
		switch key := t.String(); key {
		case "model":
			v, err := dec.ReadToken()
			if seen || err != nil || v.Kind() != '"' {
				return "", 0, errNotJSON
			}
			seen, model = true, v.String()
		case "max_tokens":
			v, err := dec.ReadValue()
			if seenMax || err != nil {
				return "", 0, errNotJSON
			}
			if maxTokens, err = strconv.ParseInt(string(v), 10, 64); err != nil || maxTokens < 0 {
				return "", 0, errNotJSON
			}
			seenMax = true
		default:
			if _, ok := casingOf([]byte(key)); ok {
				return "", 0, errNotJSON
			}
			if err := dec.SkipValue(); err != nil {
				return "", 0, errNotJSON
			}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return "", 0, errNotJSON
	}
	if _, err := dec.ReadToken(); err != io.EOF || model == "" {
		return "", 0, errNotJSON
	}
	return model, maxTokens, nil
}

// usageEventJSONText is usageEvent on jsontext's Decoder: it reads down
// path and sets the counts of the usage object there.
func usageEventJSONText(data []byte, path []string, u *tokens.Usage) bool {
	dec := jsontext.NewDecoder(bytes.NewBuffer(data), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for _, want := range path {
		if t, err := dec.ReadToken(); err != nil || t.Kind() != '{' {
			return false
		}
		for {
			if dec.PeekKind() == '}' {
				return false
			}
			t, err := dec.ReadToken()
			if err != nil {
				return false
			}
			if t.String() == want {
				break
			}
			if dec.SkipValue() != nil {
				return false
			}
		}
	}
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '{' {
		return false
	}
	var got [len(usageFields)]int64
	var has [len(usageFields)]bool
	for dec.PeekKind() != '}' {
		t, err := dec.ReadToken()
		if err != nil {
			return false
		}
		key := t.String()
		v, err := dec.ReadValue()
		if err != nil {
			return false
		}
		for f, name := range usageFields {
			if key != name {
				continue
			}
			if string(v) == "null" {
				has[f] = false
				continue
			}
			if got[f], err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return false
			}
			has[f] = true
		}
	}
	for f, dst := range [...]*int64{&u.Input, &u.Output, &u.CacheRead, &u.CacheWrite} {
		if has[f] && got[f] >= 0 {
			*dst = got[f]
		}
	}
	return true
}
