// Package plugins runs Sluice's WebAssembly policies: it compiles modules with
// wazero (with an on-disk compilation cache), checks them against the host
// ABI (hostabi/ABI.md), keeps a bounded pool of instances per module, calls
// the recover, replay and rewrite_request hooks with per-call deadlines and
// memory caps, falls back to the built-in defaults on any fault, rolls a
// policy back after repeated faults, and hot-swaps modules when the files in
// the policy directory change.
package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/logtext"
)

// Options configure a Runtime. Zero values take the defaults noted.
type Options struct {
	// PolicyDir is watched for *.wasm files; "" means embedded defaults only.
	// It is created when missing.
	PolicyDir string
	// CacheDir holds wazero's compilation cache (the CLI maps
	// wasm_cache_dir here); New fails when it cannot be written. "" means
	// DefaultCacheDir when it can be written, else FallbackCacheDir, else
	// memory, with one warning naming wasm_cache_dir.
	CacheDir string
	// FallbackCacheDir is the compilation cache when CacheDir is "" and the
	// user cache dir cannot be written (HOME unset or read-only, as under
	// systemd or in containers); the CLI passes <data_dir>/wasm-cache.
	FallbackCacheDir string
	// Embedded maps file names ("recover.wasm") to module bytes, loaded first
	// as defaults; a PolicyDir file with the same name overrides one.
	Embedded map[string][]byte
	// Config is each policy's configuration (key: file name without
	// ".wasm"), returned to the guest by the config host function.
	Config map[string]json.RawMessage
	// Logger receives load, swap, fault and guest log messages; nil = hclog.NewNullLogger().
	Logger hclog.Logger
	// PoolSize bounds the instances per module; 0 = 2×GOMAXPROCS.
	PoolSize int
	// Prewarm is the number of instances kept per module at load (the
	// first is the one that ran the load checks, the rest are created in
	// the background). 0 (or negative) = none: the load-time instance is
	// closed after the checks and instances are created by the first calls
	// that need them (about 4–5 ms each for the embedded Go policies, see
	// BenchmarkInstantiate), which keeps an idle gateway small (each Go
	// instance holds a few MiB of linear memory).
	Prewarm int
	// CallTimeout bounds every hook call (the request's own deadline applies
	// when sooner); 0 = 50ms.
	CallTimeout time.Duration
	// MemoryLimitPages caps each instance's memory in 64 KiB pages; 0 = 1024 (64 MiB).
	MemoryLimitPages uint32
	// FaultsBeforeRollback is how many faults in a row roll a policy back; 0 = 5,
	// negative: never (a test harness reports every input's own answer).
	FaultsBeforeRollback int
	// Debounce is the quiet time after a file event before rescanning; 0 = 100ms.
	Debounce time.Duration
	// RecordDir, when set, receives every hook call the gateway makes (the
	// input, the verdict and who gave it) as JSONL, keys and ids redacted
	// (see Record); recording starts on and SetRecording toggles it.
	RecordDir string
	// RecordFileBytes rotates a recording file past this size; 0 =
	// DefaultRecordFileBytes. The files kept total at most RecordFiles
	// times that size; 0 = DefaultRecordFiles.
	RecordFileBytes int64
	RecordFiles     int
	// StandIns maps embedded file names ("recover.wasm") to native functions
	// that decide exactly as those modules do (hostabi.EmbeddedRecover and
	// hostabi.EmbeddedReplay are what the embedded modules call). An embedded module
	// with a stand-in for each hook it answers is compiled and checked at
	// load, then parked: its compiled code is released, the stand-in answers
	// its first calls while the module is compiled again in the background
	// (from the compilation cache, ~50 ms), and the module answers after
	// that. An idle gateway then holds no policy code (about 16 MiB per Go
	// module) and no first failure waits for a compile. Without a stand-in,
	// or with Prewarm, modules stay compiled from load.
	StandIns map[string]StandIn

	// initTimeout bounds the load-time calls and an instantiation;
	// 0 = initTimeout. Only tests change it.
	initTimeout time.Duration
}

// StandIn is the native twin of an embedded policy module (Options.StandIns).
// A nil function means the module's hook has no twin. config is the
// policy's Options.Config entry (nil when none).
type StandIn struct {
	Recover func(in hostabi.RecoverInput, config []byte) hostabi.RecoverOutput
	Replay  func(in hostabi.ReplayInput, config []byte) hostabi.ReplayOutput
}

// hooks is the set of hooks the stand-in answers.
func (s StandIn) hooks() hostabi.Hook {
	var h hostabi.Hook
	if s.Recover != nil {
		h |= hostabi.HookRecover
	}
	if s.Replay != nil {
		h |= hostabi.HookReplay
	}
	return h
}

// Defaults of Options.
const (
	DefaultCallTimeout          = 50 * time.Millisecond
	DefaultMemoryLimitPages     = 1024
	DefaultFaultsBeforeRollback = 5
	DefaultDebounce             = 100 * time.Millisecond
)

// Policy states reported by Status.
const (
	StateActive     = "active"      // the version shown is serving (a refused newer file shows as rejected_sha256)
	StateRejected   = "rejected"    // the latest file was refused and no version of the name serves
	StateRolledBack = "rolled_back" // the version shown replaced a faulting one (see last_error)
	StateTripped    = "tripped"     // faulted repeatedly with nothing to roll back to (a version that tripped is none): the built-in default applies (a rewrite held to its edits refuses its requests)
)

// Sources of a policy version.
const (
	SourceEmbedded = "embedded"
	SourceDir      = "dir"
)

// ErrClosed is returned by Reload after Close.
var ErrClosed = errors.New("plugins: runtime closed")

// Runtime holds the loaded policies. Its methods are safe for concurrent use.
type Runtime struct {
	opts  Options
	log   hclog.Logger
	wrt   wazero.Runtime
	cache wazero.CompilationCache
	m     *metrics

	// mu serializes swaps, rollbacks and the planning of reloads; files
	// are compiled, instantiated and self-tested without it (Reload).
	mu      sync.Mutex
	entries map[string]*entry
	// answered is, by policy name, the hooks its published version answers
	// (as of the last publish, under mu): the hooks it has per-hook series
	// for.
	answered map[string]hostabi.Hook

	// compileSlots and loadSlots bound the files being compiled, and
	// instantiated and self-tested, at once (build).
	compileSlots chan struct{}
	loadSlots    chan struct{}

	cmu      sync.Mutex
	compiled map[string]*compiled
	pending  []*compiled // references held by precompileSoon until the next reload

	precompiling    atomic.Bool
	precompileAgain atomic.Bool

	active atomic.Pointer[activeSet]
	status atomic.Pointer[[]statusBase]
	ready  atomic.Bool
	closed atomic.Bool

	// life ends when Close starts: it bounds the instances created in the
	// background (version.instantiate).
	life    context.Context
	endLife context.CancelFunc

	watcher   *fsnotify.Watcher
	stopWatch chan struct{}
	watchDone chan struct{}
	bgMu      sync.Mutex
	bg        sync.WaitGroup

	rec       *recorder   // nil without Options.RecordDir
	recording atomic.Bool // rec is on: the hook entry points record
	recordErr atomic.Bool // a write error was logged
}

// background runs f in a goroutine that Close waits for; it does nothing
// once the runtime is closed, and reports whether f was started.
func (r *Runtime) background(f func()) bool {
	r.bgMu.Lock()
	defer r.bgMu.Unlock()
	if r.closed.Load() {
		return false
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		f()
	}()
	return true
}

// entry is everything known about one policy name.
type entry struct {
	name        string
	embedded    *artifact
	standIn     StandIn // answers for the embedded version while it is parked
	fileSHA     string  // sha256 of the file last seen in PolicyDir ("" = none)
	triedEmbed  bool
	cur         *version
	prev        *artifact // what served before cur, for rollback
	state       string
	lastError   string
	rejectedSHA string
	// rejectedError is why the file of rejectedSHA was refused; it is
	// lastError too unless the state is rolled_back or tripped, whose
	// reason lastError keeps.
	rejectedError string
	// rejectedSource is where the refused file came from ("dir", or
	// "embedded"): what /admin/policies shows as source when no version
	// serves.
	rejectedSource string
	gen            uint64
	st             *stats // the name's last error; each version counts its own calls (stats)
	// planned numbers the plans made for this name (Reload); cancelBuild
	// stops the build of the latest one, nil once it is applied.
	planned     uint64
	cancelBuild context.CancelFunc

	// configRefusal is the error of a policy that refused its config
	// (policyRefusal) while nothing of the name serves, "" otherwise.
	configRefusal string
}

// policyRefusal is a load failure of the policy's own code run with its
// config: _initialize, sluice_hooks or sluice_self_test failed. The file is
// a policy the host could load, and it refused (README "Running it": at
// start, a configured policy that refuses its config is a config error).
// Every other load failure (not Wasm, imports, exports, ABI version) is
// the file's.
type policyRefusal struct{ err error }

func (e *policyRefusal) Error() string { return e.err.Error() }
func (e *policyRefusal) Unwrap() error { return e.err }

// refusalOf is the error of the first of errs that is a policyRefusal, ""
// when none is.
func refusalOf(errs ...error) string {
	for _, err := range errs {
		var pr *policyRefusal
		if errors.As(err, &pr) {
			return err.Error()
		}
	}
	return ""
}

// artifact is a module's bytes and where they came from.
type artifact struct {
	source string
	data   []byte
	sha    string
	// tripped: a version built from it tripped (ABI.md §7), so it is no
	// rollback target. Guarded by Runtime.mu.
	tripped bool
}

// activeSet is the ordered set of serving versions, by hook.
type activeSet struct {
	all    []*version
	byHook [hStreamEvent + 1][]*version // self_test's list stays empty
}

func newArtifact(source string, data []byte) *artifact {
	sum := sha256.Sum256(data)
	return &artifact{source: source, data: data, sha: hex.EncodeToString(sum[:])}
}

// DefaultCacheDir is where the compilation cache lives when Options.CacheDir
// is empty: the user cache dir's sluice/wasm, or "" when there is no user
// cache dir (HOME and XDG_CACHE_HOME unset).
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sluice", "wasm")
	}
	return ""
}

// CacheDirFor is the directory a runtime with o keeps its compilation
// cache in: CacheDir when set, else the first writable of DefaultCacheDir
// and FallbackCacheDir, else "" (memory). fellBack says why the user cache
// dir was not used (nil when it was, or CacheDir is set). The start
// summary names the directory with it before the runtime opens.
func CacheDirFor(o Options) (dir string, fellBack error) {
	if o.CacheDir != "" {
		return o.CacheDir, nil
	}
	def := DefaultCacheDir()
	fellBack = errors.New("no user cache dir (HOME is not set)")
	if def != "" {
		if fellBack = writableDir(def); fellBack == nil {
			return def, nil
		}
	}
	if o.FallbackCacheDir != "" && writableDir(o.FallbackCacheDir) == nil {
		return o.FallbackCacheDir, fellBack
	}
	return "", fellBack
}

// openCache opens the compilation cache where CacheDirFor says, in memory
// when no directory can hold it. Only the fallbacks warn, once.
func openCache(o Options, log hclog.Logger) (wazero.CompilationCache, error) {
	if o.CacheDir != "" {
		if err := writableDir(o.CacheDir); err != nil {
			return nil, fmt.Errorf("plugins: wasm_cache_dir: %w", err)
		}
		return wazero.NewCompilationCacheWithDir(o.CacheDir)
	}
	dir, why := CacheDirFor(o)
	if dir != "" {
		c, err := wazero.NewCompilationCacheWithDir(dir)
		switch {
		case err == nil && why == nil:
			return c, nil
		case err == nil:
			log.Warn("the user cache dir cannot hold the Wasm compilation cache; set wasm_cache_dir to choose one",
				"wasm_cache_dir", dir, "reason", why.Error())
			return c, nil
		}
		why = err
	}
	log.Warn("the user cache dir cannot hold the Wasm compilation cache; set wasm_cache_dir to choose one",
		"wasm_cache_dir", "memory", "reason", why.Error())
	return wazero.NewCompilationCache(), nil
}

// writableDir creates dir when missing and checks a file can be written in it.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 2 * runtime.GOMAXPROCS(0)
	}
	o.Prewarm = min(max(o.Prewarm, 0), o.PoolSize)
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.MemoryLimitPages == 0 {
		o.MemoryLimitPages = DefaultMemoryLimitPages
	}
	o.MemoryLimitPages = min(o.MemoryLimitPages, 65536)
	if o.FaultsBeforeRollback == 0 {
		o.FaultsBeforeRollback = DefaultFaultsBeforeRollback
	}
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.initTimeout <= 0 {
		o.initTimeout = initTimeout
	}
	return o
}

// New compiles the embedded and PolicyDir policies, publishes them and starts
// watching PolicyDir. Policies that fail to load are reported by Status, not
// by an error; New fails only when the runtime itself cannot start.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	opts = opts.withDefaults()
	r := &Runtime{
		opts:     opts,
		log:      opts.Logger.Named("policies"),
		m:        newMetrics(),
		entries:  map[string]*entry{},
		compiled: map[string]*compiled{},
		// Compiling is CPU work: one file per core. A load-time call is
		// normally a few ms, but one stuck in a loop holds its slot for
		// initTimeout while using one core: more slots than cores keep a
		// few such files from holding up the others (and the start's
		// readiness) while still bounding the instances held at once.
		compileSlots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0))),
		loadSlots:    make(chan struct{}, max(8, 4*runtime.GOMAXPROCS(0))),
	}
	r.life, r.endLife = context.WithCancel(context.Background())
	if opts.RecordDir != "" {
		r.rec = newRecorder(opts)
		r.recording.Store(true)
	}
	cache, err := openCache(opts, r.log)
	if err != nil {
		return nil, err
	}
	r.cache = cache
	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(cache).
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(opts.MemoryLimitPages)
	r.wrt = wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.wrt); err != nil {
		_ = r.wrt.Close(ctx)
		return nil, fmt.Errorf("plugins: wasi: %w", err)
	}
	if err := r.instantiateHost(ctx); err != nil {
		_ = r.wrt.Close(ctx)
		return nil, fmt.Errorf("plugins: host module: %w", err)
	}
	for file, data := range opts.Embedded {
		name, ok := PolicyName(file)
		if !ok {
			continue
		}
		e := r.entry(name)
		e.embedded = newArtifact(SourceEmbedded, data)
		e.standIn = opts.StandIns[file]
	}
	r.active.Store(&activeSet{})
	if opts.PolicyDir != "" {
		if err := r.ensurePolicyDir(); err != nil {
			_ = r.wrt.Close(ctx)
			return nil, err
		}
	}
	if err := r.Reload(ctx); err != nil {
		_ = r.Close(context.Background())
		return nil, err
	}
	if opts.PolicyDir != "" {
		if err := r.watch(); err != nil {
			_ = r.Close(context.Background())
			return nil, err
		}
	}
	r.ready.Store(true)
	return r, nil
}

// ensurePolicyDir creates PolicyDir when it does not exist, so that it can
// be watched, and warns: a mistyped policy_dir would otherwise load none of
// the operator's policies without a word.
func (r *Runtime) ensurePolicyDir() error {
	dir := r.opts.PolicyDir
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plugins: policy dir: %w", err)
	}
	if !errors.Is(statErr, fs.ErrNotExist) {
		return nil
	}
	r.log.Warn("policy dir did not exist and was created: only the embedded policies serve until *.wasm files are renamed into it",
		"dir", dir)
	return nil
}

// ReadPolicyFile reads the module file at path (a link followed), refusing
// one that is not a regular file (a directory, a FIFO or a device, which
// reading would block on or never end: notRegular) before it is opened.
func ReadPolicyFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(fi.Mode())
	}
	return os.ReadFile(path)
}

// notRegular says what a policy-named path that is not a regular file is
// instead: a directory, or the type bits of another kind.
func notRegular(mode os.FileMode) error {
	if mode.IsDir() {
		return errors.New("a directory, not a regular file")
	}
	return fmt.Errorf("not a regular file (%s)", mode.Type())
}

// PolicyName maps the name of a file in the policy directory to the name of
// the policy it holds; false for files the runtime ignores (not *.wasm,
// hidden or editor files). `sluice policy build` uses it to refuse output
// names a gateway would never load.
func PolicyName(file string) (string, bool) {
	if !strings.HasSuffix(file, ".wasm") || strings.HasPrefix(file, ".") || strings.HasPrefix(file, "#") {
		return "", false
	}
	name := strings.TrimSuffix(file, ".wasm")
	if name == "" || strings.ContainsAny(name, "/\\") {
		return "", false
	}
	return name, true
}

func (r *Runtime) entry(name string) *entry {
	e := r.entries[name]
	if e == nil {
		e = &entry{name: name, st: newStats()}
		r.entries[name] = e
	}
	return e
}

// Ready reports whether the initial load is done (and the runtime not closed).
func (r *Runtime) Ready() bool { return r.ready.Load() && !r.closed.Load() }

// Collectors returns the runtime's Prometheus collectors (not registered).
func (r *Runtime) Collectors() []prometheus.Collector { return r.m.collectors() }

// scanDir reads every policy file in PolicyDir; with warn it logs a
// *.wasm name it skips (a directory, a dangling symlink, unreadable).
func (r *Runtime) scanDir(warn bool) (map[string][]byte, error) {
	files := map[string][]byte{}
	if r.opts.PolicyDir == "" {
		return files, nil
	}
	des, err := os.ReadDir(r.opts.PolicyDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return files, nil
		}
		return nil, fmt.Errorf("plugins: read policy dir: %w", err)
	}
	for _, de := range des {
		name, ok := PolicyName(de.Name())
		if !ok {
			continue
		}
		p := filepath.Join(r.opts.PolicyDir, de.Name())
		data, err := ReadPolicyFile(p) // follows symlinks
		if err != nil {
			if warn { // a name that looks like a policy but cannot be one
				r.log.Warn("policy file skipped", "file", p, "error", err)
			}
			continue
		}
		files[name] = data
	}
	return files, nil
}

type plan struct {
	e   *entry
	art *artifact // nil: unload
	// seq is e.planned when this plan was made: a later plan of the same
	// name supersedes it, and its result is then dropped (the newer file
	// wins, however long the older one took to load).
	seq uint64
	// ctx bounds the build; it is canceled when a later plan supersedes
	// this one, so a superseded file stuck in _initialize stops early.
	ctx    context.Context
	cancel context.CancelFunc
	// serving: the version serving e already has art's bytes (nothing to
	// build). fallback: nothing served the name when this plan was made
	// and it has an embedded default (see embedded).
	serving, fallback bool
	v                 *version
	err               error
	// embedded is the embedded default built because art, a policy_dir
	// file, was rejected while nothing served the name (at start, or after
	// the embedded one was rejected too): ABI.md §10 has the previous
	// version keep serving, and for a name with an embedded default that is
	// the default. embeddedErr is why it could not be built.
	embedded    *version
	embeddedErr error
}

// needsBuild reports whether p has a module to compile and check.
func (p *plan) needsBuild() bool { return p.art != nil && !p.serving }

// Reload rescans PolicyDir now and swaps in what changed. The watcher calls
// it after debouncing; tests call it directly. Files whose content did not
// change are skipped. Each changed file is compiled, instantiated and
// self-tested outside r.mu, concurrently (loadSlots), and swapped in under
// r.mu as soon as it is ready: a file whose _initialize or self-test runs
// until initTimeout delays only itself, not the other files of this reload,
// of a reload started meanwhile, or a rollback. Reload returns once every
// file it found changed is swapped in or rejected.
func (r *Runtime) Reload(ctx context.Context) error {
	if r.closed.Load() {
		return ErrClosed
	}
	plans, err := r.planReload(ctx)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, p := range plans {
		if !p.needsBuild() {
			r.apply(ctx, p)
			continue
		}
		wg.Add(1)
		go func(p *plan) {
			defer wg.Done()
			r.buildPlan(p)
			r.apply(ctx, p)
		}(p)
	}
	wg.Wait()
	r.releasePending()
	if err := ctx.Err(); err != nil && !r.ready.Load() {
		// Stopped while starting (New closes the runtime): the builds
		// that failed for it were not the files' fault, and nothing is
		// published or logged as rejected (apply).
		return fmt.Errorf("plugins: loading stopped: %w", context.Cause(ctx))
	}
	return nil
}

// planReload scans PolicyDir and, under r.mu, records what changed: one
// plan per name whose file appeared, changed or went away. A plan
// supersedes any plan of the same name still being built.
func (r *Runtime) planReload(ctx context.Context) ([]*plan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}
	files, err := r.scanDir(true)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for n := range files {
		names[n] = true
	}
	for n := range r.entries {
		names[n] = true
	}
	var plans []*plan
	for _, name := range sortedKeys(names) {
		e := r.entry(name)
		data, inDir := files[name]
		var p *plan
		switch {
		case inDir:
			a := newArtifact(SourceDir, data)
			if a.sha == e.fileSHA {
				continue
			}
			e.fileSHA = a.sha
			p = &plan{e: e, art: a}
		case e.fileSHA != "":
			e.fileSHA = ""
			p = &plan{e: e, art: e.embedded} // nil without one: unload
		case e.cur == nil && e.embedded != nil && !e.triedEmbed:
			p = &plan{e: e, art: e.embedded}
		}
		if e.embedded != nil {
			e.triedEmbed = true
		}
		if p == nil {
			continue
		}
		if e.cancelBuild != nil {
			e.cancelBuild() // superseded: its result will be dropped
		}
		e.planned++
		p.seq = e.planned
		p.ctx, p.cancel = context.WithCancel(ctx)
		e.cancelBuild = p.cancel
		p.serving = p.art != nil && e.cur != nil && e.cur.comp.sha == p.art.sha && e.cur.source == p.art.source
		p.fallback = p.art != nil && e.cur == nil && e.embedded != nil && p.art != e.embedded
		plans = append(plans, p)
	}
	return plans, nil
}

// buildPlan compiles, checks and self-tests p's module (and the embedded
// default when p's file is rejected with nothing serving), off the
// request path and without r.mu.
func (r *Runtime) buildPlan(p *plan) {
	p.v, p.err = r.build(p.ctx, p.e, p.art)
	if p.err != nil && p.fallback && p.ctx.Err() == nil {
		p.embedded, p.embeddedErr = r.build(p.ctx, p.e, p.e.embedded)
	}
}

// apply swaps in (or records the rejection of) one plan's result under
// r.mu and publishes it. The result of a plan superseded meanwhile, of a
// runtime closed meanwhile, or of a start that was stopped is dropped.
func (r *Runtime) apply(ctx context.Context, p *plan) {
	defer p.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := p.e
	drop := func() {
		for _, v := range []*version{p.v, p.embedded} {
			if v != nil {
				v.retire() // never published: closes at once
			}
		}
	}
	switch {
	case r.closed.Load(), ctx.Err() != nil && !r.ready.Load():
		drop()
		return
	case p.seq != e.planned || r.entries[e.name] != e:
		// A newer file of this name (or its removal) came while this one
		// was being loaded: swaps of one name happen in the order of the
		// files, so the newer plan decides.
		if p.v != nil || p.err != nil {
			r.log.Debug("policy file superseded while loading", "policy", e.name, "sha256", short(p.art.sha))
		}
		drop()
		return
	}
	e.cancelBuild = nil
	var retired *version
	switch {
	case p.art == nil: // unload
		if e.cur != nil {
			retired = e.cur
			r.m.swaps.WithLabelValues(e.name, "unloaded").Inc()
			r.log.Info("policy unloaded", "policy", e.name, "sha256", short(e.cur.comp.sha))
		}
		delete(r.entries, e.name)
	case p.serving: // already serving these bytes
		e.rejectedSHA, e.rejectedError, e.rejectedSource, e.configRefusal = "", "", "", ""
		if !e.cur.tripped.Load() { // a tripped version stays tripped until a new file is loaded (ABI.md §7)
			e.state, e.lastError = StateActive, ""
			e.st.clearErr()
		}
	case p.err != nil:
		e.rejectedSHA, e.rejectedError, e.rejectedSource = p.art.sha, p.err.Error(), p.art.source
		if e.cur == nil || (e.state != StateRolledBack && e.state != StateTripped) {
			// A rolled_back or tripped state keeps its reason in
			// last_error (README, "GET /admin/policies"): the
			// rejection shows as rejected_error.
			e.lastError = p.err.Error()
			e.st.setErr(p.err.Error())
		}
		r.m.rejections.WithLabelValues(e.name).Inc()
		fields := []any{"policy", e.name, "source", p.art.source, "sha256", short(p.art.sha), "error", p.err}
		switch {
		case e.cur != nil && p.embedded == nil && e.cur.tripped.Load():
			fields = append(fields, "still_serving", "the built-in default", "tripped_sha256", short(e.cur.comp.sha))
		case e.cur != nil && p.embedded == nil:
			fields = append(fields, "still_serving", short(e.cur.comp.sha))
		}
		if halfWritten(p.err) {
			// A copy slower than the debounce is read half-written; the
			// write that completes it triggers another load.
			fields = append(fields, "hint", "the file may still be being written: write it under a name starting with . and rename it into place")
		}
		r.log.Error("policy rejected", fields...)
		switch {
		case p.embedded != nil && e.cur == nil:
			// The embedded default serves; rejected_sha256 and
			// last_error say the operator's file is not what serves.
			e.adopt(p.embedded)
			r.m.swaps.WithLabelValues(e.name, "loaded").Inc()
			r.log.Warn("policy file rejected: the embedded default serves instead", "policy", e.name,
				"source", SourceEmbedded, "sha256", short(p.embedded.comp.sha), "rejected_sha256", short(p.art.sha),
				"hooks", strings.Join(p.embedded.hooks.Names(), ","), "parked", p.embedded.parked())
		case p.embedded != nil:
			p.embedded.retire() // something serves already
		case p.embeddedErr != nil:
			r.log.Error("policy rejected, and its embedded default cannot serve either", "policy", e.name,
				"source", SourceEmbedded, "sha256", short(e.embedded.sha), "error", p.embeddedErr)
		}
		e.state = stateAfterRejection(e)
		e.configRefusal = ""
		if e.cur == nil {
			e.configRefusal = refusalOf(p.err, p.embeddedErr)
		}
	default:
		if e.cur != nil {
			retired = e.cur
			e.prev = e.cur.art
		}
		e.adopt(p.v)
		e.state, e.lastError, e.rejectedSHA, e.rejectedError, e.rejectedSource, e.configRefusal = StateActive, "", "", "", "", ""
		e.st.clearErr() // what went wrong before this version is no longer news
		r.m.swaps.WithLabelValues(e.name, "loaded").Inc()
		r.log.Info("policy loaded", "policy", e.name, "source", p.art.source, "sha256", short(p.art.sha),
			"hooks", strings.Join(p.v.hooks.Names(), ","), "parked", p.v.parked())
	}
	r.publish()
	if retired != nil {
		retired.retire()
	}
}

// adopt makes v, built for e, the version serving e, with the next load
// generation. Callers hold r.mu.
func (e *entry) adopt(v *version) {
	e.gen++
	v.gen = e.gen
	e.cur = v
}

// stateAfterRejection is the state of e once a file of its name was
// rejected. The state describes what serves (README, "GET /admin/policies"):
// a version still serving stays active (or keeps saying it was rolled back
// or tripped), and the refused file shows as rejected_sha256 with its
// last_error. Only a name with nothing serving is "rejected".
func stateAfterRejection(e *entry) string {
	switch {
	case e.cur == nil:
		return StateRejected
	case e.state == StateRolledBack, e.state == StateTripped:
		return e.state
	}
	return StateActive
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// publish stores the active set and the status snapshot. Callers hold r.mu.
func (r *Runtime) publish() {
	set := &activeSet{}
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	r.m.active.Reset()
	var sb []statusBase
	answered := make(map[string]hostabi.Hook, len(names))
	for _, n := range names {
		e := r.entries[n]
		if e.cur == nil && e.state == "" {
			continue // its first file is still being loaded (Reload): nothing to show yet
		}
		if v := e.cur; v != nil {
			answered[n] = v.hooks & hostabi.CallHooks
			set.all = append(set.all, v)
			for h := range set.byHook {
				if h != hSelfTest && v.hooks&hookBits[h] != 0 {
					set.byHook[h] = append(set.byHook[h], v)
				}
			}
			r.m.active.WithLabelValues(n, v.comp.sha, v.source, e.state).Set(1)
		}
		sb = append(sb, r.statusOf(e))
	}
	r.active.Store(set)
	r.status.Store(&sb)
	// Per-hook series exist only for the hooks a policy answers (README,
	// Observability): drop those of a policy no longer served, and of hooks
	// its new version does not answer. A call of the replaced version still
	// under way counts into a deleted child: lost, not resurrected.
	for n, had := range r.answered {
		now, served := answered[n]
		if gone := had &^ now; !served || gone != 0 {
			r.m.forget(n, gone, !served)
		}
	}
	r.answered = answered
}

// getCompiled compiles data, or reuses (or waits for) the module compiled
// from the same bytes; the caller owns one reference.
func (r *Runtime) getCompiled(ctx context.Context, a *artifact) (*compiled, error) {
	r.cmu.Lock()
	if c := r.compiled[a.sha]; c != nil {
		c.refs++
		r.cmu.Unlock()
		select {
		case <-c.ready:
		case <-ctx.Done():
			r.releaseCompiled(c)
			return nil, ctx.Err()
		}
		if c.err != nil {
			r.releaseCompiled(c)
			return nil, c.err
		}
		return c, nil
	}
	c := &compiled{sha: a.sha, refs: 1, ready: make(chan struct{})}
	r.compiled[a.sha] = c
	r.cmu.Unlock()
	c.cm, c.err = r.wrt.CompileModule(ctx, mergeDataSegments(a.data)) // datasegments.go
	close(c.ready)
	if c.err != nil {
		err := c.err
		r.releaseCompiled(c)
		return nil, err
	}
	return c, nil
}

func (r *Runtime) releaseCompiled(c *compiled) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	c.refs--
	if c.err != nil && r.compiled[c.sha] == c {
		delete(r.compiled, c.sha) // a later load compiles again
	}
	if c.refs == 0 {
		if r.compiled[c.sha] == c {
			delete(r.compiled, c.sha)
		}
		if c.cm != nil {
			_ = c.cm.Close(context.Background())
			// A dormant or parked version keeps c for its sha: without
			// this the closed module (megabytes of decoded code and data
			// segments) would stay reachable through it.
			c.cm = nil
		}
	}
}

// build compiles, checks and self-tests a module and prewarms its pool.
func (r *Runtime) build(ctx context.Context, e *entry, a *artifact) (*version, error) {
	if len(a.data) < 8 || string(a.data[:4]) != "\x00asm" {
		return nil, errors.New("not a WebAssembly module (bad magic)")
	}
	if err := takeSlot(ctx, r.compileSlots); err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	comp, err := r.getCompiled(ctx, a)
	<-r.compileSlots
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	if err := takeSlot(ctx, r.loadSlots); err != nil {
		r.releaseCompiled(comp)
		return nil, fmt.Errorf("init: %w", err)
	}
	v, err := r.buildFrom(ctx, e, a, comp)
	<-r.loadSlots
	if err != nil {
		r.releaseCompiled(comp)
		return nil, err
	}
	return v, nil
}

func (r *Runtime) buildFrom(ctx context.Context, e *entry, a *artifact, comp *compiled) (*version, error) {
	exported, err := checkImportsAndMarker(comp.cm)
	if err != nil {
		return nil, err
	}
	v := &version{
		rt:       r,
		name:     e.name,
		source:   a.source,
		data:     a.data,
		art:      a,
		comp:     comp,
		hooks:    exported,
		loadedAt: time.Now(),
		config:   []byte(r.opts.Config[e.name]),
		st:       e.st.forVersion(),
		idle:     make(chan *instance, r.opts.PoolSize),
		tokens:   make(chan struct{}, r.opts.PoolSize),
		closed:   make(chan struct{}),
		busyLog:  logtext.Every{Interval: 10 * time.Second},
	}
	if len(v.config) == 0 {
		v.config = nil
	}
	v.live.Store(comp)
	for range r.opts.PoolSize {
		v.tokens <- struct{}{}
	}
	<-v.tokens
	lctx, cancel := context.WithTimeout(ctx, r.opts.initTimeout)
	defer cancel()
	logged := &loadLog{}
	lctx = withLoadLog(lctx, logged)
	// pastLimit names the limit when it, not the caller, stopped the guest:
	// wazero says only "module closed with context deadline exceeded".
	// _initialize and the load checks after it share the limit (ABI.md §8).
	pastLimit := func(export string, err error) error {
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		shared := ""
		if export != hostabi.ExportInitialize {
			shared = " it shares with _initialize"
		}
		return fmt.Errorf("%s ran past the %s limit%s", export, r.opts.initTimeout, shared)
	}
	if err := checkInstantiable(comp.cm); err != nil {
		return nil, err
	}
	inst, err := v.newInstance(lctx)
	if err != nil {
		var ie *instantiateError
		if errors.As(err, &ie) {
			if lim := pastLimit(hostabi.ExportInitialize, ie.err); lim != ie.err {
				err = &instantiateError{err: lim, stderr: ie.stderr}
			}
		}
		return nil, &policyRefusal{logged.explain(fmt.Errorf("init: %w", err))}
	}
	fail := func(err error) (*version, error) {
		if t := inst.tail.String(); t != "" {
			err = fmt.Errorf("%w (stderr: %s)", err, strings.TrimSpace(t))
		}
		inst.close()
		return nil, logged.explain(err)
	}
	// refused is fail for what the policy's own load code answered with
	// its config (policyRefusal).
	refused := func(err error) (*version, error) {
		_, err = fail(err)
		return nil, &policyRefusal{err}
	}
	sctx := withState(lctx, &callState{v: v, hook: "load"})
	abi, err := callI32(sctx, inst.mod, hostabi.ExportABIVersion)
	if err != nil {
		return fail(fmt.Errorf("sluice_abi_version: %w", pastLimit(hostabi.ExportABIVersion, err)))
	}
	if !hostabi.SupportedABI(abi) {
		return fail(fmt.Errorf("ABI version %d, this host supports %d to %d", abi, hostabi.MinABIVersion, hostabi.ABIVersion))
	}
	v.abi = abi
	if err := checkExports(comp.cm); err != nil {
		return fail(err)
	}
	if v.hooks&hostabi.CallHooks == 0 {
		return fail(errors.New("the module exports none of the hooks recover, replay, rewrite_request, stream_event"))
	}
	if inst.mod.ExportedFunction(hostabi.ExportHooks) != nil {
		// A module may answer that, with its config, it has nothing to do:
		// it is then loaded but never asked (a call saved per request).
		mask, err := callI32(sctx, inst.mod, hostabi.ExportHooks)
		if err != nil {
			return refused(fmt.Errorf("sluice_hooks: %w", pastLimit(hostabi.ExportHooks, err)))
		}
		v.hooks &= hostabi.Hook(mask)
	}
	if v.hooks&hostabi.HookSelfTest != 0 {
		tctx := withState(lctx, &callState{v: v, hook: "self_test"})
		res, err := callI32(tctx, inst.mod, hostabi.ExportSelfTest)
		if err != nil {
			return refused(fmt.Errorf("self_test: %w", pastLimit(hostabi.ExportSelfTest, err)))
		}
		if res != 0 {
			return refused(fmt.Errorf("self_test failed (returned %d)", res))
		}
	}
	for h := range hookNames {
		inst.fns[h] = nil
		if v.hooks&hookBits[h] != 0 {
			inst.fns[h] = inst.mod.ExportedFunction(hookBits[h].Export())
		}
		// Series only for the hooks the policy answers: a hook it does not
		// export (or self_test, run once at load) can never count anything.
		v.hm[h] = nil
		if v.hooks&hookBits[h] != 0 && h != hSelfTest {
			v.hm[h] = r.m.forHook(e.name, hookNames[h])
		}
	}
	calls := v.hooks & hostabi.CallHooks
	switch {
	case calls == 0:
		// The module answered (sluice_hooks) that with its config it has
		// nothing to do: it is never called, so neither an instance nor
		// its compiled module (megabytes of decoded code and data, and the
		// native code) is kept; a changed file is compiled anew.
		inst.close()
		v.tokens <- struct{}{}
		v.dormant = true
		v.live.Store(nil)
		r.releaseCompiled(comp)
	case a.source == SourceEmbedded && r.opts.Prewarm <= 0 && calls&^e.standIn.hooks() == 0:
		// Parked (Options.StandIns): checked, then released like a
		// dormant module; its stand-in answers until it is compiled again.
		inst.close()
		v.tokens <- struct{}{}
		v.standIn = e.standIn
		v.live.Store(nil)
		r.releaseCompiled(comp)
	case r.opts.Prewarm > 0:
		v.idle <- inst
		v.warm(r.opts.Prewarm - 1)
	default:
		// Lazy pool: the first call that needs an instance creates it.
		inst.close()
		v.tokens <- struct{}{}
	}
	return v, nil
}

// takeSlot waits for room in slots, or for ctx to end.
func takeSlot(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func callI32(ctx context.Context, mod api.Module, name string) (int32, error) {
	fn := mod.ExportedFunction(name)
	if fn == nil {
		return 0, errors.New("not exported")
	}
	res, err := fn.Call(ctx)
	if err != nil {
		return 0, err
	}
	if len(res) != 1 {
		return 0, errors.New("no result")
	}
	return api.DecodeI32(res[0]), nil
}

// sig renders a function type for error messages.
func sig(d api.FunctionDefinition) string {
	return "(" + typeNames(d.ParamTypes()) + ")->(" + typeNames(d.ResultTypes()) + ")"
}

func sameTypes(got, want []api.ValueType) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func checkFunc(exps map[string]api.FunctionDefinition, name string, params, results []api.ValueType, required bool) (bool, error) {
	d, ok := exps[name]
	if !ok {
		if required {
			return false, fmt.Errorf("missing export %s", name)
		}
		return false, nil
	}
	if !sameTypes(d.ParamTypes(), params) || !sameTypes(d.ResultTypes(), results) {
		return false, fmt.Errorf("export %s has type %s, the ABI wants (%s)->(%s)", name, sig(d), typeNames(params), typeNames(results))
	}
	return true, nil
}

func typeNames(ts []api.ValueType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = api.ValueTypeName(t)
	}
	return strings.Join(s, ",")
}

// checkImportsAndMarker checks what can be checked before instantiation and
// returns the exported hooks.
func checkImportsAndMarker(cm wazero.CompiledModule) (hostabi.Hook, error) {
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch mod {
		case hostabi.ImportModule:
			if !hostImports[name] {
				return 0, fmt.Errorf("imports unknown host function %s.%s (written for another ABI version?)", mod, name)
			}
		case wasi_snapshot_preview1.ModuleName:
		default:
			return 0, unknownImport(mod, name)
		}
	}
	if len(cm.ImportedMemories()) > 0 {
		return 0, errors.New("imports a memory; a policy must define and export its own")
	}
	exps := cm.ExportedFunctions()
	if _, err := checkFunc(exps, hostabi.ExportABIVersion, nil, []api.ValueType{i32}, true); err != nil {
		return 0, fmt.Errorf("not a Sluice policy: %w", err)
	}
	var hooks hostabi.Hook
	for h := range hookNames {
		if _, ok := exps[hookBits[h].Export()]; ok {
			hooks |= hookBits[h]
		}
	}
	return hooks, nil
}

// checkInstantiable checks the exports an instance needs before one is
// made: memory and sluice_alloc, and the type of _initialize, which
// instantiation runs. Every ABI version has them alike (ABI.md §2).
func checkInstantiable(cm wazero.CompiledModule) error {
	if _, ok := cm.ExportedMemories()[hostabi.ExportMemory]; !ok {
		return errors.New("missing export memory")
	}
	exps := cm.ExportedFunctions()
	if _, err := checkFunc(exps, hostabi.ExportAlloc, []api.ValueType{i32}, []api.ValueType{i32}, true); err != nil {
		return err
	}
	_, err := checkFunc(exps, hostabi.ExportInitialize, nil, nil, false)
	return err
}

// unknownImport explains an import of mod.name from a module the host does
// not provide. AssemblyScript imports env.abort unless told where abort is
// (ABI.md §11, "Other languages").
func unknownImport(mod, name string) error {
	err := fmt.Errorf("imports %s.%s from unknown module %q (a policy may import only from %q and %q)",
		mod, name, mod, hostabi.ImportModule, wasi_snapshot_preview1.ModuleName)
	if mod == "env" && name == "abort" {
		err = fmt.Errorf("%w; AssemblyScript imports env.abort unless built with --use abort=FUNCTION (the SDK's sluice-sdk/assembly/index/sluiceAbort) or --use abort= (none)", err)
	}
	return err
}

// checkExports checks the hooks' types once the version marker matched.
func checkExports(cm wazero.CompiledModule) error {
	exps := cm.ExportedFunctions()
	hook := []api.ValueType{i32, i32}
	for _, name := range []string{hostabi.ExportRecover, hostabi.ExportReplay, hostabi.ExportRewrite, hostabi.ExportStreamEvent} {
		if _, err := checkFunc(exps, name, hook, []api.ValueType{i64}, false); err != nil {
			return err
		}
	}
	if _, err := checkFunc(exps, hostabi.ExportSelfTest, nil, []api.ValueType{i32}, false); err != nil {
		return err
	}
	if _, err := checkFunc(exps, hostabi.ExportHooks, nil, []api.ValueType{i32}, false); err != nil {
		return err
	}
	return nil
}

// faultsInARow explains a trip: reason is the fault that tripped v.
func (r *Runtime) faultsInARow(v *version, reason string) string {
	return fmt.Sprintf("%d faults in a row in version %s: %s", r.opts.FaultsBeforeRollback, short(v.comp.sha), reason)
}

// rollback replaces a version that faulted FaultsBeforeRollback times in a
// row, tripped already (version.fault), by the previous version of the same
// policy; without one the trip stays. A version that tripped itself is no
// previous version: restoring it would run code already found faulty, and
// trip again (ABI.md §7).
func (r *Runtime) rollback(v *version, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return
	}
	// Marked even when v no longer serves: a call under way when v was
	// replaced can trip it, and v is then the replacement's previous version.
	v.art.tripped = true
	e := r.entries[v.name]
	if e == nil || e.cur != v {
		return
	}
	r.m.rollbacks.WithLabelValues(v.name).Inc()
	var trippedToo []string // rollback targets passed over: they tripped
	target := func(a *artifact) *artifact {
		if a != nil && a.tripped && a.sha != v.comp.sha {
			trippedToo = append(trippedToo, short(a.sha))
			return nil
		}
		return a
	}
	prev := target(e.prev)
	if prev == nil && v.source == SourceDir && e.embedded != nil {
		prev = target(e.embedded)
	}
	msg := r.faultsInARow(v, reason)
	if prev != nil && prev.sha != v.comp.sha {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		nv, err := r.build(ctx, e, prev)
		cancel()
		if err == nil {
			e.adopt(nv)
			e.prev = nil
			e.state, e.lastError = StateRolledBack, "rolled back to "+short(prev.sha)+" after "+msg
			e.st.setErr(e.lastError)
			r.m.swaps.WithLabelValues(v.name, "rolled_back").Inc()
			r.log.Error("policy rolled back", "policy", v.name, "from", short(v.comp.sha), "to", short(prev.sha), "reason", reason)
			r.publish()
			v.retire()
			return
		}
		r.log.Error("policy rollback failed", "policy", v.name, "error", err)
	}
	why := "no previous version to roll back to"
	fields := []any{"policy", v.name, "reason", reason}
	if len(trippedToo) > 0 {
		why = "not rolled back to " + strings.Join(trippedToo, ", ") + ", which tripped too"
		fields = append(fields, "not_rolled_back_to", strings.Join(trippedToo, ","))
	}
	e.state, e.lastError = StateTripped, why+"; "+v.fallbackWording("")+" after "+msg
	e.st.setErr(e.lastError)
	r.m.swaps.WithLabelValues(v.name, "tripped").Inc()
	r.log.Error("policy tripped: "+v.fallbackWording(""), fields...)
	r.publish()
}

// Close stops the watcher, drains in-flight calls (bounded by ctx) and frees
// every module. Hook calls after Close return the built-in defaults.
func (r *Runtime) Close(ctx context.Context) error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.endLife()
	if r.stopWatch != nil {
		close(r.stopWatch)
		<-r.watchDone
	}
	r.mu.Lock()
	var vs []*version
	for _, e := range r.entries {
		if e.cur != nil {
			vs = append(vs, e.cur)
		}
	}
	r.active.Store(&activeSet{})
	r.mu.Unlock()
	var err error
	for _, v := range vs {
		v.retire()
		if werr := v.waitClosed(ctx); werr != nil && err == nil {
			err = werr
		}
	}
	r.bgMu.Lock()
	r.bg.Wait()
	r.bgMu.Unlock()
	r.releasePending()
	if r.rec != nil {
		_ = r.SetRecording(false) // closes the file
	}
	if cerr := r.wrt.Close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	if cerr := r.cache.Close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// halfWritten reports whether a load error says the module's bytes ended
// early: wazero's decoder reports a truncated module as an unexpected EOF
// or, between fields, as a plain EOF at the end of its message.
func halfWritten(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, io.ErrUnexpectedEOF.Error()) || strings.HasSuffix(msg, ": "+io.EOF.Error())
}
