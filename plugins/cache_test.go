package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCacheDirFallbacks: an unusable user cache dir (HOME unset or
// read-only) moves the compilation cache to FallbackCacheDir, else to
// memory, with one warning naming wasm_cache_dir; an explicit CacheDir that
// cannot be written is an error.
func TestCacheDirFallbacks(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	unusable := filepath.Join(file, "dir") // under a regular file: fails even for root
	for _, tt := range []struct {
		name, home, fallback, wantUsing string
	}{
		{"HOME unset, fallback dir", "", filepath.Join(t.TempDir(), "wasm-cache"), "fallback"},
		{"HOME unusable, fallback dir", unusable, filepath.Join(t.TempDir(), "wasm-cache"), "fallback"},
		{"HOME unset, fallback unusable", "", unusable, "memory"},
		{"HOME unset, no fallback", "", "", "memory"},
		{"HOME usable", t.TempDir(), filepath.Join(t.TempDir(), "wasm-cache"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HOME", tt.home)
			t.Setenv("XDG_CACHE_HOME", "")
			var logs syncBuilder
			r := newRuntime(t, Options{
				Embedded:         map[string][]byte{"cfg.wasm": fixture(t, "config_echo")},
				FallbackCacheDir: tt.fallback,
				Logger:           hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs}),
			})
			if _, ok := statusOf(r, "cfg"); !ok { // loaded (compiled), whatever its verdict
				t.Fatal("policy not loaded")
			}
			warns := 0 // lines naming wasm_cache_dir
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "wasm_cache_dir") {
					warns++
				}
			}
			switch tt.wantUsing {
			case "":
				if warns != 0 {
					t.Fatalf("warned with a usable HOME:\n%s", logs.String())
				}
				if _, err := os.Stat(filepath.Join(tt.home, ".cache", "sluice", "wasm")); err != nil {
					t.Fatal(err)
				}
				return
			case "fallback":
				if entries, err := os.ReadDir(tt.fallback); err != nil || len(entries) == 0 {
					t.Fatalf("nothing cached in the fallback dir: %v", err)
				}
			}
			using := tt.fallback
			if tt.wantUsing == "memory" {
				using = "memory"
			}
			if warns != 1 || !strings.Contains(logs.String(), "[WARN]") || !strings.Contains(logs.String(), "wasm_cache_dir="+using) {
				t.Fatalf("want one WARN with wasm_cache_dir=%s:\n%s", using, logs.String())
			}
		})
	}

	_, err := New(context.Background(), Options{CacheDir: unusable})
	if err == nil || !strings.Contains(err.Error(), "wasm_cache_dir") {
		t.Fatalf("unusable explicit cache dir: %v", err)
	}
}
