package jobspec

// IDAlphabet is the alphabet of job ids: Crockford's base32 in lower case
// (no i, l, o, u), whose byte order matches its numeric order.
const IDAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// IDLen is the length of a job id, in bytes.
const IDLen = 16

// LooksLikeID reports whether s has the shape of a job id: [IDLen]
// characters of [IDAlphabet]. A job name never has it (see the package
// documentation, "Names"), so a reference in after, or on the command
// line, is an id exactly when it looks like one.
func LooksLikeID(s string) bool {
	if len(s) != IDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' && c != 'i' && c != 'l' && c != 'o' && c != 'u') {
			return false
		}
	}
	return true
}
