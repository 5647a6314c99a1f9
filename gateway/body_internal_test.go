package gateway

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/apierr"
)

func newTestServer(t *testing.T, opts Options) *Server {
	t.Helper()
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: "http://127.0.0.1:1/v1"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Pool = pool
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func zstded(t *testing.T, b []byte, opts ...zstd.EOption) []byte {
	enc, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(b, nil)
}

// TestReadBodyReleasesItsBudget: whatever way reading a body ends, the
// memory it reserved goes back to the budget; a leak would turn the gateway
// into a 503 machine after enough bad requests.
func TestReadBodyReleasesItsBudget(t *testing.T) {
	s := newTestServer(t, Options{MaxBodyBytes: 1 << 20, BodyMemoryBytes: 16 << 20})
	big := []byte(`{"model":"m","input":"` + strings.Repeat("a", 2<<20) + `"}`)
	small := []byte(`{"model":"m","input":"hi"}`)
	for _, tc := range []struct {
		name     string
		body     []byte
		encoding string
		length   int64 // -1: unknown (chunked)
		status   int   // 0: read fine
	}{
		{"plain", small, "", int64(len(small)), 0},
		{"plain chunked", small, "", -1, 0},
		{"plain over the cap by Content-Length", big, "", int64(len(big)), http.StatusRequestEntityTooLarge},
		{"plain over the cap chunked", big, "", -1, http.StatusRequestEntityTooLarge},
		{"gzip", gzipped(small), "gzip", -1, 0},
		{"gzip bomb", gzipped(big), "gzip", -1, http.StatusRequestEntityTooLarge},
		{"gzip corrupt", []byte("\x1f\x8bnot gzip"), "gzip", -1, http.StatusBadRequest},
		{"zstd", zstded(t, small), "zstd", -1, 0},
		{"zstd bomb", zstded(t, big), "zstd", -1, http.StatusRequestEntityTooLarge},
		{"zstd corrupt", []byte("(\xb5/\xfdgarbage"), "zstd", -1, http.StatusBadRequest},
		{"brotli", small, "br", -1, http.StatusUnsupportedMediaType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/responses", io.NopCloser(bytes.NewReader(tc.body)))
			r.ContentLength = tc.length
			if tc.encoding != "" {
				r.Header.Set("Content-Encoding", tc.encoding)
			}
			got, aerr := s.readBody(httptest.NewRecorder(), r)
			switch {
			case tc.status == 0 && aerr != nil:
				t.Fatalf("readBody: %v", aerr)
			case tc.status == 0 && !bytes.Equal(got, small):
				t.Fatalf("body %q", got)
			case tc.status != 0 && (aerr == nil || aerr.Status != tc.status):
				t.Fatalf("got %v, want status %d", aerr, tc.status)
			}
			if used := s.bodies.used.Load(); used != 0 {
				t.Fatalf("%d bytes of the body budget were not released", used)
			}
		})
	}
}

// TestReadBodyRefusesBeyondTheBudget: with the budget held by bodies being
// read, the next body is refused with a retryable 503 and Retry-After.
func TestReadBodyRefusesBeyondTheBudget(t *testing.T) {
	s := newTestServer(t, Options{MaxBodyBytes: 1 << 20, BodyMemoryBytes: 1 << 20})
	if !s.bodies.reserve(1<<20 - 100) { // another upload in flight
		t.Fatal("reserve")
	}
	body := []byte(`{"model":"m","input":"` + strings.Repeat("a", 4000) + `"}`)
	r := httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(body))
	_, aerr := s.readBody(httptest.NewRecorder(), r)
	if aerr == nil || aerr.Status != http.StatusServiceUnavailable || aerr.Code != apierr.CodeServerOverloaded || aerr.RetryAfter <= 0 {
		t.Fatalf("got %+v, want 503 server_overloaded with Retry-After", aerr)
	}
	w := httptest.NewRecorder()
	aerr.Write(w)
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("no Retry-After header")
	}
	s.bodies.release(1<<20 - 100)
	if _, aerr := s.readBody(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(body))); aerr != nil {
		t.Fatalf("after the other upload finished: %v", aerr)
	}
}

// TestReadBodyRefusesHugeZstdWindows: a zstd frame that asks for a window
// larger than the decoder allows is a clear 400, not memory held.
func TestReadBodyRefusesHugeZstdWindows(t *testing.T) {
	s := newTestServer(t, Options{MaxBodyBytes: 64 << 20, BodyMemoryBytes: 256 << 20})
	payload := []byte(`{"model":"m","input":"` + strings.Repeat("ab", 9<<20) + `"}`)
	body := zstded(t, payload, zstd.WithWindowSize(32<<20), zstd.WithSingleSegment(false))
	r := httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(body))
	r.Header.Set("Content-Encoding", "zstd")
	_, aerr := s.readBody(httptest.NewRecorder(), r)
	if aerr == nil || aerr.Status != http.StatusBadRequest || !strings.Contains(aerr.Message, "window") {
		t.Fatalf("got %v, want a 400 naming the window", aerr)
	}
}

func TestKeySetFindsTheFirstRepeat(t *testing.T) {
	for _, n := range []int{2, keySetScanMax, keySetScanMax + 1, keySetScanMax + 2, 1000} {
		for _, at := range []int{0, n / 2, n - 1} {
			t.Run(fmt.Sprintf("%d keys, repeat of %d", n, at), func(t *testing.T) {
				var ks keySet
				for i := 0; i < n; i++ {
					if !ks.add(fmt.Sprintf("k%d", i)) {
						t.Fatalf("k%d reported as a repeat", i)
					}
				}
				if ks.add(fmt.Sprintf("k%d", at)) {
					t.Fatalf("the repeat of k%d was not found", at)
				}
			})
		}
	}
}
