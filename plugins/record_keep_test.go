package plugins

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
)

// recordOnce runs one gateway "start" on dir: a runtime that records one
// recover call and closes, as a sluice serve that crashes after its first
// request does.
func recordOnce(t *testing.T, dir string, fileBytes int64, files int) {
	t.Helper()
	ctx := context.Background()
	rt, err := New(ctx, Options{RecordDir: dir, RecordFileBytes: fileBytes, RecordFiles: files, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	rt.Recover(ctx, hostabi.RecoverInput{Surface: hostabi.SurfaceChatStream, Code: "server_error", HTTPStatus: 500})
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// recordingLines is every line of dir's recording files, and how many files
// there are.
func recordingLines(t *testing.T, dir string) ([]string, int) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, recordPrefix+"*.jsonl"))
	var lines []string
	for _, name := range m {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		f.Close()
	}
	return lines, len(m)
}

// writeRecording writes a recording file of n bytes of whole lines.
func writeRecording(t *testing.T, dir, stamp string, n int) string {
	t.Helper()
	line := `{"hook":"recover","verdict":"pass","decided_by":"default"}` + "\n"
	body := strings.Repeat(line, n/len(line))
	name := filepath.Join(dir, recordPrefix+stamp+".jsonl")
	if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestRecordingSurvivesRestarts: a restart does not push a large recording
// out of record_dir. Restarts append to the newest file while it has room,
// and old files are kept by bytes (RecordFiles × RecordFileBytes in all), so
// a crash-looping gateway keeps the recording that explains the crash.
func TestRecordingSurvivesRestarts(t *testing.T) {
	dir := t.TempDir()
	const fileBytes, files = 4096, 2
	big := writeRecording(t, dir, "20200101T000000.000000000Z", 4000)
	want, _ := os.ReadFile(big)
	for range 8 {
		recordOnce(t, dir, fileBytes, files)
	}
	got, err := os.ReadFile(big)
	if err != nil {
		t.Fatalf("the recording made before 8 restarts was deleted: %v", err)
	}
	if string(got) != string(want) {
		t.Fatal("the full recording file was written to")
	}
	lines, n := recordingLines(t, dir)
	if recorded := len(lines) - strings.Count(string(want), "\n"); recorded != 8 {
		t.Fatalf("%d lines recorded by 8 starts, want 8", recorded)
	}
	if n != 2 {
		t.Fatalf("%d recording files, want 2: the old one and one the restarts share", n)
	}
}

// TestRecordingKeptByBytes: the files other than the one being written are
// kept, newest first, while they total at most (RecordFiles-1) ×
// RecordFileBytes; a file cut mid-line is not appended to.
func TestRecordingKeptByBytes(t *testing.T) {
	dir := t.TempDir()
	const fileBytes, files = 4096, 3
	oldest := writeRecording(t, dir, "20200101T000000.000000000Z", 4000)
	small := make([]string, 5)
	for i := range small {
		small[i] = writeRecording(t, dir, "20200102T00000"+string(rune('0'+i))+".000000000Z", 300)
	}
	// The newest was cut mid-line: appending would join the next record to
	// its broken line.
	cut := filepath.Join(dir, recordPrefix+"20200103T000000.000000000Z.jsonl")
	if err := os.WriteFile(cut, []byte(`{"hook":"recover","verd`), 0o600); err != nil {
		t.Fatal(err)
	}
	recordOnce(t, dir, fileBytes, files)
	if b, _ := os.ReadFile(cut); string(b) != `{"hook":"recover","verd` {
		t.Fatalf("a record was appended to a file cut mid-line: %q", b)
	}
	for _, name := range append(small, oldest) {
		if _, err := os.Stat(name); err != nil {
			t.Fatalf("%s deleted though the files total %d bytes of %d: %v", filepath.Base(name), 4000+5*300+23, files*fileBytes, err)
		}
	}
	if _, n := recordingLines(t, dir); n != 8 {
		t.Fatalf("%d files, want 8", n)
	}

	// Past the byte budget, the oldest go.
	for _, stamp := range []string{"20200104T000000.000000000Z", "20200105T000000.000000000Z"} {
		writeRecording(t, dir, stamp, 4000)
	}
	recordOnce(t, dir, fileBytes, files)
	if _, err := os.Stat(oldest); err == nil {
		t.Fatal("the oldest file was kept past the byte budget")
	}
	m, _ := filepath.Glob(filepath.Join(dir, recordPrefix+"*.jsonl"))
	var total int64
	for _, name := range m {
		fi, _ := os.Stat(name)
		total += fi.Size()
	}
	if total > files*fileBytes {
		t.Fatalf("%d bytes kept, more than %d", total, files*fileBytes)
	}
}
