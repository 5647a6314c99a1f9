package store

import (
	"context"
	"fmt"
	"time"
)

// StreamLogStore keeps the client-visible event logs of streaming responses
// (docs/ARCHITECTURE.md, "Resumable streams"), so that a client can resume a
// stream after a restart (streams.durable) or on another replica (Redis):
// a record per response (who may read it, its status, its final Response
// object, its input items) and its events, appended in order as the stream
// goes. Events are numbered by the client-visible sequence_number.
type StreamLogStore interface {
	// PutStreamLog creates or replaces the record of l.ResponseID (not its
	// events). A zero CreatedAt becomes the store's clock; ExpiresAt must be
	// set. Events and a pending cancel request keep living with the record.
	PutStreamLog(ctx context.Context, l StreamLog) error
	// GetStreamLog loads a record; ErrNotFound when absent or expired.
	GetStreamLog(ctx context.Context, responseID string) (StreamLog, error)
	// AppendStreamEvents appends events numbered first, first+1, … to the
	// log of responseID. An event whose number is already stored is skipped,
	// so a retried append is harmless. ErrNotFound when the record is gone.
	AppendStreamEvents(ctx context.Context, responseID string, first int64, events []StreamEvent) error
	// StreamEvents returns up to max stored events numbered after after (-1:
	// from the first), in order.
	StreamEvents(ctx context.Context, responseID string, after int64, max int) ([]StreamEvent, error)
	// CancelStreamLog marks the record's response as asked to cancel
	// (StreamLog.CancelRequested), for the replica running it to notice.
	// ErrNotFound when the record is gone.
	CancelStreamLog(ctx context.Context, responseID string) error
	// DeleteStreamLog removes a record and its events. Deleting an absent
	// log is not an error.
	DeleteStreamLog(ctx context.Context, responseID string) error
}

// SharedStreamLogStore is a StreamLogStore that several gateway replicas
// share (RedisStore). The replica running a response and the others reach
// each other only through it: a resumer on another replica marks the log
// followed (FollowStreamLog) so that the running replica keeps a detached
// stream alive, and a DeleteStreamLog leaves a tombstone until the record
// would have expired, so that the running replica learns of the delete
// (ErrStreamLogDeleted from its next write) instead of writing the
// response back. GetStreamLog fills StreamLog.SavedAt and FollowedUntil,
// and answers ErrStreamLogDeleted for a deleted record; AppendStreamEvents
// answers it too. PutStreamLog (a new record) clears a tombstone.
type SharedStreamLogStore interface {
	StreamLogStore
	// PutStreamLogUnlessDeleted is PutStreamLog for the replica writing a
	// response it already put: a record deleted since (its tombstone is
	// there) is not written again (ErrStreamLogDeleted). A record that is
	// absent without a tombstone (the store lost it) is written again.
	PutStreamLogUnlessDeleted(ctx context.Context, l StreamLog) error
	// FollowStreamLog marks the live record of responseID as followed until
	// until (StreamLog.FollowedUntil; an earlier mark does not replace a
	// later one). ErrNotFound when absent or expired, ErrStreamLogDeleted
	// when deleted.
	FollowStreamLog(ctx context.Context, responseID string, until time.Time) error
}

// ErrStreamLogDeleted is the ErrNotFound of a SharedStreamLogStore for a
// record that DeleteStreamLog removed (errors.Is matches both).
var ErrStreamLogDeleted = fmt.Errorf("%w: the stream log was deleted", ErrNotFound)

// StreamLog is the record of one response's event log.
type StreamLog struct {
	// ResponseID is the client-visible response id.
	ResponseID string
	// Owner is the scope allowed to read, resume, cancel or delete the
	// response (the gateway's hash of the creating key); empty: anyone.
	Owner string
	// Status is the Response's status: queued, in_progress, completed,
	// failed, incomplete or cancelled.
	Status string
	// Background is set for a background: true request.
	Background bool
	// Ended is set once the log holds its terminal event (or the response
	// was answered without events).
	Ended bool
	// Response is the latest Response object the client could see (the
	// final one once Ended).
	Response []byte
	// Input is the response's input items, a JSON array.
	Input []byte
	// CancelRequested is set by CancelStreamLog; PutStreamLog keeps it.
	CancelRequested bool
	// IssuedBelow bounds the sequence numbers the writer may have sent a
	// client: every event it sent is numbered below it, stored or not yet
	// (the writer raises it, written ahead, before it sends an event at or
	// past it). A reader that finds the log abandoned numbers the error
	// event that ends it at or past IssuedBelow, so that the number is none
	// a client already got for another event. 0: unknown (a writer that
	// does not say). PutStreamLog keeps the highest written.
	IssuedBelow int64
	// CreatedAt and ExpiresAt bound the record's life.
	CreatedAt, ExpiresAt time.Time
	// SavedAt is when the record was last written, by the writing store's
	// clock, and FollowedUntil the latest FollowStreamLog mark (zero: none).
	// A SharedStreamLogStore's GetStreamLog sets them; PutStreamLog ignores
	// them, and a store no other process writes leaves them zero.
	SavedAt, FollowedUntil time.Time
}

// StreamEvent is one event of a log.
type StreamEvent struct {
	// Seq is the event's sequence_number.
	Seq int64
	// Name is the SSE event name ("" when none).
	Name string
	// Data is the event's JSON.
	Data []byte
}
