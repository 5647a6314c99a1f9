package config

import "regexp"

// lineNumber is the "line N: " a problem found in a file starts with.
var lineNumber = regexp.MustCompile(`(?m)^line [0-9]+: `)

// withoutLines is err's text without the line of each problem, for the
// tests that pin the messages (TestConfigProblemFiles pins the lines).
func withoutLines(err error) string {
	return lineNumber.ReplaceAllString(err.Error(), "")
}
