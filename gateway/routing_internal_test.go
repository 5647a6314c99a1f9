package gateway

import (
	"net/http"
	"testing"
)

// TestEncodedSeparatorPredicate: which paths encode a separator the router
// would otherwise route by.
func TestEncodedSeparatorPredicate(t *testing.T) {
	for _, tt := range []struct {
		target string
		want   bool
	}{
		{"/admin%2Fkeys", true},
		{"/admin%2fkeys", true},
		{"/admin%252Fkeys", true},
		{"/v1%2Fmodels/x", true},
		{"/v1/responses/a%2Fb", true},
		{"/v1/models/a%2Fb", false},
		{"/v1/models/a%252Fb", false},
		{"/v1/models/a/b", false},
		{"/metric%73", false},
		{"/v1/responses/resp_1", false},
		{"/v1/responses/a%20b", false},
	} {
		r, err := http.NewRequest(http.MethodGet, "http://gw"+tt.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := encodedSeparator(r); got != tt.want {
			t.Errorf("%s: %t, want %t", tt.target, got, tt.want)
		}
	}
}

// TestHeadOfStream: which HEADs stand for a GET answered by a stream.
func TestHeadOfStream(t *testing.T) {
	for _, tt := range []struct {
		target string
		want   bool
	}{
		{"/v1/responses/resp_1?stream=true", true},
		{"/v1/responses/resp_1?stream=true&starting_after=3", true},
		{"/v1/responses/resp_1", false},
		{"/v1/responses/resp_1?stream=false", false},
		{"/v1/responses/resp_1/input_items?stream=true", false},
		{"/v1/streaming_input/sessions/sis_1/result", true},
		{"/v1/streaming_input/sessions/sis_1", false},
		{"/v1/models?stream=true", false},
	} {
		r, err := http.NewRequest(http.MethodHead, "http://gw"+tt.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := headOfStream(r); got != tt.want {
			t.Errorf("%s: %t, want %t", tt.target, got, tt.want)
		}
	}
}
