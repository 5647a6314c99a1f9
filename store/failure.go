package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/go-hclog"
)

// Pebble stops for good on some errors: a failed WAL write or sync (a full
// disk) makes applyInternal call Logger.Fatalf on the writer's goroutine,
// and after that its commit pipeline is stuck ("horked", db.go): the failed
// batch stays at the head of the pending queue, so a later write could wait
// forever, and a read could see a write that never reached the WAL. So the
// first fatal error fails the whole store: every later call returns the
// failure at once without touching Pebble, reads included, until a
// background loop has closed the broken database and opened it again
// (docs/ARCHITECTURE.md §7, README "Continuity").

// Reopen timing: the first attempt after recoverFirstDelay, then doubling to
// recoverMaxDelay while the directory still refuses writes. closeBound is how
// long a Close of the broken database may take before the store gives up
// waiting for it (Pebble holds its LOCK file until Close returns, so it
// cannot be opened again before).
const (
	recoverFirstDelay = 100 * time.Millisecond
	recoverMaxDelay   = 5 * time.Second
	closeBound        = 5 * time.Second
	// stuckCallAttempts is how many attempts in a row may find a call
	// still inside the failed database before the loop says so at ERROR.
	stuckCallAttempts = 10
)

// pebbleStoreMethods prefixes the name of every PebbleStore method (and of
// the closures inside them) in a stack trace.
const pebbleStoreMethods = "github.com/sluice-gw/sluice/store.(*PebbleStore)."

// writeProbeName is the file the recovery loop writes to learn whether the
// directory takes writes again.
const writeProbeName = "write-probe.tmp"

// pebbleFatal is the panic pebbleLogger.Fatalf raises on the goroutine of a
// store call; the call's release recovers it and returns the store's failure.
type pebbleFatal struct{ msg string }

func (f *pebbleFatal) Error() string { return "pebble fatal error: " + f.msg }

// pebbleLogger forwards Pebble's log lines to hclog and its fatal errors to
// the store.
type pebbleLogger struct {
	l       hclog.Logger
	onFatal func(error)
}

// Infof implements pebble.Logger.
func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...))
}

// Fatalf implements pebble.Logger. Pebble calls it on errors after which the
// database must not be used: the store is marked failed first. On the
// goroutine of a store call it then raises pebbleFatal, which the call
// recovers into an error. On one of Pebble's own goroutines (flushes,
// compactions: a MANIFEST write failing on a full disk) no recover can
// reach, so that goroutine alone ends (runtime.Goexit), leaving the broken
// database to the recovery loop, rather than the process.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	f := &pebbleFatal{msg: fmt.Sprintf(format, args...)}
	p.l.Error("pebble fatal error", "error", f.msg)
	p.onFatal(f)
	if calledFromStore() {
		panic(f)
	}
	runtime.Goexit()
}

// calledFromStore reports whether the calling goroutine is running a
// PebbleStore method, whose release recovers pebbleFatal.
func calledFromStore() bool {
	pcs := make([]uintptr, 256)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		fr, more := frames.Next()
		if strings.HasPrefix(fr.Function, pebbleStoreMethods) {
			return true
		}
		if !more {
			return false
		}
	}
}

// settle ends a guarded store call: r is what the call's deferred release
// got from recover(). Pebble's fatal panic becomes the store's failure in
// *errp (when errp is not nil); any other panic goes on. A call that met a
// damaged file (its error a corruption: a table no background job read yet)
// fails the store for good, as that job's error does (failCorrupt): the
// fault does not clear, and a caller told to retry would retry forever.
func (s *PebbleStore) settle(r any, errp *error) {
	if r == nil {
		if errp != nil && *errp != nil && pebble.IsCorruptionError(*errp) {
			s.failCorrupt(*errp)
			*errp = *s.failure.Load()
		}
		return
	}
	f, ok := r.(*pebbleFatal)
	if !ok {
		panic(r)
	}
	err := s.fail(f)
	if errp != nil {
		*errp = err
	}
}

// fail marks the store failed by cause (the first cause wins), logs it once
// and starts the recovery loop, and returns the error every call now gets.
func (s *PebbleStore) fail(cause error) error {
	return s.markFailed(cause, false,
		"failed and is closed until it can be reopened",
		"store failed: the database stopped after a write error; continuity fails closed, anchors wait in memory and streaming input answers 503 until it is reopened. Free space on the data dir's disk (or fix its permissions); the store reopens itself once it can write there again")
}

// failCorrupt marks the store failed by cause, a file of the database that
// Pebble found damaged (pebble.IsCorruptionError), like fail, but for good:
// the damage does not heal, and Pebble retries the background job that met
// it (a compaction, loading a table's statistics) at once and without end
// (compaction.go, table_stats.go in Pebble v1.1: no backoff, no option to
// stop it), spinning a core. So the recovery loop closes the database,
// which ends those jobs, and does not reopen it: the store stays
// unavailable until the gateway restarts on a data dir that reads back.
func (s *PebbleStore) failCorrupt(cause error) {
	s.markFailed(cause, true,
		"is corrupt and is closed until the gateway restarts",
		"store failed: a file of the database is damaged on disk; continuity fails closed, anchors wait in memory and streaming input answers 503 until the gateway restarts. Stop the gateway, restore the data dir from a backup (or move it aside to start with an empty store, losing what it held) and start it again")
}

// markFailed is fail and failCorrupt: the first cause wins; its error says
// state, and the one ERROR line logged says what to do.
func (s *PebbleStore) markFailed(cause error, corrupt bool, state, logLine string) error {
	err := fmt.Errorf("store: the database in %q %s: %w: %w", s.dir, state, ErrUnavailable, cause)
	if corrupt {
		err = untilRestart{err}
	}
	if s.failure.CompareAndSwap(nil, &err) {
		s.failedCorrupt.Store(corrupt)
		s.log.Error(logLine, "dir", s.dir, "error", cause)
		s.startRecovery()
	}
	return *s.failure.Load()
}

// untilRestart is the failure of a store closed for good (failCorrupt):
// it is ErrUnavailableUntilRestart too, its message unchanged.
type untilRestart struct{ error }

func (u untilRestart) Unwrap() error { return u.error }

func (u untilRestart) Is(target error) bool { return target == ErrUnavailableUntilRestart }

// Health implements HealthReporter: nil while the database works, else the
// failure that closed it, or the data dir it was opened in gone
// (checkDataDir).
func (s *PebbleStore) Health() error {
	if errp := s.failure.Load(); errp != nil {
		return *errp
	}
	return s.checkDataDir()
}

// startRecovery starts the recovery loop unless the store is closing.
func (s *PebbleStore) startRecovery() {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgCtx.Err() != nil {
		return
	}
	s.bg.Add(1)
	go s.recoverLoop(s.bgCtx)
}

// recoverLoop reopens the failed database, with backoff, once its directory
// takes writes again (a corrupt one it only closes: failCorrupt), and
// returns when it has or when the store closes.
func (s *PebbleStore) recoverLoop(ctx context.Context) {
	defer s.bg.Done()
	delay := recoverFirstDelay
	t := time.NewTimer(delay)
	defer t.Stop()
	busy := 0 // attempts in a row that found a call still inside the database
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		done, lockBusy := s.tryReopen()
		if done {
			return
		}
		busy++
		if !lockBusy {
			busy = 0
		}
		if busy == stuckCallAttempts {
			s.log.Error("store: a call is still inside the failed database, so it cannot be reopened; restart the gateway if this lasts", "dir", s.dir)
		}
		delay = min(2*delay, recoverMaxDelay)
		t.Reset(delay)
	}
}

// tryReopen makes one attempt at replacing the failed database by a fresh
// open of its directory (a corrupt one it only closes), and reports whether
// it is done, or else whether a call inside the database kept it from
// trying.
func (s *PebbleStore) tryReopen() (done, lockBusy bool) {
	corrupt := s.failedCorrupt.Load()
	if !corrupt {
		if err := s.probeWritable(); err != nil {
			s.log.Debug("store still cannot write", "dir", s.dir, "error", err)
			return false, false
		}
	}
	// Without waiting: a call stuck in the broken database holds s.mu
	// shared, and a waiting Lock would stop every new call at RLock.
	if !s.mu.TryLock() {
		return false, true
	}
	defer s.mu.Unlock()
	if corrupt && s.db == nil {
		// Pebble found the damage while Open was still opening the
		// database: wait until Open has published it, to close it.
		return false, false
	}
	if err := s.closeBroken(); err != nil {
		level := hclog.Error // once per failure; the loop keeps waiting for it
		if s.closeStuckLogged {
			level = hclog.Debug
		}
		s.closeStuckLogged = true
		s.log.Log(level, "store: closing the failed database has not finished, and it cannot be reopened before; restart the gateway if this lasts", "dir", s.dir, "error", err)
		return false, false
	}
	if corrupt {
		s.log.Info("store: the corrupt database is closed; the store stays unavailable until the gateway restarts", "dir", s.dir)
		return true, false
	}
	db, err := s.openDB()
	if err != nil {
		s.log.Warn("store: reopening the database failed; trying again", "dir", s.dir, "error", err)
		return false, false
	}
	s.db, s.closeStuckLogged = db, false
	s.failure.Store(nil)
	s.log.Info("store reopened: the database takes writes again", "dir", s.dir)
	return true, false
}

// closeBroken closes the failed database, waiting up to closeBound (a Close
// that has not returned by then is waited for again by the next call).
// Pebble's LOCK file is held until it returns. The caller holds s.mu.
func (s *PebbleStore) closeBroken() error {
	if s.db == nil {
		return nil
	}
	if s.closing == nil {
		s.closing = s.closeDB(s.db)
	}
	select {
	case err := <-s.closing:
		if err != nil {
			s.log.Debug("store: closing the failed database", "dir", s.dir, "error", err)
		}
		s.db, s.closing = nil, nil
		return nil
	case <-time.After(closeBound):
		return fmt.Errorf("close still running after %s: %w", closeBound, ErrUnavailable)
	}
}

// closeDB closes db in the background and sends the result; a fatal error
// inside Close is an error like any other.
func (s *PebbleStore) closeDB(db *pebble.DB) <-chan error {
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { s.settle(recover(), &err); done <- err }()
		err = db.Close()
	}()
	return done
}

// probeWritable writes and syncs a small file in the store's directory and
// removes it: the test that a reopen (which writes a new WAL and MANIFEST)
// may succeed.
func (s *PebbleStore) probeWritable() error {
	fs := s.opts.fs
	name := fs.PathJoin(s.dir, writeProbeName)
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, 64<<10))
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close(), fs.Remove(name))
	return err
}
