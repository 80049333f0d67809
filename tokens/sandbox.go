package tokens

// ValidSandboxID reports whether id matches ^[a-z0-9][a-z0-9-]{0,62}$. Sandbox ids end up in store keys, URLs,
// log lines and agent-facing error messages, so they are kept to characters that need no escaping anywhere.
func ValidSandboxID(id string) bool {
	if len(id) == 0 || len(id) > 63 || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
