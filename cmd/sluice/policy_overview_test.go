package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestPolicyOverviewListsEveryFlag: `sluice policy --help` lists each
// subcommand with its flags; every flag the subcommand's own -h documents
// is in each of its forms there (test's forms differ only in the input
// they replay: -events, or -recording with -expect).
func TestPolicyOverviewListsEveryFlag(t *testing.T) {
	_, overview, _ := runCLI("policy", "--help")
	flagLine := regexp.MustCompile(`(?m)^  (-[a-z-]+)`)
	forms := map[string]bool{"-events": true, "-recording": true, "-expect": true}
	for _, sub := range []string{"new", "build", "check", "test"} {
		_, help, _ := runCLI("policy", sub, "-h")
		var usages []string // each form: its line and the "       [" lines after it
		for _, line := range strings.Split(overview, "\n") {
			switch {
			case regexp.MustCompile(`^  ` + sub + ` [A-Z]`).MatchString(line): // "  check FILE …", not "  check and test …"
				usages = append(usages, line)
			case len(usages) > 0 && strings.HasPrefix(line, "       ["):
				usages[len(usages)-1] += " " + line
			}
		}
		if len(usages) == 0 {
			t.Fatalf("policy %s is not in the overview:\n%s", sub, overview)
		}
		for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
			for _, usage := range usages {
				if !forms[m[1]] && !regexp.MustCompile(regexp.QuoteMeta(m[1])+`\b[^-]`).MatchString(usage+" ") {
					t.Errorf("policy %s: %s is documented in its -h but not in the overview's %q", sub, m[1], usage)
				}
			}
		}
	}
}
