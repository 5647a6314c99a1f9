package hostabi

import "strings"

// protectedHeaders cannot be set or removed by policies (ABI.md §5).
var protectedHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "host": true, "content-length": true,
	"transfer-encoding": true, "connection": true, "keep-alive": true, "upgrade": true, "te": true, "trailer": true,
}

// hiddenHeaders are never shown to policies (ABI.md §3.3).
var hiddenHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "cookie": true, "x-api-key": true, "api-key": true,
}

// ProtectedHeader reports whether a policy may not set or remove the
// (lower-case) header name.
func ProtectedHeader(name string) bool { return protectedHeaders[name] }

// HiddenHeader reports whether the (lower-case) header is withheld from
// policies.
func HiddenHeader(name string) bool { return hiddenHeaders[name] }

// ValidHeaderName reports whether name is an HTTP token of at most 256 bytes.
func ValidHeaderName(name string) bool {
	if name == "" || len(name) > 256 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// ValidHeaderValue reports whether v may be sent as a header value: at most
// MaxHeaderBytes and no CR, LF or NUL.
func ValidHeaderValue(v string) bool {
	return len(v) <= MaxHeaderBytes && !strings.ContainsAny(v, "\r\n\x00")
}

// CheckHeaderEdit validates a header_set (remove=false) or header_remove and
// returns the lower-cased name and a host-function code.
func CheckHeaderEdit(name, value string, remove bool) (string, int32) {
	name = strings.ToLower(name)
	if !ValidHeaderName(name) || ProtectedHeader(name) {
		return name, CodeBadValue
	}
	if !remove {
		if len(value) > MaxHeaderBytes {
			return name, CodeTooLarge
		}
		if !ValidHeaderValue(value) {
			return name, CodeBadValue
		}
	}
	return name, CodeOK
}

// CheckUpstreamName validates a use_upstream argument.
func CheckUpstreamName(name string) int32 {
	if name == "" || len(name) > MaxUpstreamBytes || strings.ContainsAny(name, "\r\n\x00") {
		return CodeBadValue
	}
	return CodeOK
}
