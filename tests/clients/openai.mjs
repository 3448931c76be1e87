// openai.mjs -- the official OpenAI library (npm `openai`) against plume serve: a plain chat
// completion, a streamed one equal to it, a tool-call round trip, /v1/completions (plain and
// streamed), models.list, the details real clients rely on (a drawn seed replayed, logit_bias,
// n choices, echo + logprobs, prompt_logprobs, a continued assistant message) and the error
// shapes the library maps to its exception classes.
//
// usage: node tests/clients/openai.mjs http://127.0.0.1:PORT [CASE...]
// The model is a tiny random one: its text is noise, so the checks are on shapes, equalities
// and counts, never on what the words say.
import OpenAI from "openai";
import { base, apiKey, deadline, assert, show, runCases, waitIdle, metrics, metricValue, authHeaders } from "./lib.mjs";

// Poll cond() every 50 ms for up to `seconds`; throw naming what was awaited.
async function waitFor(cond, seconds, what) {
  for (let t = Date.now(); Date.now() - t < seconds * 1000; await new Promise((r) => setTimeout(r, 50)))
    if (await cond()) return;
  throw new Error(`not within ${seconds} s: ${what}\n${await metrics()}`);
}

deadline(240);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: apiKey || "none", maxRetries: 0, timeout: 120000 });
let model = "";

const MAX = 12; // tokens per answer: enough to stream several chunks, fast under ASan

async function modelId() {
  if (!model) {
    const page = await client.models.list();
    model = page.data[0].id;
  }
  return model;
}

function checkChatCompletion(c) {
  assert(c.object === "chat.completion", `object: ${show(c)}`);
  assert(typeof c.id === "string" && c.id.length > 0, `id: ${show(c)}`);
  assert(Number.isInteger(c.created), `created: ${show(c)}`);
  assert(Array.isArray(c.choices) && c.choices.length === 1, `choices: ${show(c)}`);
  const ch = c.choices[0];
  assert(ch.index === 0 && ch.message.role === "assistant", `choice: ${show(ch)}`);
  assert(["stop", "length", "tool_calls"].includes(ch.finish_reason), `finish_reason: ${show(ch)}`);
  const u = c.usage;
  assert(u && u.prompt_tokens > 0 && u.completion_tokens > 0, `usage: ${show(u)}`);
  assert(u.total_tokens === u.prompt_tokens + u.completion_tokens, `total_tokens: ${show(u)}`);
}

const chatReq = {
  messages: [
    { role: "system", content: "You are terse." },
    { role: "user", content: "Name three colours." },
  ],
  temperature: 0, seed: 7, max_tokens: MAX,
};

let plain = null; // the non-streamed answer, compared with the streamed one

const cases = {
  async models() {
    const page = await client.models.list();
    assert(Array.isArray(page.data) && page.data.length >= 1, `data: ${show(page.data)}`);
    for (const m of page.data) assert(typeof m.id === "string" && m.id && m.object === "model", `model: ${show(m)}`);
    model = page.data[0].id;
    const one = await client.models.retrieve(model);
    assert(one.id === model && one.object === "model", `retrieve: ${show(one)}`);
  },

  async chat() {
    const c = await client.chat.completions.create({ model: await modelId(), ...chatReq });
    checkChatCompletion(c);
    assert(typeof c.choices[0].message.content === "string", `content: ${show(c)}`);
    assert(c.usage.completion_tokens <= MAX, `completion_tokens > max_tokens: ${show(c.usage)}`);
    if (c.choices[0].finish_reason === "length") assert(c.usage.completion_tokens === MAX, `length before max_tokens: ${show(c.usage)}`);
    // Greedy is deterministic: the same request again gives the same answer.
    const again = await client.chat.completions.create({ model: await modelId(), ...chatReq });
    assert(again.choices[0].message.content === c.choices[0].message.content, `greedy answers differ: ${show(c.choices[0])} vs ${show(again.choices[0])}`);
    plain = c;
  },

  async stream() {
    if (!plain) await cases.chat();
    const stream = await client.chat.completions.create({
      model: await modelId(), ...chatReq, stream: true, stream_options: { include_usage: true },
    });
    let text = "", chunks = 0, withText = 0, finish = null, usage = null, id = null;
    for await (const chunk of stream) {
      chunks++;
      assert(chunk.object === "chat.completion.chunk", `object: ${show(chunk)}`);
      id = id || chunk.id;
      assert(chunk.id === id, `chunk ids differ: ${id} vs ${chunk.id}`);
      if (chunk.usage) usage = chunk.usage;
      if (!chunk.choices.length) {
        assert(chunk.usage, `a chunk with no choice and no usage: ${show(chunk)}`);
        continue;
      }
      assert(!usage, `a choice after the usage chunk: ${show(chunk)}`);
      const ch = chunk.choices[0];
      if (ch.delta.content) { text += ch.delta.content; withText++; }
      if (ch.finish_reason) { assert(!finish, `two finish_reasons: ${show(chunk)}`); finish = ch.finish_reason; }
    }
    assert(withText >= 2, `expected several content chunks, got ${withText} of ${chunks}`);
    assert(finish === plain.choices[0].finish_reason, `finish_reason ${finish} vs ${plain.choices[0].finish_reason}`);
    assert(text === plain.choices[0].message.content, `streamed ${show(text)} != plain ${show(plain.choices[0].message.content)}`);
    assert(usage && usage.completion_tokens === plain.usage.completion_tokens && usage.prompt_tokens === plain.usage.prompt_tokens,
      `usage: ${show(usage)} vs ${show(plain.usage)}`);
  },

  async tools() {
    const tools = [{
      type: "function",
      function: {
        name: "get_weather",
        description: "Current weather of a city",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
      },
    }];
    const user = { role: "user", content: "What is the weather in Paris?" };
    const first = await client.chat.completions.create({
      model: await modelId(), messages: [user], tools, tool_choice: "auto", temperature: 0, max_tokens: MAX,
    });
    checkChatCompletion(first);
    const msg = first.choices[0].message;
    let calls = msg.tool_calls || [];
    if (calls.length) {
      // The model did call: the shapes the library expects, and the matching finish_reason.
      assert(first.choices[0].finish_reason === "tool_calls", `finish_reason: ${show(first.choices[0])}`);
      for (const c of calls) {
        assert(typeof c.id === "string" && c.id && c.type === "function", `tool call: ${show(c)}`);
        assert(c.function.name === "get_weather" && typeof c.function.arguments === "string", `tool call: ${show(c)}`);
      }
    } else {
      // A random model writes no call: its text must come back as text, never an error.
      assert(typeof msg.content === "string", `no tool call and no content: ${show(msg)}`);
      calls = [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }];
    }
    // The round trip: the assistant's calls and the tool's answers go back in.
    const messages = [
      user,
      { role: "assistant", content: null, tool_calls: calls },
      ...calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: '{"temperature_c": 21, "sky": "clear"}' })),
    ];
    const second = await client.chat.completions.create({ model: await modelId(), messages, tools, temperature: 0, max_tokens: MAX });
    checkChatCompletion(second);
    // The tool turn made the prompt longer than the question alone.
    assert(second.usage.prompt_tokens > first.usage.prompt_tokens, `prompt_tokens ${second.usage.prompt_tokens} <= ${first.usage.prompt_tokens}`);
    // The same round trip streamed, accumulated by the library's own helper (which checks
    // each chunk's shape, tool-call deltas included).
    const runner = client.chat.completions.stream({ model: await modelId(), messages, tools, temperature: 0, max_tokens: MAX });
    const final = await runner.finalChatCompletion();
    const fm = final.choices[0].message;
    assert(fm.role === "assistant", `streamed final: ${show(final)}`);
    const secondText = second.choices[0].message.content || "";
    assert((fm.content || "") === secondText, `streamed ${show(fm.content)} != plain ${show(secondText)}`);
    // tool_choice "none" with tools present is accepted too.
    const none = await client.chat.completions.create({ model: await modelId(), messages: [user], tools, tool_choice: "none", temperature: 0, max_tokens: 4 });
    checkChatCompletion(none);
    assert(!none.choices[0].message.tool_calls || !none.choices[0].message.tool_calls.length, `tool_choice none called a tool: ${show(none)}`);
  },

  async fields() {
    // Fields real clients send: max_completion_tokens, logprobs, stop, content parts, the
    // developer role, non-ASCII text.
    const m = await modelId();
    const c = await client.chat.completions.create({
      model: m, temperature: 0, max_completion_tokens: 5, logprobs: true, top_logprobs: 2,
      messages: [
        { role: "developer", content: "Answer in one word. Grüße, 日本, 👋." },
        { role: "user", content: [{ type: "text", text: "Hello" }, { type: "text", text: " there" }] },
      ],
    });
    checkChatCompletion(c);
    assert(c.usage.completion_tokens <= 5, `max_completion_tokens: ${show(c.usage)}`);
    const lp = c.choices[0].logprobs && c.choices[0].logprobs.content;
    assert(Array.isArray(lp) && lp.length === c.usage.completion_tokens, `logprobs: ${show(c.choices[0].logprobs)}`);
    for (const e of lp) {
      assert(typeof e.token === "string" && e.logprob <= 0 && Array.isArray(e.bytes), `logprob entry: ${show(e)}`);
      assert(e.top_logprobs.length === 2 && e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, `top_logprobs: ${show(e)}`);
      assert(e.logprob <= e.top_logprobs[0].logprob + 1e-6, `chosen above the best: ${show(e)}`);
    }
    // A stop string taken from a greedy answer ends the same answer before it, never in it.
    const long = await client.chat.completions.create({ model: m, ...chatReq, max_tokens: 24 });
    const text = long.choices[0].message.content;
    const cut = text.slice(Math.floor(text.length / 2)).trim().slice(0, 3);
    assert(cut.length === 3, `no stop string to take from ${show(text)}`);
    {
      const s = await client.chat.completions.create({ model: m, ...chatReq, max_tokens: 24, stop: [cut] });
      const got = s.choices[0].message.content;
      assert(!got.includes(cut) && text.startsWith(got) && s.choices[0].finish_reason === "stop",
        `stop ${show(cut)}: ${show(got)} of ${show(text)} (${s.choices[0].finish_reason})`);
    }
  },

  async abort() {
    // A streamed request aborted by the client frees its slot at once.
    const m = await modelId();
    const ac = new AbortController();
    const stream = await client.chat.completions.create(
      { model: m, messages: [{ role: "user", content: "Go on forever." }], stream: true }, // until the context is full
      { signal: ac.signal });
    // The library ends the iteration quietly when its signal aborts the request.
    let n = 0, finish = null;
    for await (const chunk of stream) {
      if (!chunk.choices.length) continue;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      if (chunk.choices[0].delta.content && ++n === 3) ac.abort();
    }
    assert(n >= 3 && !finish, `the stream was not cut: ${n} content chunks, finish_reason ${finish}`);
    // Within 2 s: the rest of the answer (thousands of tokens) would take longer.
    await waitIdle(2);
  },

  async abort_queued() {
    // Every slot busy with a long answer, one more request waits in the queue; its client
    // gives up: the queue must not keep it (it would hold a place of the bounded queue).
    const m = await modelId();
    const slots = metricValue(await metrics(), /^plume_slots_total$/);
    assert(slots >= 1 && slots <= 16, `plume_slots_total ${slots}`);
    const acs = [], runs = [];
    const start = async (ac, content) => {
      const s = await client.chat.completions.create({ model: m, messages: [{ role: "user", content }], stream: true }, { signal: ac.signal });
      for await (const _ of s) { /* read until aborted */ }
    };
    try {
      for (let i = 0; i < slots; i++) {
        acs.push(new AbortController());
        runs.push(start(acs[i], `long answer ${i}`).catch(() => {}));
      }
      await waitFor(async () => metricValue(await metrics(), /^plume_slots_busy$/) === slots, 10, "all slots busy");
      const waiting = new AbortController();
      const queued = start(waiting, "queued").catch(() => {});
      await waitFor(async () => metricValue(await metrics(), /^plume_queue_length$/) === 1, 10, "one request queued");
      waiting.abort();
      await queued;
      await waitFor(async () => metricValue(await metrics(), /^plume_queue_length$/) === 0, 2, "the abandoned request leaves the queue");
      assert(metricValue(await metrics(), /^plume_slots_busy$/) === slots, "the long answers ended before the check");
    } finally {
      for (const ac of acs) ac.abort();
      await Promise.all(runs);
    }
    await waitIdle(3);
  },

  async completions() {
    const req = { model: await modelId(), prompt: "Once upon a time", temperature: 0, seed: 3, max_tokens: MAX };
    const c = await client.completions.create(req);
    assert(c.object === "text_completion", `object: ${show(c)}`);
    assert(c.choices.length === 1 && typeof c.choices[0].text === "string", `choices: ${show(c)}`);
    assert(["stop", "length"].includes(c.choices[0].finish_reason), `finish_reason: ${show(c)}`);
    assert(c.usage && c.usage.prompt_tokens > 0 && c.usage.completion_tokens > 0, `usage: ${show(c.usage)}`);
    const s = await client.completions.create({ ...req, stream: true });
    let text = "", n = 0;
    for await (const chunk of s) {
      assert(chunk.object === "text_completion", `chunk: ${show(chunk)}`);
      if (chunk.choices.length) { text += chunk.choices[0].text; n++; }
    }
    assert(n >= 2, `expected several chunks, got ${n}`);
    assert(text === c.choices[0].text, `streamed ${show(text)} != plain ${show(c.choices[0].text)}`);
  },

  async details() {
    // The chat/completions details through the library: a drawn seed said in the
    // reply and the X-Plume-Seed header replays it, two unseeded answers differ; logit_bias;
    // n choices (whole and streamed); echo + logprobs scoring a prompt; prompt_logprobs; a
    // continued assistant message.
    const m = await modelId();
    const tok = async (text) => {
      const r = await fetch(base + "/tokenize", { method: "POST", headers: { "Content-Type": "application/json", ...authHeaders() },
        body: JSON.stringify({ content: text }) });
      const j = await r.json();
      assert(r.ok && j.tokens.length === 1, `tokenize ${show(text)}: ${show(j)}`);
      return j.tokens[0];
    };
    const sampled = { model: m, messages: [{ role: "user", content: "Sample" }], temperature: 1, max_tokens: 16 };
    const { data: a, response } = await client.chat.completions.create(sampled).withResponse();
    const b = await client.chat.completions.create(sampled);
    assert(Number.isInteger(a.seed) && String(a.seed) === response.headers.get("x-plume-seed"), `seed ${a.seed} vs header ${response.headers.get("x-plume-seed")}`);
    assert(a.choices[0].message.content !== b.choices[0].message.content && a.seed !== b.seed, `two unseeded answers: ${show(a.choices[0].message)}`);
    const again = await client.chat.completions.create({ ...sampled, seed: a.seed });
    assert(again.choices[0].message.content === a.choices[0].message.content, `the seed ${a.seed} does not replay`);

    const x = await tok("x");
    const biased = await client.completions.create({ model: m, prompt: "abc", max_tokens: 4, temperature: 0, logit_bias: { [x]: 100 } });
    assert(biased.choices[0].text === "xxxx", `logit_bias +100 on 'x': ${show(biased.choices[0].text)}`);

    const three = await client.chat.completions.create({ ...sampled, n: 3, seed: 5 });
    assert(three.choices.length === 3 && three.choices.every((c, i) => c.index === i && c.message.content), `n = 3: ${show(three.choices)}`);
    const one = await client.chat.completions.create({ ...sampled, seed: 5 });
    assert(three.choices[0].message.content === one.choices[0].message.content, `choice 0 is not n = 1's answer with the seed`);
    const texts = ["", ""], ends = [null, null];
    for await (const chunk of await client.chat.completions.create({ ...sampled, n: 2, seed: 5, stream: true }))
      for (const c of chunk.choices) {
        texts[c.index] += c.delta.content || "";
        if (c.finish_reason) ends[c.index] = c.finish_reason;
      }
    assert(texts[0] === one.choices[0].message.content && texts[1] === three.choices[1].message.content && ends.every((e) => e),
      `streamed n = 2: ${show(texts)} ${show(ends)}`);

    const ids = [await tok("a"), await tok("b"), await tok("c")];
    const echo = await client.completions.create({ model: m, prompt: ids, echo: true, logprobs: 1, max_tokens: 0, temperature: 0 });
    const lp = echo.choices[0].logprobs;
    assert(echo.choices[0].text === "abc" && lp.tokens.length === 3 && lp.token_logprobs.every((v) => typeof v === "number" && v <= 0),
      `echo: ${show(echo.choices[0])}`);

    const pl = await client.chat.completions.create({ model: m, messages: [{ role: "user", content: "hi" }], max_tokens: 1, prompt_logprobs: 1 });
    assert(pl.prompt_logprobs.length === pl.usage.prompt_tokens && pl.prompt_logprobs[0] === null, `prompt_logprobs: ${show(pl.prompt_logprobs)}`);

    const cont = await client.chat.completions.create({ model: m, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "Hel" }],
      continue_final_message: true, add_generation_prompt: false, max_tokens: 4, temperature: 0, ignore_eos: true });
    const raw = await client.completions.create({ model: m, prompt: "<|turn>user\nhi<turn|>\n<|turn>model\nHel", max_tokens: 4, temperature: 0, ignore_eos: true });
    assert(cont.choices[0].message.content === raw.choices[0].text, `continued ${show(cont.choices[0].message.content)} != ${show(raw.choices[0].text)}`);
  },

  async errors() {
    // A missing field: 400, mapped by the library to BadRequestError with the server's message.
    try {
      await client.chat.completions.create({ model: await modelId(), max_tokens: 2 });
      throw new Error("a request without messages was accepted");
    } catch (e) {
      assert(e instanceof OpenAI.BadRequestError, `expected BadRequestError, got ${e}`);
      assert(e.status === 400 && e.error && typeof e.error.message === "string" && e.error.message, `error body: ${show(e.error)}`);
    }
    try {
      await client.chat.completions.create({ model: await modelId(), messages: [{ role: "user", content: "hi" }], temperature: "hot" });
      throw new Error("temperature 'hot' was accepted");
    } catch (e) {
      assert(e instanceof OpenAI.BadRequestError, `expected BadRequestError, got ${e}`);
    }
    // With --api-key set, a wrong key is 401 (AuthenticationError).
    if (apiKey) {
      const wrong = new OpenAI({ baseURL: base + "/v1", apiKey: apiKey + "-wrong", maxRetries: 0 });
      try {
        await wrong.models.list();
        throw new Error("a wrong API key was accepted");
      } catch (e) {
        assert(e instanceof OpenAI.AuthenticationError, `expected AuthenticationError, got ${e}`);
      }
    }
  },
};

process.exit((await runCases(cases)) ? 1 : 0);
