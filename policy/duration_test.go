package policy

import (
	"errors"
	"testing"
	"time"
)

// A duration past what time.Duration holds is refused as too long, where
// multiplying the days would wrap around: 213504d is 25 minutes and a bit
// once wrapped.
func TestParseDaysRefusesOverflow(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  error // nil: no error; errSyntax: an error other than ErrDurationTooLong
	}{
		{"7d", 7 * 24 * time.Hour, nil},
		{"106751d", 106751 * 24 * time.Hour, nil},
		{"-106751d", -106751 * 24 * time.Hour, nil},
		{"2562047h47m16.854775807s", time.Duration(1<<63 - 1), nil},
		{"90m", 90 * time.Minute, nil},
		{"106752d", 0, ErrDurationTooLong},
		{"213504d", 0, ErrDurationTooLong},
		{"-213504d", 0, ErrDurationTooLong},
		{"99999999999999999999d", 0, ErrDurationTooLong},
		{"2562048h", 0, ErrDurationTooLong},
		{"2562047h47m16.854775808s", 0, ErrDurationTooLong},
		{"1.5d", 0, errSyntax},
		{"soon", 0, errSyntax},
		{"d", 0, errSyntax},
		{"", 0, errSyntax},
	} {
		got, err := ParseDays(tc.in)
		switch {
		case tc.err == nil && (err != nil || got != tc.want):
			t.Errorf("ParseDays(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err == ErrDurationTooLong && !errors.Is(err, ErrDurationTooLong):
			t.Errorf("ParseDays(%q) = %v, %v; want ErrDurationTooLong", tc.in, got, err)
		case tc.err == errSyntax && (err == nil || errors.Is(err, ErrDurationTooLong)):
			t.Errorf("ParseDays(%q) = %v, %v; want a syntax error", tc.in, got, err)
		}
	}
}

var errSyntax = errors.New("syntax")
