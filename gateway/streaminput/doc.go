// Package streaminput implements streaming input sessions (its README.md): a client
// sends a request's input in pieces and the gateway starts the upstream
// request as soon as the session's start policy allows, without losing an
// acknowledged piece across a crash.
//
// Three front ends share one engine:
//
//   - Mode B, REST append: a session resource under /v1/streaming_input/sessions
//     with chunk, finish, status, cancel and result endpoints (Manager.Handler,
//     Manager.Routes). A chunk is acknowledged (202) only once it is synced to
//     the store.
//   - Mode A, one chunked request: POST /v1/responses or /v1/chat/completions
//     with "X-Streaming-Input: true" and an NDJSON body, answered with the
//     normal (streamed) answer (Manager.ModeA). Mode A sessions live in memory
//     only: the connection that carries them cannot outlive the process.
//   - WebSocket input: input_chunk frames collected by an Accumulator and
//     merged into the next response.create.
//
// The package does not import the gateway. It sends the assembled request
// through an http.Handler it is given (the gateway's own handler) as an
// internal request carrying the client's headers, captures the answer in its
// own ResponseWriter and fans the bytes out to the readers attached to the
// session's result, replaying what they missed.
//
// README.md in this directory describes the wire formats, start policies,
// retention and the crash-recovery rules for users.
package streaminput
