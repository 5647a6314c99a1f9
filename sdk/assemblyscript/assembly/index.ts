// The AssemblyScript guest SDK for Sluice policies (hostabi/ABI.md, version 2).
//
// A policy registers its handlers from top-level code and re-exports the ABI
// exports from "./exports" (a path next to this file):
//
//   import { Policy, register, RecoverInput, RecoverOutput, RecoverVerdict } from "../sluice-sdk/assembly/index";
//   export * from "../sluice-sdk/assembly/exports";
//
//   function recover(in_: RecoverInput): RecoverOutput | null {
//     if (in_.code == "vendor_context_lost") return new RecoverOutput(RecoverVerdict.Recover);
//     return null; // defer: the next policy, finally the built-in default, decides
//   }
//   const p = new Policy();
//   p.recover = recover;
//   register(p);
//
// Build with the flags of asconfig.json next to this file (runtime "stub",
// exportStart "_initialize", the SDK's abort): a plain core-Wasm reactor that
// imports only the module "sluice".
//
// Memory: the stub runtime never frees, so the SDK rewinds its heap at the
// start of every hook call to where it stood after initialization. Objects
// made by top-level code (and the input region) survive; objects a hook makes
// live until the next call. Do not keep them in globals: guest state never
// lives across calls (ABI.md §1).

import * as host from "./host";

/** The ABI version this SDK speaks (sluice_abi_version). */
export const ABI_VERSION: i32 = 3;

// ---- verdicts, phases, classes, levels ---------------------------------

export enum RecoverVerdict {
  Pass = 0,
  Recover = 1,
  FailClosed = 2,
  /** ABI 3, for an owner_unavailable question only: send the kept conversation elsewhere. */
  Rehydrate = 3,
}

/** RecoverInput.code of the owner_unavailable question (ABI 3, ABI.md §3.1). */
export const CODE_OWNER_UNAVAILABLE = "owner_unavailable";

export enum ReplayVerdict {
  No = 0,
  OtherUpstream = 1,
  SameUpstream = 2,
  ContinuePrefill = 3,
  ContinueRestart = 4,
}

export enum Level {
  Trace = 0,
  Debug = 1,
  Info = 2,
  Warn = 3,
  Error = 4,
}

export const PHASE_BEFORE_HEADERS = "before_headers";
export const PHASE_BEFORE_CONTENT = "before_content";
export const PHASE_AFTER_CONTENT = "after_content";

// Failure classes (ReplayInput.failureClass); treat unknown ones like "other".
export const FAILURE_TRANSPORT = "transport";
export const FAILURE_SERVER_ERROR = "server_error";
export const FAILURE_OVERLOADED = "overloaded";
export const FAILURE_RATE_LIMIT = "rate_limit";
export const FAILURE_QUOTA = "quota";
export const FAILURE_FIRST_BYTE = "first_byte";
export const FAILURE_FIRST_TOKEN = "first_token";
export const FAILURE_CONTEXT_LENGTH = "context_length";
export const FAILURE_CLIENT_ERROR = "client_error";
export const FAILURE_AUTH = "auth";
export const FAILURE_CUT = "cut";
export const FAILURE_STALL = "stall";
export const FAILURE_ERROR_EVENT = "error_event";
export const FAILURE_OTHER = "other";

// Host function result codes (ABI.md §5).
export const CODE_NOT_FOUND: i32 = -1;
export const CODE_BAD_PATH: i32 = -2;
export const CODE_BAD_VALUE: i32 = -3;
export const CODE_UNAVAILABLE: i32 = -4;

// ---- hook inputs and outputs (ABI.md §3) --------------------------------

export class RecoverInput {
  surface: string = "";
  upstream: string = "";
  httpStatus: i32 = 0;
  eventType: string = "";
  code: string = "";
  type: string = "";
  param: string = "";
  message: string = "";
  transport: bool = false;
  // version 3: set only for the owner_unavailable question
  ownerRemoved: bool = false;
  ownerDownMs: i64 = 0;
  rehydrateAfterMs: i64 = 0;
  portable: bool = false;
}

export class RecoverOutput {
  constructor(public verdict: RecoverVerdict, public code: string = "", public message: string = "") {}
}

export class ReplayInput {
  surface: string = "";
  upstream: string = "";
  code: string = "";
  httpStatus: i32 = 0;
  replayCount: i32 = 0;
  responseCreatedSeen: bool = false;
  responseIdAssigned: bool = false;
  pendingRequests: i32 = 0;
  hasPreviousResponseId: bool = false;
  pinnedOwner: string = "";
  retryAfterMs: i64 = 0;
  // version 2
  phase: string = "";
  failureClass: string = "";
  bytesSent: i64 = 0;
  itemsSent: i32 = 0;
  toolCallInFlight: bool = false;
  hasTools: bool = false;
  targetIndex: i32 = 0;
  targetCount: i32 = 0;
  hasNextTarget: bool = false;
  nextModelDiffers: bool = false;
  sameTargetRetries: i32 = 0;
  maxWaitMs: i64 = 0;
  continuation: string = "";
  prefillAllowed: bool = false;
}

export class ReplayOutput {
  constructor(public verdict: ReplayVerdict, public penaltyMs: i64 = 0) {}
}

/** The rewrite_request hook's view of a request; the body stays in the host. */
export class Request {
  surface: string = "";
  endpoint: string = "";
  model: string = "";
  stream: bool = false;
  bodyBytes: i32 = 0;
  headersPtr: usize = 0; // the raw "headers" object in the input region
  headersLen: i32 = 0;
  failed: bool = false;

  /** The raw JSON at path, or null when absent (or on another error). */
  get(path: string): string | null {
    const p = String.UTF8.encode(path);
    const pp = changetype<usize>(p);
    const pl = p.byteLength;
    let n = host.doc_get(pp, pl, scratchPtr(), scratchCap);
    if (n < 0) return null;
    if (n > scratchCap) {
      growScratch(n);
      n = host.doc_get(pp, pl, scratchPtr(), scratchCap);
      if (n < 0) return null;
    }
    return String.UTF8.decodeUnsafe(scratchPtr(), n);
  }
  /** Stores the raw JSON value at path; 0 or a negative host code. */
  set(path: string, rawJSON: string): i32 {
    const p = String.UTF8.encode(path);
    const v = String.UTF8.encode(rawJSON);
    return host.doc_set(changetype<usize>(p), p.byteLength, changetype<usize>(v), v.byteLength);
  }
  /** Stores a JSON string value at path. */
  setString(path: string, s: string): i32 {
    return this.set(path, quote(s));
  }
  /** Removes the value at path; 0, or -1 when absent. */
  delete(path: string): i32 {
    const p = String.UTF8.encode(path);
    return host.doc_delete(changetype<usize>(p), p.byteLength);
  }
  /** A client header (lower-case name), or null. */
  header(name: string): string | null {
    if (this.headersLen == 0) return null;
    return lookupString(this.headersPtr, this.headersLen, name);
  }
  setHeader(name: string, value: string): i32 {
    const n = String.UTF8.encode(name);
    const v = String.UTF8.encode(value);
    return host.header_set(changetype<usize>(n), n.byteLength, changetype<usize>(v), v.byteLength);
  }
  removeHeader(name: string): i32 {
    const n = String.UTF8.encode(name);
    return host.header_remove(changetype<usize>(n), n.byteLength);
  }
  useUpstream(name: string): i32 {
    const n = String.UTF8.encode(name);
    return host.use_upstream(changetype<usize>(n), n.byteLength);
  }
  /** Answers the client with this error instead of calling an upstream. */
  reject(status: i32, code: string, message: string): i32 {
    const j = '{"status":' + status.toString() + ',"code":' + quote(code) + ',"message":' + quote(message) + "}";
    const b = String.UTF8.encode(j);
    return host.reject(changetype<usize>(b), b.byteLength);
  }
  /** Drops this module's edits (the hook answers "error", ABI.md §4). */
  fail(why: string): void {
    logMessage(Level.Error, "rewrite: " + why);
    this.failed = true;
  }
}

// ---- stream_event (ABI.md §3.5, optional) ----------------------------------

export enum StreamVerdict {
  Pass = 0,
  Drop = 1,
  Replace = 2,
}

/**
 * One text-bearing Responses event as the stream_event hook sees it: a
 * delta event (hasDelta, delta) or a text done event (hasText, text).
 * outputIndex and contentIndex are -1 when the event has none.
 */
export class StreamEvent {
  surface: string = "";
  upstream: string = "";
  type: string = "";
  sequenceNumber: i64 = 0;
  outputIndex: i32 = -1;
  contentIndex: i32 = -1;
  itemId: string = "";
  delta: string = "";
  text: string = "";
  hasDelta: bool = false;
  hasText: bool = false;
}

/** A stream_event handler's answer: use passEvent, dropEvent, replaceDelta or replaceText. */
export class StreamEventOutput {
  constructor(public verdict: StreamVerdict, public delta: string | null = null, public text: string | null = null) {}
}

/** Sends the event as it is (the same as returning null). */
export function passEvent(): StreamEventOutput {
  return new StreamEventOutput(StreamVerdict.Pass);
}
/** Leaves a delta out of the client's stream (on a done event: pass). */
export function dropEvent(): StreamEventOutput {
  return new StreamEventOutput(StreamVerdict.Drop);
}
/** Sends a delta event with this delta instead. */
export function replaceDelta(s: string): StreamEventOutput {
  return new StreamEventOutput(StreamVerdict.Replace, s);
}
/** Sends a text done event with this text instead. */
export function replaceText(s: string): StreamEventOutput {
  return new StreamEventOutput(StreamVerdict.Replace, null, s);
}

// ---- registration ---------------------------------------------------------

/** A set of handlers; null handlers are not implemented (sluice_hooks). */
export class Policy {
  /** Return null to defer. */
  recover: ((in_: RecoverInput) => RecoverOutput | null) | null = null;
  /** Return null to defer. */
  replay: ((in_: ReplayInput) => ReplayOutput | null) | null = null;
  rewrite: ((req: Request) => void) | null = null;
  /**
   * The optional per-event stream hook (ABI.md §3.5): called once per
   * text-bearing event of a Responses stream, so keep it short and return
   * early (null: pass) on types it does not act on.
   */
  streamEvent: ((ev: StreamEvent) => StreamEventOutput | null) | null = null;
  /** true: the policy works; false rejects the module at load. */
  selfTest: (() => bool) | null = null;
  /** Asked once at load: false means nothing to do with this config. */
  active: (() => bool) | null = null;
}

let registered: Policy = new Policy();

/** Installs the policy's handlers. Call it from top-level code. */
export function register(p: Policy): void {
  registered = p;
}

export function registeredPolicy(): Policy {
  return registered;
}

// ---- host helpers -----------------------------------------------------------

export function logMessage(level: Level, msg: string): void {
  const b = String.UTF8.encode(msg);
  host.log(<i32>level, changetype<usize>(b), b.byteLength);
}

/** The policy's configuration JSON, "" when there is none. */
export function config(): string {
  let n = host.config(scratchPtr(), scratchCap);
  if (n <= 0) return "";
  if (n > scratchCap) {
    growScratch(n);
    n = host.config(scratchPtr(), scratchCap);
    if (n <= 0) return "";
  }
  return String.UTF8.decodeUnsafe(scratchPtr(), n);
}

/** The host's wall clock, Unix milliseconds (the only real time). */
export function nowMillis(): i64 {
  return host.now_ms();
}

/** A JSON string literal for s (ABI.md §3 escaping). */
export function quote(s: string): string {
  let out = '"';
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c != 0x22 && c != 0x5c) continue;
    out += s.substring(start, i);
    if (c == 0x22) out += '\\"';
    else if (c == 0x5c) out += "\\\\";
    else if (c == 0x0a) out += "\\n";
    else if (c == 0x0d) out += "\\r";
    else if (c == 0x09) out += "\\t";
    else out += "\\u00" + (c < 0x10 ? "0" : "") + c.toString(16);
    start = i + 1;
  }
  return out + s.substring(start) + '"';
}

/** The string member key of the flat JSON object json, or null. */
export function jsonString(json: string, key: string): string | null {
  const b = String.UTF8.encode(json);
  return lookupString(changetype<usize>(b), b.byteLength, key);
}

// ---- scratch buffer for host reads (config, doc_get) -------------------------

let scratch: ArrayBuffer | null = null;
let scratchCap: i32 = 0;

function scratchPtr(): usize {
  if (scratch == null) growScratch(1024);
  return changetype<usize>(scratch);
}

function growScratch(n: i32): void {
  scratch = new ArrayBuffer(n);
  scratchCap = n;
}

// ---- heap rewinding (the stub runtime's bump allocator) ------------------------

// These mirror the stub runtime (~lib/rt/stub.ts, ~lib/rt/common.ts).
// @ts-ignore: decorator
@inline const BLOCK_OVERHEAD: usize = 4;
// @ts-ignore: decorator
@inline const AL_MASK: usize = 15;

let heapStart: usize = 0; // the stub's startOffset
let mark: usize = 0; // the heap offset every hook starts from
let regionBase: usize = 0; // the offset before the input region
let regionPtr: usize = 0;
let regionCap: i32 = 0;

/** The stub allocator's current offset. */
function heapOffset(): usize {
  const p = __alloc(0);
  __free(p); // the last block: discarded
  return p - BLOCK_OVERHEAD;
}

/** Sets the stub allocator's offset back to off (≥ heapStart). */
function rewindTo(off: usize): void {
  if (off == heapStart) {
    __reset();
    return;
  }
  // One block from heapStart to off; its header overwrites the first block's,
  // which is put back.
  const saved = load<u32>(heapStart);
  __reset();
  __alloc(off - heapStart - BLOCK_OVERHEAD);
  store<u32>(heapStart, saved);
}

function ensureMark(): void {
  if (mark != 0) return;
  heapStart = ((__heap_base + BLOCK_OVERHEAD + AL_MASK) & ~AL_MASK) - BLOCK_OVERHEAD;
  scratchPtr(); // kept across calls, below the mark
  mark = heapOffset();
  regionBase = mark;
}

/** Start of every hook call: forget the previous call's objects. */
export function beginCall(): void {
  ensureMark();
  rewindTo(mark);
  dropScratchAbove(mark);
  outBuf = null;
}

/** sluice_alloc: the input region, kept below the mark. */
export function allocRegion(size: i32): usize {
  ensureMark();
  if (regionPtr != 0 && size <= regionCap) return regionPtr;
  const want = size < 4096 ? 4096 : size;
  // The old region is the host's no longer (ABI.md §2): place the new one
  // where it was.
  rewindTo(regionBase);
  dropScratchAbove(regionBase);
  regionPtr = __alloc(<usize>want);
  regionCap = want;
  mark = heapOffset();
  return regionPtr;
}

/** A scratch buffer grown during a call is gone once the heap rewinds. */
function dropScratchAbove(off: usize): void {
  if (scratch != null && changetype<usize>(scratch) >= off) {
    scratch = null;
    scratchCap = 0;
  }
}

// ---- JSON input decoding (flat objects, ABI.md §3) ------------------------------

let pos: usize = 0;
let end: usize = 0;
let bad: bool = false;

function ws(): void {
  while (pos < end) {
    const c = load<u8>(pos);
    if (c != 0x20 && c != 0x0a && c != 0x0d && c != 0x09) return;
    pos++;
  }
}

/** Scans a string starting at pos (the quote); returns its end (after the closing quote). */
function scanString(): usize {
  let i = pos + 1;
  while (i < end) {
    const c = load<u8>(i);
    if (c == 0x22) return i + 1;
    if (c == 0x5c) i++;
    i++;
  }
  bad = true;
  return end;
}

/** Skips any JSON value at pos. */
function skipValue(): void {
  ws();
  if (pos >= end) {
    bad = true;
    return;
  }
  const c = load<u8>(pos);
  if (c == 0x22) {
    pos = scanString();
    return;
  }
  if (c == 0x7b || c == 0x5b) {
    let depth = 0;
    while (pos < end) {
      const d = load<u8>(pos);
      if (d == 0x22) {
        pos = scanString();
        continue;
      }
      if (d == 0x7b || d == 0x5b) depth++;
      else if (d == 0x7d || d == 0x5d) {
        depth--;
        if (depth == 0) {
          pos++;
          return;
        }
      }
      pos++;
    }
    bad = true;
    return;
  }
  // number, true, false, null
  while (pos < end) {
    const d = load<u8>(pos);
    if (d == 0x2c || d == 0x7d || d == 0x5d || d == 0x20 || d == 0x0a || d == 0x0d || d == 0x09) return;
    pos++;
  }
}

function isNull(): bool {
  return end - pos >= 4 && load<u32>(pos) == 0x6c6c756e; // "null"
}

function readString(): string {
  ws();
  if (isNull()) {
    pos += 4;
    return "";
  }
  if (pos >= end || load<u8>(pos) != 0x22) {
    bad = true;
    return "";
  }
  const s = pos + 1;
  const e = scanString();
  pos = e;
  if (bad) return "";
  return decodeString(s, <i32>(e - 1 - s));
}

function hex(c: u32): i32 {
  if (c >= 0x30 && c <= 0x39) return <i32>(c - 0x30);
  if (c >= 0x61 && c <= 0x66) return <i32>(c - 0x61 + 10);
  if (c >= 0x41 && c <= 0x46) return <i32>(c - 0x41 + 10);
  return -1;
}

/** Decodes the inner bytes of a JSON string. */
function decodeString(p: usize, n: i32): string {
  let esc = false;
  for (let i: i32 = 0; i < n; i++) {
    if (load<u8>(p + i) == 0x5c) {
      esc = true;
      break;
    }
  }
  if (!esc) return String.UTF8.decodeUnsafe(p, n);
  let out = "";
  let i: i32 = 0;
  let start: i32 = 0;
  while (i < n) {
    const c = load<u8>(p + i);
    if (c != 0x5c) {
      i++;
      continue;
    }
    out += String.UTF8.decodeUnsafe(p + start, i - start);
    if (i + 1 >= n) {
      bad = true;
      return "";
    }
    const e = load<u8>(p + i + 1);
    i += 2;
    if (e == 0x6e) out += "\n";
    else if (e == 0x72) out += "\r";
    else if (e == 0x74) out += "\t";
    else if (e == 0x62) out += "\b";
    else if (e == 0x66) out += "\f";
    else if (e == 0x22 || e == 0x5c || e == 0x2f) out += String.fromCharCode(e);
    else if (e == 0x75 && i + 4 <= n) {
      let u: i32 = 0;
      for (let k = 0; k < 4; k++) {
        const h = hex(load<u8>(p + i + k));
        if (h < 0) {
          bad = true;
          return "";
        }
        u = (u << 4) | h;
      }
      i += 4;
      out += String.fromCharCode(u); // surrogate halves pair up in UTF-16
    } else {
      bad = true;
      return "";
    }
    start = i;
  }
  return out + String.UTF8.decodeUnsafe(p + start, n - start);
}

function readInt(): i64 {
  ws();
  if (isNull()) {
    pos += 4;
    return 0;
  }
  let neg = false;
  if (pos < end && load<u8>(pos) == 0x2d) {
    neg = true;
    pos++;
  }
  let v: i64 = 0;
  let digits = 0;
  while (pos < end) {
    const c = load<u8>(pos);
    if (c < 0x30 || c > 0x39) break;
    v = v * 10 + <i64>(c - 0x30);
    digits++;
    pos++;
  }
  if (digits == 0 || digits > 18) bad = true;
  return neg ? -v : v;
}

function readBool(): bool {
  ws();
  if (end - pos >= 4 && load<u32>(pos) == 0x65757274) {
    // "true"
    pos += 4;
    return true;
  }
  if (end - pos >= 5 && load<u32>(pos) == 0x736c6166 && load<u8>(pos + 4) == 0x65) {
    // "false"
    pos += 5;
    return false;
  }
  if (isNull()) {
    pos += 4;
    return false;
  }
  bad = true;
  return false;
}

// The current member key: raw bytes [kp, kp+kn).
let kp: usize = 0;
let kn: i32 = 0;

/** key == s (ASCII). */
function keyIs(s: string): bool {
  if (kn != s.length) return false;
  const sp = changetype<usize>(s);
  for (let i: i32 = 0; i < kn; i++) {
    if (<u16>load<u8>(kp + i) != load<u16>(sp + (<usize>i << 1))) return false;
  }
  return true;
}

/** Starts walking the object in [p, p+n). */
function begin(p: usize, n: i32): bool {
  pos = p;
  end = p + n;
  bad = false;
  ws();
  if (pos >= end || load<u8>(pos) != 0x7b) {
    bad = true;
    return false;
  }
  pos++;
  ws();
  if (pos < end && load<u8>(pos) == 0x7d) {
    pos++;
    return false;
  }
  return true;
}

/** Reads the next key (sets kp, kn) and the colon; false at the end. */
function nextKey(first: bool): bool {
  ws();
  if (!first) {
    if (pos >= end) {
      bad = true;
      return false;
    }
    const c = load<u8>(pos);
    if (c == 0x7d) {
      pos++;
      return false;
    }
    if (c != 0x2c) {
      bad = true;
      return false;
    }
    pos++;
    ws();
  }
  if (pos >= end || load<u8>(pos) != 0x22) {
    bad = true;
    return false;
  }
  kp = pos + 1;
  const e = scanString();
  kn = <i32>(e - 1 - kp);
  pos = e;
  ws();
  if (pos >= end || load<u8>(pos) != 0x3a) {
    bad = true;
    return false;
  }
  pos++;
  return !bad;
}

function lookupString(p: usize, n: i32, key: string): string | null {
  const sp = pos, se = end, sb = bad;
  let res: string | null = null;
  if (begin(p, n)) {
    for (let first = true; nextKey(first); first = false) {
      if (keyIs(key)) {
        res = readString();
        break;
      }
      skipValue();
      if (bad) break;
    }
  }
  pos = sp;
  end = se;
  bad = sb;
  return res;
}

export function decodeRecoverInput(p: usize, n: i32): RecoverInput | null {
  const in_ = new RecoverInput();
  if (begin(p, n)) {
    for (let first = true; nextKey(first); first = false) {
      if (keyIs("surface")) in_.surface = readString();
      else if (keyIs("upstream")) in_.upstream = readString();
      else if (keyIs("http_status")) in_.httpStatus = <i32>readInt();
      else if (keyIs("event_type")) in_.eventType = readString();
      else if (keyIs("code")) in_.code = readString();
      else if (keyIs("type")) in_.type = readString();
      else if (keyIs("param")) in_.param = readString();
      else if (keyIs("message")) in_.message = readString();
      else if (keyIs("transport")) in_.transport = readBool();
      else if (keyIs("owner_removed")) in_.ownerRemoved = readBool();
      else if (keyIs("owner_down_ms")) in_.ownerDownMs = readInt();
      else if (keyIs("rehydrate_after_ms")) in_.rehydrateAfterMs = readInt();
      else if (keyIs("portable")) in_.portable = readBool();
      else skipValue();
      if (bad) break;
    }
  }
  return bad ? null : in_;
}

export function decodeReplayInput(p: usize, n: i32): ReplayInput | null {
  const in_ = new ReplayInput();
  if (begin(p, n)) {
    for (let first = true; nextKey(first); first = false) {
      if (keyIs("surface")) in_.surface = readString();
      else if (keyIs("upstream")) in_.upstream = readString();
      else if (keyIs("code")) in_.code = readString();
      else if (keyIs("http_status")) in_.httpStatus = <i32>readInt();
      else if (keyIs("replay_count")) in_.replayCount = <i32>readInt();
      else if (keyIs("response_created_seen")) in_.responseCreatedSeen = readBool();
      else if (keyIs("response_id_assigned")) in_.responseIdAssigned = readBool();
      else if (keyIs("pending_requests")) in_.pendingRequests = <i32>readInt();
      else if (keyIs("has_previous_response_id")) in_.hasPreviousResponseId = readBool();
      else if (keyIs("pinned_owner")) in_.pinnedOwner = readString();
      else if (keyIs("retry_after_ms")) in_.retryAfterMs = readInt();
      else if (keyIs("phase")) in_.phase = readString();
      else if (keyIs("failure_class")) in_.failureClass = readString();
      else if (keyIs("bytes_sent")) in_.bytesSent = readInt();
      else if (keyIs("items_sent")) in_.itemsSent = <i32>readInt();
      else if (keyIs("tool_call_in_flight")) in_.toolCallInFlight = readBool();
      else if (keyIs("has_tools")) in_.hasTools = readBool();
      else if (keyIs("target_index")) in_.targetIndex = <i32>readInt();
      else if (keyIs("target_count")) in_.targetCount = <i32>readInt();
      else if (keyIs("has_next_target")) in_.hasNextTarget = readBool();
      else if (keyIs("next_model_differs")) in_.nextModelDiffers = readBool();
      else if (keyIs("same_target_retries")) in_.sameTargetRetries = <i32>readInt();
      else if (keyIs("max_wait_ms")) in_.maxWaitMs = readInt();
      else if (keyIs("continuation")) in_.continuation = readString();
      else if (keyIs("prefill_allowed")) in_.prefillAllowed = readBool();
      else skipValue();
      if (bad) break;
    }
  }
  return bad ? null : in_;
}

export function decodeRequest(p: usize, n: i32): Request | null {
  const r = new Request();
  if (begin(p, n)) {
    for (let first = true; nextKey(first); first = false) {
      if (keyIs("surface")) r.surface = readString();
      else if (keyIs("endpoint")) r.endpoint = readString();
      else if (keyIs("model")) r.model = readString();
      else if (keyIs("stream")) r.stream = readBool();
      else if (keyIs("body_bytes")) r.bodyBytes = <i32>readInt();
      else if (keyIs("headers")) {
        ws();
        const s = pos;
        skipValue();
        if (!isNullAt(s)) {
          r.headersPtr = s;
          r.headersLen = <i32>(pos - s);
        }
      } else skipValue();
      if (bad) break;
    }
  }
  return bad ? null : r;
}

export function decodeStreamEvent(p: usize, n: i32): StreamEvent | null {
  const ev = new StreamEvent();
  if (begin(p, n)) {
    for (let first = true; nextKey(first); first = false) {
      if (keyIs("type")) ev.type = readString();
      else if (keyIs("delta")) {
        ev.delta = readString();
        ev.hasDelta = true;
      } else if (keyIs("text")) {
        ev.text = readString();
        ev.hasText = true;
      } else if (keyIs("sequence_number")) ev.sequenceNumber = readInt();
      else if (keyIs("output_index")) ev.outputIndex = <i32>readInt();
      else if (keyIs("content_index")) ev.contentIndex = <i32>readInt();
      else if (keyIs("item_id")) ev.itemId = readString();
      else if (keyIs("surface")) ev.surface = readString();
      else if (keyIs("upstream")) ev.upstream = readString();
      else skipValue();
      if (bad) break;
    }
  }
  return bad ? null : ev;
}

function isNullAt(p: usize): bool {
  return end - p >= 4 && load<u32>(p) == 0x6c6c756e;
}

// ---- results (ABI.md §4) ------------------------------------------------------------

export const RESULT_DEFER: i64 = -1;
export const RESULT_ERROR: i64 = -2;

let outBuf: ArrayBuffer | null = null;

/** The output location ptr<<32|len of json (kept until the next call). */
export function outputJSON(json: string): i64 {
  const b = String.UTF8.encode(json);
  outBuf = b;
  return (<i64>changetype<usize>(b) << 32) | <i64>b.byteLength;
}

export function encodeRecover(out: RecoverOutput): i64 {
  if (out.code.length == 0 && out.message.length == 0) return <i64>(<u32>out.verdict);
  let j = '{"verdict":' + (<i32>out.verdict).toString();
  if (out.code.length > 0) j += ',"code":' + quote(out.code);
  if (out.message.length > 0) j += ',"message":' + quote(out.message);
  return outputJSON(j + "}");
}

export function encodeReplay(out: ReplayOutput): i64 {
  if (out.penaltyMs == 0) return <i64>(<u32>out.verdict);
  return outputJSON('{"verdict":' + (<i32>out.verdict).toString() + ',"penalty_ms":' + out.penaltyMs.toString() + "}");
}

export function encodeStreamEvent(out: StreamEventOutput): i64 {
  if (out.verdict != StreamVerdict.Replace) return <i64>(<u32>out.verdict);
  const d = out.delta, t = out.text;
  if (d != null) return outputJSON('{"delta":' + quote(d) + "}");
  if (t != null) return outputJSON('{"text":' + quote(t) + "}");
  logMessage(Level.Error, "stream_event: a replace without a delta or text");
  return RESULT_ERROR;
}

/** A host-safe abort (asconfig "use": abort=…): log the message, then trap. */
export function sluiceAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  let m = "abort: " + (message != null ? message : "");
  if (fileName != null) m += " at " + fileName + ":" + line.toString() + ":" + column.toString();
  const b = String.UTF8.encode(m);
  host.log(<i32>Level.Error, changetype<usize>(b), b.byteLength);
  unreachable();
}
