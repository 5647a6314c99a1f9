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
