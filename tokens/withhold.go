package tokens

import "strings"

// Withhold returns s with every part of it that could be a sandbox token replaced by mark, and whether it replaced
// any. Logs and audit records pass client-chosen text (paths, model and package names, refusals quoting them)
// through it, so that a token a sandbox puts in a request never reaches them, while the rest of the text stays
// readable. A part that could be a token is either
//   - Prefix, in any case, and the run of base62 characters after it, however long: a token cut short, run on or
//     mistyped is withheld too, and a bare "cpx_" followed by nothing base62 is kept; or
//   - a run of base62 characters holding a token's random part followed by its valid checksum (a token without its
//     prefix): the whole run is withheld.
//
// Base62 runs are maximal, so a token inside a longer word is found; a token broken up by other characters (a
// sandbox hiding its own token on purpose) is not, and need not be: it is no longer what a secret scanner finds.
func Withhold(s, mark string) (string, bool) {
	var b strings.Builder
	kept, withheld := 0, false
	for i := 0; i < len(s); {
		if !isBase62(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isBase62(s[j]) {
			j++
		}
		from := -1
		switch {
		case i >= len(Prefix) && strings.EqualFold(s[i-len(Prefix):i], Prefix):
			from = i - len(Prefix)
		case holdsToken(s[i:j]):
			from = i
		}
		if from >= 0 {
			if from >= kept { // else it runs on from the part withheld just before
				b.WriteString(s[kept:from])
				b.WriteString(mark)
			}
			kept, withheld = j, true
		}
		i = j
	}
	if !withheld {
		return s, false
	}
	b.WriteString(s[kept:])
	return b.String(), true
}

// holdsToken reports whether the base62 run has a token's random part and valid checksum anywhere in it.
func holdsToken(run string) bool {
	const n = randomLen + checksumLen
	var want [checksumLen]byte
	for i := 0; i+n <= len(run); i++ {
		encodeChecksum(want[:], checksum(run[i:i+randomLen]))
		if run[i+randomLen:i+n] == string(want[:]) {
			return true
		}
	}
	return false
}
