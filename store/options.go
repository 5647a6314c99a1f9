package store

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/go-hclog"
)

// Defaults applied by Open to zero-valued Options fields.
const (
	// DefaultAnchorTTL is how long a response anchor lives.
	DefaultAnchorTTL = 7 * 24 * time.Hour
	// DefaultScopeTTL is how long a scope record lives after its last update.
	DefaultScopeTTL = 7 * 24 * time.Hour
	// DefaultTurnTTL is how long a conversation turn lives.
	DefaultTurnTTL = 7 * 24 * time.Hour
	// DefaultInputSessionTTL is how long a streaming-input session lives
	// after its last activity when the caller does not set ExpiresAt.
	DefaultInputSessionTTL = time.Hour
	// DefaultSweepInterval is the period of the background sweeper.
	DefaultSweepInterval = time.Minute
	// DefaultMaxTurnBytes caps the items of one conversation turn.
	DefaultMaxTurnBytes = 32 << 20
	// DefaultMaxChunkBytes caps one input chunk's payload and one input
	// session's template.
	DefaultMaxChunkBytes = 32 << 20
	// DefaultCacheSize is the size of Pebble's block cache.
	DefaultCacheSize = 8 << 20
)

// MaxIDLen is the longest response, session or scope id the store accepts.
const MaxIDLen = 1024

// Options configure Open. Only Dir is required.
type Options struct {
	// Dir is the directory that holds the Pebble database. It is created if
	// it does not exist.
	Dir string

	// AnchorTTL is the lifetime of an anchor whose ExpiresAt is zero,
	// counted from its CreatedAt. Zero or negative means DefaultAnchorTTL.
	AnchorTTL time.Duration
	// ScopeTTL is the lifetime of a scope record, counted from its last
	// update. Zero or negative means DefaultScopeTTL.
	ScopeTTL time.Duration
	// TurnTTL is the lifetime of a conversation turn whose ExpiresAt is zero,
	// counted from its CreatedAt. Zero or negative means DefaultTurnTTL.
	TurnTTL time.Duration
	// InputSessionTTL is the lifetime of an input session whose ExpiresAt is
	// zero, counted from its LastActivity. Zero or negative means
	// DefaultInputSessionTTL.
	InputSessionTTL time.Duration

	// SweepInterval is the period of the background sweeper. Zero means
	// DefaultSweepInterval; a negative value disables the background sweeper
	// (call Sweep yourself).
	SweepInterval time.Duration

	// MaxTurnBytes caps the summed size of one turn's input and output
	// items; PutConversation rejects a larger turn with ErrTooLarge. Zero or
	// negative means DefaultMaxTurnBytes.
	MaxTurnBytes int
	// MaxChunkBytes caps one chunk's payload and one input session's
	// template (ErrTooLarge). Zero or negative means DefaultMaxChunkBytes.
	MaxChunkBytes int

	// CacheSize is the size in bytes of Pebble's block cache. Zero or
	// negative means DefaultCacheSize.
	CacheSize int64

	// Logger receives the store's and Pebble's log lines. Nil discards them.
	Logger hclog.Logger

	// Now is the store's clock, used for default timestamps and expiry
	// checks. Nil means time.Now. Tests inject a fake clock here.
	Now func() time.Time

	// fs is the file system Pebble and the recovery loop use; nil means
	// the operating system's. Tests inject a failing one here.
	fs vfs.FS
}

// withDefaults returns a copy of o with every zero field set to its default,
// or an error if o cannot be used.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("store: options: Dir is required: %w", ErrInvalid)
	}
	if o.fs == nil {
		o.fs = vfs.Default
	}
	return o.withCommonDefaults(), nil
}

// withCommonDefaults sets every zero field but Dir to its default; the
// Redis store shares these.
func (o Options) withCommonDefaults() Options {
	if o.AnchorTTL <= 0 {
		o.AnchorTTL = DefaultAnchorTTL
	}
	if o.ScopeTTL <= 0 {
		o.ScopeTTL = DefaultScopeTTL
	}
	if o.TurnTTL <= 0 {
		o.TurnTTL = DefaultTurnTTL
	}
	if o.InputSessionTTL <= 0 {
		o.InputSessionTTL = DefaultInputSessionTTL
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.MaxTurnBytes <= 0 {
		o.MaxTurnBytes = DefaultMaxTurnBytes
	}
	if o.MaxChunkBytes <= 0 {
		o.MaxChunkBytes = DefaultMaxChunkBytes
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
