// Package testutil holds what the tests of several packages share and no
// program uses.
package testutil

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines may write while a test reads it:
// a log that a server, a listener or a child process writes as the test
// checks what it says so far. The zero value is an empty Buffer.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Count returns how many times s occurs in what has been written so far.
func (b *Buffer) Count(s string) int {
	return strings.Count(b.String(), s)
}
