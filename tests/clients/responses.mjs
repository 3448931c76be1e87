// responses.mjs -- the official OpenAI library's Responses API (npm `openai`: client.responses)
// against plume serve: a response and its stream (the typed events, accumulated by the
// library's own ResponseStream), with the greedy text of the chat endpoint; a function-call
// round trip with function_call_output items; the thought round trip; the refusal of stored
// state.
//
// usage: node tests/clients/responses.mjs http://127.0.0.1:PORT [CASE...]
import OpenAI from "openai";
import { base, apiKey, deadline, assert, show, runCases, openaiChat } from "./lib.mjs";

deadline(240);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: apiKey || "none", maxRetries: 0, timeout: 120000 });
const MAX = 12;
const instructions = "You are terse.", user = "Name three colours.";

async function reference() {
  const c = await openaiChat({ messages: [{ role: "system", content: instructions }, { role: "user", content: user }], temperature: 0, max_tokens: MAX });
  return c.choices[0].message.content;
}

const cases = {
  async plain() {
    const want = await reference();
    const r = await client.responses.create({ model: "tiny", instructions, input: user, temperature: 0, max_output_tokens: MAX });
    assert(r.object === "response" && ["completed", "incomplete"].includes(r.status), `status: ${show(r)}`);
    assert(r.output_text === want, `output_text ${show(r.output_text)} != ${show(want)}`);
    assert(r.usage.input_tokens > 0 && r.usage.output_tokens >= 1 && r.usage.output_tokens <= MAX &&
      r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, `usage: ${show(r.usage)}`);
    if (r.status === "incomplete") assert(r.incomplete_details.reason === "max_output_tokens", `incomplete: ${show(r)}`);
    // The same conversation as a list of input items.
    const items = await client.responses.create({ model: "tiny", temperature: 0, max_output_tokens: MAX,
      input: [{ role: "system", content: instructions }, { type: "message", role: "user", content: [{ type: "input_text", text: user }] }] });
    assert(items.output_text === want, `items ${show(items.output_text)} != ${show(want)}`);
  },

  async stream() {
    const want = await reference();
    const events = [];
    let text = "";
    const s = await client.responses.create({ model: "tiny", instructions, input: user, temperature: 0, max_output_tokens: MAX, stream: true });
    for await (const ev of s) {
      events.push(ev.type);
      if (ev.type === "response.output_text.delta") text += ev.delta;
    }
    assert(events[0] === "response.created" && events.includes("response.output_item.added") &&
      ["response.completed", "response.incomplete"].includes(events[events.length - 1]), `events: ${show(events)}`);
    assert(text === want, `streamed ${show(text)} != ${show(want)}`);
    const runner = client.responses.stream({ model: "tiny", instructions, input: user, temperature: 0, max_output_tokens: MAX });
    let deltas = 0;
    runner.on("response.output_text.delta", () => deltas++);
    const final = await runner.finalResponse();
    assert(final.output_text === want && deltas >= 2, `ResponseStream ${show(final.output_text)} (${deltas} deltas) != ${show(want)}`);
  },

  async tools() {
    const tools = [{ type: "function", name: "get_weather", description: "Weather of a city", strict: false,
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
    const input = [{ role: "user", content: "What is the weather in Paris?" }];
    const first = await client.responses.create({ model: "tiny", input, tools, tool_choice: "auto", temperature: 0, max_output_tokens: MAX });
    let calls = first.output.filter((o) => o.type === "function_call");
    for (const c of calls) assert(c.name === "get_weather" && typeof c.arguments === "string" && c.call_id, `call: ${show(c)}`);
    if (!calls.length) calls = [{ type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' }];
    const next = [...input, ...calls.map(({ type, call_id, name, arguments: a }) => ({ type, call_id, name, arguments: a })),
      ...calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: '{"temperature_c": 21}' }))];
    const second = await client.responses.create({ model: "tiny", input: next, tools, temperature: 0, max_output_tokens: MAX });
    assert(second.usage.input_tokens > first.usage.input_tokens, `the tool turn: ${show(second.usage)} vs ${show(first.usage)}`);
    const final = await client.responses.stream({ model: "tiny", input: next, tools, temperature: 0, max_output_tokens: MAX }).finalResponse();
    assert(final.output_text === second.output_text, `streamed ${show(final.output_text)} != ${show(second.output_text)}`);
  },

  async reasoning() {
    // Thinking on: the thought comes back as a reasoning item (its encrypted_content is the
    // thought itself), and goes back in as an input item.
    const r = await client.responses.create({ model: "tiny", input: "Think.", reasoning: { effort: "high" },
      include: ["reasoning.encrypted_content"], store: false, temperature: 0, max_output_tokens: MAX });
    for (const o of r.output) assert(["reasoning", "message", "function_call"].includes(o.type), `item: ${show(o)}`);
    const again = await client.responses.create({ model: "tiny", temperature: 0, max_output_tokens: 4, store: false,
      input: [{ role: "user", content: "Think." }, { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "a thought" },
        { role: "assistant", content: "Done." }, { role: "user", content: "Again." }] });
    assert(again.status && again.usage.input_tokens > 0, `round trip: ${show(again)}`);
  },

  async fields() {
    // Sampling fields and seeds: a seeded sampled response replays, two unseeded ones differ;
    // the output text's log-probabilities with their alternatives (include); the parameters
    // echoed as sent; reasoning.summary accepted.
    const ask = (extra) => client.responses.create({ model: "tiny", input: "Sample", temperature: 1, top_p: 0.95,
      max_output_tokens: 16, ...extra });
    const [a, b] = [await ask({ seed: 99 }), await ask({ seed: 99 })];
    assert(a.output_text === b.output_text && a.temperature === 1 && a.top_p === 0.95, `seeded: ${show(a)} vs ${show(b.output_text)}`);
    const [c, d] = [await ask({}), await ask({})];
    assert(c.output_text !== d.output_text, `two unseeded responses are equal: ${show(c.output_text)}`);
    const lp = await client.responses.create({ model: "tiny", input: user, temperature: 0, max_output_tokens: 3,
      include: ["message.output_text.logprobs"], top_logprobs: 2, reasoning: { effort: "low", summary: "auto" } });
    const part = lp.output.find((o) => o.type === "message").content[0];
    assert(part.logprobs.length >= 1 && part.logprobs.every((t) => typeof t.logprob === "number" && t.top_logprobs.length === 2),
      `logprobs: ${show(part)}`);
    assert(part.logprobs.map((t) => t.token).join("") === part.text, `the tokens spell ${show(part.text)}: ${show(part.logprobs)}`);
  },

  async errors() {
    try {
      await client.responses.create({ model: "tiny", input: "hi", previous_response_id: "resp_123" });
      throw new Error("previous_response_id was accepted");
    } catch (e) {
      assert(e instanceof OpenAI.BadRequestError && /previous_response_id/.test(e.message), `expected BadRequestError, got ${e}`);
    }
    // A hosted tool is left out (docs/SERVER.md), but forcing one is a 400.
    try {
      await client.responses.create({ model: "tiny", input: "hi", tools: [{ type: "web_search" }], tool_choice: { type: "web_search" } });
      throw new Error("a hosted tool was forced");
    } catch (e) {
      assert(e instanceof OpenAI.BadRequestError && /tool_choice/.test(e.message), `expected BadRequestError, got ${e}`);
    }
  },
};

process.exit((await runCases(cases)) ? 1 : 0);
