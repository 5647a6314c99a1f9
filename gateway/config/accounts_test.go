package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestKeysWithTheSameSecretAreRefused: two keys with one secret, whether
// given in clear (key:) or hashed (key_sha256:, in any case), are refused
// naming both keys and never the secret; otherwise the later key would
// silently take the secret over and the earlier one's models and limits
// would never apply.
func TestKeysWithTheSameSecretAreRefused(t *testing.T) {
	const secret = "sk-shared-0123456789abcdef"
	sum := sha256.Sum256([]byte(secret))
	hexSum := hex.EncodeToString(sum[:])
	const want = `keys[1]: "second" has the same secret as keys[0] ("first")`
	for _, tt := range []struct{ name, keys, want string }{ // want "": accepted
		{"both in clear", `[{name: first, key: "${S}", models: ["gpt-x"]}, {name: second, key: "${S}", limits: {rpm: 1}}]`, want},
		{"in clear and hashed", `[{name: first, key: "${S}"}, {name: second, key_sha256: "` + hexSum + `"}]`, want},
		{"hashed, in another case", `[{name: first, key_sha256: "` + hexSum + `"}, {name: second, key_sha256: " ` + strings.ToUpper(hexSum) + `"}]`, want},
		{"a third key names the first it repeats", `[{name: first, key: "${S}"}, {name: other, key: "${T}"}, {name: third, key: "${S}"}]`,
			`keys[2]: "third" has the same secret as keys[0] ("first")`},
		{"different secrets", `[{name: first, key: "${S}"}, {name: second, key: "${T}"}]`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("keys: "+tt.keys+"\n"), env(map[string]string{"S": secret, "T": "sk-other-0123456789abcdef"}))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || withoutLines(err) != tt.want):
				t.Fatalf("error %v\nwant %q", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(strings.ToLower(err.Error()), hexSum)) {
				t.Fatalf("the error shows the secret or its hash: %v", err)
			}
		})
	}
}

// TestPricingNamesModelsExactly: a pricing key with a glob character is
// refused naming it, since prices are looked up by exact model name and a
// pattern would silently price nothing; plain names, dated or not, pass.
func TestPricingNamesModelsExactly(t *testing.T) {
	for _, tt := range []struct{ name, pricing, want string }{ // want "": accepted
		{"a star", `{"gpt-5*": {input: 1}}`, `pricing.gpt-5*: "gpt-5*" is a pattern`},
		{"a question mark", `{"gpt-?": {input: 1}}`, `pricing.gpt-?: "gpt-?" is a pattern`},
		{"a class", `{"gpt-[45]": {input: 1}}`, `pricing.gpt-[45]: "gpt-[45]" is a pattern`},
		{"plain names", `{gpt-5: {input: 1.25, output: 10}, gpt-5-2025-08-07: {input: 1}}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("pricing: "+tt.pricing+"\n"), env(nil))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(withoutLines(err), tt.want)):
				t.Fatalf("error %v\nwant %q…", err, tt.want)
			}
		})
	}
}
