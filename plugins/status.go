package plugins

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// PolicyStatus describes one policy name (the JSON of GET /admin/policies).
// LastError is news, not history: a file (or embedded default) that loads
// and is swapped in clears it, so an active state with a last_error means the
// serving version faulted or erred since. A rejected file's error stays, next
// to its rejected_sha256, while an older version (or the embedded default)
// serves in its place, and a rollback says why it rolled back; a
// rolled_back or tripped state keeps that reason in last_error, and a file
// refused meanwhile shows its error as rejected_error only. State describes
// the serving version; it is "rejected" only when none serves. The counters
// are the serving version's: a swap or rollback starts them at zero.
type PolicyStatus struct {
	Name       string    `json:"name"`                      // file name without .wasm
	SHA256     string    `json:"sha256"`                    // of the serving version ("" when none serves)
	ABIVersion int       `json:"abi_version"`               // of the serving version
	Version    uint64    `json:"version"`                   // load generation of this name: 1, 2, …
	Hooks      []string  `json:"hooks"`                     // hooks the serving version implements ([] when none serves)
	LoadedAt   time.Time `json:"loaded_at,omitzero"`        // when the serving version was loaded (left out when none serves)
	Calls      int64     `json:"calls"`                     // hook calls into the serving version (0 when none serves)
	Faults     int64     `json:"faults"`                    // its calls that faulted (trap, timeout, memory, bad output)
	Errors     int64     `json:"errors"`                    // its calls that ended in the guest's error result, a cancellation or a busy pool
	LastError  string    `json:"last_error"`                // the latest load error, fault or error (see above)
	Source     string    `json:"source"`                    // "embedded" or "dir": of the serving version, else of the refused file
	State      string    `json:"state"`                     // "active", "rolled_back", "tripped", or "rejected" when nothing serves
	Rejected   string    `json:"rejected_sha256,omitempty"` // sha256 of the latest file refused while the version shown (if any) serves
	Size       int       `json:"size"`                      // bytes of the serving module
	// RejectedError is why the file of rejected_sha256 was refused.
	RejectedError string `json:"rejected_error,omitempty"`
	// Parked: the serving version is an embedded module whose compiled code
	// was released after its load checks; its native twin answers until a
	// first call has it compiled again (Options.StandIns).
	Parked bool `json:"parked,omitempty"`
	// ConfigRefusal is why the policy refused its config (its
	// _initialize, sluice_hooks or self-test failed with it) when no
	// version of the name serves; "" otherwise, and for a file that could
	// not load at all. `sluice serve` refuses to start on it.
	ConfigRefusal string `json:"-"`
}

// FailClosedProblem says why the gateway refuses to hold the policy s
// describes to its rewrites (hostabi.FailClosedKey set true in its config),
// "" when it may: a policy that implements no rewrite_request hook (with
// this config) never rewrites, so every request would be refused. `sluice
// serve` refuses such a config at start, and `sluice policy check|test`
// refuse the module with the same words.
func (s PolicyStatus) FailClosedProblem() string {
	if slices.Contains(s.Hooks, "rewrite_request") {
		return ""
	}
	hooks := strings.Join(s.Hooks, ", ")
	if hooks == "" {
		hooks = "none with this config"
	}
	return fmt.Sprintf("only a policy that rewrites requests can fail closed, and this one implements no rewrite_request hook (its hooks: %s); every request would be refused", hooks)
}

// statusBase is the part of a status that changes only under Runtime.mu.
type statusBase struct {
	PolicyStatus
	st *stats
	v  *version // the serving version, nil when none
}

func (r *Runtime) statusOf(e *entry) statusBase {
	s := statusBase{st: e.st}
	s.Name, s.State, s.LastError, s.Rejected, s.RejectedError, s.Hooks = e.name, e.state, e.lastError, e.rejectedSHA, e.rejectedError, []string{}
	s.ConfigRefusal = e.configRefusal
	if v := e.cur; v != nil {
		s.v, s.st = v, v.st
		s.SHA256, s.ABIVersion, s.Version = v.comp.sha, int(v.abi), v.gen
		s.Hooks = v.hooks.Names()
		s.LoadedAt, s.Source, s.Size = v.loadedAt, v.source, len(v.data)
	} else {
		s.Source = e.rejectedSource // where the file no version of the name serves came from
	}
	if s.State == "" {
		s.State = StateActive
	}
	return s
}

// Status lists every policy name, sorted, with its serving version and
// counters. It does not block on loads in progress.
func (r *Runtime) Status() []PolicyStatus {
	p := r.status.Load()
	if p == nil {
		return nil
	}
	out := make([]PolicyStatus, len(*p))
	for i, b := range *p {
		out[i] = b.PolicyStatus
		out[i].Hooks = append([]string{}, b.Hooks...) // [] (not null) when none serves
		out[i].Calls = b.st.calls.Load()
		out[i].Faults = b.st.faults.Load()
		out[i].Errors = b.st.errors.Load()
		out[i].Parked = b.v != nil && b.v.parked()
		if le := b.st.lastErr.Load(); le != nil && (out[i].LastError == "" || out[i].Rejected == "") {
			out[i].LastError = *le
		}
	}
	return out
}
