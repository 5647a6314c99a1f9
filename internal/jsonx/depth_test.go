package jsonx

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestCheckDepth(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		max  int
		ok   bool
	}{
		{"empty", ``, 2, true},
		{"scalar", `"x"`, 1, true},
		{"at the limit", `{"a":[1]}`, 2, true},
		{"over the limit", `{"a":[[1]]}`, 2, false},
		{"brackets in strings do not count", `{"a":"[[[[[[{{{{"}`, 1, true},
		{"escaped quote keeps the string open", `{"a":"\"[[[[["}`, 1, true},
		{"escaped backslash closes the string", `{"a":"\\"}`, 1, true},
		{"after an escaped backslash brackets count", `["\\",[[1]]]`, 2, false},
		{"siblings do not add up", `[[1],[2],[3],[[4]]]`, 3, true},
		{"unterminated string", `["[[[[`, 1, true},
		{"unbalanced closers never go negative", `]]]]][[`, 1, false},
		{"default limit", strings.Repeat("[", DefaultMaxDepth) + strings.Repeat("]", DefaultMaxDepth), 0, true},
		{"default limit crossed", strings.Repeat("[", DefaultMaxDepth+1), 0, false},
		{"six million", strings.Repeat("[", 6_000_000), 128, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckDepth([]byte(tc.in), tc.max)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckDepth(%.40q, %d) = %v, want ok=%v", tc.in, tc.max, err, tc.ok)
			}
			var de *DepthError
			if err != nil && !errors.As(err, &de) {
				t.Fatalf("error %T is not a *DepthError", err)
			}
		})
	}
}

func TestCheckDepthContextStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	big := []byte(strings.Repeat(`{"a":1},`, 1<<19))
	if err := CheckDepthContext(ctx, big, 8); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func FuzzCheckDepth(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"b":"]]"}]}`), 3)
	f.Add([]byte(`["\\\"[",[[]]]`), 2)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		if max > 64 || max < -1 {
			max = 8
		}
		err := CheckDepth(b, max)
		// The reference: a naive, obviously-correct scanner.
		lim := max
		if lim <= 0 {
			lim = DefaultMaxDepth
		}
		d, in, esc, over := 0, false, false, false
		for _, c := range b {
			switch {
			case in && esc:
				esc = false
			case in && c == '\\':
				esc = true
			case in && c == '"':
				in = false
			case in:
			case c == '"':
				in = true
			case c == '[' || c == '{':
				d++
				if d > lim {
					over = true
				}
			case c == ']' || c == '}':
				if d > 0 {
					d--
				}
			}
			if over {
				break
			}
		}
		if over != (err != nil) {
			t.Fatalf("CheckDepth(%q, %d) = %v, reference over=%v", b, max, err, over)
		}
	})
}
