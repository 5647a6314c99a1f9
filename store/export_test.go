package store

import (
	"context"
	"sync/atomic"
)

// OpenOnFullDisk is Open on a file system whose every write fails with
// ENOSPC while full is set (fullDisk), for the gateway-level tests in
// package store_test.
func OpenOnFullDisk(ctx context.Context, opts Options, full *atomic.Bool) (*PebbleStore, error) {
	opts.fs = fullDisk(full)
	return Open(ctx, opts)
}
