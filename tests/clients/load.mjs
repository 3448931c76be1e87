// load.mjs -- a bounded load test of plume serve: CLIENTS concurrent clients each send
// REQUESTS streamed chat completions one after another (16 x 8 by default, a fixed number:
// the script stops by itself). Every reply must be HTTP 200, text/event-stream, and a
// well-formed event stream: "data: {json}" events separated by blank lines, chunks of one id,
// one finish_reason, the usage chunk, and "data: [DONE]" last. Then /metrics must show no
// busy slot and an empty queue.
//
// usage: node tests/clients/load.mjs http://127.0.0.1:PORT [--clients N] [--requests N] [--max-tokens N]
import { base, args, deadline, assert, show, authHeaders, waitIdle } from "./lib.mjs";

function opt(name, def) {
  const i = args.indexOf(name);
  return i >= 0 ? parseInt(args[i + 1], 10) : def;
}
const CLIENTS = opt("--clients", 16), REQUESTS = opt("--requests", 8), MAX = opt("--max-tokens", 8);
deadline(420);

// Check one SSE body; returns the streamed text.
function checkSSE(body, tag) {
  assert(body.endsWith("\n\n"), `${tag}: the stream does not end with a blank line: ${show(body.slice(-80))}`);
  const events = body.slice(0, -2).split("\n\n");
  assert(events.length >= 3, `${tag}: only ${events.length} events: ${show(body)}`);
  assert(events[events.length - 1] === "data: [DONE]", `${tag}: last event is not data: [DONE]: ${show(events[events.length - 1])}`);
  let id = null, finish = 0, usage = null, text = "";
  for (const ev of events.slice(0, -1)) {
    assert(ev.startsWith("data: ") && !ev.includes("\n"), `${tag}: malformed event ${show(ev)}`);
    let j;
    try { j = JSON.parse(ev.slice(6)); } catch (e) { throw new Error(`${tag}: event is not JSON: ${show(ev)}`); }
    assert(!j.error, `${tag}: error event ${show(j)}`);
    assert(j.object === "chat.completion.chunk", `${tag}: object ${show(j)}`);
    id = id || j.id;
    assert(j.id === id, `${tag}: chunk ids differ`);
    assert(!usage, `${tag}: an event after the usage chunk`);
    if (j.usage) { usage = j.usage; continue; }
    const c = j.choices[0];
    if (c.delta && c.delta.content) text += c.delta.content;
    if (c.finish_reason) finish++;
  }
  assert(finish === 1, `${tag}: ${finish} finish_reasons`);
  assert(usage && usage.completion_tokens >= 1 && usage.completion_tokens <= MAX, `${tag}: usage ${show(usage)}`);
  return text;
}

async function client(k) {
  for (let i = 0; i < REQUESTS; i++) {
    const tag = `client ${k} request ${i}`;
    const r = await fetch(base + "/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify({
        messages: [{ role: "user", content: `Client ${k} asks question ${i}: count to ${k + i}.` }],
        stream: true, stream_options: { include_usage: true }, max_tokens: MAX, temperature: 0.8, seed: k * 100 + i,
      }),
    });
    const body = await r.text();
    assert(r.status === 200, `${tag}: HTTP ${r.status} ${show(body)}`);
    assert((r.headers.get("content-type") || "").startsWith("text/event-stream"), `${tag}: content-type ${r.headers.get("content-type")}`);
    checkSSE(body, tag);
  }
}

const t0 = Date.now();
const results = await Promise.allSettled(Array.from({ length: CLIENTS }, (_, k) => client(k)));
const failed = results.filter((r) => r.status === "rejected");
for (const f of failed.slice(0, 5)) console.log(`not ok load: ${f.reason && f.reason.message}`);
if (failed.length) {
  console.log(`not ok load: ${failed.length} of ${CLIENTS} clients failed`);
  process.exit(1);
}
console.log(`ok load: ${CLIENTS} clients x ${REQUESTS} streamed requests in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
try {
  await waitIdle(10);
  console.log("ok idle: /metrics shows 0 busy slots and an empty queue");
} catch (e) {
  console.log(`not ok idle: ${e.message}`);
  process.exit(1);
}
process.exit(0);
