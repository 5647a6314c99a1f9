// The ABI exports (hostabi/ABI.md §2). A policy's entry file re-exports them:
//
//   export * from "../sluice-sdk/assembly/exports";
//
// Every hook is exported; sluice_hooks tells the host which ones the
// registered Policy implements.

import {
  ABI_VERSION,
  RESULT_DEFER,
  RESULT_ERROR,
  allocRegion,
  beginCall,
  decodeRecoverInput,
  decodeReplayInput,
  decodeRequest,
  decodeStreamEvent,
  encodeRecover,
  encodeReplay,
  encodeStreamEvent,
  logMessage,
  Level,
  registeredPolicy,
} from "./index";

export function sluice_abi_version(): i32 {
  return ABI_VERSION;
}

export function sluice_alloc(size: i32): usize {
  return allocRegion(size);
}

export function sluice_hooks(): i32 {
  beginCall();
  const p = registeredPolicy();
  let h = 0;
  if (p.selfTest != null) h |= 8;
  const active = p.active;
  if (active != null && !active()) return h;
  if (p.recover != null) h |= 1;
  if (p.replay != null) h |= 2;
  if (p.rewrite != null) h |= 4;
  if (p.streamEvent != null) h |= 16;
  return h;
}

export function sluice_recover(ptr: usize, len: i32): i64 {
  beginCall();
  const f = registeredPolicy().recover;
  if (f == null) return RESULT_DEFER;
  const in_ = decodeRecoverInput(ptr, len);
  if (in_ == null) {
    logMessage(Level.Error, "recover: input does not decode");
    return RESULT_ERROR;
  }
  const out = f(in_);
  if (out == null) return RESULT_DEFER;
  return encodeRecover(out);
}

export function sluice_replay(ptr: usize, len: i32): i64 {
  beginCall();
  const f = registeredPolicy().replay;
  if (f == null) return RESULT_DEFER;
  const in_ = decodeReplayInput(ptr, len);
  if (in_ == null) {
    logMessage(Level.Error, "replay: input does not decode");
    return RESULT_ERROR;
  }
  const out = f(in_);
  if (out == null) return RESULT_DEFER;
  return encodeReplay(out);
}

export function sluice_rewrite_request(ptr: usize, len: i32): i64 {
  beginCall();
  const f = registeredPolicy().rewrite;
  if (f == null) return RESULT_DEFER;
  const req = decodeRequest(ptr, len);
  if (req == null) {
    logMessage(Level.Error, "rewrite: input does not decode");
    return RESULT_ERROR;
  }
  f(req);
  return req.failed ? RESULT_ERROR : 0;
}

// The optional per-event stream hook (ABI.md §3.5). Exported by every
// module; sluice_hooks sets its bit only when Policy.streamEvent is set, so
// the host never calls it otherwise.
export function sluice_stream_event(ptr: usize, len: i32): i64 {
  beginCall();
  const f = registeredPolicy().streamEvent;
  if (f == null) return RESULT_DEFER;
  const ev = decodeStreamEvent(ptr, len);
  if (ev == null) {
    logMessage(Level.Error, "stream_event: input does not decode");
    return RESULT_ERROR;
  }
  const out = f(ev);
  if (out == null) return RESULT_DEFER;
  return encodeStreamEvent(out);
}

export function sluice_self_test(): i32 {
  beginCall();
  const f = registeredPolicy().selfTest;
  if (f == null) return 0;
  return f() ? 0 : 1;
}
