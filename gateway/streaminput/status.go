package streaminput

import "math"

// SessionStatus is the JSON view of a session (GET …/{id}, and the answer
// to create and finish).
type SessionStatus struct {
	// ID is the session id ("sis_…"); SessionID repeats it.
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	// Object is "streaming_input.session".
	Object string `json:"object"`
	// Endpoint is the API the request goes to.
	Endpoint string `json:"endpoint"`
	// StartPolicy is on_end_only, on_first_chunk or on_min_length:N.
	StartPolicy string `json:"start_policy"`
	// State is "open" (accepting chunks) or "finished" (the input ended).
	State string `json:"state"`
	// Started reports that the upstream request was sent.
	Started bool `json:"started"`
	// NextSequenceID is the next sequence id expected in order.
	NextSequenceID uint64 `json:"next_sequence_id"`
	// BufferedSequenceIDs were received ahead of NextSequenceID.
	BufferedSequenceIDs []uint64 `json:"buffered_sequence_ids"`
	// EndSequenceID is the sequence id that ended the input, once known.
	EndSequenceID *uint64 `json:"end_sequence_id"`
	// ReceivedChunks and ReceivedBytes count every chunk held.
	ReceivedChunks int   `json:"received_chunks"`
	ReceivedBytes  int64 `json:"received_bytes"`
	// CreatedAt and ExpiresAt are Unix seconds; ExpiresIn is the seconds
	// left before the session closes unless something happens.
	CreatedAt int64 `json:"created_at"`
	ExpiresAt int64 `json:"expires_at"`
	ExpiresIn int64 `json:"expires_in"`
	// UpstreamSaw says what the upstream request was assembled from, once
	// it started; nil before.
	UpstreamSaw *UpstreamInput `json:"upstream_saw"`
	// LateChunks were accepted after the upstream request started: they
	// are stored for audit but the upstream never sees them.
	LateChunks int `json:"late_chunks"`
	// Result is the state of the answer, once the request started.
	Result *ResultStatus `json:"result"`
}

// UpstreamInput describes the input an upstream request was assembled from.
type UpstreamInput struct {
	// Chunks is how many chunks it holds: sequence ids 0 … Chunks-1.
	Chunks uint64 `json:"chunks"`
	// Bytes is their payload size.
	Bytes int64 `json:"bytes"`
	// Complete reports that the input had ended when the request started.
	Complete bool `json:"complete"`
	// StartedAt is when the request started (Unix seconds; 0 if unknown).
	StartedAt int64 `json:"started_at"`
}

// ResultStatus is the state of a session's answer.
type ResultStatus struct {
	// Status is pending, streaming, completed, failed or unavailable (lost
	// in a restart).
	Status string `json:"status"`
	// HTTPStatus is the status the answer was sent with (0 before).
	HTTPStatus int `json:"http_status"`
	// Bytes is the answer's size so far.
	Bytes int64 `json:"bytes"`
}

// ChunkAck is the 202 answer to an accepted chunk (also to a duplicate of
// one: Duplicate is then true and nothing changed).
type ChunkAck struct {
	// Object is "streaming_input.chunk".
	Object string `json:"object"`
	// SessionID and SequenceID name the chunk acknowledged.
	SessionID  string `json:"session_id"`
	SequenceID uint64 `json:"sequence_id"`
	// Received is always true: the chunk is durable.
	Received bool `json:"received"`
	// Duplicate reports a retransmission of a chunk already held.
	Duplicate bool `json:"duplicate"`
	// Started reports that the session's upstream request has been sent
	// (by this chunk or earlier).
	Started bool `json:"started"`
	// State is "open" or "finished".
	State string `json:"state"`
	// NextSequenceID is the next sequence id expected in order.
	NextSequenceID uint64 `json:"next_sequence_id"`
	// ReceivedBytes counts the payload bytes of every chunk held.
	ReceivedBytes int64 `json:"received_bytes"`
}

func (s *session) status() SessionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.m.now()
	st := SessionStatus{
		ID: s.id, SessionID: s.id, Object: "streaming_input.session", Endpoint: s.tpl.endpoint, StartPolicy: s.policy.String(),
		State: stateOpen, Started: s.started, NextSequenceID: s.next, BufferedSequenceIDs: s.bufferedLocked(),
		ReceivedChunks: len(s.infos), ReceivedBytes: s.received, CreatedAt: s.created.Unix(), ExpiresAt: s.expiresAt.Unix(),
		ExpiresIn: int64(math.Ceil(max(0, s.expiresAt.Sub(now).Seconds()))), LateChunks: s.late,
	}
	if s.finished {
		st.State = stateFinished
	}
	if s.hasEnd {
		e := s.endSeq
		st.EndSequenceID = &e
	}
	if s.started {
		st.UpstreamSaw = &UpstreamInput{Chunks: s.saw.chunks, Bytes: s.saw.bytes, Complete: s.saw.complete}
		if !s.saw.at.IsZero() {
			st.UpstreamSaw.StartedAt = s.saw.at.Unix()
		}
		switch {
		case s.res != nil:
			status, code, n := s.res.state()
			st.Result = &ResultStatus{Status: status, HTTPStatus: code, Bytes: n}
		case s.resultLost:
			st.Result = &ResultStatus{Status: "unavailable"}
		default:
			// Started, and its answer has not reached this copy yet: a
			// restored session Start has not sent again, or an answer
			// another replica runs whose head is not here yet.
			st.Result = &ResultStatus{Status: "pending"}
		}
	}
	return st
}
