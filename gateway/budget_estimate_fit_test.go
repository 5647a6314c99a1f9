package gateway_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/store"
)

// A day or month budget admits a request only when its own estimate fits
// in what is left, as tpm does (README "Limits"): each simple request is
// estimated at 9 tokens (36 bytes / 4) and uses 11 (the fake upstream's
// usage: 8 in, 3 out), so a budget of 30 serves two (22 tokens) and
// refuses the third (22 + 9 > 30) until the period ends, rather than
// letting it take the key to 33.
func TestBudgetRefusesARequestWhoseEstimateDoesNotFit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits store.KeyLimits
	}{
		{"day", store.KeyLimits{TokensPerDay: 30}},
		{"month", store.KeyLimits{TokensPerMonth: 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, tc.limits))
			checkBudgetFit(t, []*harness{h})
		})
	}
}

// The same rule on Redis, the requests split across two replicas.
func TestSharedBudgetRefusesARequestWhoseEstimateDoesNotFit(t *testing.T) {
	r1, r2, _ := sharedLimitReplicas(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 30}))
	checkBudgetFit(t, []*harness{r1, r2})
}

func checkBudgetFit(t *testing.T, replicas []*harness) {
	t.Helper()
	for i := range 2 {
		if resp, b := send(t, replicas[i%len(replicas)], http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i+1, resp.StatusCode, b)
		}
	}
	for i, h := range replicas {
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
		limit(t, resp, b, "insufficient_quota")
		// Not the one-second wait of a budget full only with requests in
		// flight: no retry of this request fits before the period ends.
		if s, _ := strconv.Atoi(resp.Header.Get("Retry-After")); time.Duration(s)*time.Second <= time.Second {
			t.Fatalf("replica %d: Retry-After %q, want the period's end", i+1, resp.Header.Get("Retry-After"))
		}
	}
	var u usageReport
	if code := replicas[0].getJSON("/admin/usage?key=team-a", &u); code != 200 {
		t.Fatalf("admin/usage: %d", code)
	}
	if got := u.Total.InputTokens + u.Total.OutputTokens; got > 30 {
		t.Fatalf("the key used %d tokens of its budget of 30", got)
	}
}
