// ollama.mjs -- the official Ollama library (npm `ollama`) against plume serve: the probe of
// GET /, version, list, show (capabilities), ps; chat and generate, whole and streamed (NDJSON),
// with the greedy text of the OpenAI chat endpoint; a tool-call round trip with arguments as
// objects; seeds; the error the library raises for a field plume refuses.
//
// usage: node tests/clients/ollama.mjs http://127.0.0.1:PORT [CASE...]
// The model is a tiny random one: the checks are on shapes, equalities and counts.
import { Ollama } from "ollama";
import { base, apiKey, deadline, assert, show, runCases, openaiChat } from "./lib.mjs";

deadline(240);
const client = new Ollama({ host: base, headers: apiKey ? { Authorization: "Bearer " + apiKey } : {} });
const MAX = 12;
const system = "You are terse.", user = "Name three colours.";
let model = "";

async function reference() {
  const c = await openaiChat({ messages: [{ role: "system", content: system }, { role: "user", content: user }], temperature: 0, max_tokens: MAX });
  return c.choices[0].message.content;
}

const cases = {
  async probe() {
    const r = await fetch(base + "/");
    assert(r.ok && (await r.text()) === "Ollama is running", "GET / is not Ollama's banner");
    const head = await fetch(base + "/", { method: "HEAD" });
    assert(head.ok, `HEAD /: ${head.status}`);
    const v = await client.version();
    assert(typeof v.version === "string" && /^\d+\.\d+\.\d+$/.test(v.version), `version: ${show(v)}`);
    const list = await client.list();
    assert(list.models.length === 1 && list.models[0].name.endsWith(":latest") && list.models[0].size > 0, `list: ${show(list)}`);
    model = list.models[0].name;
    const info = await client.show({ model });
    assert(info.capabilities.includes("completion") && info.capabilities.includes("tools") && info.capabilities.includes("thinking"),
      `capabilities: ${show(info.capabilities)}`);
    const ctx = info.model_info["gemma4.context_length"];
    assert(Number.isInteger(ctx) && ctx > 0, `model_info: ${show(info.model_info)}`);
    const ps = await client.ps();
    assert(ps.models.length === 1 && ps.models[0].context_length === ctx, `ps: ${show(ps)}`);
  },

  async chat() {
    const want = await reference();
    const messages = [{ role: "system", content: system }, { role: "user", content: user }];
    const r = await client.chat({ model: model || "tiny", messages, options: { temperature: 0, num_predict: MAX } });
    assert(r.done && ["stop", "length"].includes(r.done_reason), `done: ${show(r)}`);
    assert(r.message.role === "assistant" && r.message.content === want, `chat ${show(r.message.content)} != ${show(want)}`);
    assert(r.eval_count >= 1 && r.eval_count <= MAX && r.prompt_eval_count > 0 && r.total_duration > 0, `counts: ${show(r)}`);
    let text = "", parts = 0, last = null;
    for await (const part of await client.chat({ model: model || "tiny", messages, stream: true, options: { temperature: 0, num_predict: MAX } })) {
      text += part.message.content;
      parts++;
      last = part;
    }
    assert(parts >= 3 && last.done && last.done_reason === r.done_reason && last.eval_count === r.eval_count, `stream end: ${show(last)}`);
    assert(text === want, `streamed ${show(text)} != ${show(want)}`);
  },

  async generate() {
    const want = await reference();
    const r = await client.generate({ model: model || "tiny", system, prompt: user, stream: false, options: { temperature: 0, num_predict: MAX } });
    assert(r.done && r.response === want, `generate ${show(r.response)} != ${show(want)}`);
    let text = "";
    for await (const part of await client.generate({ model: model || "tiny", system, prompt: user, stream: true, options: { temperature: 0, num_predict: MAX } }))
      text += part.response;
    assert(text === want, `streamed ${show(text)} != ${show(want)}`);
    const load = await client.generate({ model: model || "tiny", prompt: "" , stream: false });
    assert(load.done && load.done_reason === "load", `load: ${show(load)}`);
  },

  async tools() {
    const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
    const messages = [{ role: "user", content: "What is the weather in Paris?" }];
    const first = await client.chat({ model: model || "tiny", messages, tools, options: { temperature: 0, num_predict: MAX } });
    let calls = first.message.tool_calls || [];
    for (const c of calls) assert(c.function.name === "get_weather" && typeof c.function.arguments === "object", `call: ${show(c)}`);
    if (!calls.length) calls = [{ function: { name: "get_weather", arguments: { city: "Paris" } } }];
    messages.push({ role: "assistant", content: first.message.content || "", tool_calls: calls });
    messages.push({ role: "tool", tool_name: "get_weather", content: '{"temperature_c": 21}' });
    const second = await client.chat({ model: model || "tiny", messages, tools, options: { temperature: 0, num_predict: MAX } });
    assert(second.done && second.prompt_eval_count > first.prompt_eval_count, `second turn: ${show(second)}`);
    let text = "";
    for await (const part of await client.chat({ model: model || "tiny", messages, tools, stream: true, options: { temperature: 0, num_predict: MAX } }))
      text += part.message.content;
    assert(text === second.message.content, `streamed ${show(text)} != ${show(second.message.content)}`);
  },

  async seeds() {
    const ask = (options) => client.generate({ model: model || "tiny", prompt: "Sample", raw: true, stream: false, options: { num_predict: 16, temperature: 1, ...options } });
    const [a, b] = [await ask({ seed: 42 }), await ask({ seed: 42 })];
    assert(a.response === b.response, `seeded answers differ: ${show(a.response)} vs ${show(b.response)}`);
    const [c, d] = [await ask({}), await ask({})];
    assert(c.response !== d.response, `two unseeded answers are equal: ${show(c.response)}`);
  },

  async options() {
    // Every option the issue names, think and keep_alive: accepted, and a seeded sampled chat
    // replays; num_ctx beyond the slots' context is a 400; keep_alive 0 with no messages unloads.
    const info = await client.show({ model: model || "tiny" });
    const ctx = info.model_info["gemma4.context_length"];
    const options = { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0.05, seed: 1234, num_predict: MAX, num_ctx: 1024,
      stop: ["\n\n\n"], repeat_penalty: 1.1, num_thread: 2, num_gpu: 0 };
    const ask = () => client.chat({ model: model || "tiny", messages: [{ role: "user", content: user }], think: true, keep_alive: "10m", options });
    const [a, b] = [await ask(), await ask()];
    assert(a.done && a.message.content === b.message.content && (a.message.thinking || "") === (b.message.thinking || ""),
      `seeded chats differ: ${show(a.message)} vs ${show(b.message)}`);
    const high = await client.chat({ model: model || "tiny", messages: [{ role: "user", content: user }], think: "high", options: { num_predict: 2 } });
    assert(high.done && high.eval_count >= 1, `think high: ${show(high)}`);
    try {
      await client.chat({ model: model || "tiny", messages: [{ role: "user", content: user }], options: { num_ctx: ctx * 2 } });
      throw new Error("num_ctx beyond the context was accepted");
    } catch (e) {
      assert(e.name === "ResponseError" && e.status_code === 400 && /num_ctx|context/.test(e.error), `num_ctx: ${e}`);
    }
    const unload = await client.generate({ model: model || "tiny", prompt: "", keep_alive: 0, stream: false });
    assert(unload.done && unload.done_reason === "unload", `unload: ${show(unload)}`);
  },

  async errors() {
    try {
      await client.chat({ model: model || "tiny", messages: [{ role: "user", content: "hi" }],
                          format: { type: "array", uniqueItems: true, minItems: 2 } });
      throw new Error("format with uniqueItems was accepted");
    } catch (e) {
      assert(e.name === "ResponseError" && e.status_code === 400 && /format/.test(e.error) && /uniqueItems/.test(e.error),
             `expected a 400 about format naming uniqueItems, got ${e}`);
    }
    try {
      await client.embed({ model: model || "tiny", input: "x" });
      throw new Error("embed was accepted");
    } catch (e) {
      assert(e.name === "ResponseError" && e.status_code === 400 && /embedding/.test(e.error), `embed: ${e}`);
    }
  },
};

process.exit((await runCases(cases)) ? 1 : 0);
