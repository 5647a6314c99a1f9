package httpx

import "strings"

// RedactURL is raw as it may be shown in a log line or an error: what can
// hold a credential is hidden, its userinfo (https://sk-…@host,
// redis://user:password@host) and its query or fragment (?key=…). It works
// on the text, so a URL that does not parse (which is when one is echoed in
// an error) is hidden as well as one that does.
func RedactURL(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 && i+1 < len(raw) {
		raw = raw[:i+1] + "…"
	}
	prefix, rest := "", raw
	if scheme, after, ok := strings.Cut(raw, "://"); ok {
		prefix, rest = scheme+"://", after
	}
	// Without a scheme (sk-…@host/v1, a forgotten https://) what comes
	// before an @ is a userinfo all the same, and so it is when a / comes
	// before it: a password with an unencoded / (base64) makes the URL
	// unparseable. Hiding a path that holds an @ too costs nothing in a
	// message.
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		return prefix + "[redacted]@" + rest[at+1:]
	}
	return raw
}
