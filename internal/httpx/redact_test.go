package httpx

import "testing"

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"},
		{"https://sk-abc@api.example.com/v1", "https://[redacted]@api.example.com/v1"},
		{"redis://alice:hunter2@cache:6379/0", "redis://[redacted]@cache:6379/0"},
		{"redis://@127.0.0.1:6379/0", "redis://[redacted]@127.0.0.1:6379/0"},
		{"redis://al ice:hunter2@cache:6379", "redis://[redacted]@cache:6379"},
		{"rediss://u:pa/ss@cache:6380/1", "rediss://[redacted]@cache:6380/1"},
		{"sk-abc@api.example.com/v1", "[redacted]@api.example.com/v1"},
		{"http://host/v1?key=sk-abc", "http://host/v1?…"},
		{"http://host/v1#sk-abc", "http://host/v1#…"},
		{"http://host/v1?", "http://host/v1?"},
		{"http://u:p@host/v1?key=k", "http://[redacted]@host/v1?…"},
		{"", ""},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
