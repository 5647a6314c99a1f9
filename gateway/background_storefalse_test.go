package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/tidwall/gjson"
)

// TestBackgroundStoreFalseIsMemoryOnly: a background: true, store: false
// response can be polled to completion and streamed back while the gateway
// keeps it in memory (README "Privacy"), but nothing of it — its id, its
// prompt — reaches the durable store, so after a restart on the same data
// dir it is unknown (404). A background response with store left on, in the
// same store, is found there: the scan below is not blind.
func TestBackgroundStoreFalseIsMemoryOnly(t *testing.T) {
	const secret, kept = "SECRET-PROMPT-bg-store-false", "KEPT-PROMPT-bg-store-true"
	dir := t.TempDir()
	st := openStore(t, dir)
	opts := resumeOpts()
	opts.Store, opts.Resume.Store = st, st
	h := newHarness(t, harnessConfig{opts: opts})

	create := func(body string) string {
		t.Helper()
		resp := h.post("/v1/responses", body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := gjson.GetBytes(b, "id").Str
		if resp.StatusCode != http.StatusOK || id == "" || gjson.GetBytes(b, "background").Type != gjson.True {
			t.Fatalf("background create: %d %s", resp.StatusCode, b)
		}
		return id
	}
	pollCompleted := func(id string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			status, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
			if status == http.StatusOK && gjson.GetBytes(body, "status").Str == "completed" {
				if got := gjson.GetBytes(body, "output.0.content.0.text").Str; got != resumeText {
					t.Fatalf("polled %s to completion: text %q", id, got)
				}
				return
			}
			if status != http.StatusOK || time.Now().After(deadline) {
				t.Fatalf("polling %s: %d %s", id, status, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	h.ups["A"].Enqueue(slowAnswer())
	id := create(`{"model":"gpt-fake-1","input":"` + secret + `","background":true,"store":false}`)
	// A resumer from the start follows it live to its end.
	_, evs, body := h.resume("sk-client-secret", id, -1)
	if o := checkResponsesEvents(t, evs); o.text != resumeText || o.terminal != "response.completed" {
		t.Fatalf("streamed while it ran: %q %s %s", o.text, o.terminal, body)
	}
	pollCompleted(id)
	// Ended, it stays readable in memory for resume_window.
	_, evs, _ = h.resume("sk-client-secret", id, -1)
	if o := checkResponsesEvents(t, evs); o.text != resumeText || o.terminal != "response.completed" {
		t.Fatalf("streamed after its end: %q %s", o.text, o.terminal)
	}
	if status, got := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items", "sk-client-secret"); status != http.StatusOK ||
		gjson.GetBytes(got, "data.0.content.0.text").Str != secret {
		t.Fatalf("input_items while in memory: %d %s", status, got)
	}

	h.ups["A"].Enqueue(slowAnswer())
	keptID := create(`{"model":"gpt-fake-1","input":"` + kept + `","background":true}`)
	pollCompleted(keptID)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.gw.Shutdown(ctx); err != nil { // waits for the durable writes
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	found := storeContains(t, dir, id, secret, keptID, kept)
	for _, s := range []string{id, secret} {
		if found[s] {
			t.Errorf("the store holds %q of the store:false background response", s)
		}
	}
	for _, s := range []string{keptID, kept} {
		if !found[s] {
			t.Errorf("the store lacks %q of the stored background response: the scan sees nothing", s)
		}
	}

	opts.Store, opts.Resume.Store = nil, nil
	st2 := openStore(t, dir)
	opts.Store, opts.Resume.Store = st2, st2
	h2 := newHarness(t, harnessConfig{opts: opts})
	for _, path := range []string{"/v1/responses/" + id, "/v1/responses/" + id + "/input_items", "/v1/responses/" + id + "?stream=true"} {
		if status, got := h2.call(http.MethodGet, path, "sk-client-secret"); status != http.StatusNotFound {
			t.Errorf("GET %s after a restart: %d %s, want 404", path, status, got)
		}
	}
	if status, got := h2.call(http.MethodGet, "/v1/responses/"+keptID, "sk-client-secret"); status != http.StatusOK {
		t.Errorf("GET of the stored background response after a restart: %d %s", status, got)
	}
}

// storeContains opens the Pebble database in dir (its store closed) and
// reports which of needles occur in any live key or value.
func storeContains(t *testing.T, dir string, needles ...string) map[string]bool {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	found := map[string]bool{}
	for it.First(); it.Valid(); it.Next() {
		for _, n := range needles {
			if bytes.Contains(it.Key(), []byte(n)) || bytes.Contains(it.Value(), []byte(n)) {
				found[n] = true
			}
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return found
}
