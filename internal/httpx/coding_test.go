package httpx

import (
	"net/http"
	"testing"
)

func TestContentCoding(t *testing.T) {
	for _, c := range []struct {
		lines []string
		want  string
	}{
		{nil, ""},
		{[]string{"gzip"}, "gzip"},
		{[]string{" GZip "}, "gzip"},
		{[]string{"gzip, br"}, "gzip, br"},
		{[]string{"gzip", "br"}, "gzip, br"},
		{[]string{"gzip", "gzip"}, "gzip, gzip"},
		{[]string{"gzip,", ""}, "gzip"},
		{[]string{",,zstd"}, "zstd"},
	} {
		h := http.Header{}
		for _, l := range c.lines {
			h.Add("Content-Encoding", l)
		}
		if got := ContentCoding(h); got != c.want {
			t.Errorf("%q: %q, want %q", c.lines, got, c.want)
		}
	}
}
