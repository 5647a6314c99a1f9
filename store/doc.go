// Package store keeps Sluice's continuity state in an embedded Pebble
// database: response anchors and session scopes (who owns a
// previous_response_id), conversation items (to expand previous_response_id
// in front of upstreams that only speak Chat Completions), streaming-input
// sessions (a request sent in pieces), and stream logs (StreamLogStore: a
// streaming response's record and client-visible events, so that a client
// can resume the stream after a restart or on another replica). Everything
// has a time to live and is removed by a background sweeper.
//
// # Guarantees
//
// Every acknowledged write is one Pebble batch committed with pebble.Sync, so
// a write that returned nil survives kill -9 of the process and a power loss
// (as far as fsync does). Concurrent synced commits are grouped by Pebble into
// one WAL sync, so many streams finishing at once share fsyncs.
//
// A record whose ExpiresAt is not after the store's clock reads as
// ErrNotFound, whether or not the sweeper has removed it yet. The sweeper
// only reclaims space; it never changes what a read returns.
//
// After Close, every method returns an error wrapping ErrClosed; none panics.
//
// A write error Pebble cannot continue after (a full disk) fails the store:
// the call that hit it and every later one return an error wrapping
// ErrUnavailable at once, reads included, Health reports it, and the store
// reopens its database in the background once the directory takes writes
// again (failure.go).
//
// Raw response, session and scope ids and client keys never appear in logs
// or error messages: they are shown as RedactID renders them,
// "sha256:<12 hex>".
//
// # Key families
//
// Every key starts with a one-byte family prefix. Numbers inside keys are
// big-endian so that byte order is numeric order. keys.go has the exact
// encodings; values are described in records.go.
//
//	family  prefix  key                                        value
//	meta     'm'    'm' name                                   schema version (1 byte)
//	anchor   'a'    'a' response_id                            anchor record
//	scope    's'    's' kind(1) sha256(scope_id)(32)           scope record
//	turn     't'    't' response_id                            turn record (input+output items)
//	session  'i'    'i' session_id                             input-session record
//	chunk    'c'    'c' len(session_id)(2) session_id seq(8)   chunk record
//	slog     'l'    'l' response_id                            stream-log record
//	sevent   'e'    'e' len(response_id)(2) response_id seq(8) stream event (name, data)
//	expiry   'x'    'x' expiry_unix_nanos(8) primary_key       empty
//
// The expiry family indexes every record that expires (anchors, scopes,
// turns, input sessions, stream logs) by its expiry time rounded up to the minute, so a
// sweep reads only the part of the index that is due instead of scanning all
// records. An index entry can be stale (the record was rewritten with a later
// expiry, or deleted); the sweeper checks the record itself before deleting
// it. Chunks and stream events have no index entries: they go with their
// session or stream-log record, by a range deletion.
//
// # Stream logs
//
// A stream log is a record (owner, status, latest Response object, input
// items, a cancel-requested flag) and its events keyed by sequence_number.
// AppendStreamEvents skips numbers already stored, so a retried append is
// harmless, and fails with ErrNotFound once the record is gone (expired,
// swept or deleted); StreamEvents reads on from a number with one iterator.
// PutStreamLog replaces a live record but keeps its events and its cancel
// flag (read and written back under a per-log lock); an expired, unswept
// record is replaced as if absent. Sweep and DeleteStreamLog remove the
// record and its events together.
//
// # Redis
//
// RedisStore implements the same interfaces in Redis (or Valkey), for
// several gateway replicas that share continuity, conversations,
// streaming-input sessions (SharedInputSessionStore: conditional writes and
// shared answers), keys and usage, and target health. It stores the same
// encoded values, one key each, expiring with the record; redis.go has the
// key layout, its failure behaviour and what "durable" means there. The
// table tests in contract_test.go run against both backends.
//
// Values are a compact versioned binary encoding: one version byte (1), then
// the fields in a fixed order; strings and byte slices are uvarint-length
// prefixed, counters are uvarints and times are zig-zag varints of Unix
// nanoseconds (0 for the zero time).
package store
