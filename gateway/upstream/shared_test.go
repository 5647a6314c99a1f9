package upstream

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// memHealth is a SharedHealth in memory, on the test's clock.
type memHealth struct {
	c     *clock
	mu    sync.Mutex
	m     map[sharedKey]memSkip
	reads int
	fail  error
}

type memSkip struct {
	until  time.Time
	reason string
}

func newMemHealth(c *clock) *memHealth { return &memHealth{c: c, m: map[sharedKey]memSkip{}} }

func (h *memHealth) PutTargetHealth(_ context.Context, up, model string, d time.Duration, reason string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail != nil {
		return h.fail
	}
	k := sharedKey{up, model}
	if until := h.c.t.Add(d); until.After(h.m[k].until) {
		h.m[k] = memSkip{until, reason}
	}
	return nil
}

func (h *memHealth) GetTargetHealth(_ context.Context, up, model string) (time.Duration, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads++
	if h.fail != nil {
		return 0, "", h.fail
	}
	s := h.m[sharedKey{up, model}]
	if !h.c.t.Before(s.until) {
		return 0, "", nil
	}
	return s.until.Sub(h.c.t), s.reason, nil
}

func (h *memHealth) ClearTargetHealth(_ context.Context, up, model string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, sharedKey{up, model})
	return nil
}

// twoReplicas builds two pools (two gateway replicas) over one shared health.
func twoReplicas(t *testing.T, c *clock, h SharedHealth) (a, b *Pool, ta, tb Target) {
	t.Helper()
	mk := func() (*Pool, Target) {
		p, err := NewPool([]Config{{Name: "up", BaseURL: "http://127.0.0.1:1/v1"}},
			Options{Now: c.now, CircuitFailures: 3, CircuitOpenFor: 10 * time.Second, Jitter: func() float64 { return 0.5 }, Shared: h})
		if err != nil {
			t.Fatal(err)
		}
		return p, Target{Upstream: p.Get("up"), Model: "m1"}
	}
	a, ta = mk()
	b, tb = mk()
	return a, b, ta, tb
}

func TestSharedCooldownReachesTheOtherReplica(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	h := newMemHealth(c)
	a, b, ta, tb := twoReplicas(t, c, h)

	// B reads the target healthy and trusts that for the refresh period.
	if ok, why := b.TargetUsable(tb); !ok {
		t.Fatalf("B: %s", why)
	}
	// A sees a 429 with Retry-After: 30s.
	if _, ok, _ := a.BeginTarget(ta); !ok {
		t.Fatal("A refused the target")
	}
	a.TargetFailed(ta, Failure{Class: "rate_limited", Reason: "HTTP 429", Hint: 30 * time.Second})
	if ok, _ := a.TargetUsable(ta); ok {
		t.Fatal("A still uses the target it saw fail")
	}
	c.t = c.t.Add(500 * time.Millisecond)
	if ok, _ := b.TargetUsable(tb); !ok {
		t.Fatal("B re-read before its refresh period")
	}
	c.t = c.t.Add(500 * time.Millisecond) // DefaultSharedRefresh after B's read
	ok, why := b.TargetUsable(tb)
	if ok || !strings.Contains(why, "shared by the replicas") || !strings.Contains(why, "rate_limited: HTTP 429") {
		t.Fatalf("B after the refresh: usable=%v %q", ok, why)
	}
	if _, ok, _ := b.BeginTarget(tb); ok {
		t.Fatal("B began a target another replica cooled down")
	}
	// The skip ends with the key's expiry, for both.
	c.t = c.t.Add(30 * time.Second)
	if ok, why := b.TargetUsable(tb); !ok {
		t.Fatalf("B after the cooldown: %s", why)
	}
	if ok, why := a.TargetUsable(ta); !ok {
		t.Fatalf("A after the cooldown: %s", why)
	}
}

func TestSharedOpenCircuitAndItsClose(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	h := newMemHealth(c)
	a, b, ta, tb := twoReplicas(t, c, h)
	fail := Failure{Class: "overloaded", Reason: "HTTP 503"}
	for range 3 {
		a.BeginTarget(ta)
		a.TargetFailed(ta, fail)
	}
	if ok, why := b.TargetUsable(tb); ok || !strings.Contains(why, "circuit open") {
		t.Fatalf("B with A's circuit open: usable=%v %q", ok, why)
	}
	// After the open period A probes, succeeds, and the circuit closes for all.
	c.t = c.t.Add(10 * time.Second)
	probe, ok, why := a.BeginTarget(ta)
	if !ok || !probe {
		t.Fatalf("A's probe: ok=%v probe=%v %s", ok, probe, why)
	}
	a.TargetSucceeded(ta)
	c.t = c.t.Add(DefaultSharedRefresh)
	if ok, why := b.TargetUsable(tb); !ok {
		t.Fatalf("B after A's circuit closed: %s", why)
	}
	h.mu.Lock()
	n := len(h.m)
	h.mu.Unlock()
	if n != 0 {
		t.Errorf("%d shared skips left after the circuit closed", n)
	}
}

func TestSharedUpstreamCooldown(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	h := newMemHealth(c)
	a, b, _, tb := twoReplicas(t, c, h)
	a.Cooldown(a.Get("up"), 5*time.Second, "connect failure")
	if ok, why := b.TargetUsable(tb); ok || !strings.Contains(why, "upstream state") {
		t.Fatalf("B with A's upstream cooldown: usable=%v %q", ok, why)
	}
	if _, err := b.Pick(func(u *Upstream) bool { ok, _ := b.TargetUsable(Target{Upstream: u, Model: "m1"}); return !ok }); err == nil {
		t.Fatal("B picked an upstream another replica cooled down")
	}
}

// TestSharedStoreDown: a shared store that cannot answer changes nothing
// (the local state still applies) and is not asked again before the
// refresh period.
func TestSharedStoreDown(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	h := newMemHealth(c)
	h.fail = errors.New("store: unavailable")
	a, _, ta, _ := twoReplicas(t, c, h)
	for range 5 {
		if ok, why := a.TargetUsable(ta); !ok {
			t.Fatalf("usable with the shared store down: %s", why)
		}
	}
	if h.reads != 2 { // the upstream's and the target's key, once
		t.Errorf("%d reads within one refresh period, want 2", h.reads)
	}
	a.TargetFailed(ta, Failure{Class: "rate_limited", Reason: "HTTP 429", Hint: time.Minute})
	if ok, _ := a.TargetUsable(ta); ok {
		t.Fatal("the local cooldown no longer applies with the shared store down")
	}
}

// TestSharedUpstreamCooldownShownInStatus: an upstream another replica
// cooled down (a failed connection) is shown cooling down, as shared, in
// the Status of a replica that skips it for that.
func TestSharedUpstreamCooldownShownInStatus(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	a, b, _, tb := twoReplicas(t, c, newMemHealth(c))
	a.Cooldown(a.Get("up"), 20*time.Second, "connect failure")
	if ok, _ := b.TargetUsable(tb); ok {
		t.Fatal("B uses the upstream A cooled down")
	}
	st := b.Get("up").Status(c.t)
	if !st.Shared || st.CoolingFor != "20s" || st.CoolReason != "connect failure" {
		t.Fatalf("B's status: %+v, want cooling down 20s, shared", st)
	}
	if own := a.Get("up").Status(c.t); own.Shared || own.CoolingFor != "20s" {
		t.Fatalf("A's status: %+v, want its own cooldown, not shared", own)
	}
}

func TestSharedRecordEncoding(t *testing.T) {
	for _, c := range []struct {
		name   string
		rec    sharedRecord
		stored string // the value in the store
		read   sharedRecord
	}{
		{"no code: the bare reason, as earlier versions wrote it", sharedRecord{reason: "server_error: HTTP 500"},
			"server_error: HTTP 500", sharedRecord{reason: "server_error: HTTP 500"}},
		{"capacity code and type", sharedRecord{reason: "rate_limited: HTTP 429 rate_limit_exceeded", code: "rate_limit_exceeded", typ: "requests"},
			"rate_limited: HTTP 429 rate_limit_exceeded\x1frate_limit_exceeded\x1frequests",
			sharedRecord{reason: "rate_limited: HTTP 429 rate_limit_exceeded", code: "rate_limit_exceeded", typ: "requests"}},
		{"code without a type", sharedRecord{reason: "quota: HTTP 429", code: "insufficient_quota"},
			"quota: HTTP 429\x1finsufficient_quota\x1f", sharedRecord{reason: "quota: HTTP 429", code: "insufficient_quota"}},
		{"an open circuit's reason still starts the value", sharedRecord{reason: sharedCircuitOpenPrefix + " after 3 consecutive failures", code: "rate_limit_exceeded", typ: "requests"},
			sharedCircuitOpenPrefix + " after 3 consecutive failures\x1frate_limit_exceeded\x1frequests",
			sharedRecord{reason: sharedCircuitOpenPrefix + " after 3 consecutive failures", code: "rate_limit_exceeded", typ: "requests"}},
		{"the separator in a part is dropped", sharedRecord{reason: "a\x1fb", code: "c\x1fd", typ: "e\x1ff"},
			"a b\x1fc d\x1fe f", sharedRecord{reason: "a b", code: "c d", typ: "e f"}},
		{"empty", sharedRecord{}, "", sharedRecord{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.rec.encode(); got != c.stored {
				t.Fatalf("encode: %q, want %q", got, c.stored)
			}
			if got := decodeSharedRecord(c.stored); got != c.read {
				t.Fatalf("decode %q: %+v, want %+v", c.stored, got, c.read)
			}
		})
	}
}

// TestSharedCapacityCodeReachesTheOtherReplica: a target another replica
// cooled down (or opened the circuit of) for the upstream's capacity is
// out here for that capacity too, with the upstream's code and type, as it
// is on the replica that saw the failure; a record without them, as
// earlier versions wrote it, still keeps the target out, without a code.
func TestSharedCapacityCodeReachesTheOtherReplica(t *testing.T) {
	rateLimited := Failure{Class: "rate_limited", Reason: "HTTP 429 rate_limit_exceeded", Code: "rate_limit_exceeded", Type: "requests"}
	for _, c := range []struct {
		name     string
		failures []Failure
		code     string
		typ      string
	}{
		{"429 with Retry-After", []Failure{{Class: rateLimited.Class, Reason: rateLimited.Reason, Code: rateLimited.Code, Type: rateLimited.Type, Hint: 30 * time.Second}},
			"rate_limit_exceeded", "requests"},
		{"quota", []Failure{{Class: "quota", Reason: "HTTP 429 insufficient_quota", Code: "insufficient_quota", Type: "insufficient_quota", Backoff: QuotaBackoff}},
			"insufficient_quota", "insufficient_quota"},
		{"a run of 429s opens the circuit", []Failure{rateLimited, rateLimited, rateLimited}, "rate_limit_exceeded", "requests"},
		{"a run of 5xx opens the circuit", []Failure{{Class: "server_error", Reason: "HTTP 500"}, {Class: "server_error", Reason: "HTTP 500"}, {Class: "server_error", Reason: "HTTP 500"}},
			"", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &clock{t: time.Unix(1000, 0)}
			a, b, ta, tb := twoReplicas(t, clk, newMemHealth(clk))
			for _, f := range c.failures {
				a.BeginTarget(ta)
				a.TargetFailed(ta, f)
			}
			here, out := a.TargetUnavailable(ta)
			if !out || here.Code != c.code || here.Type != c.typ {
				t.Fatalf("A, which saw the failures: out=%v %+v, want code %q type %q", out, here, c.code, c.typ)
			}
			there, out := b.TargetUnavailable(tb)
			if !out || there.Code != c.code || there.Type != c.typ || there.RetryIn != here.RetryIn {
				t.Fatalf("B, from the shared health: out=%v %+v, want code %q type %q and A's wait %s", out, there, c.code, c.typ, here.RetryIn)
			}
			if strings.Contains(there.Why, sharedRecordSep) {
				t.Fatalf("B's reason shows the stored encoding: %q", there.Why)
			}
			for _, st := range b.TargetStatuses() {
				if strings.Contains(st.CoolReason, sharedRecordSep) {
					t.Fatalf("B's status shows the stored encoding: %+v", st)
				}
			}
		})
	}
	t.Run("a record of an earlier version", func(t *testing.T) {
		clk := &clock{t: time.Unix(1000, 0)}
		h := newMemHealth(clk)
		_, b, _, tb := twoReplicas(t, clk, h)
		h.m[sharedKey{"up", "m1"}] = memSkip{until: clk.t.Add(20 * time.Second), reason: "rate_limited: HTTP 429 rate_limit_exceeded"}
		un, out := b.TargetUnavailable(tb)
		if !out || un.Code != "" || un.RetryIn != 20*time.Second || !strings.HasSuffix(un.Why, ": rate_limited: HTTP 429 rate_limit_exceeded") {
			t.Fatalf("B with an earlier version's record: out=%v %+v, want out for 20s without a code", out, un)
		}
	})
}
