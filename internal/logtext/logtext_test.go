package logtext

import "testing"

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                         "plain",
		"a\nb\r\nc":                     "abc",
		"\x1b[31mred\x1b[0m":            "[31mred[0m",
		"nul\x00byte\x7f":               "nulbyte",
		"bad \xff\xfe utf8":             "bad \uFFFD utf8",
		"tab\there":                     "tabhere",
		"café \u2028 line separator ok": "café \u2028 line separator ok",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
