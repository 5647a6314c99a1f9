package upstreamtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

func TestHangMidBody(t *testing.T) {
	s := NewServer(Options{Name: "A"})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(HangMidBody(10), Script{Body: []byte(`{"id":"resp_x","object":"response"}`), BodyPrefix: 8, End: EndCut})

	// The headers and the first bytes of the canned JSON arrive, then
	// nothing: the read ends only when the client gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	resp, body, err := c.do(ctx, "POST", s.URL+"/responses", `{"model":"m"}`)
	if resp == nil || resp.StatusCode != 200 || err == nil || ctx.Err() == nil {
		t.Fatalf("hang mid-body: resp %v err %v", resp, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if string(body) != `{"id":"res` {
		t.Errorf("body = %q, want the canned body's first 10 bytes", body)
	}

	// With EndCut the connection closes after the prefix.
	resp, body, err = c.post(s.URL+"/responses", `{"model":"m"}`)
	if resp == nil || err == nil || string(body) != `{"id":"r` {
		t.Errorf("cut mid-body: resp %v body %q err %v", resp, body, err)
	}
}

func TestHangMidErrorBody(t *testing.T) {
	s := NewServer(Options{Name: "A"})
	defer s.Close()
	c := newClient(t)
	hang := Status5xx(500)
	hang.BodyPrefix, hang.End = 5, EndHang
	plain := Status5xx(500)
	plain.End = EndHang
	s.Enqueue(hang, plain)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	resp, body, err := c.do(ctx, "POST", s.URL+"/responses", `{"model":"m","stream":true}`)
	if resp == nil || resp.StatusCode != 500 || err == nil || string(body) != `{"err` {
		t.Fatalf("hang mid error body: resp %v body %q err %v", resp, body, err)
	}
	// Without BodyPrefix a status answer ignores End, as before.
	resp, body, err = c.post(s.URL+"/responses", `{"model":"m"}`)
	if err != nil || resp.StatusCode != 500 || !json.Valid(body) {
		t.Fatalf("plain 500: resp %v body %q err %v", resp, body, err)
	}
}
