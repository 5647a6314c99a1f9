// asfixture: a test policy written with the AssemblyScript SDK
// (sdk/assemblyscript), built to plugins/testdata/asfixture.wasm by
// plugins/testdata/build.sh. The plugins and gateway tests hold it to what
// the Go fixture (gofixture) and the WAT fixtures do.
//
// rewrite: the model alias "fast" becomes "gpt-5-mini" and the header
// x-rewritten-by is set to "asfixture"; other requests are left alone.
//
// stream_event: replaces "secret" with "[redacted]" in
// response.output_text.delta events (as stream_redact.wat and gofixture
// do), passes the rest.
//
// recover: answers fail_closed with code "as:" + the input's code (a hook
// for the per-call cost benchmark); "defer" defers.
import {
  passEvent,
  Policy,
  RecoverInput,
  RecoverOutput,
  RecoverVerdict,
  register,
  replaceDelta,
  Request,
  StreamEvent,
  StreamEventOutput,
} from "../sluice-sdk/assembly/index";
export * from "../sluice-sdk/assembly/exports";

function rewrite(req: Request): void {
  if (req.model != "fast") return;
  if (req.setString("model", "gpt-5-mini") != 0) {
    req.fail("cannot set model");
    return;
  }
  req.setHeader("x-rewritten-by", "asfixture");
}

function streamEvent(ev: StreamEvent): StreamEventOutput | null {
  if (ev.type != "response.output_text.delta" || !ev.delta.includes("secret")) return passEvent();
  return replaceDelta(ev.delta.replaceAll("secret", "[redacted]"));
}

function recover(in_: RecoverInput): RecoverOutput | null {
  if (in_.code == "defer") return null;
  return new RecoverOutput(RecoverVerdict.FailClosed, "as:" + in_.code);
}

function selfTest(): bool {
  const ev = new StreamEvent();
  ev.type = "response.output_text.delta";
  ev.delta = "a secret";
  ev.hasDelta = true;
  const out = streamEvent(ev);
  return out != null && out.delta == "a [redacted]";
}

const p = new Policy();
p.rewrite = rewrite;
p.streamEvent = streamEvent;
p.recover = recover;
p.selfTest = selfTest;
register(p);
