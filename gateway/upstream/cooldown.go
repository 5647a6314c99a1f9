package upstream

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MaxCooldown bounds any cooldown derived from an upstream's own hint, so a
// bogus Retry-After cannot take an upstream out for hours.
const MaxCooldown = 10 * time.Minute

// tryAgainIn matches OpenAI's "Please try again in 1.5s" / "in 20ms" / "in 2m3s" hints.
var tryAgainIn = regexp.MustCompile(`(?i)try again in\s+((?:\d+(?:\.\d+)?\s*(?:ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h)\s*)+)`)

var durationPart = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h)`)

// RetryAfter extracts how long an upstream asked us to wait, from the
// retry-after-ms and Retry-After headers or a "try again in Ns" phrase in the
// error message. ok is false when there is no usable hint.
func RetryAfter(h http.Header, message string, now time.Time) (d time.Duration, ok bool) {
	if h != nil {
		if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
			if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
				return cooldownFor(ms * float64(time.Millisecond)), true
			}
		}
		if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
			if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 {
				return cooldownFor(secs * float64(time.Second)), true
			}
			if t, err := http.ParseTime(v); err == nil {
				return clampCooldown(t.Sub(now)), true
			}
		}
	}
	if m := tryAgainIn.FindStringSubmatch(message); m != nil {
		var total float64
		for _, part := range durationPart.FindAllStringSubmatch(m[1], -1) {
			n, err := strconv.ParseFloat(part[1], 64)
			if err != nil {
				continue
			}
			total += n * float64(unit(part[2]))
		}
		if total > 0 {
			return cooldownFor(total), true
		}
	}
	return 0, false
}

func unit(s string) time.Duration {
	s = strings.ToLower(s)
	switch {
	case s == "ms" || strings.HasPrefix(s, "milli"):
		return time.Millisecond
	case s == "h":
		return time.Hour
	case strings.HasPrefix(s, "m"):
		return time.Minute
	default:
		return time.Second
	}
}

// cooldownFor is ns nanoseconds as a cooldown, clamped while still a float:
// a hint too large for a Duration (Retry-After: 999999999999) is the
// longest cooldown, not an overflow into a negative one.
func cooldownFor(ns float64) time.Duration {
	return clampCooldown(time.Duration(min(ns, float64(MaxCooldown))))
}

func clampCooldown(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	if d > MaxCooldown {
		return MaxCooldown
	}
	return d
}

// IsQuotaCode reports whether an error code means the upstream account is out
// of quota or capacity, which cools the upstream down like a 429 does.
func IsQuotaCode(code string) bool {
	switch code {
	case "insufficient_quota", "usage_limit_reached", "quota_exceeded", "usage_not_included", "rate_limit_exceeded":
		return true
	}
	return false
}

// IsBillingCode reports whether an error code means the upstream account has
// no paid quota left or its plan does not include what was asked: a quota
// code that, unlike a rate limit or a usage limit that resets, no wait cures,
// so the client is told no wait in the message (waitInMessage) that would
// have it retry into the same answer.
func IsBillingCode(code string) bool {
	switch code {
	case "insufficient_quota", "usage_not_included":
		return true
	}
	return false
}

// IsAuthCode reports whether an error code means the upstream rejects our
// credentials, which parks the upstream until a probe succeeds again.
func IsAuthCode(code string) bool {
	switch code {
	case "invalid_api_key", "account_deactivated", "account_disabled", "organization_deactivated",
		"invalid_organization", "unauthorized", "permission_denied":
		return true
	}
	return false
}

// Cooldown bases used when an upstream gives no hint of its own. A target's
// capacity cooldown doubles with each consecutive one (see TargetFailed).
const (
	RateLimitBackoff       = 5 * time.Second  // 429 / rate_limit_exceeded
	QuotaBackoff           = 60 * time.Second // insufficient_quota, usage_limit_reached, …
	ConnectFailureCooldown = 5 * time.Second  // the whole upstream, after a failed connection
)

// CapacityFailure is the Failure a 429 or a quota code charges to a target:
// the upstream's hint (from h and message) when it gave one, else a
// jittered backoff from RateLimitBackoff (429, rate_limit_exceeded) or
// QuotaBackoff (the other quota codes). Its Code is the quota code, else
// rate_limit_exceeded.
func CapacityFailure(h http.Header, message, code string, status int, now time.Time, reason string) Failure {
	// A 429 is a rate limit whatever code the upstream gave it.
	f := Failure{Class: "rate_limited", Reason: reason, Backoff: RateLimitBackoff, Code: "rate_limit_exceeded"}
	if code != "" && code != "rate_limit_exceeded" && IsQuotaCode(code) {
		f.Class, f.Backoff, f.Code = "quota", QuotaBackoff, code
	}
	f.TakeHint(h, message, now)
	return f
}

// TakeHint makes the wait the upstream asked for in h or message
// (RetryAfter) f's hint, when it asked for one, zero included.
func (f *Failure) TakeHint(h http.Header, message string, now time.Time) {
	if d, ok := RetryAfter(h, message, now); ok {
		f.Hint, f.Hinted = d, true
	}
}

// HasHint reports whether f carries a wait to honour: a Hint (the
// upstream's, or a replay policy's penalty), or the upstream's "retry now"
// (Hinted with a zero Hint). The one rule for "the failure has a hint".
func (f *Failure) HasHint() bool {
	return f != nil && (f.Hinted || f.Hint > 0)
}

// HintMillis is f's hint in whole milliseconds, rounded up, and at least
// 1 when f is hinted: the replay policy's retry_after_ms (hostabi/ABI.md
// §3.2), where 0 means no hint, so "retry now" reaches the policy as the
// shortest wait it can honour (1 ms), never as no hint. 0 when not hinted.
func (f *Failure) HintMillis() int64 {
	if !f.HasHint() {
		return 0
	}
	return max(1, (f.Hint + time.Millisecond - 1).Milliseconds())
}

// IsOverloadedCode reports whether an error code means the upstream (or
// this model on it) is overloaded: the request moves to the next target at
// once, like a 503.
func IsOverloadedCode(code string) bool {
	switch code {
	case "server_is_overloaded", "overloaded_error", "overloaded", "model_overloaded":
		return true
	}
	return false
}
