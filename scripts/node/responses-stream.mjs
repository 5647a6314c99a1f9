// Consumes a Responses stream through Sluice with the openai-node SDK's
// responses.stream() helper, which needs well-formed events (output_index,
// content_index, item ids) to assemble the final response.
import OpenAI from "openai";

const base = process.argv[2];
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "sk-node", maxRetries: 0 });

async function turn(previous) {
  const stream = client.responses.stream({
    model: "gpt-fake-1",
    input: previous ? "and again" : "hi",
    ...(previous ? { previous_response_id: previous } : {}),
  });
  let deltas = "";
  stream.on("response.output_text.delta", (e) => { deltas += e.delta; });
  const final = await stream.finalResponse();
  if (final.output_text !== deltas || !deltas) {
    throw new Error(`joined deltas ${JSON.stringify(deltas)} != final ${JSON.stringify(final.output_text)}`);
  }
  return final;
}

const first = await turn(null);
const second = await turn(first.id);
console.log(`turn 1: ${first.id} ${JSON.stringify(first.output_text)}`);
console.log(`turn 2: ${second.id} ${JSON.stringify(second.output_text)}`);

// Resume: the stream of turn 2 again from after its event 2 (GET
// /v1/responses/{id}?stream=true&starting_after=2), numbered on without a
// gap to its terminal event.
const resumed = await client.responses.retrieve(second.id, { stream: true, starting_after: 2 });
const seqs = [];
let last = "";
for await (const ev of resumed) {
  seqs.push(ev.sequence_number);
  last = ev.type;
}
if (seqs[0] !== 3 || last !== "response.completed" || seqs.some((s, i) => i > 0 && s !== seqs[i - 1] + 1)) {
  throw new Error(`resumed after 2: sequence numbers ${JSON.stringify(seqs)}, last ${last}`);
}
console.log(`resume: ${seqs.length} events after 2`);

// Background: answered at once, polled to completion, its input items listed.
let bg = await client.responses.create({ model: "gpt-fake-1", input: "in the background", background: true });
if (!bg.background || bg.status !== "in_progress") {
  throw new Error(`background create: ${JSON.stringify({ status: bg.status, background: bg.background })}`);
}
for (let i = 0; bg.status !== "completed"; i++) {
  if (i > 100) throw new Error(`background never completed: ${bg.status}`);
  await new Promise((r) => setTimeout(r, 50));
  bg = await client.responses.retrieve(bg.id);
}
const items = await client.responses.inputItems.list(bg.id);
if (!bg.output_text || items.data.length !== 1) {
  throw new Error(`background: output ${JSON.stringify(bg.output_text)}, ${items.data.length} input items`);
}
console.log(`background: ${bg.id} ${JSON.stringify(bg.output_text)}`);
