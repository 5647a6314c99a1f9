package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Auth configures Sluice keys (auth:).
type Auth struct {
	// Required makes every /v1/ request carry a Sluice key (Authorization:
	// Bearer <key>, or Api-Key). false (default): the client's credential
	// passes through to upstreams that have no api_key, as before.
	Required bool `yaml:"required"`
}

// Key is one entry of keys:. Exactly one of KeySHA256 (hex SHA-256 of the
// secret) and Key (the secret itself, usually ${VAR}) is set; the secret is
// hashed at load and never kept or logged.
type Key struct {
	Name      string    `yaml:"name"`
	KeySHA256 string    `yaml:"key_sha256"`
	Key       string    `yaml:"key"`
	Models    []string  `yaml:"models"` // model patterns this key may use (exact or glob); none: all
	Limits    KeyLimits `yaml:"limits"`
}

// secretSum is the SHA-256 of the key's secret, given in clear or as
// key_sha256; false when it is neither (validateAccounts says why).
func (k Key) secretSum() ([32]byte, bool) {
	var sum [32]byte
	switch {
	case k.Key != "" && k.KeySHA256 != "":
		return sum, false
	case k.Key != "":
		return sha256.Sum256([]byte(k.Key)), true
	}
	b, err := hex.DecodeString(strings.TrimSpace(k.KeySHA256))
	if err != nil || len(b) != len(sum) {
		return sum, false
	}
	copy(sum[:], b)
	return sum, true
}

// IsCredentialSeparator splits a credential header's value into words (the
// gateway looks each word up as a key): at commas and white space, and at
// the quotes and semicolons a client may wrap a key in (`Bearer "sk-…"`,
// `sk-…;`). A secret containing one could never be presented whole, so the
// config refuses it (validateAccounts).
func IsCredentialSeparator(r rune) bool {
	return r == ',' || r == '"' || r == '\'' || r == ';' || unicode.IsSpace(r)
}

// KeyLimits are one key's limits; 0 is unlimited.
type KeyLimits struct {
	RPM            int64 `yaml:"rpm"`
	TPM            int64 `yaml:"tpm"`
	Concurrent     int64 `yaml:"concurrent"`
	TokensPerDay   int64 `yaml:"tokens_per_day"`
	TokensPerMonth int64 `yaml:"tokens_per_month"`
}

// MaxKeyLimit is the largest value a key's limit may have (10^15). The
// limiters keep their buckets in float64 (in the process, and as Lua
// numbers in Redis), exact only below 2^53: beyond, the x-ratelimit-*
// headers a limit sends would be wrong or missing.
const MaxKeyLimit int64 = 1_000_000_000_000_000

// LimitProblem is a limit out of range: its name under limits (rpm, tpm,
// …) and what is wrong.
type LimitProblem struct {
	Field, Problem string
}

// Problems lists the limits out of range, in declaration order (the
// problems' order never changes). The config and the admin API (POST and
// PATCH /admin/keys, converting store.KeyLimits) both judge limits here.
func (l KeyLimits) Problems() []LimitProblem {
	var out []LimitProblem
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"rpm", l.RPM}, {"tpm", l.TPM}, {"concurrent", l.Concurrent},
		{"tokens_per_day", l.TokensPerDay}, {"tokens_per_month", l.TokensPerMonth},
	} {
		switch {
		case f.v < 0:
			out = append(out, LimitProblem{f.name, "must not be negative"})
		case f.v > MaxKeyLimit:
			out = append(out, LimitProblem{f.name, fmt.Sprintf("must be at most %d (0: unlimited)", MaxKeyLimit)})
		}
	}
	return out
}

// MaxPrice is the largest price pricing: takes, in USD per 1M tokens: far
// above any model's, and small enough that the cost of any usage a key may
// have (MaxKeyLimit tokens, many times over) stays a finite number.
const MaxPrice = 1e6

// Price is one model's price in pricing:, per 1M tokens.
type Price struct {
	Input  float64 `yaml:"input"`
	Output float64 `yaml:"output"`
	// CachedInput is nil when cached_input is left out (or null): cached
	// input is then priced as input (CachedInputPrice). 0 is a price, for
	// free cache hits or a self-hosted model.
	CachedInput *float64 `yaml:"cached_input"`
}

// CachedInputPrice is the price of cached input tokens: cached_input when
// set, 0 included, else input (README "Keys, limits and usage").
func (p Price) CachedInputPrice() float64 {
	if p.CachedInput != nil {
		return *p.CachedInput
	}
	return p.Input
}

// KeyNamePattern is what a key name may be.
var KeyNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// validateAccounts checks auth:, keys: and pricing:.
func (c *Config) validateAccounts(bad func(key, format string, args ...any)) {
	names := map[string]int{}
	secrets := map[[32]byte]int{} // by the secret's SHA-256, whichever way it is given
	for i, k := range c.Keys {
		key := fmt.Sprintf("keys[%d]", i)
		if !KeyNamePattern.MatchString(k.Name) {
			bad(key+".name", "%q is not a key name (letters, digits, . _ -, at most 64)", k.Name)
		} else if j, dup := names[k.Name]; dup {
			bad(key+".name", "%q is used by keys[%d] too", k.Name, j)
		} else {
			names[k.Name] = i
		}
		switch {
		case k.Key == "" && k.KeySHA256 == "":
			bad(key, "needs key_sha256 (hex SHA-256 of the secret) or key")
		case k.Key != "" && k.KeySHA256 != "":
			bad(key, "has both key and key_sha256; keep one")
		case k.KeySHA256 != "":
			if b, err := hex.DecodeString(strings.TrimSpace(k.KeySHA256)); err != nil || len(b) != 32 {
				bad(key+".key_sha256", "is not 64 hex digits")
			}
		case utf8.RuneCountInString(k.Key) < 16:
			bad(key+".key", "is shorter than 16 characters") // never echo the secret
		case strings.ContainsFunc(k.Key, IsCredentialSeparator):
			// The gateway splits a credential header into words at these
			// (IsCredentialSeparator), so no request could present this
			// secret: every one would be a 401. Never echo the secret.
			bad(key+".key", "contains white space, a comma, a quote or a semicolon, which split a credential header: no request could present it")
		}
		if sum, ok := k.secretSum(); ok {
			// A secret identifies one key: with two, the later key would take
			// it over and the earlier one's models and limits never apply.
			if j, dup := secrets[sum]; dup {
				bad(key, "%q has the same secret as keys[%d] (%q)", k.Name, j, c.Keys[j].Name) // never echo the secret
			} else {
				secrets[sum] = i
			}
		}
		for j, m := range k.Models {
			if _, err := path.Match(m, ""); err != nil || strings.TrimSpace(m) == "" {
				bad(fmt.Sprintf("%s.models[%d]", key, j), "%q is not a valid pattern", m)
			}
		}
		for _, p := range k.Limits.Problems() {
			bad(key+".limits."+p.Field, "%s", p.Problem)
		}
	}
	for _, m := range slices.Sorted(maps.Keys(c.Pricing)) { // a map's order changes from run to run
		p := c.Pricing[m]
		type field struct {
			name string
			v    float64
		}
		prices := []field{{"input", p.Input}, {"output", p.Output}}
		if p.CachedInput != nil { // left out, it is input's, checked as input
			prices = append(prices, field{"cached_input", *p.CachedInput})
		}
		for _, f := range prices {
			switch {
			case f.v < 0:
				bad("pricing."+m+"."+f.name, "prices must not be negative")
			case math.IsNaN(f.v) || f.v > MaxPrice:
				// A cost computed from it would overflow to +Inf or be NaN:
				// neither is a number /admin/usage's JSON or the cost metric
				// can carry.
				bad("pricing."+m+"."+f.name, "must be a number from 0 to %g (USD per 1M tokens)", float64(MaxPrice))
			}
		}
		// A price names one model exactly: a pattern would never match a
		// served name, and silently price nothing. A dated name an upstream
		// answers with is priced by the model it was asked for (README
		// "Keys, limits and usage").
		if strings.ContainsAny(m, "*?[") {
			bad("pricing."+m, "%q is a pattern; a price names one model exactly (a dated name an upstream answers with is priced as the model it was sent)", m)
		}
	}
}
