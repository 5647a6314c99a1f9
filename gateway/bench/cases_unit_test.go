package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/upstream"
)

func TestParseCases(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", allCases},
		{"all", allCases},
		{"ws", []string{caseWSTurns, caseWSIdle}},
		{" Replay , continuity,", []string{caseReplay, caseContinuity}},
		{"overhead,ws-idle", []string{caseOverhead, caseWSIdle}},
	} {
		got, err := parseCases(c.in)
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if len(got) != len(c.want) {
			t.Errorf("%q: got %v, want %v", c.in, got, c.want)
		}
		for _, w := range c.want {
			if !got[w] {
				t.Errorf("%q: %s not selected (%v)", c.in, w, got)
			}
		}
	}
	if _, err := parseCases("ws,bogus"); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown case: err %v", err)
	}
}

// TestBodies checks the bodies the new cases derive from the default one.
func TestBodies(t *testing.T) {
	for _, size := range []int{0, 4096} {
		stream := requestBody(true, size)
		frame := wsCreateFrame(stream)
		if !gjson.ValidBytes(frame) || !strings.HasPrefix(string(frame), `{"type":"response.create",`) {
			t.Fatalf("frame: %.200s", frame)
		}
		if gjson.GetBytes(frame, "stream").Exists() || gjson.GetBytes(frame, "model").Str != "gpt-fake-1" ||
			gjson.GetBytes(frame, "instructions").Str != gjson.GetBytes(stream, "instructions").Str {
			t.Errorf("frame fields: %.300s", frame)
		}

		if gjson.GetBytes(stream, "store").Bool() {
			t.Fatal("the default body is expected to carry store:false")
		}
		st := storeBody(stream)
		if !gjson.ValidBytes(st) || !gjson.GetBytes(st, "store").Bool() || !gjson.GetBytes(st, "stream").Bool() {
			t.Errorf("store body: %.300s", st)
		}
		f := followUpBody(stream, "resp_bench_7")
		if !gjson.ValidBytes(f) || gjson.GetBytes(f, "previous_response_id").Str != "resp_bench_7" || !gjson.GetBytes(f, "store").Bool() {
			t.Errorf("follow-up body: %.300s", f)
		}
	}
}

// TestQuotaFailure checks that the replay case's failure is one Sluice
// replays, and that its hint gives the 1 ms cooldown the case relies on.
func TestQuotaFailure(t *testing.T) {
	sc := quotaFailure()
	if len(sc.Frames) != 1 {
		t.Fatalf("%d frames", len(sc.Frames))
	}
	_, data, _ := strings.Cut(string(sc.Frames[0].Raw), "data: ")
	if typ := gjson.Get(data, "type").Str; typ != "response.failed" {
		t.Errorf("type %q", typ)
	}
	if code := gjson.Get(data, "response.error.code").Str; code != "usage_limit_reached" {
		t.Errorf("code %q", code)
	}
	d, ok := upstream.RetryAfter(nil, gjson.Get(data, "response.error.message").Str, time.Now())
	if !ok || d != time.Millisecond {
		t.Errorf("cooldown %v %v, want 1ms", d, ok)
	}
	if d >= replayGap {
		t.Errorf("the gap %v must outlast the cooldown %v", replayGap, d)
	}
}

func TestScrapeMetric(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP sluice_upstream_attempts_total x
# TYPE sluice_upstream_attempts_total counter
sluice_upstream_attempts_total{outcome="ok",upstream="A"} 7
sluice_upstream_attempts_total{outcome="replayed",upstream="A"} 3
sluice_upstream_attempts_total{outcome="ok",upstream="B"} 4
sluice_upstream_attempts_total_other{outcome="ok",upstream="A"} 100
`)
	}))
	defer srv.Close()
	ctx := context.Background()
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{nil, 14},
		{[]string{`upstream="A"`}, 10},
		{[]string{`upstream="A"`, `outcome="replayed"`}, 3},
		{[]string{`outcome="ok"`}, 11},
	} {
		got, err := scrapeMetric(ctx, srv.URL, "sluice_upstream_attempts_total", c.labels...)
		if err != nil || got != c.want {
			t.Errorf("%v: %v, %v; want %v", c.labels, got, err, c.want)
		}
	}
}

func TestPerGiBAndDiff(t *testing.T) {
	if got := perGiB(64); got != 16384 {
		t.Errorf("perGiB(64) = %v", got)
	}
	d := diff{p50: 10 * time.Microsecond, p99: 20 * time.Microsecond, roundP50: 30 * time.Microsecond, roundP99: 40 * time.Microsecond}.div(10)
	if d.p50 != time.Microsecond || d.roundP99 != 4*time.Microsecond {
		t.Errorf("div: %+v", d)
	}
	if got := rotated([]int{1, 2, 3}, 4); fmt.Sprint(got) != "[2 3 1]" {
		t.Errorf("rotated = %v", got)
	}
}
