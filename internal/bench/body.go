package bench

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Model is the model every benchmark request names; the policy the cproxy
// target runs with allows it through a glob, as a real profile would.
const Model = "claude-sonnet-4-5-20250929"

// bodySize is roughly what a Claude Code request weighs a few turns into a
// session: a system prompt, tool definitions, and a conversation with tool
// calls and file contents.
const bodySize = 20 << 10

type textBlock struct {
	Type         string        `json:"type"`
	Text         string        `json:"text"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

type cacheControl struct {
	Type string `json:"type"`
}

type tool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	InputSchema any    `json:"input_schema"`
}

type message struct {
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

type messagesRequest struct {
	Model     string            `json:"model"`
	MaxTokens int               `json:"max_tokens"`
	System    []textBlock       `json:"system"`
	Tools     []tool            `json:"tools"`
	Messages  []message         `json:"messages"`
	Metadata  map[string]string `json:"metadata"`
	Stream    bool              `json:"stream"`
}

// Body returns a Messages API request body of about 20 KiB, shaped like Claude
// Code's: model first, a cached system prompt, tools with JSON schemas, and a
// conversation of text, tool_use and tool_result blocks (source code with
// escaped newlines and quotes). The same bytes come back on every call.
func Body(stream bool) []byte {
	req := messagesRequest{
		Model:     Model,
		MaxTokens: 32000,
		System: []textBlock{{
			Type:         "text",
			Text:         prose("You are an agent that helps with software engineering tasks in a sandbox.", 30),
			CacheControl: &cacheControl{"ephemeral"},
		}},
		Tools:    tools(),
		Metadata: map[string]string{"user_id": "user_0123456789abcdef_account__session_01234567-89ab-cdef-0123-456789abcdef"},
		Stream:   stream,
	}
	req.Messages = append(req.Messages, message{Role: "user", Content: []any{
		textBlock{Type: "text", Text: "The tests in ./store fail after the last change; find out why and fix it."},
	}})
	for turn := 0; ; turn++ {
		b, err := json.Marshal(req)
		if err != nil {
			panic(err) // only fixed, encodable values above
		}
		if len(b) >= bodySize {
			return b
		}
		id := fmt.Sprintf("toolu_01%022d", turn)
		req.Messages = append(req.Messages,
			message{Role: "assistant", Content: []any{
				textBlock{Type: "text", Text: "Let me read the file the failing test covers."},
				map[string]any{"type": "tool_use", "id": id, "name": "Read", "input": map[string]any{
					"file_path": fmt.Sprintf("/workspace/store/part%d.go", turn), "offset": 1, "limit": 2000,
				}},
			}},
			message{Role: "user", Content: []any{
				map[string]any{"type": "tool_result", "tool_use_id": id, "content": source(turn, 24)},
			}},
		)
	}
}

func tools() []tool {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	num := func(desc string) map[string]any { return map[string]any{"type": "number", "description": desc} }
	schema := func(required []string, props map[string]any) map[string]any {
		return map[string]any{
			"type": "object", "properties": props, "required": required,
			"additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#",
		}
	}
	return []tool{
		{"Read", prose("Reads a file from the local filesystem.", 3), schema([]string{"file_path"}, map[string]any{
			"file_path": str("The absolute path to the file to read"), "offset": num("The line number to start reading from"),
			"limit": num("The number of lines to read"),
		})},
		{"Edit", prose("Performs exact string replacements in files.", 3), schema([]string{"file_path", "old_string", "new_string"}, map[string]any{
			"file_path": str("The absolute path to the file to modify"), "old_string": str("The text to replace"),
			"new_string": str("The text to replace it with"), "replace_all": map[string]any{"type": "boolean", "default": false},
		})},
		{"Bash", prose("Executes a given bash command in a persistent shell session.", 3), schema([]string{"command"}, map[string]any{
			"command": str("The command to execute"), "timeout": num("Optional timeout in milliseconds"),
			"description": str("Clear, concise description of what this command does"),
		})},
		{"Grep", prose("A powerful search tool built on ripgrep.", 3), schema([]string{"pattern"}, map[string]any{
			"pattern": str("The regular expression pattern to search for"), "path": str("File or directory to search in"),
			"glob": str("Glob pattern to filter files"), "output_mode": map[string]any{"type": "string", "enum": []string{"content", "files_with_matches", "count"}},
		})},
	}
}

// prose repeats a sentence into a paragraph.
func prose(sentence string, n int) string {
	return strings.TrimSpace(strings.Repeat(sentence+" Follow the user's instructions carefully and explain what you change. ", n))
}

// source is a fake Go file as the Read tool returns it: numbered lines.
func source(part, lines int) string {
	var b strings.Builder
	for i := 1; i <= lines; i++ {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "%6d\t\treturn fmt.Errorf(\"store part %d: lookup %%q: %%w\", key, err)\n", i, part)
		case 1:
			fmt.Fprintf(&b, "%6d\tfunc (s *Store) get%d(ctx context.Context, key string) ([]byte, error) {\n", i, i)
		case 2:
			fmt.Fprintf(&b, "%6d\t\tv, err := s.db.Get(ctx, []byte(key)) // see issue #%d\n", i, 100+i)
		default:
			fmt.Fprintf(&b, "%6d\t}\n", i)
		}
	}
	return b.String()
}
