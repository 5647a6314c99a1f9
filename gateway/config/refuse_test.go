package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRefuseReportsAtTheKeysLine: a problem found once the config is in
// use (a policy refusing policies.NAME) is reported as the file's own are:
// after "config FILE: ", at the line of its key, or of its nearest written
// parent; without a file, after "config: ".
func TestRefuseReportsAtTheKeysLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	const yaml = "# policies\npolicies:\n  recover: {sluice_fail_closed: true}\n  rewrite:\n    bogus: 1\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		problems []Problem
		want     string
	}{
		{"none", nil, ""},
		{"a policy's key", []Problem{{"policies.rewrite", "refused"}}, "config " + path + ": line 4: policies.rewrite: refused"},
		{"a key in a flow mapping", []Problem{{"policies.recover.sluice_fail_closed", "no rewrite"}},
			"config " + path + ": line 3: policies.recover.sluice_fail_closed: no rewrite"},
		{"a key not written: its parent's line", []Problem{{"policies.other", "x"}}, "config " + path + ": line 2: policies.other: x"},
		{"two", []Problem{{"policies.recover", "a"}, {"policies.rewrite", "b"}},
			"config " + path + ": 2 problems:\n  line 3: policies.recover: a\n  line 4: policies.rewrite: b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := cfg.Refuse(tt.problems...)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("error %v\nwant  %s", err, tt.want)
			}
		})
	}
	noFile := Defaults()
	if err := noFile.Refuse(Problem{"policies.rewrite", "refused"}); err == nil || err.Error() != "config: policies.rewrite: refused" {
		t.Fatalf("without a file: %v", err)
	}
}
