package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// dirPollInterval is how often the watcher looks for a removed policy
// directory to come back: a directory that does not exist cannot be watched.
const dirPollInterval = 500 * time.Millisecond

// watch starts the fsnotify watcher on PolicyDir: any event (create, write,
// rename, remove) schedules one rescan after Debounce of quiet. Rescans skip
// files whose content is unchanged, so editor temp files and duplicate events
// cost little.
func (r *Runtime) watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("plugins: watcher: %w", err)
	}
	if err := w.Add(r.opts.PolicyDir); err != nil {
		_ = w.Close()
		return fmt.Errorf("plugins: watch %s: %w", r.opts.PolicyDir, err)
	}
	r.watcher = w
	r.stopWatch = make(chan struct{})
	r.watchDone = make(chan struct{})
	links := r.statLinks() // before the loop starts: a change from now on is seen
	go r.watchLoop(w, links)
	return nil
}

// linkTarget is what a symlinked policy file pointed at when last looked:
// its target's file info, or nil when the link dangled.
type linkTarget struct {
	path string
	fi   os.FileInfo
}

// changed reports whether the link now resolves to another file, or to
// one whose size or modification time changed, or appears or disappears.
func (l linkTarget) changed() bool {
	fi, err := os.Stat(l.path)
	if err != nil || l.fi == nil {
		return (err == nil) != (l.fi != nil)
	}
	return !os.SameFile(fi, l.fi) || fi.Size() != l.fi.Size() || !fi.ModTime().Equal(l.fi.ModTime())
}

// statLinks records the targets of the policy files in PolicyDir that are
// symlinks. The directory's watch sees changes to its own entries only: a
// target elsewhere (outside PolicyDir) replaced, rewritten or deleted makes
// no event there, so the loop re-stats these every dirPollInterval.
func (r *Runtime) statLinks() []linkTarget {
	des, err := os.ReadDir(r.opts.PolicyDir)
	if err != nil {
		return nil
	}
	var links []linkTarget
	for _, de := range des {
		if _, ok := PolicyName(de.Name()); !ok || de.Type()&os.ModeSymlink == 0 {
			continue
		}
		l := linkTarget{path: filepath.Join(r.opts.PolicyDir, de.Name())}
		if fi, err := os.Stat(l.path); err == nil {
			l.fi = fi
		}
		links = append(links, l)
	}
	return links
}

// anyLinkChanged reports whether one of links now points at something else.
func anyLinkChanged(links []linkTarget) bool {
	for _, l := range links {
		if l.changed() {
			return true
		}
	}
	return false
}

// watchLoop turns the watcher's events into debounced rescans until Close.
// The kernel drops the watch when the directory itself is removed or moved
// away, and a directory created again at the same path is a new one: the
// loop then polls every dirPollInterval until the path is a directory again,
// watches it and rescans (files copied in before the watch was back are
// found by that rescan). While the directory holds symlinked policy files,
// their targets are re-stated every dirPollInterval (statLinks), and a
// change schedules a rescan like an event.
func (r *Runtime) watchLoop(w *fsnotify.Watcher, links []linkTarget) {
	defer close(r.watchDone)
	defer w.Close()
	dir := filepath.Clean(r.opts.PolicyDir)
	rescan := time.NewTimer(time.Hour)
	rescan.Stop()
	poll := time.NewTicker(dirPollInterval)
	poll.Stop()
	defer poll.Stop()
	linkPoll := time.NewTicker(dirPollInterval)
	defer linkPoll.Stop()
	pollLinks := func(l []linkTarget) {
		links = l
		if len(links) == 0 {
			linkPoll.Stop()
		} else {
			linkPoll.Reset(dirPollInterval)
		}
	}
	pollLinks(links)
	watching := true
	lost := func(why string) {
		watching = false
		// inotify has dropped the watch already; other backends may not.
		if err := w.Remove(dir); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) {
			r.log.Debug("policy dir watcher: removing the old watch", "dir", dir, "error", err)
		}
		r.log.Warn("policy dir is gone: hot swap pauses until it is back", "dir", dir, "why", why,
			"poll", dirPollInterval.String())
		poll.Reset(dirPollInterval)
	}
	for {
		select {
		case <-r.stopWatch:
			rescan.Stop()
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if watching && filepath.Clean(ev.Name) == dir && ev.Op.Has(fsnotify.Remove|fsnotify.Rename) {
				lost(strings.ToLower(ev.Op.String()))
			}
			rescan.Reset(r.opts.Debounce)
			r.precompileSoon()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			r.log.Warn("policy dir watcher error; rescanning", "error", err)
			rescan.Reset(r.opts.Debounce)
		case <-poll.C:
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				continue
			}
			if err := w.Add(dir); err != nil {
				// Removed again in between, or not readable: try at the next tick.
				r.log.Debug("policy dir is back but cannot be watched yet", "dir", dir, "error", err)
				continue
			}
			poll.Stop()
			watching = true
			r.log.Info("policy dir is back: watching it again", "dir", dir)
			rescan.Reset(r.opts.Debounce)
			r.precompileSoon()
		case <-linkPoll.C:
			if anyLinkChanged(links) {
				pollLinks(nil) // the rescan records the targets again
				rescan.Reset(r.opts.Debounce)
				r.precompileSoon()
			}
		case <-rescan.C:
			// Recorded before the reload reads the files: a target that
			// changes while it runs is seen at the next tick.
			pollLinks(r.statLinks())
			// In the background: a file whose load runs until its limit
			// must not keep the loop from seeing, and loading, the files
			// renamed into place meanwhile (Reload).
			r.background(func() {
				ctx, cancel := context.WithTimeout(r.life, 5*time.Minute)
				defer cancel()
				if err := r.Reload(ctx); err != nil && !errors.Is(err, ErrClosed) && r.life.Err() == nil {
					r.log.Error("policy reload failed", "error", err)
				}
			})
			// A watch can also vanish without an event for the directory
			// itself (its file system unmounted, say).
			if _, err := os.Stat(dir); watching && errors.Is(err, os.ErrNotExist) {
				lost("missing at rescan")
			}
		}
	}
}

// precompileSoon compiles changed files in the background while the
// debounce timer runs, so that the reload after it finds them compiled (the
// bytes are hashed again then: a file still being written is compiled again
// or rejected, never swapped in half-written).
func (r *Runtime) precompileSoon() {
	if !r.precompiling.CompareAndSwap(false, true) {
		r.precompileAgain.Store(true)
		return
	}
	r.background(func() {
		defer r.precompiling.Store(false)
		for {
			r.precompileAgain.Store(false)
			files, err := r.scanDir(false) // the reload after it logs what it skips
			if err == nil {
				for _, data := range files {
					if len(data) < 8 || string(data[:4]) != "\x00asm" {
						continue
					}
					a := newArtifact(SourceDir, data)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					if c, err := r.getCompiled(ctx, a); err == nil {
						r.cmu.Lock()
						r.pending = append(r.pending, c)
						r.cmu.Unlock()
					}
					cancel()
				}
			}
			if !r.precompileAgain.Load() || r.closed.Load() {
				return
			}
		}
	})
}

// releasePending drops the references precompileSoon took.
func (r *Runtime) releasePending() {
	r.cmu.Lock()
	p := r.pending
	r.pending = nil
	r.cmu.Unlock()
	for _, c := range p {
		r.releaseCompiled(c)
	}
}
