// Package config loads and validates the gateway's YAML configuration.
//
// String values may reference the environment as ${VAR} or ${VAR:-default};
// a variable that is empty counts as unset, and a reference to one without a
// default is an error that names the key. Every error names the offending key.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/httpx"
)

// Config is the whole gateway configuration.
type Config struct {
	Listen       string `yaml:"listen"`
	DataDir      string `yaml:"data_dir"`
	PolicyDir    string `yaml:"policy_dir"`
	WasmCacheDir string `yaml:"wasm_cache_dir"`
	// RecordDir, when set, records every policy hook call (input, verdict,
	// who decided; keys and ids redacted) as JSONL for `sluice policy test
	// -recording`; POST /admin/record?on=true|false toggles it.
	RecordDir  string `yaml:"record_dir"`
	AdminToken string `yaml:"admin_token"` // required on /admin/ endpoints when set
	// MetricsPublic leaves /metrics open when admin_token is set (by
	// default the token guards it too).
	MetricsPublic bool `yaml:"metrics_public"`
	// TrustedProxies lists the peers (CIDRs or addresses) whose
	// X-Forwarded-For / Forwarded headers are believed; everyone else's
	// are replaced with what the gateway itself saw.
	TrustedProxies []string       `yaml:"trusted_proxies"`
	Log            Log            `yaml:"log"`
	Limits         Limits         `yaml:"limits"`
	Timeouts       Timeouts       `yaml:"timeouts"`
	Continuity     Continuity     `yaml:"continuity"`
	Policies       map[string]any `yaml:"policies"` // per-policy config, keyed by policy name
	// PolicyLimits bounds every policy's hook calls (policies.go;
	// hostabi/ABI.md §7, §8).
	PolicyLimits PolicyLimits `yaml:"policy_limits"`
	Upstreams    []Upstream   `yaml:"upstreams"`
	// Routes map client models to ordered targets; first match wins. None:
	// every upstream serves every model.
	Routes []Route `yaml:"routes"`
	Retry  Retry   `yaml:"retry"`
	// Streams configures client streams.
	Streams Streams `yaml:"streams"`
	// Auth, Keys and Pricing: Sluice keys, their limits, and the price
	// table for usage cost (accounts.go).
	Auth    Auth             `yaml:"auth"`
	Keys    []Key            `yaml:"keys"`
	Pricing map[string]Price `yaml:"pricing"`
	// Store selects where continuity, conversations, streaming-input
	// sessions and shared target health live (store.go).
	Store Store `yaml:"store"`
	// Tracing exports OpenTelemetry spans over OTLP/HTTP (tracing.go).
	Tracing Tracing `yaml:"tracing"`

	// file is the path Load read (none: ""), and lines the line each key
	// path is written on there, for the problems found only once the
	// config is in use (Refuse).
	file  string
	lines map[string]int
}

// Problem is a problem with a key found only once the config is in use (a
// policy refusing its policies.NAME at load): Key is the key's path.
type Problem struct{ Key, Msg string }

// Refuse reports problems found after loading the way Load reports the
// file's own: "config FILE: line N: key: problem" (README "Running it"),
// each at the line its key, or else its nearest written parent, is on.
func (c *Config) Refuse(problems ...Problem) error {
	ps := make([]problem, len(problems))
	for i, p := range problems {
		ps[i] = problem{key: p.Key, msg: p.Msg}
	}
	err := renderProblems(c.lines, ps)
	switch {
	case err == nil:
		return nil
	case c.file != "":
		return &FileError{Path: c.file, Err: err}
	}
	return fmt.Errorf("config: %s", Indent(err))
}

// Streams configures how client streams treat their upstreams' events.
type Streams struct {
	// MalformedEvents is what an unparseable upstream event does: skip
	// (default: skipped and counted in sluice_stream_skipped_events_total;
	// three in a row still fail the stream) or fail (the first fails it).
	MalformedEvents string `yaml:"malformed_events"`
	// ResumeWindow is how long a response's client-visible event log is
	// kept after its last event, for GET /v1/responses/{id}?stream=true
	// (README "Resuming a stream"); 0 turns resume off.
	ResumeWindow Duration `yaml:"resume_window"`
	// ResumeMaxBytes bounds one response's log; a longer stream can no
	// longer be resumed (ResumeMemoryBytes bounds all logs in memory).
	ResumeMaxBytes    int64 `yaml:"resume_max_bytes"`
	ResumeMemoryBytes int64 `yaml:"resume_memory_bytes"`
	// Durable also writes the logs to the store, so a stream can be resumed
	// after a restart and, on Redis, on another replica.
	Durable bool `yaml:"durable"`
	// DetachOnDisconnect keeps a stream's upstream running for DetachGrace
	// after its client went away, so the client can resume it (background
	// requests always run to their end).
	DetachOnDisconnect *bool    `yaml:"detach_on_disconnect"`
	DetachGrace        Duration `yaml:"detach_grace"`
}

// Route is one entry of routes:.
type Route struct {
	Models       []string      `yaml:"models"`  // client model names: exact or path.Match globs
	Targets      []Target      `yaml:"targets"` // tried in order
	Timeouts     RouteTimeouts `yaml:"timeouts"`
	Continuation string        `yaml:"continuation"` // auto (default) | restart | off
}

// Target is one entry of routes[].targets: an upstream, and the model sent
// to it ("" sends the client's model).
type Target struct {
	Upstream string `yaml:"upstream"`
	Model    string `yaml:"model"`
}

// RouteTimeouts bound a route's waits for a target; zero (the timeout not
// written) is no bound.
type RouteTimeouts struct {
	FirstByte  Duration `yaml:"first_byte"`  // response headers
	FirstToken Duration `yaml:"first_token"` // the first event after them
	Stall      Duration `yaml:"stall"`       // between events once content was sent

	written routeTimeoutsWritten // which of them the file wrote (null: not written)
}

type routeTimeoutsWritten struct{ firstByte, firstToken, stall bool }

// UnmarshalYAML decodes the timeouts and notes which were written: an
// omitted one is no bound, but a written 0s is refused like any timeout's
// (README "Running it"), and only the file tells them apart.
func (t *RouteTimeouts) UnmarshalYAML(n *yaml.Node) error {
	var w struct {
		FirstByte  *Duration `yaml:"first_byte"`
		FirstToken *Duration `yaml:"first_token"`
		Stall      *Duration `yaml:"stall"`
	}
	if err := n.Decode(&w); err != nil {
		return err
	}
	for _, f := range []struct {
		from    *Duration
		to      *Duration
		written *bool
	}{
		{w.FirstByte, &t.FirstByte, &t.written.firstByte},
		{w.FirstToken, &t.FirstToken, &t.written.firstToken},
		{w.Stall, &t.Stall, &t.written.stall},
	} {
		if f.from != nil {
			*f.to, *f.written = *f.from, true
		}
	}
	return nil
}

// Retry configures waiting on the same target.
type Retry struct {
	// MaxWait is the longest Retry-After honoured by waiting and retrying
	// the same target once (longer ones move on to the next target); 0
	// never waits.
	MaxWait Duration `yaml:"max_wait"`
}

// Log configures logging.
type Log struct {
	Level string `yaml:"level"` // trace, debug, info, warn, error
	JSON  bool   `yaml:"json"`
}

// Limits bound what clients and upstreams may send.
type Limits struct {
	MaxBodyBytes    int64 `yaml:"max_body_bytes"`     // request body cap (413 beyond)
	MaxEventBytes   int   `yaml:"max_event_bytes"`    // one upstream SSE event
	MaxWSFrameBytes int64 `yaml:"max_ws_frame_bytes"` // one response.create frame
	UpstreamSockets int   `yaml:"upstream_sockets"`   // upstream WebSockets kept open at most
	// MaxJSONDepth bounds the nesting of every JSON document a client or
	// upstream sends (deeper → 400 before any parser sees it).
	MaxJSONDepth int `yaml:"max_json_depth"`
	// BodyMemoryBytes is the budget for request bodies being read at once,
	// across all connections (503 server_overloaded with Retry-After beyond).
	BodyMemoryBytes int64 `yaml:"body_memory_bytes"`
	// MaxConnections caps open client connections; more wait in the
	// kernel's accept queue.
	MaxConnections int `yaml:"max_connections"`
	// InputSessions caps the streaming-input sessions open at once, all
	// clients together; InputSessionBytes caps their buffered bytes.
	InputSessions     int   `yaml:"input_sessions"`
	InputSessionBytes int64 `yaml:"input_session_bytes"`
	// WSSessionMemoryBytes bounds the store:false turns one client
	// WebSocket keeps in memory for its follow-ups (the bytes of their
	// items); the oldest are evicted first.
	WSSessionMemoryBytes int64 `yaml:"ws_session_memory_bytes"`
	// WSSessionMemoryTotalBytes bounds what all client WebSockets keep
	// that way together: a socket that would take it past the bound
	// evicts its own oldest turns.
	WSSessionMemoryTotalBytes int64 `yaml:"ws_session_memory_total_bytes"`
}

// Timeouts bound every wait.
type Timeouts struct {
	Connect       Duration `yaml:"connect"`              // TCP+TLS to an upstream
	Header        Duration `yaml:"header"`               // upstream response headers
	Idle          Duration `yaml:"idle"`                 // between upstream stream events
	ReadHeader    Duration `yaml:"read_header"`          // client request headers (slow-loris)
	DrainGrace    Duration `yaml:"drain_grace"`          // in-flight streams on shutdown
	ProbeInterval Duration `yaml:"probe_interval"`       // upstream readiness probe period
	UpstreamIdle  Duration `yaml:"upstream_socket_idle"` // an idle upstream WebSocket is closed after this
	ClientWrite   Duration `yaml:"client_write"`         // one write to a streaming client that stopped reading
	ReadBody      Duration `yaml:"read_body"`            // a whole client request body (408 beyond)
	WSIdle        Duration `yaml:"ws_idle"`              // a client WebSocket with no frame and no request in flight
	KeepAlive     Duration `yaml:"keepalive"`            // SSE comment / WS ping to a client while the upstream is silent
}

// Continuity configures previous_response_id owner pinning.
type Continuity struct {
	Disabled  bool     `yaml:"disabled"`
	AnchorTTL Duration `yaml:"anchor_ttl"`
	// Portable keeps the input and output items of every response relayed
	// (not only those of Chat upstreams), so a conversation whose owner is
	// gone can be rehydrated on another upstream (README, "Continuity").
	Portable bool `yaml:"portable"`
	// RehydrateAfter is how long an owner must have been down before the
	// default recover decision rehydrates its conversations elsewhere.
	RehydrateAfter Duration `yaml:"rehydrate_after"`
}

// Upstream is one entry of upstreams:.
type Upstream struct {
	Name      string `yaml:"name"`
	BaseURL   string `yaml:"base_url"`
	APIKey    string `yaml:"api_key"`
	Weight    int    `yaml:"weight"`
	Protocol  string `yaml:"protocol"`
	Transport string `yaml:"transport"`
	// ForwardHeaders names client headers that still reach an upstream
	// with its own api_key (credential-like ones are dropped otherwise:
	// X-Api-Key, Api-Key, OpenAI-Organization, OpenAI-Project).
	ForwardHeaders []string `yaml:"forward_headers"`
	// Prefill says whether the upstream accepts a trailing assistant
	// message to continue from; absent means it does.
	Prefill *bool `yaml:"prefill"`

	weightWritten bool // the file wrote a weight (absent or empty: 1)
}

// UnmarshalYAML decodes the upstream and notes whether its weight was
// written: an absent weight is 1, but a written 0 reads as "no share" and
// the pool has no such thing (every upstream in rotation gets at least
// weight 1), so it is refused rather than quietly served as 1 (README
// "weight"), and only the file tells the two apart.
func (u *Upstream) UnmarshalYAML(n *yaml.Node) error {
	type plain Upstream // without this method: no recursion
	var w struct {
		Weight *int `yaml:"weight"`
	}
	if err := n.Decode((*plain)(u)); err != nil {
		return err
	}
	if err := n.Decode(&w); err != nil {
		return err
	}
	u.weightWritten = w.Weight != nil
	return nil
}

// Duration is a time.Duration written as "5s", "1m30s" or "168h".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	text := strings.TrimSpace(s)
	v, err := time.ParseDuration(text)
	switch {
	case err != nil && !durationSyntax.MatchString(text):
		return fmt.Errorf("%q is not a duration (like 30s or 5m)", s)
	case err != nil && !strings.HasPrefix(text, "-"):
		// Written right, but past time.Duration's 292 years: say what
		// Validate says of one past maxDuration, not "not a duration".
		return fmt.Errorf("%q is too large: %s", s, durationBound())
	case err != nil || v < 0:
		return fmt.Errorf("%q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// durationSyntax is what time.ParseDuration reads: numbers, each with a
// unit. A value written so that ParseDuration still refuses is out of range.
var durationSyntax = regexp.MustCompile(`^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Defaults returns the configuration used when a key is absent.
func Defaults() Config {
	return Config{
		Listen:  "127.0.0.1:8080",
		DataDir: "./sluice-data",
		Log:     Log{Level: "info"},
		Limits: Limits{MaxBodyBytes: 32 << 20, MaxEventBytes: 16 << 20, MaxWSFrameBytes: 15 << 20, UpstreamSockets: 1024,
			MaxJSONDepth: 128, BodyMemoryBytes: 256 << 20, MaxConnections: 10000, InputSessions: 10000, InputSessionBytes: 1 << 30,
			WSSessionMemoryBytes: 64 << 20, WSSessionMemoryTotalBytes: 1 << 30},
		Timeouts: Timeouts{
			Connect:       Duration(5 * time.Second),
			Header:        Duration(120 * time.Second),
			Idle:          Duration(300 * time.Second),
			ReadHeader:    Duration(10 * time.Second),
			DrainGrace:    Duration(30 * time.Second),
			ProbeInterval: Duration(upstream.DefaultProbeInterval),
			UpstreamIdle:  Duration(5 * time.Minute),
			ClientWrite:   Duration(60 * time.Second),
			ReadBody:      Duration(30 * time.Second),
			WSIdle:        Duration(10 * time.Minute),
			KeepAlive:     Duration(15 * time.Second),
		},
		Continuity: Continuity{AnchorTTL: Duration(7 * 24 * time.Hour), RehydrateAfter: Duration(5 * time.Minute)},
		Retry:      Retry{MaxWait: Duration(5 * time.Second)},
		Streams: Streams{MalformedEvents: "skip", ResumeWindow: Duration(10 * time.Minute), ResumeMaxBytes: 8 << 20,
			ResumeMemoryBytes: 256 << 20, DetachGrace: Duration(10 * time.Second)},
		Store:        defaultStore(),
		PolicyLimits: PolicyLimits{CallTimeout: Duration(50 * time.Millisecond), MemoryMiB: 64, FaultsBeforeRollback: 5},
	}
}

// Load reads, expands and validates a config file. With an error, the
// Config is what could be read of it (the defaults where nothing could), so
// that the caller can report the error the way the file asks (log.json).
func Load(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Defaults(), fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(raw, os.LookupEnv)
	if err != nil {
		return cfg, &FileError{Path: path, Err: err}
	}
	cfg.file = path
	return cfg, nil
}

// FileError is a config file's problems: one per line, each naming its key.
type FileError struct {
	Path string
	Err  error // errors.Join of the problems, or one
}

// Error is "config FILE: problem", or with several problems one per
// indented line after "config FILE: N problems:".
func (e *FileError) Error() string {
	return "config " + e.Path + ": " + Indent(e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// Indent renders an errors.Join of problems for a terminal: one problem as
// is, several as "N problems:" and an indented line each.
func Indent(err error) string {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return lines[0]
	}
	return fmt.Sprintf("%d problems:\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// Parse decodes YAML over the defaults, expanding ${VAR} with lookup. The
// YAML is one document: a second one is an error, not silently dropped.
// Unknown keys are errors, so a typo never silently falls back to a default:
// all of them are reported at once, each with its path and the key it most
// likely meant, and so are values of the wrong shape and, in the same run,
// Validate's problems with what did parse. Each problem starts with the
// line its key is written on ("line 7: upstreams[0].weight: …").
func Parse(raw []byte, lookup func(string) (string, bool)) (Config, error) {
	cfg := Defaults()
	docs := yaml.NewDecoder(bytes.NewReader(raw))
	var root yaml.Node
	if err := docs.Decode(&root); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
		return cfg, syntaxError(raw, err)
	}
	if err := refuseMoreDocuments(docs); err != nil {
		return cfg, err
	}
	if emptyDocument(&root) { // an empty file (or a bare ---): all defaults
		return cfg, cfg.Validate()
	}
	// Every problem is reported in one run: what cannot be expanded or read
	// is left out (the default stays) and Validate judges the rest, skipping
	// the checks whose input was left out (README "Running it").
	exp := &expansion{failed: map[*yaml.Node]bool{}, fromEnv: map[*yaml.Node][]string{}}
	expandNode(&root, "", lookup, exp)
	chk := checkTree(&root, exp)
	problems := append(exp.problems, chk.problems...)
	if chk.unread.refused[""] { // not a mapping at the top: nothing to decode
		return logOnly(cfg, &root), chk.render(problems)
	}
	chk.prune(&root)
	expanded, err := yaml.Marshal(&root)
	if err != nil {
		return cfg, fmt.Errorf("re-encoding expanded YAML: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(len(problems) == 0) // unknown keys found are reported, and left in for the anchors they may hold
	if err := dec.Decode(&cfg); err != nil {
		if len(problems) > 0 {
			// What is left still does not decode (an alias of a pruned
			// anchor, say): the problems found so far are the report.
			return logOnly(Defaults(), &root), chk.render(problems)
		}
		return logOnly(Defaults(), &root), fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	problems = append(problems, cfg.validate(&chk.unread)...)
	cfg.lines = chk.lines
	return cfg, chk.render(problems)
}

// logOnly is cfg with the file's log: section, read leniently, for a file
// that does not parse as a whole: its errors are then reported the way it
// asks (log.json: README "Observability"), as a valid file's are. A log:
// section that does not read leaves cfg's.
func logOnly(cfg Config, root *yaml.Node) Config {
	doc := root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return cfg
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "log" {
			continue
		}
		l := cfg.Log
		if doc.Content[i+1].Decode(&l) == nil {
			cfg.Log = l
		}
	}
	return cfg
}

// refuseMoreDocuments reports a document after the first: only the first is
// decoded, so keys after a "---" would be ignored without a word. An empty
// one (a trailing "---") holds no keys and is let through.
// emptyDocument reports whether a YAML document holds nothing: no node, or
// the empty null a bare --- gives.
func emptyDocument(doc *yaml.Node) bool {
	return len(doc.Content) == 0 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" && doc.Content[0].Value == "")
}

func refuseMoreDocuments(docs *yaml.Decoder) error {
	for {
		var doc yaml.Node
		err := docs.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("invalid YAML: %w", err)
		case !emptyDocument(&doc):
			return fmt.Errorf("line %d: a second YAML document starts here; the config must be a single document", doc.Line)
		}
	}
}

// syntaxError is raw's YAML syntax error err, with the likeliest cause
// explained when raw has an unquoted ${VAR} inside a flow collection ([...]
// or {...}, the style README's examples use): there "{" and "}" end the
// collection, so the reference is not a plain scalar and the file does not
// parse, whatever the variable holds. ${VAR} is expanded in the parsed
// values, never in the text (a value must not be able to add YAML of its
// own), so the fix is the quotes. When quoting the reference changes the
// error, it was the cause: the error is reported at the reference's line
// alone, since yaml.v3 names another (near the start of the enclosing
// collection) and one error must not point at two lines.
func syntaxError(raw []byte, err error) error {
	at, line, key, ref := unquotedFlowEnvRef(raw)
	if ref == "" {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	quoted := fmt.Sprintf("%q", ref)
	fix := quoted
	if key != "" {
		fix = key + ": " + quoted
	}
	hint := fmt.Sprintf("an unquoted %s inside [...] or {...} is not valid YAML; quote it: %s", ref, fix)
	var doc yaml.Node
	again := yaml.NewDecoder(bytes.NewReader(slices.Concat(raw[:at], []byte(quoted), raw[at+len(ref):]))).Decode(&doc)
	if again == nil || again.Error() != err.Error() {
		return fmt.Errorf("invalid YAML: line %d: %s (%s)", line, yamlErrorPrefix.ReplaceAllString(err.Error(), ""), hint)
	}
	return fmt.Errorf("invalid YAML: %w (line %d: %s)", err, line, hint) // another error comes first
}

// yamlErrorPrefix is what yaml.v3 puts before a syntax error's text.
var yamlErrorPrefix = regexp.MustCompile(`^yaml: (line \d+: )?`)

// unquotedFlowEnvRef finds the first ${VAR} outside quotes and comments
// inside a flow collection: its offset in raw, its line (1-based), the key
// before it on that line ("" for none) and the reference. It reads the text the way YAML's
// flow context does, closely enough for a hint: a quote opens a quoted
// scalar only where a scalar may start.
func unquotedFlowEnvRef(raw []byte) (at, line int, key, ref string) {
	line, depth := 1, 0
	var quote byte       // the open quote, or 0
	var prev byte = '\n' // the last character outside quotes that is not a space
	lineStart := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '\n' {
			line, lineStart = line+1, i+1
		}
		switch {
		case quote == '"' && c == '\\':
			i++ // an escape: the next character is not the closing quote
		case quote != 0:
			if c == quote {
				quote, prev = 0, c
			}
		case c == '#' && (i == 0 || raw[i-1] == ' ' || raw[i-1] == '\t' || raw[i-1] == '\n'):
			for i+1 < len(raw) && raw[i+1] != '\n' { // a comment runs to the end of its line
				i++
			}
		case (c == '"' || c == '\'') && strings.IndexByte(":,[{-?\n", prev) >= 0:
			quote = c
		case (c == '[' || c == '{') && (depth > 0 || strings.IndexByte(":-?\n", prev) >= 0):
			depth++ // in block context only where a value starts: ${X} there is a plain scalar
		case c == ']' || c == '}':
			if depth > 0 {
				depth--
			}
		case c == '$' && depth > 0 && i+1 < len(raw) && raw[i+1] == '{':
			if loc := envRef.FindIndex(raw[i:]); loc != nil && loc[0] == 0 {
				if k := flowKey.FindSubmatch(raw[lineStart:i]); k != nil {
					key = string(k[1])
				}
				return i, line, key, string(raw[i : i+loc[1]])
			}
		}
		if c != ' ' && c != '\t' && quote == 0 && c != '"' && c != '\'' {
			prev = c
		}
	}
	return 0, 0, "", ""
}

// flowKey is the key a value after it belongs to: "api_key: " at the end of
// the text before the value.
var flowKey = regexp.MustCompile(`([A-Za-z0-9_.-]+):\s*$`)

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expansion is what expandNode could not expand: each problem, and the
// values concerned (the checker refuses them without a second word).
type expansion struct {
	problems []problem
	failed   map[*yaml.Node]bool
	// fromEnv holds the values that took text from the environment, with
	// the variables that gave it: a problem with one must not quote it
	// (it may be a secret in the wrong variable), and names them instead.
	fromEnv map[*yaml.Node][]string
}

// expandNode replaces ${VAR} references in scalar values, tracking the key
// path so that an unset variable is reported against its key.
func expandNode(n *yaml.Node, path string, lookup func(string) (string, bool), exp *expansion) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			expandNode(c, path, lookup, exp)
		}
	case yaml.MappingNode: // every unset variable, not just the first
		for i := 0; i+1 < len(n.Content); i += 2 {
			expandNode(n.Content[i+1], join(path, n.Content[i].Value), lookup, exp)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			expandNode(c, fmt.Sprintf("%s[%d]", path, i), lookup, exp)
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${") {
			return
		}
		var missing, notUTF8, nested string
		var used []string // the variables whose values went in
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			m := envRef.FindStringSubmatch(ref)
			if strings.Contains(m[3], "${") && nested == "" {
				// ${A:-${B:-c}}: the first } would end the outer default,
				// leaving a literal "${B:-c}" behind.
				nested = m[1]
			}
			if v, ok := lookup(m[1]); ok && v != "" {
				if !utf8.ValidString(v) && notUTF8 == "" {
					notUTF8 = m[1]
				}
				if !slices.Contains(used, m[1]) {
					used = append(used, m[1])
				}
				return v
			}
			if m[2] != "" {
				return m[3]
			}
			if missing == "" {
				missing = m[1]
			}
			return ""
		})
		failed := func(format string, args ...any) {
			exp.problems = append(exp.problems, problem{key: path, msg: fmt.Sprintf(format, args...)})
			exp.failed[n] = true
		}
		switch {
		case nested != "":
			failed("the default of ${%s:-…} holds a ${…}; defaults cannot nest", nested)
			return
		case missing != "":
			failed("environment variable %s is empty or not set", missing)
			return
		case notUTF8 != "": // YAML text is UTF-8: the expanded tree could not be re-encoded
			failed("environment variable %s is not valid UTF-8 text", notUTF8)
			return
		}
		if len(used) > 0 {
			exp.fromEnv[n] = used
		}
		// An expanded value is data, never YAML structure or a tag.
		n.Tag = "!!str"
		if n.Style == 0 {
			n.Style = yaml.DoubleQuotedStyle
		}
	}
}

// Validate checks every value and names the key of each problem.
func (c *Config) Validate() error {
	var errs []error
	for _, p := range c.validate(&unreadable{}) {
		errs = append(errs, errors.New(p.text()))
	}
	return errors.Join(errs...)
}

// validate lists the problems of the values, skipping a check whose input
// could not be read from the file (unread).
func (c *Config) validate(unread *unreadable) []problem {
	var problems []problem
	bad := func(key, format string, args ...any) {
		if !unread.covers(key) {
			problems = append(problems, problem{key: key, msg: fmt.Sprintf(format, args...)})
		}
	}
	// duration checks one duration: positive unless zeroOK, and at most
	// maxDuration.
	duration := func(key string, d Duration, zeroOK bool) {
		switch {
		case d < 0 || (d == 0 && !zeroOK):
			bad(key, "must be positive")
		case d.D() > maxDuration:
			bad(key, "%s", durationBound())
		}
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "%q is not host:port", c.Listen)
	} else if !isDecimal(port) || len(port) > 5 || atoiPort(port) > 65535 {
		// Numbers only, as README writes it: a service name would depend
		// on the machine's /etc/services, and a bad port must be found
		// here, with the file's other problems, not when the listener
		// opens after the store.
		bad("listen", "%q: the port is not a number from 0 to 65535 (0 picks a free port)", c.Listen)
	}
	switch c.Streams.MalformedEvents {
	case "skip", "fail":
	default:
		bad("streams.malformed_events", "%q is not skip or fail", c.Streams.MalformedEvents)
	}
	if c.Streams.Durable && c.Continuity.Disabled {
		bad("streams.durable", "needs the store, and continuity.disabled turns it off")
	}
	if c.Streams.Durable && c.Streams.ResumeWindow <= 0 {
		bad("streams.durable", "needs streams.resume_window > 0 (0 turns resume off)")
	}
	if c.Streams.ResumeMaxBytes <= 0 {
		bad("streams.resume_max_bytes", "must be positive")
	} else if c.Streams.ResumeMaxBytes > maxBytes {
		bad("streams.resume_max_bytes", "must be at most %d (1 TiB)", maxBytes)
	}
	// A resume_max_bytes already refused is no bound for another key
	// (README "Running it": no problem as a consequence of another).
	if c.Streams.ResumeMaxBytes <= maxBytes && c.Streams.ResumeMemoryBytes < c.Streams.ResumeMaxBytes {
		bad("streams.resume_memory_bytes", "must be at least streams.resume_max_bytes (%d)", c.Streams.ResumeMaxBytes)
	} else if c.Streams.ResumeMemoryBytes > maxBytes {
		bad("streams.resume_memory_bytes", "must be at most %d (1 TiB)", maxBytes)
	}
	duration("streams.resume_window", c.Streams.ResumeWindow, true) // 0 turns resume off
	duration("streams.detach_grace", c.Streams.DetachGrace, true)   // 0: no grace
	switch strings.ToLower(c.Log.Level) {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of trace, debug, info, warn, error", c.Log.Level)
	}
	// In declaration order, so that the problems come out in the same
	// order every run. Counts (upTo 0) are only compared with, never added
	// to or multiplied, so they need no upper bound.
	for _, l := range []struct {
		key     string
		v, upTo int64
	}{
		{"limits.max_body_bytes", c.Limits.MaxBodyBytes, maxBytes},
		{"limits.max_event_bytes", int64(c.Limits.MaxEventBytes), maxBytes},
		{"limits.max_ws_frame_bytes", c.Limits.MaxWSFrameBytes, maxBytes},
		{"limits.upstream_sockets", int64(c.Limits.UpstreamSockets), 0},
		{"limits.max_json_depth", int64(c.Limits.MaxJSONDepth), 0},
		{"limits.body_memory_bytes", c.Limits.BodyMemoryBytes, maxBytes},
		{"limits.max_connections", int64(c.Limits.MaxConnections), 0},
		{"limits.input_sessions", int64(c.Limits.InputSessions), 0},
		{"limits.input_session_bytes", c.Limits.InputSessionBytes, maxBytes},
		{"limits.ws_session_memory_bytes", c.Limits.WSSessionMemoryBytes, maxBytes},
		{"limits.ws_session_memory_total_bytes", c.Limits.WSSessionMemoryTotalBytes, maxBytes},
	} {
		if l.v <= 0 {
			bad(l.key, "must be positive")
		} else if l.upTo > 0 && l.v > l.upTo {
			bad(l.key, "must be at most %d (1 TiB)", l.upTo)
		}
	}
	// Only a max_body_bytes in range bounds body_memory_bytes: one refused
	// above would make it a second problem the file never wrote.
	if c.Limits.BodyMemoryBytes > 0 && c.Limits.MaxBodyBytes <= maxBytes && c.Limits.BodyMemoryBytes < c.Limits.MaxBodyBytes {
		bad("limits.body_memory_bytes", "must be at least limits.max_body_bytes (%d)", c.Limits.MaxBodyBytes)
	}
	for i, p := range c.TrustedProxies {
		if _, _, err := net.ParseCIDR(p); err != nil && net.ParseIP(p) == nil {
			bad(fmt.Sprintf("trusted_proxies[%d]", i), "%q is not an IP address or CIDR", p)
		}
	}
	// An absent timeout keeps its default, so 0 here was written: refuse it
	// rather than let the gateway swap in the default unannounced.
	for _, t := range []struct {
		key string
		d   Duration
	}{
		{"timeouts.connect", c.Timeouts.Connect},
		{"timeouts.header", c.Timeouts.Header},
		{"timeouts.idle", c.Timeouts.Idle},
		{"timeouts.read_header", c.Timeouts.ReadHeader},
		{"timeouts.drain_grace", c.Timeouts.DrainGrace},
		{"timeouts.probe_interval", c.Timeouts.ProbeInterval},
		{"timeouts.upstream_socket_idle", c.Timeouts.UpstreamIdle},
		{"timeouts.client_write", c.Timeouts.ClientWrite},
		{"timeouts.read_body", c.Timeouts.ReadBody},
		{"timeouts.ws_idle", c.Timeouts.WSIdle},
		{"timeouts.keepalive", c.Timeouts.KeepAlive},
	} {
		duration(t.key, t.d, false)
	}
	if p := c.Timeouts.ProbeInterval.D(); p > 0 && p < minProbeInterval {
		bad("timeouts.probe_interval", "must be at least %s (every upstream is probed this often)", minProbeInterval)
	}
	names := map[string]bool{}
	namesRead := true // false when an upstream's name could not be read: a target may name it
	for i, u := range c.Upstreams {
		if key := fmt.Sprintf("upstreams[%d]", i); u.Name == "" && unread.covers(key+".name") && !unread.empty[key] {
			namesRead = false
		}
	}
	for i, u := range c.Upstreams {
		key := fmt.Sprintf("upstreams[%d]", i)
		if u.Name == "" {
			bad(key+".name", "is required")
		} else if names[u.Name] {
			bad(key+".name", "%q is used twice", u.Name)
		}
		names[u.Name] = true
		if strings.ContainsFunc(u.Name, unicode.IsControl) {
			bad(key+".name", "%q has a control character (a line break, a tab…)", u.Name)
		}
		if strings.ContainsFunc(u.APIKey, unicode.IsControl) { // never echoed: it is a secret
			bad(key+".api_key", "has a control character (a line break, a tab…; a mounted secret's trailing newline?)")
		}
		if err := upstream.CheckBaseURL(u.BaseURL); err != nil {
			bad(key+".base_url", "%q %v", httpx.RedactURL(u.BaseURL), err)
		} else if strings.Contains(u.BaseURL, "#") { // a fragment is never sent; one here is a mistake
			bad(key+".base_url", "%q must not have a fragment (#…)", httpx.RedactURL(u.BaseURL))
		} else if base, _, _ := strings.Cut(u.BaseURL, "?"); strings.HasSuffix(base, "/") {
			bad(key+".base_url", "%q must not end with a slash (the probe is GET {base_url}/models)", httpx.RedactURL(u.BaseURL))
		} else if p, err := url.Parse(u.BaseURL); err == nil && p.User != nil {
			// Go's HTTP client would send the userinfo as Basic auth, not
			// as the key: only --upstream reads a key from its URL
			// (UpstreamFromURL), and never leaves it there.
			bad(key+".base_url", "%q has credentials before the host (user@…); in a config file the upstream's key goes in api_key:", httpx.RedactURL(u.BaseURL))
		}
		switch u.Protocol {
		case "", "responses", "chat":
		default:
			bad(key+".protocol", "%q is not responses or chat", u.Protocol)
		}
		switch u.Transport {
		case "", "http", "auto":
			// auto on a chat upstream chooses HTTP (gateway/proxy.go):
			// Chat Completions has no WebSocket mode.
		case "websocket":
			if u.Protocol == upstream.ProtocolChat {
				// The gateway reaches a chat upstream over HTTP whatever
				// this says (gateway/proxy.go).
				bad(key+".transport", "%q does not apply to protocol: chat (Chat Completions has no WebSocket mode; it is always HTTP): remove it or write http or auto", u.Transport)
			}
		default:
			bad(key+".transport", "%q is not http, websocket or auto", u.Transport)
		}
		validateForwardHeaders(key, u.ForwardHeaders, u.APIKey != "", bad)
		if u.Weight < 0 {
			bad(key+".weight", "must not be negative")
		} else if u.Weight == 0 && u.weightWritten {
			bad(key+".weight", "must be at least 1: it is a share of the requests, and 0 is not \"no share\"; to take an upstream out of rotation, remove it from upstreams: (and from any route's targets)")
		} else if u.Weight > maxWeight {
			bad(key+".weight", "must be at most %d", maxWeight)
		}
	}
	c.validateStore(unread.written["store"]["redis"], bad)
	if c.Retry.MaxWait.D() > maxRetryWait {
		bad("retry.max_wait", "must be at most %s", maxRetryWait)
	}
	for i, r := range c.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if len(r.Models) == 0 {
			bad(key+".models", "is required")
		}
		for j, m := range r.Models {
			mk := fmt.Sprintf("%s.models[%d]", key, j)
			if strings.TrimSpace(m) == "" {
				bad(mk, "must not be empty")
			} else if _, err := path.Match(m, ""); err != nil {
				bad(mk, "%q is not a valid pattern (%v)", m, err)
			}
		}
		if len(r.Targets) == 0 {
			bad(key+".targets", "is required")
		}
		seen := map[Target]int{}
		for j, t := range r.Targets {
			tk := fmt.Sprintf("%s.targets[%d]", key, j)
			switch {
			case t.Upstream == "":
				bad(tk+".upstream", "is required")
			case len(c.Upstreams) > 0 && namesRead && !names[t.Upstream]: // none yet: --upstream flags may add them
				bad(tk+".upstream", "%q is not a configured upstream", t.Upstream)
			}
			if k, dup := seen[t]; dup {
				bad(tk, "repeats %s.targets[%d]", key, k)
			} else {
				seen[t] = j
			}
		}
		switch r.Continuation {
		case "", "auto", "restart", "off":
		default:
			bad(key+".continuation", "%q is not one of auto, restart, off", r.Continuation)
		}
		for _, t := range []struct {
			name    string
			d       Duration
			written bool
		}{
			{"first_byte", r.Timeouts.FirstByte, r.Timeouts.written.firstByte},
			{"first_token", r.Timeouts.FirstToken, r.Timeouts.written.firstToken},
			{"stall", r.Timeouts.Stall, r.Timeouts.written.stall},
		} {
			duration(key+".timeouts."+t.name, t.d, !t.written) // not written: no bound
		}
		c.refuseShadowedRoute(i, bad)
	}
	duration("continuity.anchor_ttl", c.Continuity.AnchorTTL, false)
	duration("continuity.rehydrate_after", c.Continuity.RehydrateAfter, false)
	if c.Continuity.Portable && c.Continuity.Disabled {
		bad("continuity.portable", "needs continuity (continuity.disabled is true)")
	}
	c.validateAccounts(bad)
	c.validateTracing(bad)
	c.validatePolicies(bad)
	return problems
}

// refuseShadowedRoute reports route i when every model pattern it names is
// named, as written, by an earlier route: the first match wins (README
// "Routes and fallbacks"), so route i could never be used. Patterns that
// differ are not compared (whether one glob covers another is not decided).
func (c *Config) refuseShadowedRoute(i int, bad func(key, format string, args ...any)) {
	var by []int // the earlier routes that take its models
	for _, m := range c.Routes[i].Models {
		first := slices.IndexFunc(c.Routes[:i], func(r Route) bool { return slices.Contains(r.Models, m) })
		if first < 0 {
			return // a model only this route names
		}
		if !slices.Contains(by, first) {
			by = append(by, first)
		}
	}
	if len(by) == 0 {
		return // no models: reported as required
	}
	slices.Sort(by)
	names := make([]string, len(by))
	for k, j := range by {
		names[k] = fmt.Sprintf("routes[%d]", j)
	}
	bad(fmt.Sprintf("routes[%d].models", i), "every model is matched first by %s, so this route is never used",
		strings.Join(names, ", "))
}

// maxBytes bounds the byte limits. The gateway adds to them and multiplies
// them (a body is read up to limits.max_body_bytes+1, a whole upstream answer
// up to 4×limits.max_event_bytes): 1 TiB is far beyond any real limit and
// keeps that arithmetic within an int64.
const maxBytes = 1 << 40

// maxDuration bounds the durations that are added to the clock or to other
// durations (an anchor expires at its creation + continuity.anchor_ttl, kept
// as nanoseconds since 1970, which end in 2262): 100 years is far beyond any
// real timeout and keeps the sums in range.
const maxDuration = 100 * 365 * 24 * time.Hour

// durationBound is the problem with a duration past maxDuration.
func durationBound() string { return fmt.Sprintf("must be at most %s (100 years)", maxDuration) }

// minProbeInterval bounds timeouts.probe_interval from below: a typo such
// as 15ms for 15s would otherwise probe every upstream dozens of times a
// second, and the on-demand probes are held to one per upstream per second
// too (README "What it promises").
const minProbeInterval = time.Second

// maxWeight bounds an upstream's weight: a share, not a count, and the
// pool's round-robin credits sum weights per pick (upstream.Pool.Pick).
const maxWeight = 1_000_000

// maxRetryWait bounds retry.max_wait: no upstream hint is honoured longer
// (upstream.MaxCooldown).
const maxRetryWait = 10 * time.Minute

// UpstreamFromURL builds an upstream entry for a --upstream flag: the name is
// derived from the host so several flags stay distinct. The scheme may name
// the protocol: chat+http(s)://… is a Chat-Completions-only server,
// responses+http(s)://… (or plain http(s)://) a Responses one. A key may
// ride in the userinfo (https://KEY@host/v1 or https://:KEY@host/v1).
func UpstreamFromURL(raw string, index int) (Upstream, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Upstream{}, fmt.Errorf("--upstream %q: not an http(s) URL", httpx.RedactURL(raw))
	}
	protocol := ""
	if p, scheme, ok := strings.Cut(u.Scheme, "+"); ok {
		switch p {
		case "chat", "responses":
			protocol, u.Scheme = p, scheme
		default:
			return Upstream{}, fmt.Errorf("--upstream %q: %q is not a protocol (chat+http(s)://… or responses+http(s)://…)", httpx.RedactURL(raw), p)
		}
	}
	if !upstream.IsHTTPURL(u) {
		return Upstream{}, fmt.Errorf("--upstream %q: not an http(s) URL (optionally chat+ or responses+ before the scheme)", httpx.RedactURL(raw))
	}
	key := ""
	if u.User != nil {
		key, _ = u.User.Password()
		if key == "" {
			key = u.User.Username()
		}
		u.User = nil
	}
	return Upstream{Name: fmt.Sprintf("%s-%d", u.Hostname(), index+1), BaseURL: strings.TrimRight(u.String(), "/"), APIKey: key,
		Protocol: protocol}, nil
}

// validateForwardHeaders refuses the forward_headers entries of upstream
// key that ask for what the gateway never does, and repeats: the list
// governs only the client credential headers a keyed upstream is otherwise
// denied (README, after upstreams:; gateway/headers.go upstreamHeaders), so
// Authorization, Cookie or a hop-by-hop header there is a wish the gateway
// would drop without a word (Authorization only on an upstream with
// api_key: one without gets the client's). Any other name is accepted: it
// asks for what happens anyway (the header reaches the upstream).
func validateForwardHeaders(key string, names []string, keyed bool, bad func(key, format string, args ...any)) {
	seen := map[string]int{}
	for i, name := range names {
		ek := fmt.Sprintf("%s.forward_headers[%d]", key, i)
		lower := strings.ToLower(strings.TrimSpace(name))
		switch {
		case !hostabi.ValidFieldName(lower):
			bad(ek, "%q is not a header name", name)
			continue
		case lower == "authorization" && keyed: // an upstream without api_key gets the client's anyway
			bad(ek, "%q is never forwarded from a client to an upstream with api_key (it gets its own key there); forward_headers governs only X-Api-Key, Api-Key, OpenAI-Organization and OpenAI-Project", name)
		case lower == "cookie" || lower == "proxy-authorization" || hostabi.ProtectedHeader(lower) && !hostabi.CredentialHeader(lower):
			bad(ek, "%q is never sent to an upstream, whatever forward_headers says", name)
		}
		if j, dup := seen[lower]; dup {
			bad(ek, "%q repeats forward_headers[%d]", name, j)
		} else {
			seen[lower] = i
		}
	}
}
