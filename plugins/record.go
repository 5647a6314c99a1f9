package plugins

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/eventring"
)

// Record is one line of a recording (Options.RecordDir): a hook call the
// gateway made and what it got. Its hook, input, body, headers, surface and
// endpoint members are those of a `sluice policy test -events` event, so a
// recording replays as it is (`sluice policy test FILE -recording DIR`).
type Record struct {
	Time      string            `json:"time"`
	Hook      string            `json:"hook"`            // recover, replay, rewrite or stream_event
	Input     json.RawMessage   `json:"input,omitempty"` // recover, replay and stream_event: the hook input (ABI.md §3)
	Surface   string            `json:"surface,omitempty"`
	Endpoint  string            `json:"endpoint,omitempty"`
	Body      json.RawMessage   `json:"body,omitempty"`    // rewrite: the client body
	Headers   map[string]string `json:"headers,omitempty"` // rewrite: the headers a policy may read
	Verdict   string            `json:"verdict"`           // the verdict name; for rewrite changed, unchanged, rejected or failed_closed
	DecidedBy string            `json:"decided_by"`        // the policy, or "default"; for rewrite see rewriteDecidedBy
	Output    json.RawMessage   `json:"output,omitempty"`  // recover, replay and stream_event: the output
	// EffectiveVerdict, on a recover line, is what the gateway did with
	// Verdict, the policy's (hostabi.EffectiveRecover): rehydrate answers
	// only an owner_unavailable question and fails an upstream error
	// closed. Verdict stays the policy's: `sluice policy test -recording`
	// compares a candidate's verdict with it.
	EffectiveVerdict string `json:"effective_verdict,omitempty"`
	// UpstreamEvents are the last upstream events (at most eventring.Size,
	// oldest first) of the attempt whose failure a recover or replay call
	// is about, when the gateway saw any; keys and ids in them are
	// redacted like the rest of the line. `sluice policy test` ignores them.
	UpstreamEvents []eventring.Event `json:"upstream_events,omitempty"`
}

// Recording limits.
const (
	DefaultRecordFileBytes = 16 << 20 // a file is rotated past this size
	DefaultRecordFiles     = 8        // the files' total is kept to this many times the rotation size
	recordPrefix           = "hooks-"
)

// ErrNoRecordDir is returned by SetRecording when no RecordDir was configured.
var ErrNoRecordDir = errors.New("plugins: no record_dir configured")

// idRE matches what logs redact: API keys and response, message, item and
// call ids.
var idRE = regexp.MustCompile(`\b(?:sk-[A-Za-z0-9_\-]{6,}|(?:resp|msg|rs|fc|call|conv|chatcmpl|ws|req|item|ctc)_[A-Za-z0-9_\-]{6,})`)

// RedactID is how recordings hide an id: the first 6 bytes of its sha256,
// the same form as store.RedactID in logs, so ids still correlate.
func RedactID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// redactIDs replaces every key and id in a JSON text.
func redactIDs(b []byte) []byte {
	return idRE.ReplaceAllFunc(b, func(m []byte) []byte { return []byte(RedactID(string(m))) })
}

// recorder appends Records as JSONL to rotated files in a directory.
type recorder struct {
	dir      string
	maxBytes int64
	keep     int

	mu sync.Mutex
	f  *os.File
	n  int64
	on bool
}

func newRecorder(o Options) *recorder {
	rec := &recorder{dir: o.RecordDir, maxBytes: o.RecordFileBytes, keep: o.RecordFiles, on: o.RecordDir != ""}
	if rec.maxBytes <= 0 {
		rec.maxBytes = DefaultRecordFileBytes
	}
	if rec.keep <= 0 {
		rec.keep = DefaultRecordFiles
	}
	return rec
}

// SetRecording starts or stops recording hook calls to Options.RecordDir.
func (r *Runtime) SetRecording(on bool) error {
	if r.rec == nil {
		return ErrNoRecordDir
	}
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	r.rec.on = on
	if !on {
		r.rec.closeLocked()
	}
	r.recording.Store(on)
	return nil
}

// Recording reports the record dir ("" when none) and whether it records.
func (r *Runtime) Recording() (string, bool) {
	if r.rec == nil {
		return "", false
	}
	return r.rec.dir, r.recording.Load()
}

func (rec *recorder) closeLocked() {
	if rec.f != nil {
		_ = rec.f.Close()
		rec.f, rec.n = nil, 0
	}
}

// write appends one record; errors are logged by the caller once.
func (rec *recorder) write(line []byte) error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !rec.on {
		return nil
	}
	if rec.f != nil && rec.n+int64(len(line)) > rec.maxBytes {
		rec.closeLocked()
	}
	if rec.f == nil {
		if err := rec.openLocked(int64(len(line))); err != nil {
			return err
		}
	}
	n, err := rec.f.Write(line)
	rec.n += int64(n)
	return err
}

// openLocked opens the file the next record, of next bytes, goes to: the
// newest recording file when it has room for it and ends with a whole line, so that restarts and
// toggling recording do not each start a file, or else a new one. Then it
// prunes the older files.
func (rec *recorder) openLocked(next int64) error {
	if err := os.MkdirAll(rec.dir, 0o700); err != nil {
		return fmt.Errorf("record_dir: %w", err)
	}
	if files := rec.filesLocked(); len(files) > 0 {
		newest := files[len(files)-1]
		if size, ok := appendable(newest, rec.maxBytes-next); ok {
			f, err := os.OpenFile(newest, os.O_WRONLY|os.O_APPEND, 0o600)
			if err == nil {
				rec.f, rec.n = f, size
				rec.pruneLocked()
				return nil
			}
		}
	}
	name := filepath.Join(rec.dir, fmt.Sprintf("%s%s.jsonl", recordPrefix, time.Now().UTC().Format("20060102T150405.000000000Z")))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	rec.f, rec.n = f, 0
	rec.pruneLocked()
	return nil
}

// appendable reports the size of the recording file name and whether
// records may be appended to it: it is a regular file of at most maxBytes
// (or empty) whose last byte ends a line. A file cut mid-line (the gateway was killed while
// writing) is left as it is; appending would join the next record to its
// broken last line.
func appendable(name string, maxBytes int64) (int64, bool) {
	fi, err := os.Lstat(name)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 0 && fi.Size() > maxBytes {
		return 0, false
	}
	if fi.Size() == 0 {
		return 0, true
	}
	f, err := os.Open(name)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, fi.Size()-1); err != nil || last[0] != '\n' {
		return 0, false
	}
	return fi.Size(), true
}

// filesLocked lists the recording files, oldest first (names sort by time).
func (rec *recorder) filesLocked() []string {
	m, _ := filepath.Glob(filepath.Join(rec.dir, recordPrefix+"*.jsonl"))
	sort.Strings(m)
	return m
}

// pruneLocked deletes the older recording files by size, not by count, so
// that short runs (restarts, a crash loop) do not push out a large
// recording: the file being written may grow to maxBytes, and the newest of
// the others are kept while they total at most (keep-1) × maxBytes, so the
// directory holds at most keep × maxBytes (README "Recorded traffic as
// tests").
func (rec *recorder) pruneLocked() {
	files := rec.filesLocked()
	current := rec.f.Name()
	budget := int64(rec.keep-1) * rec.maxBytes
	var total int64
	full := false
	for i := len(files) - 1; i >= 0; i-- {
		if files[i] == current {
			continue
		}
		if !full {
			if fi, err := os.Lstat(files[i]); err == nil && total+fi.Size() <= budget {
				total += fi.Size()
				continue
			}
			full = true // this one and every older file go
		}
		_ = os.Remove(files[i])
	}
}

// decidedBy names the module whose recover, replay or stream_event answer
// was used, or "default".
func decidedBy(tr Trace) string {
	if tr.Outcome == "decided" && tr.Policy != "" {
		return tr.Policy
	}
	return "default"
}

// Rewrite verdicts, as recorded and as `sluice policy test` reports them.
const (
	RewriteChanged   = "changed"   // the request the gateway sends differs: body, headers or upstream choice
	RewriteUnchanged = "unchanged" // the request goes on as it came
	RewriteRejected  = "rejected"  // the client is answered with the policy's error
	// RewriteFailedClosed: a module the gateway holds to its edits
	// (hostabi.FailClosedKey) could not complete its rewrite
	// (Trace.FailedClosed), and the client is answered 503
	// policy_unavailable (README "Policies").
	RewriteFailedClosed = "failed_closed"
)

// RewriteTraceVerdict is RewriteVerdict of a rewrite whose trace is tr, as
// the gateway acts on it: a chain that failed closed sends nothing, whatever
// out says; one stopped at a use_upstream the caller does not know
// (Trace.UnknownUpstream) fails the request (500, ABI.md §3.3), so none of
// its edits reach an upstream and the request counts as unchanged, though
// out names that upstream.
func RewriteTraceVerdict(in hostabi.RewriteInput, out hostabi.RewriteOutput, tr Trace) string {
	switch {
	case tr.FailedClosed:
		return RewriteFailedClosed
	case tr.UnknownUpstream:
		return RewriteUnchanged
	}
	return RewriteVerdict(in, out)
}

// RewriteVerdict names the result of a rewrite of in. "changed" covers
// every edit the gateway applies to the request it sends, not only the
// body's: a policy that only sets a header or picks an upstream changed the
// request too. A body returned byte for byte as it came (a field set to the
// value it had) changes nothing the gateway sends.
func RewriteVerdict(in hostabi.RewriteInput, out hostabi.RewriteOutput) string {
	switch {
	case out.Reject != nil:
		return RewriteRejected
	case rewriteEdited(in, out):
		return RewriteChanged
	}
	return RewriteUnchanged
}

// rewriteEdited reports whether out edits the request in that the gateway
// sends.
func rewriteEdited(in hostabi.RewriteInput, out hostabi.RewriteOutput) bool {
	return out.Body != nil && !bytes.Equal(out.Body, in.Body) || len(out.SetHeaders) > 0 || len(out.RemoveHeaders) > 0 || out.Upstream != ""
}

// rewriteDecidedBy names who made a rewrite's result, whose verdict is
// RewriteTraceVerdict's: the module that rejected, or that failed closed; for an edited request
// the modules that ran their rewrite and returned done (their edits are the
// ones applied, in chain order, comma separated); "default" when the
// request was left as it came.
func rewriteDecidedBy(verdict string, tr Trace) string {
	if (verdict == RewriteRejected || verdict == RewriteFailedClosed) && tr.Policy != "" {
		return tr.Policy
	}
	if verdict != RewriteChanged {
		return "default"
	}
	var names []string
	for _, st := range tr.Steps {
		if st.Outcome == outOK.String() && !slices.Contains(names, st.Policy) {
			names = append(names, st.Policy)
		}
	}
	if len(names) == 0 {
		return "default"
	}
	return strings.Join(names, ",")
}

func (r *Runtime) record(rc *Record) {
	rc.Time = time.Now().UTC().Format(time.RFC3339Nano)
	line, err := json.Marshal(rc)
	if err == nil {
		line = append(redactIDs(line), '\n')
		err = r.rec.write(line)
	}
	if err != nil && r.recordErr.CompareAndSwap(false, true) {
		r.log.Warn("cannot record hook calls; recording continues to try", "dir", r.rec.dir, "error", err)
	}
}

func (r *Runtime) recordRecover(ctx context.Context, in hostabi.RecoverInput, out hostabi.RecoverOutput, tr Trace) {
	rc := Record{Hook: "recover", Verdict: out.Verdict.String(), EffectiveVerdict: hostabi.EffectiveRecover(in, out.Verdict).String(),
		DecidedBy: decidedBy(tr), UpstreamEvents: eventring.FromContext(ctx).Events()}
	rc.Input, _ = json.Marshal(in)
	rc.Output, _ = json.Marshal(out)
	r.record(&rc)
}

func (r *Runtime) recordReplay(ctx context.Context, in hostabi.ReplayInput, out hostabi.ReplayOutput, tr Trace) {
	rc := Record{Hook: "replay", Verdict: out.Verdict.String(), DecidedBy: decidedBy(tr), UpstreamEvents: eventring.FromContext(ctx).Events()}
	rc.Input, _ = json.Marshal(in)
	rc.Output, _ = json.Marshal(out)
	r.record(&rc)
}

func (r *Runtime) recordRewrite(in hostabi.RewriteInput, out hostabi.RewriteOutput, tr Trace) {
	// What the gateway did with the request, as `sluice policy test`
	// computes it on the replay.
	verdict := RewriteTraceVerdict(in, out, tr)
	rc := Record{Hook: "rewrite", Surface: in.Surface, Endpoint: in.Endpoint, Headers: recordedHeaders(in.Headers),
		Verdict: verdict, DecidedBy: rewriteDecidedBy(verdict, tr)}
	if json.Valid(in.Body) {
		rc.Body = in.Body
	}
	if strings.TrimSpace(string(rc.Body)) == "" {
		rc.Body = nil
	}
	r.record(&rc)
}

// recordedHeaders are the headers a rewrite line keeps: those the policy
// read, less every header that is or looks like a credential by its name
// (hostabi.LooksLikeCredential) or its value (hostabi.CredentialValue). A policy may read X-Auth-Token and the
// like, but a recording is a file on disk, and credentials are never
// written to disk; a replay of the line sees the headers without them.
func recordedHeaders(h map[string]string) map[string]string {
	out := visibleHeaders(h)
	for k, v := range out {
		if hostabi.LooksLikeCredential(k) || hostabi.CredentialValue(v) {
			delete(out, k)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// recordStreamEvent records one stream_event call: a line per event, its
// input and output in the ABI's encoding (ABI.md §3.5), so that a replay
// gives the module exactly what it got. Like a rewrite body, the delta or
// text is recorded as sent; file rotation bounds the volume.
func (r *Runtime) recordStreamEvent(in hostabi.StreamEventInput, out hostabi.StreamEventOutput, tr Trace) {
	rc := Record{Hook: "stream_event", Verdict: out.Verdict.String(),
		Input:  hostabi.AppendStreamEventInput(nil, in),
		Output: hostabi.AppendStreamEventOutput(nil, out), DecidedBy: decidedBy(tr)}
	r.record(&rc)
}
