package policycli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/plugins"
)

// replayed is one output line of `policy test -recording`.
type replayed struct {
	Hook            string `json:"hook"`
	Request         string `json:"request"` // FILE:LINE in the recording
	RecordedVerdict string `json:"recorded_verdict"`
	Verdict         string `json:"verdict"`
	Changed         bool   `json:"changed"`
	DecidedBy       string `json:"decided_by,omitempty"`
	Outcome         string `json:"outcome,omitempty"` // as -events reports it
	// Output and RecordedOutput are a stream_event's answers now and in the
	// recording: a replace's verdict says nothing of its replacement.
	Output         json.RawMessage `json:"output,omitempty"`
	RecordedOutput json.RawMessage `json:"recorded_output,omitempty"`
	Error          string          `json:"error,omitempty"`
	Expect         string          `json:"expect,omitempty"`
}

// summary is the last output line of `policy test -recording`.
type summary struct {
	Summary struct {
		Inputs     int            `json:"inputs"`
		Changed    int            `json:"changed"`
		Errors     int            `json:"errors"`
		Expected   int            `json:"expected,omitempty"`
		Mismatches int            `json:"mismatches,omitempty"`
		ByHook     map[string]int `json:"changed_by_hook,omitempty"`
	} `json:"summary"`
}

// recordingFiles lists a record_dir's JSONL files oldest first (or the one
// file given).
func recordingFiles(dir string) ([]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{dir}, nil
	}
	m, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(m)
	if len(m) == 0 {
		return nil, fmt.Errorf("%s holds no *.jsonl recording", dir)
	}
	return m, nil
}

// readExpect reads an -expect file: JSONL objects with request and verdict
// (an earlier output of -recording works as it is; its summary is skipped).
func readExpect(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	want := map[string]string{}
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var e struct{ Request, Verdict string }
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, i+1, err)
		}
		if e.Request != "" {
			want[e.Request] = e.Verdict
		}
	}
	return want, nil
}

func runRecording(ctx context.Context, file, dir, expectFile string, spec loadSpec, check *gatewayChecks, stdout, stderr io.Writer) error {
	files, err := recordingFiles(dir)
	if err != nil {
		return err
	}
	var want map[string]string
	if expectFile != "" {
		if want, err = readExpect(expectFile); err != nil {
			return err
		}
	}
	rt, name, err := open(ctx, file, spec)
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	if err := serves(rt, name, spec, check, file, stderr); err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	var sum summary
	seen := map[string]bool{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for line := 1; sc.Scan(); line++ {
			text := bytes.TrimSpace(sc.Bytes())
			if len(text) == 0 || text[0] == '#' {
				continue
			}
			var rec plugins.Record
			_ = json.Unmarshal(text, &rec)
			res := runEvent(ctx, rt, check, line, text)
			out := replayed{Hook: res.Hook, Request: fmt.Sprintf("%s:%d", filepath.Base(f), line),
				RecordedVerdict: rec.Verdict, Verdict: res.Verdict, DecidedBy: res.DecidedBy, Outcome: res.Outcome, Error: res.Error}
			out.Changed = out.Verdict != out.RecordedVerdict
			if now, ok := res.Output.(json.RawMessage); ok && res.Hook == "stream_event" {
				out.Output, out.RecordedOutput = now, rec.Output
				out.Changed = out.Changed || (len(rec.Output) > 0 && !sameStreamOutput(now, rec.Output))
			}
			sum.Summary.Inputs++
			errorExpected := false
			if out.Changed {
				sum.Summary.Changed++
				if sum.Summary.ByHook == nil {
					sum.Summary.ByHook = map[string]int{}
				}
				sum.Summary.ByHook[out.Hook]++
			}
			if v, ok := want[out.Request]; ok {
				seen[out.Request] = true
				sum.Summary.Expected++
				out.Expect = v
				if v != out.Verdict {
					sum.Summary.Mismatches++
					why := fmt.Sprintf("%s: %s verdict %s, expected %s", out.Request, out.Hook, out.Verdict, v)
					if out.Error != "" {
						why += ": " + out.Error
					}
					fmt.Fprintln(stderr, why)
				}
				errorExpected = expectedFailClosed(v, out.Verdict)
			}
			if out.Error != "" && !errorExpected {
				sum.Summary.Errors++
			}
			if err := enc.Encode(out); err != nil {
				fh.Close()
				return err
			}
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return err
		}
	}
	if sum.Summary.Inputs == 0 { // as for a directory without a recording
		return fmt.Errorf("%s holds no recorded hook input", dir)
	}
	for req := range want {
		if !seen[req] {
			sum.Summary.Mismatches++
			fmt.Fprintf(stderr, "%s: expected but not in the recording\n", req)
		}
	}
	if err := enc.Encode(sum); err != nil {
		return err
	}
	if sum.Summary.Mismatches > 0 || sum.Summary.Errors > 0 {
		fmt.Fprintf(stderr, "%d mismatch(es), %d error(s)\n", sum.Summary.Mismatches, sum.Summary.Errors)
		return errReported
	}
	return nil
}

// sameStreamOutput reports whether two stream_event outputs (ABI.md §3.5)
// say the same: the recording's was re-encoded (HTML characters escaped),
// so they are compared decoded, not byte for byte.
func sameStreamOutput(a, b json.RawMessage) bool {
	x, errA := hostabi.DecodeStreamEventOutput(a)
	y, errB := hostabi.DecodeStreamEventOutput(b)
	return errA == nil && errB == nil && x == y
}
