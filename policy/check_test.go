package policy

import (
	"errors"
	"fmt"
	"testing"
)

func TestProblemsError(t *testing.T) {
	ps := Problems{
		{File: "a.toml", Line: 2, Col: 3, Message: "first"},
		{File: "b.toml", Message: "cannot read: permission denied"},
		{Message: "listen.proxy: bad"},
	}
	if got, want := ps.Error(), "a.toml:2:3: first\nb.toml: cannot read: permission denied\nlisten.proxy: bad"; got != want {
		t.Errorf("Error = %q, want %q", got, want)
	}

	// Loaders return a *Problems; errors.As fills either kind of target.
	var err error = &ps
	wrapped := fmt.Errorf("serve: %w", err)
	var byValue Problems
	var byPointer *Problems
	if !errors.As(wrapped, &byValue) || len(byValue) != 3 {
		t.Errorf("errors.As(Problems) = %v", byValue)
	}
	if !errors.As(wrapped, &byPointer) || len(*byPointer) != 3 {
		t.Errorf("errors.As(*Problems) = %v", byPointer)
	}
	if errors.As(errors.New("other"), &byValue) {
		t.Error("errors.As matched another error")
	}
}
