package gateway

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// dispatch routes r. A HEAD is answered wherever a GET is, as that GET
// without its content (RFC 9110 §9.3.2): the GET's handler serves it, and
// net/http, which knows the request is a HEAD, sends the status and headers
// and drops the body. The router's Allow headers list HEAD next to GET
// (allowHead), but for a stream, whose HEAD is refused (headOfStream).
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		if h, _, _ := s.router.Lookup(http.MethodGet, r.URL.Path); h != nil {
			if headOfStream(r) {
				s.refuseHeadOfStream(w, r)
				return
			}
			r = getForHead(r)
		}
	}
	s.router.ServeHTTP(w, r)
}

// getForHead is the GET a HEAD r is served as. A HEAD's content has no
// defined meaning (RFC 9110 §9.3.2), so the GET has none, and a HEAD asks
// for no protocol switch: GET /v1/responses answers it with its 426.
func getForHead(r *http.Request) *http.Request {
	g := r.Clone(r.Context())
	g.Method = http.MethodGet
	g.Body, g.ContentLength, g.TransferEncoding = http.NoBody, 0, nil
	g.Header.Del("Upgrade")
	return g
}

// headOfStream reports whether the GET a HEAD r stands for is answered by a
// stream, which holds the connection until it ends and whose status comes
// with its first event: a resume (GET /v1/responses/{id}?stream=true) or a
// streaming-input session's result. Those are GET-only (README "Endpoints"),
// and the Allow headers leave HEAD out there (allowHead).
//
// A session's result is GET-only even when it turns out to be one JSON
// answer: its GET waits for the upstream request to start (with
// start_policy on_end_only, for the end of the input) and takes its status,
// its headers and whether it is SSE or JSON from the upstream's answer,
// which is not known before. A HEAD served like that GET could hold its
// connection as long as the session lasts; refused at once, it tells the
// client to GET the result (RFC 9110 §15.5.6). The path is split as
// streaminput's REST handler splits it, so a path that handler answers
// otherwise (…/sessions//result: the session "result", a 404) is served
// like its GET.
func headOfStream(r *http.Request) bool {
	p := r.URL.Path
	if id, ok := strings.CutPrefix(p, "/v1/responses/"); ok && !strings.Contains(id, "/") {
		return r.URL.Query().Get("stream") == "true"
	}
	rest, ok := strings.CutPrefix(p, streaminput.PathPrefix+"/")
	if !ok {
		return false
	}
	id, action, _ := strings.Cut(strings.Trim(rest, "/"), "/")
	return id != "" && action == "result"
}

// refuseHeadOfStream answers a HEAD of a stream (headOfStream) with the 405
// of a method the resource does not allow.
func (s *Server) refuseHeadOfStream(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodDelete, http.MethodGet, http.MethodPatch, http.MethodPost, http.MethodPut} {
		if h, _, _ := s.router.Lookup(m, r.URL.Path); h != nil {
			allow = append(allow, m)
		}
	}
	allow = append(allow, http.MethodOptions)
	sort.Strings(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	allowResponsesAction(w.Header(), r) // relay_endpoints.go
	s.answerMethodNotAllowed(w, r, fmt.Sprintf("HEAD is not allowed on %s with a stream: it is answered event by event; GET it", label(r.URL.Path)))
}

// allowHead adds HEAD next to GET in the Allow header h the router set for
// r: dispatch serves HEAD wherever there is a GET, except on a stream
// (headOfStream), whose HEAD is a 405. An OPTIONS and a 405 of one URL
// then list what that URL allows (RFC 9110 §10.2.1).
func allowHead(h http.Header, r *http.Request) {
	allowResponsesAction(h, r) // relay_endpoints.go: POST /v1/responses/{word} is two endpoints, not a response's
	if headOfStream(r) {
		return
	}
	methods := strings.Split(h.Get("Allow"), ", ")
	for i, m := range methods {
		if m == http.MethodGet {
			methods = append(methods[:i+1], append([]string{http.MethodHead}, methods[i+1:]...)...)
			h.Set("Allow", strings.Join(methods, ", "))
			return
		}
	}
}
