package config

import "testing"

// A file that does not parse as a whole still says how its errors are to
// be reported: Parse returns its log: section with the error, so that
// log.json applies to an unknown key, a wrong type or an unset ${VAR} as
// it does to a value Validate refuses.
func TestParseErrorKeepsTheLogSection(t *testing.T) {
	for name, yaml := range map[string]string{
		"unknown key": "log: {json: true}\nlisten_typo: x\n",
		"wrong type":  "log: {json: true}\nlimits: {max_body_bytes: abc}\n",
		"unset var":   "log: {json: true}\nadmin_token: ${SLUICE_TEST_SURELY_UNSET}\n",
		"validate":    "log: {json: true}\ntimeouts: {connect: 0s}\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(yaml), func(string) (string, bool) { return "", false })
			if err == nil {
				t.Fatal("no error")
			}
			if !c.Log.JSON {
				t.Fatalf("log.json lost with the error %v", err)
			}
		})
	}
}
