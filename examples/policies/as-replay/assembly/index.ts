// An example Sluice policy in AssemblyScript (the SDK: ../sluice-sdk, written
// by `sluice policy build` from the sluice binary when missing).
//
// replay (ABI 2): never retry a server error; after content, restart on the
// next target when a tool call was streaming, else continue with the text as
// prefill (7 ms cooldown on the failed target); before content, go to the
// next target when there is one; defer everything else. These are the rules
// of plugins/testdata/replay_v2.wat, so plugins' conformance test holds the
// Go, AssemblyScript and WAT guests to the same inputs.
//
// recover: recovers `upstream_context_lost` with the code
// `context_lost_upstream` and the upstream's message quoted; defers the rest.
//
// Build: sluice policy build . -o ../20-as-replay.wasm
import {
  FAILURE_SERVER_ERROR,
  PHASE_AFTER_CONTENT,
  Policy,
  RecoverInput,
  RecoverOutput,
  RecoverVerdict,
  register,
  ReplayInput,
  ReplayOutput,
  ReplayVerdict,
} from "../sluice-sdk/assembly/index";
export * from "../sluice-sdk/assembly/exports";

function recover(in_: RecoverInput): RecoverOutput | null {
  if (in_.code == "upstream_context_lost") {
    return new RecoverOutput(RecoverVerdict.Recover, "context_lost_upstream", "upstream said: " + in_.message);
  }
  return null; // defer: the next policy, finally the built-in default
}

function replay(in_: ReplayInput): ReplayOutput | null {
  if (in_.failureClass == FAILURE_SERVER_ERROR) return new ReplayOutput(ReplayVerdict.No);
  if (in_.toolCallInFlight) return new ReplayOutput(ReplayVerdict.ContinueRestart);
  if (in_.phase == PHASE_AFTER_CONTENT) return new ReplayOutput(ReplayVerdict.ContinuePrefill, 7);
  if (in_.hasNextTarget) return new ReplayOutput(ReplayVerdict.OtherUpstream);
  return null;
}

function selfTest(): bool {
  const in_ = new RecoverInput();
  in_.code = "upstream_context_lost";
  const out = recover(in_);
  return out != null && out.verdict == RecoverVerdict.Recover;
}

const p = new Policy();
p.recover = recover;
p.replay = replay;
p.selfTest = selfTest;
register(p);
