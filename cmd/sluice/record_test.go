package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// POST /admin/record answers its errors in OpenAI's shape, like every other
// endpoint (README "Errors").
func TestAdminRecordErrorsAreOpenAIShaped(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	base, stop := startWithEnv(t, nil, "serve", "--upstream", up.URL, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	defer func() { _, _ = stop() }()
	for _, tt := range []struct {
		query string
		code  int
	}{{"on=maybe", http.StatusBadRequest}, {"on=true", http.StatusConflict}} {
		resp, err := http.Post(base+"/admin/record?"+tt.query, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct {
				Message, Type, Code string
				Param               *string
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || err != nil || resp.Header.Get("Content-Type") != "application/json" ||
			body.Error.Message == "" || body.Error.Type != "invalid_request_error" || body.Error.Code != "invalid_value" ||
			body.Error.Param == nil || *body.Error.Param != "on" {
			t.Errorf("POST /admin/record?%s: %d %s %+v (decode: %v)", tt.query, resp.StatusCode, resp.Header.Get("Content-Type"), body.Error, err)
		}
	}
}
