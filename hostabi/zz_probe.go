package hostabi

// ProbeSkip etc. are temporary probes.
func ProbeSkip(b []byte) int { e, _ := skipValue(b, 0); return e }
func ProbeMembers(b []byte) int {
	n := 0
	_, _ = forEachMember(b, 0, func(key []byte, ks, vs, ve int) bool { n++; return true })
	return n
}
func ProbeStr(b []byte) int { e, _ := skipString(b, 0); return e }
