package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script that RunScript runs atomically on the store's
// Redis. It is the hook for state that other features share across
// replicas: rate limits (gateway.Limiter's shared implementation) count
// requests, tokens and slots in keys of their own, in one script per
// admission, so that a limit holds whichever replica a request reaches.
type Script struct{ s *redis.Script }

// NewScript prepares a Lua script (its SHA-1 is sent, the source only when
// Redis does not have it cached).
func NewScript(src string) *Script { return &Script{s: redis.NewScript(src)} }

// RunScript runs sc with keys, each prefixed with the store's KeyPrefix
// (so replicas that share a prefix share the keys, and fleets that do not,
// do not), and args. It fails like every store operation: ErrClosed after
// Close, ErrUnavailable at once while Redis is down (the caller decides
// whether to fail open or closed), ErrNotFound for a nil reply. With
// WaitReplicas, it also waits for the replicas, as every write does.
func (s *RedisStore) RunScript(ctx context.Context, sc *Script, keys []string, args ...any) (any, error) {
	release, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: run script: %w", err)
	}
	defer release()
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.p + k
	}
	v, err := s.exec(ctx, sc.s, full, args...)
	if err != nil {
		return nil, fmt.Errorf("store: run script: %w", s.fail(err))
	}
	return v, nil
}
