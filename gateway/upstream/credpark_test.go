package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestCredentialParkNeedsAProbeThatChecksCredentials: an upstream parked
// because a request's credentials were rejected is cleared by a successful
// probe only where the probe checks credentials, and only the first time.
// llama.cpp's /models answers anyone, even with --api-key; there a probe
// clears the park only once its time is up, and a park soon after doubles
// that time.
func TestCredentialParkNeedsAProbeThatChecksCredentials(t *testing.T) {
	for _, tt := range []struct {
		name          string
		publicModels  bool
		clearsAtOnce  bool
		wantReasonHas string
	}{
		{name: "models need the key", publicModels: false, clearsAtOnce: true},
		{name: "models are public", publicModels: true, clearsAtOnce: false, wantReasonHas: "needs no credentials"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !tt.publicModels && r.Header.Get("Authorization") != "Bearer sk-a" {
					w.WriteHeader(http.StatusUnauthorized)
					_, _ = w.Write([]byte(`{"error":{"message":"no key","type":"authentication_error"}}`))
					return
				}
				_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m"}]}`))
			}))
			defer srv.Close()
			c := &clock{t: time.Unix(1000, 0)}
			p := newTestPool(t, c, Config{Name: "a", BaseURL: srv.URL + "/v1", APIKey: "sk-a"})
			a := p.Get("a")
			ctx := context.Background()

			p.MarkFailed(a, "HTTP 401 invalid_api_key")
			p.Probe(ctx, a)
			st := a.Status(c.now())
			if ok, _ := a.Usable(c.now()); ok != tt.clearsAtOnce {
				t.Fatalf("usable after a successful probe = %v, want %v (status %+v)", ok, tt.clearsAtOnce, st)
			}
			if tt.clearsAtOnce {
				// A key that lists models but may not create responses
				// passes every probe: rejected again soon after the probe
				// lifted the park, it stays parked for twice the first
				// time, whatever the probes say.
				p.MarkFailed(a, "HTTP 401 invalid_api_key")
				c.t = c.t.Add(credentialRetryFirst + time.Second)
				p.Probe(ctx, a)
				if st := a.Status(c.now()); st.State != StateFailed || !strings.Contains(st.Reason, "rejected again soon") {
					t.Fatalf("a second park soon after a probe lifted the first: status %+v, want failed", st)
				}
				c.t = c.t.Add(credentialRetryFirst)
				p.Probe(ctx, a)
				if ok, why := a.Usable(c.now()); !ok {
					t.Fatalf("not usable after twice the first park's time: %s", why)
				}
				return
			}
			if st.State != StateFailed || !strings.Contains(st.Reason, tt.wantReasonHas) || !strings.HasPrefix(st.Reason, "HTTP 401 invalid_api_key") {
				t.Fatalf("status %+v, want failed with its reason kept and why the probe cannot clear it", st)
			}
			// Probes within the park leave it, and its reason does not grow.
			c.t = c.t.Add(credentialRetryFirst / 2)
			p.Probe(ctx, a)
			if again := a.Status(c.now()); again.State != StateFailed || strings.Count(again.Reason, "(") != 1 {
				t.Fatalf("second probe in the park: status %+v", again)
			}
			// Once the park's time is up the next probe lifts it, so that a
			// request tries the credentials again.
			c.t = c.t.Add(credentialRetryFirst / 2)
			p.Probe(ctx, a)
			if ok, why := a.Usable(c.now()); !ok {
				t.Fatalf("not usable once the park's time is up: %s", why)
			}
			// Rejected again soon after: the park lasts twice as long.
			p.MarkFailed(a, "HTTP 401 invalid_api_key")
			c.t = c.t.Add(credentialRetryFirst + time.Second)
			p.Probe(ctx, a)
			if ok, _ := a.Usable(c.now()); ok {
				t.Fatal("a second park soon after the first was lifted after the first one's time")
			}
			c.t = c.t.Add(credentialRetryFirst)
			p.Probe(ctx, a)
			if ok, why := a.Usable(c.now()); !ok {
				t.Fatalf("not usable after twice the first park's time: %s", why)
			}
			// Much later, a new rejection starts from the first park's time.
			c.t = c.t.Add(2 * credentialRetryMax)
			p.MarkFailed(a, "HTTP 401 invalid_api_key")
			c.t = c.t.Add(credentialRetryFirst)
			p.Probe(ctx, a)
			if ok, why := a.Usable(c.now()); !ok {
				t.Fatalf("a park long after the last did not start over: %s", why)
			}
		})
	}
}
