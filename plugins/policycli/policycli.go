// Package policycli implements the `sluice policy` commands for policy
// authors: new (scaffold a Go policy), build (compile it to Wasm), check
// (load a module like the gateway does and run its self-test) and test (run
// recorded hook inputs through a module and print the verdicts).
package policycli

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/plugins"
)

// SluiceModule is the module path of Sluice, which provides the SDK.
const SluiceModule = "github.com/sluice-gw/sluice"

const usage = `usage: sluice policy <command> [arguments]

commands:
  new NAME [-dir PARENT] [-module PATH] [-sluice DIR] [-lang go|assemblyscript]
        scaffold a Go policy in PARENT/NAME (main.go, main_test.go and, outside
        the Sluice module, go.mod plus the SDK this binary carries in
        sluice-sdk/: it builds offline with only Go installed); with
        -lang assemblyscript an AssemblyScript policy (assembly/index.ts,
        asconfig.json, package.json and the AssemblyScript SDK in sluice-sdk/)
  build DIR [-o OUT] [-update-sdk]
        compile the Go policy in DIR to OUT (default DIR.wasm) with
        GOOS=wasip1 GOARCH=wasm -buildmode=c-shared -trimpath (running go mod
        tidy first when go.mod needs it), then check it; a DIR with an
        asconfig.json (AssemblyScript) is compiled with asc instead
  check FILE [-config JSON|@FILE] [-memory-mib N] [-wasm-cache-dir DIR]
        load FILE as the gateway would, run its self-test, print its hooks
  test FILE -recording DIR [-expect EXPECT.jsonl] [-config JSON|@FILE]
       [-upstreams A,B | -gateway-config FILE] [-max-body-bytes N]
       [-memory-mib N] [-call-timeout D] [-wasm-cache-dir DIR]
        replay every hook input recorded in DIR (record_dir) through FILE,
        print {"hook","request","recorded_verdict","verdict","changed"} per
        input and a summary; exit 1 when EXPECT disagrees
  test FILE -events EVENTS.jsonl [-config JSON|@FILE]
       [-upstreams A,B | -gateway-config FILE] [-max-body-bytes N]
       [-memory-mib N] [-call-timeout D] [-wasm-cache-dir DIR]
        run each event through FILE (then the built-in defaults) and print one
        JSON result per line; an event is {"hook":"recover","input":{…}},
        {"hook":"replay","input":{…}}, {"hook":"stream_event","input":{…}} or
        {"hook":"rewrite","body":{…},"headers":{…},"surface":"…",
        "endpoint":"…"}; an optional "expect" (a verdict name, or for rewrite
        "changed", "unchanged", "rejected", "failed_closed") makes the command
        fail when the result differs; a rewrite is "changed" when the request
        the gateway sends changes: its body, a header or the upstream choice;
        an input FILE faults or errs on is a failure, as is a rewrite the
        gateway would discard as an invalid request
  check and test write what FILE logs (its log calls) to stderr, one
  "policy log: [LEVEL] HOOK: MESSAGE" line each
  help [COMMAND]
        print this, or a command's flags, environment and examples (also
        sluice policy COMMAND -h)

environment:
  PATH, GOFLAGS, GOTOOLCHAIN, GOCACHE, …
        build runs the go command found in PATH with GOOS=wasip1 GOARCH=wasm
        CGO_ENABLED=0 and the rest of your Go environment
  XDG_CACHE_HOME, HOME
        locate the user cache dir, the default compilation cache of build,
        check and test (none or unwritable: in memory)

examples:
  sluice policy new mypolicy
  sluice policy build mypolicy -o policies.d/10-mypolicy.wasm
  sluice policy test policies.d/10-mypolicy.wasm -events events.jsonl
`

// commandHelp is each command's `-h`.
var commandHelp = map[string]string{
	"new": `usage: sluice policy new NAME [-dir PARENT] [-module PATH] [-sluice DIR] [-lang go|assemblyscript]

Scaffold a Go policy in PARENT/NAME: main.go, main_test.go and, outside the
Sluice module, a go.mod. The SDK (packages sdk and hostabi, and the JSON
engine they use) comes from this binary: it is written to
PARENT/NAME/sluice-sdk and go.mod replaces github.com/sluice-gw/sluice with
it, so the policy builds and tests offline with only Go installed. -sluice
uses a Sluice checkout instead.

flags:
  -dir PARENT
        parent directory (default .)
  -module PATH
        module path for a policy outside the Sluice module (default NAME)
  -sluice DIR
        a Sluice checkout to use through a replace directive instead of
        the SDK copy (for work on Sluice itself)
  -lang go|assemblyscript
        the policy's language (default go). assemblyscript writes
        assembly/index.ts, asconfig.json, package.json (assemblyscript pinned)
        and the AssemblyScript SDK this binary carries in sluice-sdk/; build
        it with sluice policy build (needs node and npm)

environment: none

examples:
  sluice policy new mypolicy
  sluice policy new quota -module example.com/policies/quota -sluice ~/src/sluice
  sluice policy new --lang assemblyscript mypolicy
`,
	"build": `usage: sluice policy build DIR [-o OUT] [-update-sdk]

Compile the Go policy in DIR to Wasm with GOOS=wasip1 GOARCH=wasm
-buildmode=c-shared -trimpath (reproducible: no VCS stamp, no build id),
then check it like sluice policy check and print where the module went.
When go.mod is behind the imports, go mod tidy runs first. A go.mod that
replaces github.com/sluice-gw/sluice with ./sluice-sdk gets that copy
written from this binary when it is missing.

A DIR with an asconfig.json (or a package.json depending on assemblyscript)
is an AssemblyScript policy: assembly/index.ts is compiled with asc (DIR's
node_modules/.bin/asc, else $SLUICE_ASC, else assemblyscript@` + ASCVersion + `
in the user cache, installed there with npm when missing), its sluice-sdk/
written from this binary when missing, then checked the same way.

flags:
  -o OUT
        output file (default DIR.wasm); missing directories are created
  -update-sdk
        rewrite DIR/sluice-sdk from this binary first (a note says when
        it differs)

environment:
  PATH, GOFLAGS, GOTOOLCHAIN, GOCACHE, …
        the go command found in PATH runs with your Go environment, plus
        GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0
  XDG_CACHE_HOME, HOME
        locate the user cache dir for the compilation cache (else in memory)
        and, for AssemblyScript, sluice-npm/assemblyscript-VERSION
  SLUICE_ASC
        the asc to run for an AssemblyScript policy (else found as above)

examples:
  sluice policy build ../mypolicy
  sluice policy build ./mypolicy -o policies.d/10-mypolicy.wasm
`,
	"check": `usage: sluice policy check FILE [-config JSON|@FILE] [-memory-mib N] [-wasm-cache-dir DIR]

Load FILE as the gateway would (ABI version, imports, exports, memory
limit), run its self-test and print its sha256, size, ABI version and
hooks. Exits 1 when the gateway would reject it, with the gateway's
reason; "sluice_fail_closed":true in -config makes a module without a
rewrite_request hook (with that config) one, as it refuses to start.
What FILE logs while it loads (_initialize, the self-test) goes to
stderr, one "policy log: [LEVEL] HOOK: MESSAGE" line each.

flags:
  -config JSON|@FILE
        the policy's config (what policies.NAME is in the gateway's config,
        sluice_fail_closed included)
  -memory-mib N
        the gateway's policy_limits.memory_mib: a module whose initial
        memory is larger is rejected (default {{memory_mib}}, the gateway's)
  -wasm-cache-dir DIR
        compilation cache (default: the user cache dir's sluice/wasm, else
        in memory)

environment:
  XDG_CACHE_HOME, HOME
        locate the user cache dir, the default compilation cache

examples:
  sluice policy check policies.d/10-mypolicy.wasm
  sluice policy check rewrite.wasm -config '{"model_aliases":{"fast":"gpt-4.1-mini"}}'
  sluice policy check mypolicy.wasm -memory-mib 16   # as under policy_limits: {memory_mib: 16}
`,
	"test": `usage: sluice policy test FILE (-events EVENTS.jsonl | -recording DIR [-expect EXPECT.jsonl])
           [-config JSON|@FILE] [-upstreams A,B | -gateway-config FILE]
           [-max-body-bytes N] [-memory-mib N] [-call-timeout D] [-wasm-cache-dir DIR]

Run each event of EVENTS.jsonl through FILE (then the built-in defaults)
and print one JSON result per line. An event is {"hook":"recover",
"input":{…}}, {"hook":"replay","input":{…}}, {"hook":"stream_event",
"input":{…}} (ABI.md §3.5's input: a delta or a text) or {"hook":"rewrite",
"body":{…},"headers":{…},"surface":"…","endpoint":"…"}; an optional
"expect" (a verdict name, or for rewrite "changed", "unchanged",
"rejected", "failed_closed") makes the command exit 1 when the result
differs; a rewrite expected "failed_closed" passes when FILE fails closed,
though its result has an "error" saying why (any other error fails the
event, and stderr says why each failed one did). A rewrite is
"changed" when the request the gateway sends changes: its body, a header
set or removed, or the upstream chosen ("body", "set_headers",
"remove_headers" and "upstream" show the edits). Blank lines and lines
starting with # are skipped. A line that is no such event (not JSON, an
unknown hook, an input that does not decode, a rewrite "body" that is not
a JSON object, a "surface" or "endpoint" the gateway does not have) is not
run: its result's "error" says which field is wrong, stderr says so with
its line number, and the command exits 1.

Every input gets FILE's own answer: unlike the gateway, the test never
rolls FILE back or trips it after faults in a row. An input FILE faults or
errs on has an "error" (its verdict is the built-in default's) and makes
the command exit 1. So does a rewrite whose edited body the gateway would
discard as an invalid request (hostabi/ABI.md §3.3: not a request it
accepts from a client, a "stream" other than the client's, or over
limits.max_body_bytes): as in the gateway, none of its edits apply, its
verdict is "unchanged", its outcome "invalid" and its "error" says why.
A rewrite whose use_upstream names no upstream of -upstreams (or of
-gateway-config's upstreams:) is "invalid" too (verdict "unchanged", none
of its edits), with an "error", and makes the command exit 1: the gateway
answers such a request 500. Without either flag the names are not
checked, and a note on stderr says so. The outcome of a rewrite is
"done", "rejected", or that of the first module whose edits were dropped
("fault", "error", ...), as for the other hooks. With
"sluice_fail_closed":true in -config, FILE is held to its edits as the
gateway holds it: a rewrite it cannot complete (a fault, its error result,
an edited body the gateway refuses) has the verdict "failed_closed", no
edits, and an "error" saying the gateway answers the request 503
policy_unavailable; FILE without a rewrite_request hook is refused, as
check refuses it.

With -recording, every line of DIR/*.jsonl (what record_dir wrote, oldest
first; or one such file) runs through FILE and the output is one
{"hook","request","recorded_verdict","verdict","changed","decided_by",
"outcome"} line per input (request is FILE:LINE in the recording; for
stream_event also "output" and "recorded_output", the replacement, and
changed is true when either the verdict or the replacement differs), then
{"summary":{…}}.

What FILE logs (its log calls, while it loads and on each input) goes to
stderr, one "policy log: [LEVEL] HOOK: MESSAGE" line each; stdout keeps
only the JSON lines.

flags:
  -events EVENTS.jsonl
        the events, one JSON object a line ('-' for stdin)
  -recording DIR
        a record_dir (or one of its files) to replay instead of -events
  -expect EXPECT.jsonl
        with -recording: {"request","verdict"} lines; exit 1 when a result
        differs or a request is missing (a rewrite expected "failed_closed"
        that fails closed is not counted as an error)
  -config JSON|@FILE
        the policy's config (what policies.NAME is in the gateway's config,
        sluice_fail_closed included)
  -upstreams A,B
        the gateway's upstream names: a rewrite's use_upstream must name one
  -gateway-config FILE
        read the upstream names from the gateway's config file (loaded as
        sluice serve loads it, ${VAR}s from the environment)
  -max-body-bytes N
        the gateway's limits.max_body_bytes, which a rewritten body must
        fit (default 0: the gateway's default)
  -memory-mib N
        the gateway's policy_limits.memory_mib: FILE's memory cap; a module
        whose initial memory is larger is rejected, one that grows past it
        sees memory.grow fail (default {{memory_mib}}, the gateway's)
  -call-timeout D
        the gateway's policy_limits.call_timeout: a hook call past it is a
        fault and gets the built-in default (default {{call_timeout}}, the gateway's)
  -wasm-cache-dir DIR
        compilation cache (default: the user cache dir's sluice/wasm, else
        in memory)

environment:
  XDG_CACHE_HOME, HOME
        locate the user cache dir, the default compilation cache

examples:
  sluice policy test mypolicy.wasm -recording /var/lib/sluice/record -expect expect.jsonl
  sluice policy test mypolicy.wasm -events recorded.jsonl
  grep '"replay"' recorded.jsonl | sluice policy test mypolicy.wasm -events -
  sluice policy test mypolicy.wasm -events recorded.jsonl -call-timeout 20ms -memory-mib 16
  sluice policy test mypolicy.wasm -events recorded.jsonl -gateway-config /etc/sluice/sluice.yaml
`,
}

// RewriteCheck reports why the gateway would discard a rewrite's edited
// body as an invalid request (ABI.md §3.3), nil when it would send it:
// body is the edited request to endpoint, whose client sent stream
// clientStream; maxBodyBytes is limits.max_body_bytes (0: its default).
type RewriteCheck func(ctx context.Context, endpoint string, body []byte, clientStream bool, maxBodyBytes int64) error

// Options are what `sluice policy` takes from the binary that runs it.
type Options struct {
	// CheckRewrite is the gateway's own check of a rewritten body
	// (gateway.CheckRewrittenBody), given by cmd/sluice: plugins may not
	// import the gateway (docs/ARCHITECTURE.md §2), and a second copy of
	// the rule would drift. nil checks nothing: test then reports the
	// module's edits as they are.
	CheckRewrite RewriteCheck
	// GatewayUpstreams reads the upstream names of a gateway config file
	// (test's -gateway-config), given by cmd/sluice, which loads the file
	// as `sluice serve` does: plugins may not import the gateway's config
	// (docs/ARCHITECTURE.md §2). nil: -gateway-config is refused.
	GatewayUpstreams func(path string) ([]string, error)
	// Limits are the gateway's default policy_limits (cmd/sluice passes
	// gateway/config's defaults, where they are defined): the defaults of
	// -memory-mib and -call-timeout. A zero field takes the plugins
	// runtime's default.
	Limits Limits
}

// Limits are the gateway's policy_limits a module is loaded and called
// under (README.md, "Policies").
type Limits struct {
	CallTimeout time.Duration // policy_limits.call_timeout
	MemoryMiB   int           // policy_limits.memory_mib
}

// withDefaults fills the zero fields with the plugins runtime's defaults.
func (l Limits) withDefaults() Limits {
	if l.CallTimeout <= 0 {
		l.CallTimeout = plugins.DefaultCallTimeout
	}
	if l.MemoryMiB <= 0 {
		l.MemoryMiB = plugins.DefaultMemoryLimitPages / pagesPerMiB
	}
	return l
}

// pagesPerMiB is how many 64 KiB Wasm pages make a MiB.
const pagesPerMiB = 16

// maxMemoryMiB is all a 32-bit Wasm memory can address (4 GiB).
const maxMemoryMiB = 4096

// flags adds -memory-mib (and, with callTimeout, -call-timeout) to fs,
// defaulting to l; the returned function checks and reads them after
// parsing.
func (l Limits) flags(fs *flag.FlagSet, callTimeout bool) func() (Limits, error) {
	mem := fs.Int("memory-mib", l.MemoryMiB, "the gateway's policy_limits.memory_mib")
	timeout := &l.CallTimeout
	if callTimeout {
		timeout = fs.Duration("call-timeout", l.CallTimeout, "the gateway's policy_limits.call_timeout")
	}
	return func() (Limits, error) {
		if *mem < 1 || *mem > maxMemoryMiB {
			return Limits{}, usageError{fmt.Errorf("-memory-mib %d: want 1 to %d", *mem, maxMemoryMiB)}
		}
		if *timeout <= 0 {
			return Limits{}, usageError{fmt.Errorf("-call-timeout %v: want a positive duration", *timeout)}
		}
		return Limits{CallTimeout: *timeout, MemoryMiB: *mem}, nil
	}
}

// help is cmd's -h text (usage when cmd is ""), with the defaults of opts.
func help(opts Options, cmd string) string {
	text := usage
	if cmd != "" {
		text = commandHelp[cmd]
	}
	l := opts.Limits.withDefaults()
	return strings.NewReplacer("{{memory_mib}}", fmt.Sprint(l.MemoryMiB), "{{call_timeout}}", l.CallTimeout.String()).Replace(text)
}

// syncWriter serializes writes to w: a module's log lines may come from
// an instance created in the background while the command writes.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// guestLogger is the runtime's logger for check and test: it writes what
// the module logs through the log host function (hostabi/ABI.md §5; the
// runtime logs each as "policy: MESSAGE" with the hook) to w, one
// "policy log: [LEVEL] HOOK: MESSAGE" line each, so that it stands apart
// from the command's own output. The runtime's other messages (loaded,
// rejected, faults) are dropped: the commands report those themselves.
func guestLogger(w io.Writer) hclog.Logger {
	// Every level: the runtime writes (and charges to the policy's log
	// budget) only the lines its logger's level lets through.
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Trace})
	l.RegisterSink(guestLogSink{w: w})
	return l
}

type guestLogSink struct{ w io.Writer }

func (s guestLogSink) Accept(_ string, level hclog.Level, msg string, args ...any) {
	if strings.HasPrefix(msg, "policy log lines dropped") {
		// The runtime's budget (ABI.md §5) applies here as in the gateway:
		// say so, or an author takes what was shown for all the policy logged.
		field := map[any]any{}
		for i := 0; i+1 < len(args); i += 2 {
			field[args[i]] = args[i+1]
		}
		fmt.Fprintf(s.w, "policy log: [WARN] %v: more lines were logged than the gateway writes (%v a call, ABI.md §5); the rest are dropped\n",
			field["hook"], field["per_call"])
		return
	}
	text, ok := strings.CutPrefix(msg, "policy: ")
	if !ok {
		return
	}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "hook" {
			fmt.Fprintf(s.w, "policy log: [%s] %v: %s\n", strings.ToUpper(level.String()), args[i+1], text)
			return
		}
	}
}

// Run runs `sluice policy` with args (the words after "policy") and returns
// the process exit code: 0 success, 1 failure, 2 usage error.
func Run(ctx context.Context, opts Options, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, help(opts, ""))
		return 2
	}
	stderr = &syncWriter{w: stderr}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "new":
		err = runNew(rest, stdout, stderr)
	case "build":
		err = runBuild(ctx, opts, rest, stdout, stderr)
	case "check":
		err = runCheck(ctx, opts, rest, stdout, stderr)
	case "test":
		err = runTest(ctx, opts, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			fmt.Fprint(stdout, help(opts, ""))
			return 0
		}
		if _, ok := commandHelp[rest[0]]; ok && len(rest) == 1 {
			fmt.Fprint(stdout, help(opts, rest[0]))
			return 0
		}
		fmt.Fprintf(stderr, "sluice policy help: unknown command %q\n\n%s", strings.Join(rest, " "), help(opts, ""))
		return 2
	default:
		fmt.Fprintf(stderr, "sluice policy: unknown command %q\n\n%s", cmd, help(opts, ""))
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp): // -h, -help, --help
		fmt.Fprint(stdout, help(opts, cmd))
		return 0
	case errors.As(err, &ue):
		line, _, _ := strings.Cut(commandHelp[cmd], "\n")
		fmt.Fprintf(stderr, "sluice policy %s: %v\n%s\n(sluice policy %s -h for the flags and examples)\n", cmd, err, line, cmd)
		return 2
	case errors.Is(err, errReported):
		return 1
	}
	fmt.Fprintf(stderr, "sluice policy %s: %v\n", cmd, err)
	return 1
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// errReported means the failure was already printed.
var errReported = errors.New("failed")

// parse parses flags that may come before or after the positional
// arguments, which it returns.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{err}
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)

func runNew(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("new", flag.ContinueOnError)
	parent := fs.String("dir", ".", "parent directory")
	module := fs.String("module", "", "module path for a policy outside the Sluice module (default: NAME)")
	sluiceDir := fs.String("sluice", "", "a Sluice checkout to use through a replace directive")
	lang := fs.String("lang", LangGo, "the policy's language: go or assemblyscript")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || !nameRE.MatchString(pos[0]) {
		return usageError{errors.New("want one NAME of letters, digits, '.', '_' or '-'")}
	}
	name := pos[0]
	dir := filepath.Join(*parent, name)
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s already exists", dir)
	}
	switch *lang {
	case LangGo:
	case LangAS, "as":
		if *module != "" || *sluiceDir != "" {
			return usageError{errors.New("-module and -sluice are for Go policies")}
		}
		return newAS(name, dir, stdout)
	default:
		return usageError{fmt.Errorf("-lang %q: want go or assemblyscript", *lang)}
	}
	absParent, err := filepath.Abs(*parent)
	if err != nil {
		return err
	}
	data := scaffold{Name: name, Module: *module}
	if data.Module == "" {
		data.Module = name
	}
	modDir, modPath := findModule(absParent)
	inSluice := modPath == SluiceModule
	if !inSluice { // the policy gets a go.mod naming data.Module
		if err := checkModulePath(data.Module); err != nil {
			if *module == "" {
				return usageError{fmt.Errorf("NAME %q cannot be a Go module path (%v): choose another NAME, or a module path with -module", name, err)}
			}
			return usageError{fmt.Errorf("-module %q is not a valid Go module path: %v", *module, err)}
		}
	}
	data.Replace = "./" + SDKDir // the SDK carried by this binary, written next to the policy
	if *sluiceDir != "" {
		abs, err := filepath.Abs(*sluiceDir)
		if err != nil {
			return err
		}
		if _, p := findModule(abs); p != SluiceModule || !isDir(filepath.Join(abs, "sdk")) {
			return fmt.Errorf("-sluice %s: not a Sluice checkout (no go.mod of %s with sdk/)", *sluiceDir, SluiceModule)
		}
		data.Replace = abs
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]scaffoldText{"main.go": mainTmpl, "main_test.go": testTmpl}
	if !inSluice {
		if modPath != "" {
			fmt.Fprintf(stderr, "note: %s is inside module %s (%s); the policy gets its own go.mod\n", dir, modPath, modDir)
		}
		files["go.mod"] = goModTmpl
	}
	for fname, tmpl := range files {
		if err := os.WriteFile(filepath.Join(dir, fname), tmpl.render(data), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "created %s\n", dir)
	if inSluice {
		fmt.Fprintf(stdout, "next:\n  go test ./%s && sluice policy build %s\n", filepath.ToSlash(mustRel(modDir, dir)), dir)
		return nil
	}
	if *sluiceDir == "" {
		hash, err := writeSDK(filepath.Join(dir, SDKDir))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (sdk %s, ABI %d; go.mod replaces %s with it: no network needed)\n",
			filepath.Join(dir, SDKDir), hash, hostabi.ABIVersion, SluiceModule)
	} else {
		fmt.Fprintf(stdout, "go.mod replaces %s with %s\n", SluiceModule, data.Replace)
	}
	fmt.Fprintf(stdout, "next:\n  cd %s && go test ./... && sluice policy build .\n", dir)
	return nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func mustRel(base, p string) string {
	if r, err := filepath.Rel(base, p); err == nil {
		return r
	}
	return p
}

// findModule returns the directory and module path of the go.mod governing dir.
func findModule(dir string) (string, string) {
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
					return d, strings.Trim(f[1], `"`)
				}
			}
			return d, ""
		}
		if filepath.Dir(d) == d {
			return "", ""
		}
	}
}

type scaffold struct {
	Name, Module, Replace string
}

// scaffoldText is a file `policy new` writes, with {{.Name}}, {{.Module}}
// and {{.Replace}} standing for the scaffold's fields. It is plain
// substitution, not text/template: that package's reflective method calls
// would make the linker keep every exported method of every type in the
// gateway's binary (docs/ARCHITECTURE.md, "Memory at idle").
type scaffoldText string

func (t scaffoldText) render(s scaffold) []byte {
	r := strings.NewReplacer("{{.Name}}", s.Name, "{{.Module}}", s.Module, "{{.Replace}}", s.Replace)
	return []byte(r.Replace(string(t)))
}

var goModTmpl = scaffoldText(`module {{.Module}}

go 1.26

require ` + SluiceModule + ` v0.0.0-00010101000000-000000000000

// The SDK: ./` + SDKDir + ` is the copy ` + "`sluice policy new`" + ` wrote from the sluice
// binary (` + "`sluice policy build -update-sdk`" + ` refreshes it); a path to a Sluice
// checkout works too.
replace ` + SluiceModule + ` => {{.Replace}}
`)

var mainTmpl = scaffoldText(`// Command {{.Name}} is a Sluice policy (the ABI: sluice-sdk/hostabi/ABI.md).
//
// Build:  sluice policy build .   (or: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o {{.Name}}.wasm .)
// Deploy: copy {{.Name}}.wasm into the gateway's policy_dir; it is picked up
// without a restart. Files are asked in name order: call it e.g.
// 10-{{.Name}}.wasm to be asked before the embedded defaults.
package main

import "github.com/sluice-gw/sluice/sdk"

func init() {
	sdk.Register(sdk.Policy{
		// Recover: is this upstream error recoverable? This example
		// recovers a vendor-specific code and defers everything else to
		// the next policy and finally the built-in default.
		Recover: func(in sdk.RecoverInput) (sdk.RecoverOutput, error) {
			if in.Code == "vendor_context_lost" {
				return sdk.RecoverOutput{Verdict: sdk.Recover}, nil
			}
			return sdk.RecoverOutput{}, sdk.ErrDefer
		},
		// Rewrite (optional) edits requests by path; the body stays in the
		// gateway. Example: pin a reasoning effort when the client set none.
		Rewrite: func(req *sdk.Request) error {
			if _, ok := req.Get("reasoning.effort"); !ok && req.Endpoint() == "/v1/responses" {
				return req.SetString("reasoning.effort", "medium")
			}
			return nil
		},
		// SelfTest runs before the gateway swaps this policy in.
		SelfTest: func() error { return nil },
	})
}

func main() {}
`)

var testTmpl = scaffoldText(`//go:build !wasip1

// The SDK's Harness runs the handlers natively: plain ` + "`go test`" + `.
package main

import (
	"testing"

	"github.com/sluice-gw/sluice/sdk"
)

func TestRecover(t *testing.T) {
	h := &sdk.Harness{}
	if err := h.SelfTest(); err != nil {
		t.Fatal(err)
	}
	out, deferred, err := h.Recover(sdk.RecoverInput{Code: "vendor_context_lost"})
	if err != nil || deferred || out.Verdict != sdk.Recover {
		t.Fatalf("got %+v deferred=%v err=%v", out, deferred, err)
	}
	if _, deferred, _ := h.Recover(sdk.RecoverInput{Code: "rate_limit_exceeded"}); !deferred {
		t.Fatal("other codes should defer")
	}
}

func TestRewrite(t *testing.T) {
	out, err := (&sdk.Harness{}).Rewrite(sdk.RewriteInput{Endpoint: "/v1/responses", Body: []byte(` + "`" + `{"model":"m","input":"hi"}` + "`" + `)})
	if err != nil || string(out.Body) != ` + "`" + `{"model":"m","input":"hi","reasoning":{"effort":"medium"}}` + "`" + ` {
		t.Fatalf("got %s %v", out.Body, err)
	}
}
`)

func runBuild(ctx context.Context, opts Options, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	out := fs.String("o", "", "output file (default DIR.wasm)")
	updateSDK := fs.Bool("update-sdk", false, "rewrite DIR/"+SDKDir+" from this binary first")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{errors.New("want one DIR")}
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", pos[0])
	}
	target := *out
	if target == "" {
		target = dir + ".wasm"
	}
	if target, err = filepath.Abs(target); err != nil {
		return err
	}
	if err := checkOutput(target, *out, filepath.Base(dir)); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if isASProject(dir) && !fileExists(filepath.Join(dir, "go.mod")) {
		return buildASPolicy(ctx, dir, target, *updateSDK, opts.Limits.withDefaults(), stdout, stderr)
	}
	if err := ensureSDK(dir, *updateSDK, stdout, stderr); err != nil {
		return err
	}
	start := time.Now()
	goCmd := func(env []string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	}
	// Build next to the target under a name a policy_dir watcher ignores,
	// check, then rename: a running gateway never sees a partial file or a
	// module that fails its self-test.
	tmp := filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".build")
	defer os.Remove(tmp)
	build := func() ([]byte, error) {
		return goCmd([]string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}, "build", "-buildmode=c-shared", "-trimpath",
			"-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", tmp, ".")
	}
	msg, err := build()
	if err != nil && needsTidy(msg) && fileExists(filepath.Join(dir, "go.mod")) {
		// go.mod or go.sum is behind the imports: tidy once, offline when
		// the only dependency is the SDK copy.
		fmt.Fprintf(stderr, "%s", msg)
		fmt.Fprintf(stdout, "running go mod tidy in %s\n", dir)
		if tmsg, terr := goCmd(nil, "mod", "tidy"); terr != nil {
			stderr.Write(tmsg)
			return fmt.Errorf("go mod tidy: %w", terr)
		}
		msg, err = build()
	}
	stderr.Write(msg)
	if err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	// Compiled, not built: target is written only once the module passed
	// its checks (checkAndPlace says "built" then).
	fmt.Fprintf(stdout, "compiled %s in %v\n", dir, time.Since(start).Round(time.Millisecond))
	return checkAndPlace(ctx, tmp, target, opts.Limits.withDefaults(), stdout, stderr)
}

// buildASPolicy builds the AssemblyScript policy in dir to target, checked
// and placed like a Go one.
func buildASPolicy(ctx context.Context, dir, target string, updateSDK bool, limits Limits, stdout, stderr io.Writer) error {
	if err := ensureASSDK(dir, updateSDK, stdout, stderr); err != nil {
		return err
	}
	start := time.Now()
	tmp := filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".build")
	defer os.Remove(tmp)
	if err := buildAS(ctx, dir, tmp, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compiled %s in %v (AssemblyScript)\n", dir, time.Since(start).Round(time.Millisecond))
	return checkAndPlace(ctx, tmp, target, limits, stdout, stderr)
}

// checkOutput refuses, before anything is built, an output path the module
// could not be renamed to, and (for an -o the user gave) a file name a
// gateway would never load from its policy_dir. outFlag is the -o value
// ("" for the default DIR.wasm), policy the name of the policy's directory.
func checkOutput(target, outFlag, policy string) error {
	suggest := filepath.Join(filepath.Dir(outFlag), "10-"+policy+".wasm")
	if fi, err := os.Stat(target); err == nil && fi.IsDir() {
		if outFlag == "" {
			return usageError{fmt.Errorf("%s is a directory: name the module file with -o (e.g. -o %s)", target, suggest)}
		}
		return usageError{fmt.Errorf("-o %s is a directory: -o names the module file (e.g. -o %s)",
			outFlag, filepath.Join(outFlag, "10-"+policy+".wasm"))}
	}
	if outFlag == "" {
		return nil
	}
	if _, ok := plugins.PolicyName(filepath.Base(target)); !ok {
		return usageError{fmt.Errorf("-o %s: a gateway loads only files named NAME.wasm, not starting with '.' or '#', from its policy_dir (e.g. -o %s)",
			outFlag, suggest)}
	}
	return nil
}

// checkAndPlace checks the module built at tmp as the gateway would and
// renames it to target, which it replaces: a running gateway watching
// target's directory sees the old module or the new one, never a part.
// limits are the gateway's defaults.
func checkAndPlace(ctx context.Context, tmp, target string, limits Limits, stdout, stderr io.Writer) error {
	if err := checkAs(ctx, tmp, target, loadSpec{limits: limits, logs: stderr}, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "%s not written\n", target)
		return err
	}
	if err := os.Rename(tmp, target); err != nil {
		fmt.Fprintf(stderr, "%s not written\n", target)
		return fmt.Errorf("placing the checked module: %w", err)
	}
	fmt.Fprintf(stdout, "built %s\n", target)
	deployed := filepath.Base(target)
	if deployed == "" || deployed[0] < '0' || deployed[0] > '9' {
		deployed = "10-" + deployed
	}
	fmt.Fprintf(stdout, "deploy: a gateway whose policy_dir is %s loads it without a restart; for another, copy it into its policy_dir (e.g. policies.d/%s)\n",
		filepath.Dir(target), deployed)
	return nil
}

// needsTidy reports whether go build's output asks for go mod tidy.
func needsTidy(out []byte) bool {
	for _, s := range []string{"missing go.sum entry", "go mod tidy", "no required module provides package", "updates to go.mod needed", "but not required"} {
		if bytes.Contains(out, []byte(s)) {
			return true
		}
	}
	return false
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// loadConfig reads a -config value (inline JSON or @FILE) into spec: the
// policy's config, and whether the gateway would hold the policy to its
// rewrites (hostabi.FailClosedKey).
func loadConfig(v string, spec *loadSpec) error {
	if v == "" {
		return nil
	}
	b := []byte(v)
	if strings.HasPrefix(v, "@") {
		var err error
		if b, err = os.ReadFile(v[1:]); err != nil {
			return err
		}
	}
	b = bytes.TrimSpace(b)
	if !json.Valid(b) {
		return errors.New("-config is not valid JSON")
	}
	// The gateway's own member of a policies.NAME block, which a policy
	// never gets (hostabi.FailClosedKey): a block copied from the gateway's
	// config tests as the gateway would load and call it.
	if v := gjson.GetBytes(b, hostabi.FailClosedKey); v.Exists() && gjson.ParseBytes(b).IsObject() {
		if v.Type != gjson.True && v.Type != gjson.False {
			return fmt.Errorf("-config: %s must be true or false, as the gateway's config says", hostabi.FailClosedKey)
		}
		var err error
		if b, err = sjson.DeleteBytes(b, hostabi.FailClosedKey); err != nil {
			return fmt.Errorf("-config: %w", err)
		}
		spec.failClosed = v.Type == gjson.True
	}
	spec.config = b
	return nil
}

// loadSpec is what check and test load a module with, besides the file.
type loadSpec struct {
	config   json.RawMessage // the policy's config (-config), nil for none
	cacheDir string          // -wasm-cache-dir
	limits   Limits          // the gateway's policy_limits
	logs     io.Writer       // receives what the module logs (guestLogger)
	// failClosed: -config sets hostabi.FailClosedKey true, so the gateway
	// holds the policy to its rewrites (README "Policies").
	failClosed bool
}

// open loads one module file in a runtime of its own, named after the file.
func open(ctx context.Context, file string, spec loadSpec) (*plugins.Runtime, string, error) {
	return openAs(ctx, file, file, spec)
}

func openAs(ctx context.Context, file, label string, spec loadSpec) (*plugins.Runtime, string, error) {
	data, err := plugins.ReadPolicyFile(file) // a FIFO would block the command for good
	if err != nil {
		return nil, "", err
	}
	base := filepath.Base(label)
	if !strings.HasSuffix(base, ".wasm") {
		base += ".wasm"
	}
	name := strings.TrimSuffix(base, ".wasm")
	opts := plugins.Options{
		Embedded: map[string][]byte{base: data},
		CacheDir: spec.cacheDir,
		PoolSize: 1,
		Prewarm:  1,
		Logger:   guestLogger(spec.logs),
		// The gateway's limits (cmd/sluice maps policy_limits the same
		// way), so that a module it would refuse or fault is refused or
		// faulted here too.
		CallTimeout:      spec.limits.CallTimeout,
		MemoryLimitPages: uint32(spec.limits.MemoryMiB) * pagesPerMiB,
		// A test reports the module's own answer for every input, so it
		// never rolls the module back or trips it (which the gateway does
		// after FaultsBeforeRollback faults in a row, asynchronously, so
		// later inputs would get the default at random). Each fault is
		// reported on its own input.
		FaultsBeforeRollback: -1,
	}
	if spec.config != nil {
		opts.Config = map[string]json.RawMessage{name: spec.config}
	}
	rt, err := plugins.New(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	return rt, name, nil
}

func runCheck(ctx context.Context, opts Options, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	cfgFlag := fs.String("config", "", "policy config: JSON or @FILE")
	cacheDir := fs.String("wasm-cache-dir", "", "compilation cache directory")
	// No -call-timeout: check runs only load-time code (_initialize, the
	// self-test), which the gateway bounds by its 10 s instantiation limit,
	// not by call_timeout (hostabi/ABI.md §7).
	limits := opts.Limits.withDefaults().flags(fs, false)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{errors.New("want one FILE")}
	}
	spec := loadSpec{cacheDir: *cacheDir, logs: stderr}
	if spec.limits, err = limits(); err != nil {
		return err
	}
	if err = loadConfig(*cfgFlag, &spec); err != nil {
		return err
	}
	return checkAs(ctx, pos[0], pos[0], spec, stdout, stderr)
}

// checkAs checks file, naming it label in what it prints (and loading it
// under label's name).
func checkAs(ctx context.Context, file, label string, spec loadSpec, stdout, stderr io.Writer) error {
	start := time.Now()
	rt, name, err := openAs(ctx, file, label, spec)
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	for _, st := range rt.Status() {
		if st.Name != name {
			continue
		}
		if why := refusal(st, spec); why != "" {
			fmt.Fprintf(stderr, "%s: rejected: %s\n", label, why)
			return errReported
		}
		selfTest := "none"
		for _, h := range st.Hooks {
			if h == "self_test" {
				selfTest = "passed"
			}
		}
		fmt.Fprintf(stdout, "%s: ok\n  sha256:      %s\n  size:        %d bytes\n  abi_version: %d\n  hooks:       %s\n  self_test:   %s\n  loaded in:   %v\n",
			label, st.SHA256, st.Size, st.ABIVersion, strings.Join(st.Hooks, ", "), selfTest, time.Since(start).Round(time.Millisecond))
		return nil
	}
	return fmt.Errorf("%s: not loaded", label)
}

// refusal says why the gateway would not serve the module st describes
// under spec: its load failed, or -config holds it to rewrites it does not
// implement (the gateway refuses to start so: PolicyStatus.FailClosedProblem);
// "" when it would serve it.
func refusal(st plugins.PolicyStatus, spec loadSpec) string {
	if st.State != plugins.StateActive {
		return st.LastError
	}
	if spec.failClosed {
		if problem := st.FailClosedProblem(); problem != "" {
			return hostabi.FailClosedKey + ": " + problem
		}
	}
	return ""
}

// serves reports (errReported, after printing why) a module loaded as name
// in rt that the gateway would refuse (refusal), and otherwise holds it to
// its rewrites in check when spec says the gateway would.
func serves(rt *plugins.Runtime, name string, spec loadSpec, check *gatewayChecks, label string, stderr io.Writer) error {
	for _, st := range rt.Status() {
		if st.Name != name {
			continue
		}
		if why := refusal(st, spec); why != "" {
			fmt.Fprintf(stderr, "%s: rejected: %s\n", label, why)
			return errReported
		}
	}
	if spec.failClosed {
		check.failClosed = func(policy string) bool { return policy == name }
	}
	return nil
}

// event is one line of a test events file.
type event struct {
	Hook     string            `json:"hook"`
	Input    json.RawMessage   `json:"input"`
	Body     json.RawMessage   `json:"body"`
	Headers  map[string]string `json:"headers"`
	Surface  string            `json:"surface"`
	Endpoint string            `json:"endpoint"`
	Expect   string            `json:"expect"`
}

// result is one line of test output.
type result struct {
	Line      int                  `json:"line"`
	Hook      string               `json:"hook"`
	Verdict   string               `json:"verdict,omitempty"`
	DecidedBy string               `json:"decided_by,omitempty"` // the policy, or "default"
	Outcome   string               `json:"outcome"`
	Output    any                  `json:"output,omitempty"`
	Changed   *bool                `json:"changed,omitempty"`
	Body      json.RawMessage      `json:"body,omitempty"`
	SetHdrs   map[string]string    `json:"set_headers,omitempty"`
	RmHdrs    []string             `json:"remove_headers,omitempty"`
	Upstream  string               `json:"upstream,omitempty"`
	Reject    *hostabi.RejectError `json:"reject,omitempty"`
	Error     string               `json:"error,omitempty"`
	Expect    string               `json:"expect,omitempty"`
	Pass      *bool                `json:"pass,omitempty"`
	// badEvent: the line is not an event the gateway could ask about
	// (Error says which field is wrong), so FILE was not run on it.
	badEvent bool
}

func runTest(ctx context.Context, opts Options, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	events := fs.String("events", "", "JSONL file of events ('-' for stdin)")
	recording := fs.String("recording", "", "a record_dir: replay every recorded hook input")
	expect := fs.String("expect", "", "with -recording: JSONL of {\"request\",\"verdict\"} the results must match")
	cfgFlag := fs.String("config", "", "policy config: JSON or @FILE")
	cacheDir := fs.String("wasm-cache-dir", "", "compilation cache directory")
	maxBody := fs.Int64("max-body-bytes", 0, "the gateway's limits.max_body_bytes a rewritten body must fit (0: its default)")
	upstreams := fs.String("upstreams", "", "the gateway's upstream names, comma separated: a rewrite's use_upstream must name one")
	gatewayConfig := fs.String("gateway-config", "", "a gateway config file whose upstreams: a rewrite's use_upstream must name")
	limits := opts.Limits.withDefaults().flags(fs, true)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *maxBody < 0 {
		return usageError{errors.New("-max-body-bytes must not be negative")}
	}
	spec := loadSpec{cacheDir: *cacheDir, logs: stderr}
	if spec.limits, err = limits(); err != nil {
		return err
	}
	var check gatewayChecks
	if opts.CheckRewrite != nil {
		check.body = func(ctx context.Context, endpoint string, body []byte, clientStream bool) error {
			return opts.CheckRewrite(ctx, endpoint, body, clientStream, *maxBody)
		}
	}
	if check.upstreams, err = upstreamNames(opts, *upstreams, *gatewayConfig); err != nil {
		return err
	}
	check.notes = stderr
	if len(pos) != 1 || (*events == "") == (*recording == "") {
		return usageError{errors.New("want FILE and one of -events EVENTS.jsonl or -recording DIR")}
	}
	if *expect != "" && *recording == "" {
		return usageError{errors.New("-expect needs -recording")}
	}
	if err = loadConfig(*cfgFlag, &spec); err != nil {
		return err
	}
	if *recording != "" {
		return runRecording(ctx, pos[0], *recording, *expect, spec, &check, stdout, stderr)
	}
	var in io.Reader = os.Stdin
	if *events != "-" {
		f, err := os.Open(*events)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	rt, name, err := open(ctx, pos[0], spec)
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	if err := serves(rt, name, spec, &check, pos[0], stderr); err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	failed := 0
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		res := runEvent(ctx, rt, &check, line, text)
		if res.badEvent {
			// The events file's fault, not FILE's: said as such, whatever
			// the line expected.
			failed++
			if res.Expect != "" {
				pass := false
				res.Pass = &pass
			}
			fmt.Fprintf(stderr, "line %d: %s\n", line, res.Error)
		} else if res.Expect != "" {
			ok := res.Expect == res.Verdict && (res.Error == "" || expectedFailClosed(res.Expect, res.Verdict))
			res.Pass = &ok
			if !ok {
				failed++
				why := fmt.Sprintf("line %d: %s verdict %s, expected %s", line, res.Hook, res.Verdict, res.Expect)
				if res.Error != "" {
					why += ": " + res.Error
				}
				fmt.Fprintln(stderr, why)
			}
		} else if res.Error != "" {
			failed++
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "%d event(s) failed\n", failed)
		return errReported
	}
	return nil
}

// expectedFailClosed reports whether a result's error is the one its
// expected verdict names: a rewrite that fails closed carries an error (why
// the module could not complete it), as a fault does, but failing closed is
// what a case expecting "failed_closed" asks for. Any other error (a fault
// of a module not held to its edits, an invalid rewrite) still fails the
// case, whatever its verdict.
func expectedFailClosed(expect, verdict string) bool {
	return expect == plugins.RewriteFailedClosed && verdict == plugins.RewriteFailedClosed
}

func decidedBy(tr plugins.Trace) string {
	if tr.Outcome == "decided" && tr.Policy != "" {
		return tr.Policy
	}
	return "default"
}

// bodyCheck is Options.CheckRewrite with test's body limit.
type bodyCheck func(ctx context.Context, endpoint string, body []byte, clientStream bool) error

// gatewayChecks are what test judges a rewrite by as the gateway would.
type gatewayChecks struct {
	body bodyCheck
	// upstreams are the gateway's upstream names (-upstreams,
	// -gateway-config); nil: not known, use_upstream is not checked.
	upstreams map[string]bool
	notes     io.Writer // where the note that upstream names went unchecked goes
	noted     bool      // that note was written
	// failClosed names the module the gateway would hold to its edits
	// (-config sets hostabi.FailClosedKey); nil: none.
	failClosed func(policy string) bool
}

// upstreamNames is the set of upstream names -upstreams lists or the
// gateway config file -gateway-config names has; nil when neither is set.
func upstreamNames(opts Options, list, gatewayConfig string) (map[string]bool, error) {
	if list != "" && gatewayConfig != "" {
		return nil, usageError{errors.New("-upstreams and -gateway-config both name the upstreams: give one")}
	}
	var names []string
	switch {
	case list != "":
		for _, n := range strings.Split(list, ",") {
			if n = strings.TrimSpace(n); n == "" {
				return nil, usageError{fmt.Errorf("-upstreams %q: an empty name", list)}
			}
			names = append(names, n)
		}
	case gatewayConfig != "":
		if opts.GatewayUpstreams == nil {
			return nil, usageError{errors.New("-gateway-config is not supported by this binary")}
		}
		var err error
		if names, err = opts.GatewayUpstreams(gatewayConfig); err != nil {
			return nil, fmt.Errorf("-gateway-config: %w", err)
		}
	default:
		return nil, nil
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set, nil
}

// rewriteInvalid is the outcome of a rewrite whose edited body the
// gateway would discard as an invalid request.
const rewriteInvalid = "invalid"

func runEvent(ctx context.Context, rt *plugins.Runtime, check *gatewayChecks, line int, text []byte) result {
	res := result{Line: line}
	var ev event
	if err := json.Unmarshal(text, &ev); err != nil {
		return badEvent(res, "%v", err)
	}
	res.Hook, res.Expect = ev.Hook, ev.Expect
	switch ev.Hook {
	case "recover":
		var in hostabi.RecoverInput
		if err := json.Unmarshal(ev.Input, &in); err != nil {
			return badEvent(res, `"input": %v`, err)
		}
		out, tr := rt.RecoverTrace(ctx, in)
		res.Verdict, res.Output, res.DecidedBy, res.Outcome = out.Verdict.String(), out, decidedBy(tr), tr.Outcome
		res.Error = traceError(tr)
	case "replay":
		var in hostabi.ReplayInput
		if err := json.Unmarshal(ev.Input, &in); err != nil {
			return badEvent(res, `"input": %v`, err)
		}
		out, tr := rt.ReplayTrace(ctx, in)
		res.Verdict, res.Output, res.DecidedBy, res.Outcome = out.Verdict.String(), out, decidedBy(tr), tr.Outcome
		res.Error = traceError(tr)
	case "rewrite", "rewrite_request":
		if why := badRewriteEvent(ev); why != "" {
			return badEvent(res, "%s", why)
		}
		in := hostabi.RewriteInput{Surface: ev.Surface, Endpoint: ev.Endpoint, Body: ev.Body, Headers: ev.Headers}
		if in.Endpoint == "" {
			in.Endpoint = defaultEndpoint
		}
		if in.Surface == "" {
			in.Surface = hostabi.SurfaceResponsesStream
		}
		var known func(name string) bool
		if check.upstreams != nil {
			known = func(name string) bool { return check.upstreams[name] }
		}
		checks := plugins.RewriteChecks{KnownUpstream: known, FailClosed: check.failClosed}
		if check.failClosed != nil && check.body != nil {
			// The gateway judges a body as each module returns it, so that a
			// module held to its edits whose body it refuses fails the
			// request closed (plugins.RewriteChecks.FailClosed).
			checks.Body = func(body []byte) error { return check.body(ctx, in.Endpoint, body, clientStream(ev, in)) }
		}
		out, tr := rt.RewriteWith(ctx, in, checks)
		res.Outcome = tr.Outcome
		res.Error = traceError(tr)
		if tr.FailedClosed {
			// As in the gateway: the request reaches no upstream, and the
			// client gets a retryable 503 (README "Policies").
			changed := false
			res.Verdict, res.Changed = plugins.RewriteTraceVerdict(in, out, tr), &changed
			res.Error = fmt.Sprintf("%s; it fails closed (%s): the gateway answers the request 503 %s",
				cmp.Or(res.Error, tr.Policy+": "+tr.Outcome), hostabi.FailClosedKey, apierr.CodePolicyUnavailable)
			return res
		}
		switch {
		case tr.UnknownUpstream:
			// As in the gateway: a name no upstream has fails the request
			// (500), whatever else the module did (ABI.md §3.3), so none of
			// its edits reach an upstream: the verdict is "unchanged"
			// (plugins.RewriteTraceVerdict, as the recording says), as for
			// an edit the gateway discards (README "Policies").
			res.Outcome = rewriteInvalid
			res.Error = fmt.Sprintf("%s: %s: use_upstream named %q, which is not one of the gateway's upstreams: the gateway answers the request 500",
				tr.Policy, rewriteInvalid, out.Upstream)
			out = hostabi.RewriteOutput{}
		case known == nil && out.Upstream != "" && !check.noted && check.notes != nil:
			check.noted = true
			fmt.Fprintf(check.notes, "note: line %d: use_upstream %q was not checked against the gateway's upstreams (-upstreams or -gateway-config); the gateway fails a request naming an unknown one (500)\n",
				line, out.Upstream)
		}
		if reason := invalidRewrite(ctx, check.body, ev, in, out); reason != "" && res.Outcome != rewriteInvalid {
			// As in the gateway: the module's edits are discarded as one
			// unit, as if it had returned its error result (ABI.md §3.3).
			// FILE is the only rewrite module, so that is every edit.
			out = hostabi.RewriteOutput{}
			res.Outcome, res.Error = rewriteInvalid, editorOf(tr)+": "+rewriteInvalid+": "+reason
		}
		res.Verdict = plugins.RewriteTraceVerdict(in, out, tr)
		changed := res.Verdict == plugins.RewriteChanged
		res.Changed, res.Body, res.Reject = &changed, out.Body, out.Reject
		res.SetHdrs, res.RmHdrs, res.Upstream = out.SetHeaders, out.RemoveHeaders, out.Upstream
	case "stream_event":
		// The ABI's own decoder: it tells a present "delta":"" from none,
		// and an absent index from 0, as the gateway does.
		in, err := hostabi.DecodeStreamEventInput(ev.Input)
		if err != nil {
			return badEvent(res, `"input": %v`, err)
		}
		if !in.HasDelta && !in.HasText {
			return badEvent(res, `"input" without "delta" or "text": the gateway asks only about events with one`)
		}
		out, tr := rt.StreamEventTrace(ctx, in)
		res.Verdict, res.DecidedBy, res.Outcome = out.Verdict.String(), decidedBy(tr), tr.Outcome
		res.Output = json.RawMessage(hostabi.AppendStreamEventOutput(nil, out))
		res.Error = traceError(tr)
	default:
		return badEvent(res, `unknown "hook" %q (want recover, replay, rewrite or stream_event)`, ev.Hook)
	}
	return res
}

// badEvent is res for an events file line that is not an event the
// gateway could ask about: FILE is not run on it, and its error (what is
// wrong with the line, from the tool, not FILE) fails the run.
func badEvent(res result, format string, args ...any) result {
	res.badEvent = true
	res.Error = "bad event: " + fmt.Sprintf(format, args...)
	return res
}

// The surfaces and endpoints a rewrite event may name: those the gateway
// asks rewrite_request about (hostabi's Surface constants; ABI.md §3.3),
// the defaults first.
const (
	rewriteSurfaces  = hostabi.SurfaceResponsesStream + ", " + hostabi.SurfaceResponsesJSON + ", " + hostabi.SurfaceChatStream + ", " + hostabi.SurfaceChatJSON + ", " + hostabi.SurfaceWebSocket
	defaultEndpoint  = "/v1/responses"
	rewriteEndpoints = defaultEndpoint + ", /v1/chat/completions, /v1/responses/compact, /v1/responses/input_tokens"
)

// badRewriteEvent says which field of a rewrite event makes it an input the
// gateway never gives a rewrite hook, "" when none does: a body that is not
// a JSON object (the gateway refuses such a request before any policy sees
// it), or a surface or endpoint it does not have. Run, such an event would
// blame FILE for the events file's mistake.
func badRewriteEvent(ev event) string {
	switch {
	case len(ev.Body) == 0:
		return `no "body" (the client's request, a JSON object)`
	case !gjson.ParseBytes(ev.Body).IsObject():
		return fmt.Sprintf(`"body" is %s, not a JSON object (the client's request)`, jsonx.Kind(ev.Body))
	case ev.Surface != "" && !slices.Contains(strings.Split(rewriteSurfaces, ", "), ev.Surface):
		return fmt.Sprintf(`"surface" %q is not one of %s`, ev.Surface, rewriteSurfaces)
	case ev.Endpoint != "" && !slices.Contains(strings.Split(rewriteEndpoints, ", "), ev.Endpoint):
		return fmt.Sprintf(`"endpoint" %q is not one of %s`, ev.Endpoint, rewriteEndpoints)
	}
	return ""
}

// traceError reports a fault or error of the module under test: the
// verdict then is the built-in default's, not the module's answer.
func traceError(tr plugins.Trace) string {
	for _, s := range tr.Steps {
		switch {
		case s.Error != "":
			return s.Policy + ": " + s.Outcome + ": " + s.Error
		case s.Outcome == "tripped":
			return s.Policy + ": tripped: the built-in default answered"
		}
	}
	return ""
}

// invalidRewrite says why the gateway would discard out's edited body
// (check, the gateway's own rule), "" when it would send it or out leaves
// the body as it came.
func invalidRewrite(ctx context.Context, check bodyCheck, ev event, in hostabi.RewriteInput, out hostabi.RewriteOutput) string {
	if check == nil || out.Body == nil || bytes.Equal(out.Body, in.Body) {
		return ""
	}
	if err := check(ctx, in.Endpoint, out.Body, clientStream(ev, in)); err != nil {
		return "its edited body is not a valid request: " + err.Error()
	}
	return ""
}

// clientStream is the stream flag of the client's request: its body's
// (always true on a WebSocket), as the gateway reads it.
func clientStream(ev event, in hostabi.RewriteInput) bool {
	var client struct {
		Stream any `json:"stream"`
	}
	_ = json.Unmarshal(ev.Body, &client)
	return client.Stream == true || in.Surface == hostabi.SurfaceWebSocket
}

// editorOf names the module whose edits a check judges: the one that
// returned without an error.
func editorOf(tr plugins.Trace) string {
	for _, s := range tr.Steps {
		if s.Outcome == "ok" || s.Outcome == "defer" {
			return s.Policy
		}
	}
	return "rewrite"
}
