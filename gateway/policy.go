package gateway

import (
	"context"

	"github.com/sluice-gw/sluice/hostabi"
)

// Policy makes the decisions operators change often. The plugin runtime
// implements it with WebAssembly modules; BuiltinPolicy is the fallback the
// gateway uses when no runtime is configured.
type Policy interface {
	// Recover decides what an upstream error-shaped answer becomes.
	Recover(ctx context.Context, in hostabi.RecoverInput) hostabi.RecoverOutput
	// Replay decides whether a request that failed before its response was
	// committed is sent again, and where.
	Replay(ctx context.Context, in hostabi.ReplayInput) hostabi.ReplayOutput
	// Rewrite may edit a request before an upstream is chosen.
	Rewrite(ctx context.Context, in hostabi.RewriteInput) hostabi.RewriteOutput
}

// BuiltinPolicy answers every hook with the host's built-in defaults.
type BuiltinPolicy struct{}

// Recover implements Policy with hostabi.DefaultRecover.
func (BuiltinPolicy) Recover(_ context.Context, in hostabi.RecoverInput) hostabi.RecoverOutput {
	return hostabi.DefaultRecover(in)
}

// Replay implements Policy with hostabi.DefaultReplay.
func (BuiltinPolicy) Replay(_ context.Context, in hostabi.ReplayInput) hostabi.ReplayOutput {
	return hostabi.DefaultReplay(in)
}

// Rewrite implements Policy by leaving the request unchanged.
func (BuiltinPolicy) Rewrite(context.Context, hostabi.RewriteInput) hostabi.RewriteOutput {
	return hostabi.RewriteOutput{}
}

// StreamPolicy is implemented by a Policy that may run a per-event hook on
// Responses streams (the plugin runtime's stream_event, ABI.md §3.5). The
// gateway asks StreamHookActive once per stream; when it is false (or the
// Policy does not implement StreamPolicy) the stream never builds a hook
// input: the no-hook path is one nil check per event.
//
// The strings of StreamEvent's input (Type, ItemID, Delta, Text) may point
// into the buffer the gateway reads the upstream with, which the next read
// reuses: they are valid during the call only, and an implementation that
// keeps one copies it (strings.Clone). Wasm policies get copies anyway.
type StreamPolicy interface {
	StreamHookActive() bool
	StreamEvent(ctx context.Context, in hostabi.StreamEventInput) hostabi.StreamEventOutput
}
