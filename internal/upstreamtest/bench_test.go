package upstreamtest

import (
	"net/http"
	"strings"
	"testing"
)

// discardWriter is a minimal flushable http.ResponseWriter.
type discardWriter struct {
	h http.Header
	n int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }
func (w *discardWriter) Flush()                      {}

// BenchmarkCannedResponsesStream measures the handler's own cost for the
// canned happy path (no network).
func BenchmarkCannedResponsesStream(b *testing.B) {
	for _, rec := range []bool{true, false} {
		name := "recording"
		if !rec {
			name = "no-recording"
		}
		b.Run(name, func(b *testing.B) {
			s := NewHandler(Options{Name: "bench", DisableRecording: !rec})
			defer s.Close()
			const body = `{"model":"gpt-fake-1","input":"hi","stream":true}`
			b.ReportAllocs()
			for b.Loop() {
				r, _ := http.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body))
				w := &discardWriter{h: http.Header{}}
				s.ServeHTTP(w, r)
				if w.n == 0 {
					b.Fatal("no output")
				}
				if rec && s.RequestCount() > 10000 {
					s.ClearRequests()
				}
			}
		})
	}
}
