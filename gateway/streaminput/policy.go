package streaminput

import (
	"strconv"
	"strings"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// Start policies.
const (
	PolicyOnEndOnly    = "on_end_only"
	PolicyOnFirstChunk = "on_first_chunk"
	PolicyOnMinLength  = "on_min_length" // written "on_min_length:N"
)

// startPolicy says when the assembled request may go upstream.
type startPolicy struct {
	kind string
	min  int64 // on_min_length: payload bytes received in order
}

func parsePolicy(s string) (startPolicy, *apierr.Error) {
	switch {
	case s == "" || s == PolicyOnEndOnly:
		return startPolicy{kind: PolicyOnEndOnly}, nil
	case s == PolicyOnFirstChunk:
		return startPolicy{kind: PolicyOnFirstChunk}, nil
	case strings.HasPrefix(s, PolicyOnMinLength+":"):
		n, err := strconv.ParseInt(strings.TrimPrefix(s, PolicyOnMinLength+":"), 10, 64)
		if err == nil && n > 0 {
			return startPolicy{kind: PolicyOnMinLength, min: n}, nil
		}
	}
	return startPolicy{}, apierr.Invalid("start_policy", apierr.CodeInvalidValue,
		"start_policy must be %q, %q or %q with N a positive number of bytes, got %q", PolicyOnEndOnly, PolicyOnFirstChunk, PolicyOnMinLength+":N", s)
}

func (p startPolicy) String() string {
	if p.kind == PolicyOnMinLength {
		return PolicyOnMinLength + ":" + strconv.FormatInt(p.min, 10)
	}
	return p.kind
}

// holds reports whether a session whose in-order prefix is next chunks and
// contig bytes long may start.
func (p startPolicy) holds(next uint64, contig int64, finished bool) bool {
	switch {
	case finished:
		return true
	case p.kind == PolicyOnFirstChunk:
		return next > 0
	case p.kind == PolicyOnMinLength:
		return contig >= p.min
	}
	return false
}
