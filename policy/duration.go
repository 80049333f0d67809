package policy

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MaxDays is the most whole days a time.Duration holds: 106751, about 292 years.
const MaxDays = math.MaxInt64 / int64(24*time.Hour)

// ErrDurationTooLong is what ParseDuration and ParseDays return for a duration that does not fit in a
// time.Duration, which a plain multiplication would wrap around to a short one (213504d to 25 minutes).
var ErrDurationTooLong = errors.New("too long for a duration")

// goDuration is time.ParseDuration's syntax, so that its one error for bad syntax and overflow alike can be told
// apart.
var goDuration = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// ParseDuration reads a Go duration ("90m", "36h30m") as time.ParseDuration does, with an error wrapping
// ErrDurationTooLong for one beyond ±2562047h47m16.854775807s.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil && goDuration.MatchString(s) {
		return 0, ErrDurationTooLong
	}
	return d, err
}

// ParseDays reads a Go duration ("90m", "36h30m") or a whole number of days ("7d"), with an error wrapping
// ErrDurationTooLong for more than MaxDays days, or a Go duration beyond what time.Duration holds.
func ParseDays(s string) (time.Duration, error) {
	days, ok := strings.CutSuffix(s, "d")
	if !ok {
		return ParseDuration(s)
	}
	n, err := strconv.ParseInt(days, 10, 64)
	if errors.Is(err, strconv.ErrRange) || err == nil && (n > MaxDays || n < -MaxDays) {
		return 0, ErrDurationTooLong
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(n) * 24 * time.Hour, nil
}
