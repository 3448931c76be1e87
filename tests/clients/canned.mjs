// canned.mjs -- the official libraries (npm `openai` with its Responses API, `@anthropic-ai/sdk`,
// `ollama`) read the bytes plume's dialect writers wrote for an answer of thought, text and a
// tool call (get_weather {"city": "Paris"}), whole and streamed. tests/test_serve_dialects.c
// writes the bytes into $PLUME_CANNED/NAME-whole and NAME-stream; each library gets them
// through its own fetch hook (no server), parses or accumulates them as it does a server's,
// and the call must come out whole.
//
// usage: PLUME_CANNED=DIR node tests/clients/canned.mjs http://127.0.0.1:1 [CASE...]
import { readFileSync } from "node:fs";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";
import { deadline, assert, show, runCases } from "./lib.mjs";

deadline(100);
const dir = process.env.PLUME_CANNED;
if (!dir) {
  console.error("PLUME_CANNED (the directory of the canned replies) is not set");
  process.exit(2);
}

// A fetch that answers every request with the file's bytes: JSON for a whole reply, the
// dialect's stream type for a stream.
function canned(name, type) {
  return async () => new Response(readFileSync(`${dir}/${name}`), { status: 200, headers: { "content-type": type } });
}
const sse = "text/event-stream", json = "application/json", ndjson = "application/x-ndjson";
const city = (args) => (typeof args === "string" ? JSON.parse(args) : args).city;

const cases = {
  async openai() {
    const make = (name, type) => new OpenAI({ baseURL: "http://127.0.0.1:1/v1", apiKey: "x", maxRetries: 0, fetch: canned(name, type) });
    const req = { model: "m", messages: [{ role: "user", content: "q" }] };
    const c = await make("openai-whole", json).chat.completions.create(req);
    const m = c.choices[0].message, call = m.tool_calls?.[0];
    assert(call?.type === "function" && call.function.name === "get_weather" && city(call.function.arguments) === "Paris" &&
      call.id && m.content === "Sunny now." && c.choices[0].finish_reason === "tool_calls", `whole: ${show(c)}`);
    const runner = make("openai-stream", sse).chat.completions.stream({ ...req, stream: true });
    const final = await runner.finalChatCompletion();
    const fm = final.choices[0].message, fc = fm.tool_calls?.[0];
    assert(fc?.function.name === "get_weather" && city(fc.function.arguments) === "Paris" && fc.id &&
      fm.content === "Sunny now." && final.choices[0].finish_reason === "tool_calls", `streamed: ${show(final)}`);
  },

  async responses() {
    const make = (name, type) => new OpenAI({ baseURL: "http://127.0.0.1:1/v1", apiKey: "x", maxRetries: 0, fetch: canned(name, type) });
    const check = (r, how) => {
      const call = r.output.find((o) => o.type === "function_call");
      assert(call?.name === "get_weather" && city(call.arguments) === "Paris" && call.call_id && r.output_text === "Sunny now." &&
        r.output.some((o) => o.type === "reasoning"), `${how}: ${show(r)}`);
    };
    check(await make("responses-whole", json).responses.create({ model: "m", input: "q" }), "whole");
    const stream = make("responses-stream", sse).responses.stream({ model: "m", input: "q" });
    let args = "";
    stream.on("response.function_call_arguments.done", (e) => { args = e.arguments; });
    check(await stream.finalResponse(), "streamed");
    assert(city(args) === "Paris", `function_call_arguments.done: ${show(args)}`);
  },

  async anthropic() {
    const make = (name, type) => new Anthropic({ baseURL: "http://127.0.0.1:1", apiKey: "x", maxRetries: 0, fetch: canned(name, type) });
    const req = { model: "m", max_tokens: 9, messages: [{ role: "user", content: "q" }] };
    const check = (m, how) => {
      const use = m.content.find((b) => b.type === "tool_use"), thought = m.content.find((b) => b.type === "thinking");
      const text = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
      assert(use?.name === "get_weather" && use.input?.city === "Paris" && use.id && thought?.thinking === "hmm" && text === "Sunny now." &&
        m.stop_reason === "tool_use", `${how}: ${show(m)}`);
    };
    check(await make("anthropic-whole", json).messages.create(req), "whole");
    check(await make("anthropic-stream", sse).messages.stream(req).finalMessage(), "streamed");
  },

  async ollama() {
    const make = (name, type) => new Ollama({ host: "http://127.0.0.1:1", fetch: canned(name, type) });
    const req = { model: "m", messages: [{ role: "user", content: "q" }] };
    const whole = await make("ollama-whole", json).chat({ ...req, stream: false });
    const call = whole.message.tool_calls?.[0];
    assert(call?.function.name === "get_weather" && call.function.arguments.city === "Paris" && whole.message.content === "Sunny now." &&
      whole.message.thinking === "hmm" && whole.done, `whole: ${show(whole)}`);
    let content = "", thinking = "", calls = [], last = null;
    for await (const part of await make("ollama-stream", ndjson).chat({ ...req, stream: true })) {
      content += part.message.content;
      thinking += part.message.thinking || "";
      calls.push(...(part.message.tool_calls || []));
      last = part;
    }
    assert(calls.length === 1 && calls[0].function.arguments.city === "Paris" && content === "Sunny now." && thinking === "hmm" &&
      last.done && last.done_reason === "stop", `streamed: ${show({ content, thinking, calls, last })}`);
  },
};

process.exit((await runCases(cases)) ? 1 : 0);
