package model

import (
	"encoding/json"
	"strings"
	"testing"
)

// claudeCodeLikeBody is shaped like Claude Code's request: the model first,
// then ~50 KB of system prompt, tools and messages.
func claudeCodeLikeBody() []byte {
	var tools []map[string]any
	for i := range 40 {
		tools = append(tools, map[string]any{
			"name":         "tool" + strings.Repeat("x", i%7),
			"description":  strings.Repeat("does a thing with files and shells. ", 20),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}},
		})
	}
	b, _ := json.Marshal(map[string]any{
		"model":      "claude-opus-5-5",
		"max_tokens": 128000,
		"stream":     true,
		"system":     []map[string]any{{"type": "text", "text": strings.Repeat("You are Claude Code. ", 400)}},
		"tools":      tools,
		"messages":   []map[string]any{{"role": "user", "content": "say hi"}},
		"metadata":   map[string]any{"user_id": "x"},
	})
	return b
}

func BenchmarkRequestModel(b *testing.B) {
	body := claudeCodeLikeBody()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := requestModel(body); err != nil {
			b.Fatal(err)
		}
	}
}
