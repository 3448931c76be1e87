// anthropic.mjs -- the official Anthropic library (npm `@anthropic-ai/sdk`) against plume
// serve: a message and its stream (the library's MessageStream over message_start ...
// message_stop), with the greedy text of the OpenAI chat endpoint; count_tokens against the
// usage; a tool_use / tool_result round trip; a prefilled assistant turn; errors.
//
// usage: node tests/clients/anthropic.mjs http://127.0.0.1:PORT [CASE...]
import Anthropic from "@anthropic-ai/sdk";
import { base, apiKey, deadline, assert, show, runCases, openaiChat } from "./lib.mjs";

deadline(240);
const client = new Anthropic({ baseURL: base, apiKey: apiKey || "none", maxRetries: 0, timeout: 120000 });
const MAX = 12;
const system = "You are terse.", user = "Name three colours.";

async function reference(extra = {}, messages = [{ role: "user", content: user }]) {
  const c = await openaiChat({ messages: [{ role: "system", content: system }, ...messages], temperature: 0, max_tokens: MAX, ...extra });
  return c.choices[0].message.content;
}

const text = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

const cases = {
  async plain() {
    const want = await reference();
    const m = await client.messages.create({ model: "tiny", max_tokens: MAX, system, messages: [{ role: "user", content: user }], temperature: 0 });
    assert(m.type === "message" && m.role === "assistant" && ["end_turn", "max_tokens"].includes(m.stop_reason), `message: ${show(m)}`);
    assert(text(m) === want, `text ${show(text(m))} != ${show(want)}`);
    assert(m.usage.output_tokens >= 1 && m.usage.output_tokens <= MAX && m.usage.input_tokens + m.usage.cache_read_input_tokens > 0, `usage: ${show(m.usage)}`);
    const count = await client.messages.countTokens({ model: "tiny", system, messages: [{ role: "user", content: user }] });
    assert(count.input_tokens === m.usage.input_tokens + m.usage.cache_read_input_tokens, `count_tokens ${show(count)} vs usage ${show(m.usage)}`);
  },

  async stream() {
    const want = await reference();
    const types = [];
    let streamed = "";
    const s = await client.messages.create({ model: "tiny", max_tokens: MAX, system, messages: [{ role: "user", content: user }], temperature: 0, stream: true });
    for await (const ev of s) {
      types.push(ev.type);
      if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") streamed += ev.delta.text;
    }
    assert(types[0] === "message_start" && types[types.length - 1] === "message_stop" && types.includes("message_delta"), `events: ${show(types)}`);
    assert(streamed === want, `streamed ${show(streamed)} != ${show(want)}`);
    const runner = client.messages.stream({ model: "tiny", max_tokens: MAX, system, messages: [{ role: "user", content: user }], temperature: 0 });
    let pieces = 0;
    runner.on("text", () => pieces++);
    const final = await runner.finalMessage();
    assert(text(final) === want && pieces >= 2 && final.usage.output_tokens >= 1, `MessageStream ${show(final)} != ${show(want)}`);
  },

  async tools() {
    const tools = [{ name: "get_weather", description: "Weather of a city",
      input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
    const messages = [{ role: "user", content: "What is the weather in Paris?" }];
    const first = await client.messages.create({ model: "tiny", max_tokens: MAX, messages, tools, temperature: 0 });
    let uses = first.content.filter((b) => b.type === "tool_use");
    for (const u of uses) assert(u.name === "get_weather" && typeof u.input === "object" && u.id, `tool_use: ${show(u)}`);
    if (uses.length) assert(first.stop_reason === "tool_use", `stop_reason: ${first.stop_reason}`);
    else uses = [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }];
    const next = [...messages, { role: "assistant", content: [...first.content.filter((b) => b.type === "text" && b.text), ...uses] },
      { role: "user", content: uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: '{"temperature_c": 21}' })) }];
    const second = await client.messages.create({ model: "tiny", max_tokens: MAX, messages: next, tools, temperature: 0 });
    const final = await client.messages.stream({ model: "tiny", max_tokens: MAX, messages: next, tools, temperature: 0 }).finalMessage();
    assert(text(final) === text(second), `streamed ${show(text(final))} != ${show(text(second))}`);
    const total = (m) => m.usage.input_tokens + m.usage.cache_read_input_tokens;
    assert(total(second) > total(first), `the tool turn: ${show(second.usage)} vs ${show(first.usage)}`);
  },

  async prefill() {
    // A last assistant message is continued: the same text as the chat endpoint's
    // continue_final_message.
    const turns = [{ role: "user", content: user }, { role: "assistant", content: "Red," }];
    const want = await reference({ continue_final_message: true, add_generation_prompt: false }, turns);
    const m = await client.messages.create({ model: "tiny", max_tokens: MAX, system, messages: turns, temperature: 0 });
    assert(text(m) === want, `prefill ${show(text(m))} != ${show(want)}`);
  },

  async sampling() {
    // Two sampled messages (temperature 1, top_k, top_p) differ (each request draws its own
    // seed); a stop sequence taken from the greedy answer ends it there, named in the reply.
    const ask = () => client.messages.create({ model: "tiny", max_tokens: 16, messages: [{ role: "user", content: "Sample" }],
      temperature: 1, top_k: 50, top_p: 0.95 });
    const [a, b] = [await ask(), await ask()];
    assert(text(a) !== text(b), `two sampled messages are equal: ${show(text(a))}`);
    const want = await reference();
    const cut = [...want].slice(2, 4).join("");
    assert(cut.length > 0, `the greedy answer is too short to cut: ${show(want)}`);
    const m = await client.messages.create({ model: "tiny", max_tokens: MAX, system, messages: [{ role: "user", content: user }],
      temperature: 0, stop_sequences: ["zq-never-zq", cut] });
    assert(m.stop_reason === "stop_sequence" && m.stop_sequence === cut && text(m) === want.slice(0, want.indexOf(cut)),
      `stop at ${show(cut)}: ${show(m)} (greedy ${show(want)})`);
  },

  async thinking() {
    // Thinking on (a budget below max_tokens, as Anthropic checks) and a past turn's thinking
    // block (its signature ignored) sent back: accepted; the template drops an earlier turn's
    // thought (the count equals the one without it) and keeps the thought of the turn being
    // continued (a longer count). A budget of max_tokens is refused.
    const m = await client.messages.create({ model: "tiny", max_tokens: 1100, thinking: { type: "enabled", budget_tokens: 1024 },
      messages: [{ role: "user", content: user }], temperature: 1, stop_sequences: ["\n\n\n"] });
    assert(m.type === "message" && m.content.every((b) => ["thinking", "text"].includes(b.type)), `message: ${show(m)}`);
    const thought = { type: "thinking", thinking: "Colours are wavelengths.", signature: "sig" }, red = { type: "text", text: "Red." };
    const count = async (turns) => (await client.messages.countTokens({ model: "tiny",
      thinking: { type: "enabled", budget_tokens: 1024 }, messages: [{ role: "user", content: user }, ...turns] })).input_tokens;
    const more = { role: "user", content: "More." };
    const [past, pastPlain] = [await count([{ role: "assistant", content: [thought, red] }, more]),
      await count([{ role: "assistant", content: [red] }, more])];
    assert(past === pastPlain, `an earlier turn's thought counted: ${past} vs ${pastPlain}`);
    const [last, lastPlain] = [await count([{ role: "assistant", content: [thought, red] }]), await count([{ role: "assistant", content: [red] }])];
    assert(last > lastPlain, `the continued turn's thought not counted: ${last} vs ${lastPlain}`);
    try {
      await client.messages.create({ model: "tiny", max_tokens: 1024, thinking: { type: "enabled", budget_tokens: 1024 },
        messages: [{ role: "user", content: user }] });
      throw new Error("a budget of max_tokens was accepted");
    } catch (e) {
      assert(e instanceof Anthropic.BadRequestError && /budget_tokens/.test(e.message), `expected BadRequestError, got ${e}`);
    }
  },

  async errors() {
    try {
      await client.messages.create({ model: "tiny", max_tokens: 5, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "aGk=" } }] }] });
      throw new Error("an image was accepted");
    } catch (e) {
      assert(e instanceof Anthropic.BadRequestError && e.error?.error?.type === "invalid_request_error", `expected BadRequestError, got ${e}`);
    }
    if (apiKey) {
      const wrong = new Anthropic({ baseURL: base, apiKey: apiKey + "-wrong", maxRetries: 0 });
      try {
        await wrong.messages.create({ model: "tiny", max_tokens: 2, messages: [{ role: "user", content: "hi" }] });
        throw new Error("a wrong key was accepted");
      } catch (e) {
        assert(e instanceof Anthropic.AuthenticationError, `expected AuthenticationError, got ${e}`);
      }
    }
  },
};

process.exit((await runCases(cases)) ? 1 : 0);
