package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeySecretWithACredentialSeparatorIsRefused: the gateway splits a
// credential header's value into words at IsCredentialSeparator and looks
// each word up, so a secret with white space, a comma, a quote or a
// semicolon could never be presented: every request would be a 401. The
// config refuses it at load, naming the key's path and never the secret;
// any other character is still a secret's own.
func TestKeySecretWithACredentialSeparatorIsRefused(t *testing.T) {
	const refused = "keys[0].key: contains white space, a comma, a quote or a semicolon, which split a credential header: no request could present it"
	for _, tt := range []struct{ name, secret, want string }{ // want "": accepted
		{"a space", "teamsecret withspace1", refused},
		{"a comma", "teamsecret,withcomma1", refused},
		{"a tab", "teamsecret\twithtab01", refused},
		{"a mounted secret's trailing newline", "teamsecret-newline01\n", refused},
		{"a leading space", " teamsecret-leading1", refused},
		{"a no-break space", "teamsecret\u00a0nbsp0001", refused},
		{"a double quote", `teamsecret"quoted001`, refused},
		{"a single quote", "teamsecret'quoted001", refused},
		{"a semicolon", "teamsecret;semicolon1", refused},
		{"punctuation that splits nothing", "sk-team_a.b+c/d=e:f~g!h", ""},
		{"a generated key", "sk-sluice-0123456789abcdefABCDEF_-", ""},
		{"non-ASCII letters", "clé-secrète-ünïcødé", ""},
		{"15 characters", "teamsecret-1234", "keys[0].key: is shorter than 16 characters"},
		{"16 bytes but 8 characters", "éééééééé", "keys[0].key: is shorter than 16 characters"},
		{"16 characters", "teamsecret-12345", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("keys: [{name: a, key: \"${S}\"}]\n"), env(map[string]string{"S": tt.secret}))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || withoutLines(err) != tt.want):
				t.Fatalf("error %v\nwant %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), strings.TrimSpace(tt.secret)) {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}

// TestLoadRefusesKeySecretsNoRequestCouldPresent: loading a config file with
// such secrets names each key, so sluice exits 1 rather than start with
// keys that always answer 401.
func TestLoadRefusesKeySecretsNoRequestCouldPresent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := "auth: {required: true}\n" +
		"upstreams: [{name: u, base_url: \"http://127.0.0.1:1/v1\", api_key: \"upk-123456789\"}]\n" +
		"keys:\n" +
		"  - {name: sp, key: \"teamsecret withspace1\"}\n" +
		"  - {name: ok, key: \"teamsecret-nospace01\"}\n" +
		"  - {name: cm, key: \"teamsecret,withcomma1\"}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	const why = ": contains white space, a comma, a quote or a semicolon, which split a credential header: no request could present it"
	want := "config " + path + ": 2 problems:\n  line 4: keys[0].key" + why + "\n  line 6: keys[2].key" + why
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
