package plugins

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
)

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
	go r.watchLoop(w)
	return nil
}

func (r *Runtime) watchLoop(w *fsnotify.Watcher) {
	defer close(r.watchDone)
	defer w.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-r.stopWatch:
			timer.Stop()
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			timer.Reset(r.opts.Debounce)
			r.precompileSoon()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			r.log.Warn("policy dir watcher error; rescanning", "error", err)
			timer.Reset(r.opts.Debounce)
		case <-timer.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			if err := r.Reload(ctx); err != nil && err != ErrClosed {
				r.log.Error("policy reload failed", "error", err)
			}
			cancel()
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
			files, err := r.scanDir()
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
