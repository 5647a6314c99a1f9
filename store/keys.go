package store

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Key families. Every key in the database starts with exactly one of these
// bytes; the rest of the key is family specific:
//
//	famMeta     'm' | name
//	            Store metadata. 'm' "schema" holds the schema version (one
//	            byte, schemaVersion); Open refuses a database with another.
//
//	famAnchor   'a' | response_id
//	            One anchor per response id (anchor record, records.go). The id
//	            is the whole rest of the key, so no separator is needed.
//
//	famScope    's' | kind (1 byte) | sha256(scope_id) (32 bytes)
//	            One scope record per (kind, id). The id is hashed so the key
//	            has a fixed length whatever bytes the id holds, and so raw
//	            session ids do not sit in the key space.
//
//	famTurn     't' | response_id
//	            One conversation turn per response id (turn record): the
//	            input items of that request and the output items it produced,
//	            plus the parent response id.
//
//	famSession  'i' | session_id
//	            One streaming-input session record per session id.
//
//	famChunk    'c' | len(session_id) (2 bytes, big-endian) | session_id |
//	            seq (8 bytes, big-endian)
//	            One chunk per (session, sequence id). The length prefix makes
//	            'c' | len | session_id a prefix that no other session's keys
//	            share, so one range deletion removes a session's chunks and an
//	            iterator over that prefix yields them in sequence order.
//
//	famStreamLog 'l' | response_id
//	            One stream-log record per response id (StreamLog, records.go):
//	            the client-visible state of a streaming response whose events
//	            are kept for resumption.
//
//	famStreamEvent 'e' | len(response_id) (2 bytes, big-endian) |
//	            response_id | seq (8 bytes, big-endian)
//	            One event of a stream log per (response, sequence_number),
//	            laid out like famChunk: 'e' | len | response_id is a prefix no
//	            other response's events share, so one range deletion removes
//	            a log's events and an iterator from a sequence number reads
//	            them on in order. Events have no expiry entries: they go with
//	            their record.
//
//	famExpiry   'x' | expiry (8 bytes, big-endian Unix nanoseconds, rounded
//	            up to expiryGranularity) | primary key
//	            Expiry index with empty values. The primary key is the full
//	            key of the record (family byte included) that expires then.
//	            Sorting by expiry first lets a sweep read only entries that
//	            are due: the range ['x', 'x' | now+1).
const (
	famMeta    byte = 'm'
	famAnchor  byte = 'a'
	famScope   byte = 's'
	famTurn    byte = 't'
	famSession byte = 'i'
	famChunk   byte = 'c'
	famExpiry  byte = 'x'

	famStreamLog   byte = 'l'
	famStreamEvent byte = 'e'
)

// schemaVersion is the on-disk layout version recorded under metaSchemaKey.
const schemaVersion = 1

// metaSchemaKey holds the schema version.
var metaSchemaKey = []byte{famMeta, 's', 'c', 'h', 'e', 'm', 'a'}

// expiryGranularity is the resolution of the expiry index. Rounding expiry
// times up to it means a record rewritten many times within one minute (a
// scope updated on every turn, a session updated on every chunk) keeps
// writing the same index key instead of leaving a stale entry per write.
// Rounding up keeps the index conservative: an entry is never due before its
// record has expired. Reads check the exact ExpiresAt, so the sweeper running
// late by up to this much is invisible to callers.
const expiryGranularity = time.Minute

// expiryKeyLen is the length of an expiry key's prefix: family and time.
const expiryKeyLen = 1 + 8

func anchorKey(responseID string) []byte {
	k := make([]byte, 0, 1+len(responseID))
	k = append(k, famAnchor)
	return append(k, responseID...)
}

func scopeKey(kind ScopeKind, id string) []byte {
	sum := sha256.Sum256([]byte(id))
	k := make([]byte, 0, 2+len(sum))
	k = append(k, famScope, byte(kind))
	return append(k, sum[:]...)
}

func turnKey(responseID string) []byte {
	k := make([]byte, 0, 1+len(responseID))
	k = append(k, famTurn)
	return append(k, responseID...)
}

func sessionKey(sessionID string) []byte {
	k := make([]byte, 0, 1+len(sessionID))
	k = append(k, famSession)
	return append(k, sessionID...)
}

// chunkPrefix is the prefix shared by all chunk keys of one session and by
// no other key. sessionID must be at most MaxIDLen bytes.
func chunkPrefix(sessionID string) []byte {
	k := make([]byte, 0, 3+len(sessionID)+8)
	k = append(k, famChunk)
	k = binary.BigEndian.AppendUint16(k, uint16(len(sessionID)))
	return append(k, sessionID...)
}

func chunkKey(sessionID string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(chunkPrefix(sessionID), seq)
}

// chunkSeq decodes the sequence id from a chunk key with the given prefix.
func chunkSeq(key []byte, prefixLen int) (uint64, bool) {
	if len(key) != prefixLen+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(key[prefixLen:]), true
}

func streamLogKey(responseID string) []byte {
	k := make([]byte, 0, 1+len(responseID))
	k = append(k, famStreamLog)
	return append(k, responseID...)
}

// streamEventPrefix is the prefix shared by all event keys of one stream log
// and by no other key. responseID must be at most MaxIDLen bytes.
func streamEventPrefix(responseID string) []byte {
	k := make([]byte, 0, 3+len(responseID)+8)
	k = append(k, famStreamEvent)
	k = binary.BigEndian.AppendUint16(k, uint16(len(responseID)))
	return append(k, responseID...)
}

// streamEventKey is the key of event seq (0 <= seq) of responseID's log.
func streamEventKey(responseID string, seq int64) []byte {
	return binary.BigEndian.AppendUint64(streamEventPrefix(responseID), uint64(seq))
}

// expiryNanos maps t to the index's clock: Unix nanoseconds, clamped to
// zero for times before 1970 (and for the zero time).
func expiryNanos(t time.Time) uint64 {
	if t.IsZero() || t.Before(time.Unix(0, 0)) {
		return 0
	}
	return uint64(t.UnixNano())
}

// expiryKey is the index entry for the record under primary that expires at
// t. t is rounded up to expiryGranularity.
func expiryKey(t time.Time, primary []byte) []byte {
	n := expiryNanos(t)
	g := uint64(expiryGranularity)
	if r := n % g; r != 0 {
		n += g - r
	}
	k := make([]byte, 0, expiryKeyLen+len(primary))
	k = append(k, famExpiry)
	k = binary.BigEndian.AppendUint64(k, n)
	return append(k, primary...)
}

// expiryUpperBound is the exclusive upper bound of the index entries due at
// now: every entry whose (rounded) time is at or before now sorts below it.
func expiryUpperBound(now time.Time) []byte {
	k := make([]byte, 0, expiryKeyLen)
	k = append(k, famExpiry)
	return binary.BigEndian.AppendUint64(k, expiryNanos(now)+1)
}

// expiryPrimary returns the primary key an index entry points at.
func expiryPrimary(key []byte) ([]byte, bool) {
	if len(key) < expiryKeyLen+1 || key[0] != famExpiry {
		return nil, false
	}
	return key[expiryKeyLen:], true
}

// familyUpperBound is the exclusive upper bound of a whole family.
func familyUpperBound(fam byte) []byte {
	return []byte{fam + 1}
}

// prefixSuccessor returns the smallest key greater than every key that
// starts with prefix, or nil if there is none (prefix is all 0xff).
func prefixSuccessor(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
