package hostabi

import "strings"

// MaxHeaderNameBytes is the longest header name a policy may set or remove
// (ABI.md §8).
const MaxHeaderNameBytes = 256

// hiddenHeaders carry a secret: they are never shown to policies (ABI.md
// §3.3), and policies cannot set or remove them (SECURITY.md).
var hiddenHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "cookie": true, "x-api-key": true, "api-key": true,
}

// billingHeaders say whom an upstream bills. Unlike the hidden headers a
// policy sees them and may set them (the operator's code picking the
// organization or project); only a client's never reach an upstream with
// its own key (CredentialHeader).
var billingHeaders = map[string]bool{"openai-organization": true, "openai-project": true}

// framingHeaders describe the connection or the message's framing, which
// the gateway's HTTP client owns.
var framingHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true, "keep-alive": true,
	"upgrade": true, "te": true, "trailer": true,
}

// ProtectedHeader reports whether a policy may not set or remove the
// (lower-case) header name (ABI.md §5): the credentials policies never see,
// and the framing headers.
func ProtectedHeader(name string) bool { return hiddenHeaders[name] || framingHeaders[name] }

// HiddenHeader reports whether the (lower-case) header is withheld from
// policies.
func HiddenHeader(name string) bool { return hiddenHeaders[name] }

// CredentialHeader reports whether the (lower-case) header says who the
// client is or whom to bill: a hidden header or a billing one. An upstream
// with its own API key bills the operator, so the gateway never forwards a
// client's credential headers to it unless the upstream's forward_headers
// names them.
func CredentialHeader(name string) bool { return hiddenHeaders[name] || billingHeaders[name] }

// ValidFieldName reports whether name is an HTTP token (RFC 9110 §5.1): the
// rule net/http applies to every header name it sends.
func ValidFieldName(name string) bool {
	if name == "" {
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

// ValidFieldValue reports whether v may be sent as a header value: no
// control byte but horizontal tab (RFC 9110 §5.5 field-content), the rule
// net/http applies when it sends a request. CR, LF and NUL would split or
// cut the header; net/http refuses the other controls (0x01–0x1F, DEL) as
// well, failing the whole request.
func ValidFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// CheckHeaderEdit validates a header_set (remove=false) or header_remove and
// returns the lower-cased name and a host-function code: CodeTooLarge for a
// name or value over its limit (ABI.md §8), CodeBadValue for an invalid or
// protected name or an invalid value.
func CheckHeaderEdit(name, value string, remove bool) (string, int32) {
	name = strings.ToLower(name)
	if len(name) > MaxHeaderNameBytes {
		return name, CodeTooLarge
	}
	if !ValidFieldName(name) || ProtectedHeader(name) {
		return name, CodeBadValue
	}
	if !remove {
		if len(value) > MaxHeaderBytes {
			return name, CodeTooLarge
		}
		if !ValidFieldValue(value) {
			return name, CodeBadValue
		}
	}
	return name, CodeOK
}

// CheckUpstreamName validates a use_upstream argument: CodeTooLarge past
// MaxUpstreamBytes, CodeBadValue for an empty name or one with CR, LF or NUL.
func CheckUpstreamName(name string) int32 {
	if len(name) > MaxUpstreamBytes {
		return CodeTooLarge
	}
	if name == "" || strings.ContainsAny(name, "\r\n\x00") {
		return CodeBadValue
	}
	return CodeOK
}
