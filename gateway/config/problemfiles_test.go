package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigProblemFiles: each testdata/problems/NAME.yaml is refused in one
// run with every problem it has, each on its line, exactly as in NAME.want
// (one problem a line): what could not be read and what was read but is
// wrong together, nothing reported twice or as a consequence of another.
func TestConfigProblemFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "problems", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no problem files: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata", "problems", name+".want"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(raw, env(nil))
			if err == nil {
				t.Fatalf("accepted; want\n%s", want)
			}
			if got := err.Error() + "\n"; got != string(want) {
				t.Fatalf("problems\n%s\nwant\n%s", got, want)
			}
		})
	}
}
