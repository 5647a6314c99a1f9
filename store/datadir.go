package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// A data dir removed while the gateway runs does not stop Pebble: its open
// files stay writable once unlinked, so every call keeps working, and all
// the store holds is lost when the process ends (README "Continuity").
// Health therefore checks, each time it is asked (/readyz, the
// sluice_store_up scrape, the sweeper's round), that the data dir's path
// still names the directory the database was opened in: one stat, cheap.
// A directory renamed while serving is harmless (the open files follow it),
// but its old path then names nothing, or another directory, which is what
// a restart would open: so that is reported too.

// openedDir is the identity of the directory the database was opened in.
type openedDir struct{ info os.FileInfo }

// noteOpenedDir records the data dir the database was just opened in
// (openDB: at Open and when the recovery loop reopens it). A stat that
// fails leaves the check off until the next open.
func (s *PebbleStore) noteOpenedDir() {
	info, err := os.Stat(s.dir)
	if err != nil {
		s.openedDir.Store(nil)
		return
	}
	s.openedDir.Store(&openedDir{info: info})
	s.dirGone.Store(false)
}

// checkDataDir returns nil while the data dir's path names the directory
// the database was opened in, else why not. The first time it finds it
// gone it logs an ERROR saying what it means and what to do; once the
// directory is back at its path (renamed back) it says so at INFO.
func (s *PebbleStore) checkDataDir() error {
	opened := s.openedDir.Load()
	if opened == nil {
		return nil
	}
	cur, err := os.Stat(s.dir)
	if err == nil && os.SameFile(cur, opened.info) {
		if s.dirGone.CompareAndSwap(true, false) {
			s.log.Info("store: the data dir is back; what the store writes is kept again", "dir", s.dir)
		}
		return nil
	}
	var why string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		why = "it was removed or renamed"
	case err != nil:
		why = fmt.Sprintf("it cannot be checked: %v", err)
	default:
		why = "another file or directory took its place"
	}
	gone := fmt.Errorf("store: the data dir %q is no longer the directory the database was opened in (%s): "+
		"what the store holds is lost when the gateway stops", s.dir, why)
	if s.dirGone.CompareAndSwap(false, true) {
		s.log.Error("store: the data dir is gone: the database keeps working in files no longer under it, and everything it holds "+
			"(anchors, keys, usage) is lost when the gateway stops. Put the directory back at its path if it was moved, "+
			"else restart the gateway on a data dir it can keep", "dir", s.dir, "error", gone)
	}
	return gone
}
