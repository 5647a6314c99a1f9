package streaminput

import (
	"net/http"
	"time"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// tracedREST wraps a REST call's writer when Options.Trace is set, and
// returns what reports the call to it once answered.
func (m *Manager) tracedREST(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, func()) {
	if m.opts.Trace == nil {
		return w, func() {}
	}
	start := time.Now()
	rec := &answerRecorder{ResponseWriter: w}
	return rec, func() { m.opts.Trace(r, start, rec.statusOrOK(), rec.code()) }
}

// traceRefusal reports a Mode A request refused with aerr before its
// session dispatched it to Options.Trace.
func (m *Manager) traceRefusal(r *http.Request, start time.Time, aerr *apierr.Error) {
	if m.opts.Trace != nil {
		m.opts.Trace(r, start, aerr.Status, aerr.Code)
	}
}

// maxErrorBodyKept bounds what answerRecorder keeps of an error body:
// every error this package writes is a short OpenAI error object.
const maxErrorBodyKept = 8 << 10

// answerRecorder notes a REST call's status and, for an error, the start
// of its body, where its code is (apierr.Parse). Unwrap lets
// http.ResponseController reach the connection (deadlines, flushes).
type answerRecorder struct {
	http.ResponseWriter
	status  int
	errBody []byte
}

func (a *answerRecorder) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
	a.ResponseWriter.WriteHeader(status)
}

func (a *answerRecorder) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if a.status >= 400 && len(a.errBody) < maxErrorBodyKept {
		a.errBody = append(a.errBody, b[:min(len(b), maxErrorBodyKept-len(a.errBody))]...)
	}
	return a.ResponseWriter.Write(b)
}

func (a *answerRecorder) Unwrap() http.ResponseWriter { return a.ResponseWriter }

func (a *answerRecorder) statusOrOK() int {
	if a.status == 0 {
		return http.StatusOK
	}
	return a.status
}

// code is the error code of the answer, "" for a success.
func (a *answerRecorder) code() string {
	if a.status < 400 {
		return ""
	}
	if e, ok := apierr.Parse(a.errBody); ok {
		return e.Code
	}
	return ""
}
