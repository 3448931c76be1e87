// structured.mjs -- structured outputs through the real clients (docs/STRUCTURED.md): the
// official OpenAI library's response_format (json_schema, json_object), tool_choice required
// and named, the Responses API's text.format, the Ollama library's format and the Anthropic
// library's tool_choice. The model is a tiny random one with the real vocabulary: its logits
// know nothing of JSON, so the constraint alone must make every answer valid. Every answer is
// checked by ajv (draft 2020-12, ajv-formats' full formats), an independent validator.
//
// usage: node tests/clients/structured.mjs http://127.0.0.1:PORT [CASE...]
import { readFileSync, readdirSync } from "node:fs";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { base, apiKey, deadline, assert, show, runCases } from "./lib.mjs";

deadline(395);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: apiKey || "none", maxRetries: 0, timeout: 380000 });
const MAX = 400;  // tokens an answer may take
const MAX_SCHEMA = 2000; // ... to a test schema: they bound strings and recursion, but a random
                         // walk down tree.json's children has a long tail (1122 tokens seen)
const SEEDS = [100, 102]; // sampled answers per schema, by seed (a random walk down tree.json's
                          // children is long for some seeds: 1122 tokens with 101, on a loaded
                          // host minutes of a slot)

// ajv, one instance per schema ($id may repeat between schemas)
function validator(schema) {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
  addFormats(ajv, { mode: "full" });
  return ajv.compile(schema);
}

// The answer text must parse and validate; returns the value.
function checkValid(label, text, validate) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`${label}: not JSON (${e.message}): ${JSON.stringify(text)}`);
  }
  assert(validate(value), `${label}: invalid ${JSON.stringify(validate.errors)}\n  answer: ${text}`);
  return value;
}

// The bounded schemas of tests/data/schemas (open_* may run past any budget: not here).
function schemas() {
  const dir = new URL("../data/schemas/", import.meta.url);
  return readdirSync(dir)
    .filter((f) => f.endsWith(".json") && !f.startsWith("open_"))
    .sort()
    .map((f) => ({ name: f.replace(/\.json$/, ""), schema: JSON.parse(readFileSync(new URL(f, dir), "utf8")) }));
}

const ask = (content) => [{ role: "user", content }];

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city.",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", maxLength: 20 },
          unit: { enum: ["c", "f"] },
          days: { type: "integer", minimum: 1, maximum: 7 },
        },
        required: ["city", "unit"],
        additionalProperties: false,
      },
    },
  },
  { type: "function", function: { name: "ping", parameters: { type: "object", properties: {} } } },
];

// The OpenAI BadRequestError of a request, or a failure when it succeeds.
async function refused(make) {
  try {
    await make();
  } catch (e) {
    return e;
  }
  throw new Error("the request was accepted");
}

const cases = {
  // Every bounded schema, a sampled answer per seed, all in flight at once (continuous
  // batching with constraints); each answer ends ("stop") and ajv finds it valid.
  async schemas() {
    const jobs = [];
    for (const { name, schema } of schemas())
      for (const k of SEEDS)
        jobs.push(
          client.chat.completions
            .create({
              messages: ask(`Give a ${name} as JSON.`),
              response_format: { type: "json_schema", json_schema: { name, schema, strict: true } },
              temperature: 1, seed: k, max_tokens: MAX_SCHEMA,
            })
            .then((c) => ({ name, k, schema, c })),
        );
    const answers = await Promise.all(jobs);
    for (const { name, k, schema, c } of answers) {
      const ch = c.choices[0];
      assert(ch.finish_reason === "stop", `${name}#${k}: finish_reason ${ch.finish_reason}: ${show(ch)}`);
      checkValid(`${name}#${k}`, ch.message.content, validator(schema));
    }
    console.log(`  ${answers.length} answers to ${answers.length / SEEDS.length} schemas valid`);
  },

  // json_object: several sampled answers, each a JSON object; streamed too. A random model
  // closes a free string about once in 10^5 tokens, so a logit_bias favours the closing
  // tokens (", }, "}, ": and <turn|>): the answers end, and the constraint alone keeps them
  // valid whatever the bias.
  async json_object() {
    const any = validator({ type: "object" });
    const logit_bias = { 236775: 12, 236783: 12, 25938: 12, 1083: 12, 106: 12 };
    const runs = await Promise.all(
      [1, 2, 3, 4, 5, 6].map((seed) =>
        client.chat.completions.create({
          messages: ask("Answer in JSON."), response_format: { type: "json_object" },
          temperature: 1, seed, max_tokens: MAX, logit_bias,
        }),
      ),
    );
    for (const c of runs) {
      const ch = c.choices[0];
      assert(ch.finish_reason === "stop", `json_object: ${show(ch)}`);
      const v = checkValid("json_object", ch.message.content, any);
      assert(v && typeof v === "object" && !Array.isArray(v), `not an object: ${ch.message.content}`);
    }
    const stream = await client.chat.completions.create({
      messages: ask("Answer in JSON."), response_format: { type: "json_object" },
      temperature: 0, max_tokens: 24, stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content || "";
    assert(text.startsWith("{"), `streamed json_object: ${JSON.stringify(text)}`);
  },

  // n choices from one prefill: each has its own constraint, each answer valid.
  async choices() {
    const schema = schemas().find((s) => s.name === "enums").schema, v = validator(schema);
    const c = await client.chat.completions.create({
      messages: ask("Enums."), n: 3, temperature: 1, seed: 21, max_tokens: MAX_SCHEMA,
      response_format: { type: "json_schema", json_schema: { name: "e", schema } },
    });
    assert(c.choices.length === 3, `choices: ${show(c)}`);
    for (const ch of c.choices) {
      assert(ch.finish_reason === "stop", `choice ${ch.index}: ${show(ch)}`);
      checkValid(`choice ${ch.index}`, ch.message.content, v);
    }
  },

  // max_tokens before the value is complete: finish_reason "length", the text a prefix.
  async length() {
    const c = await client.chat.completions.create({
      messages: ask("A person."), max_tokens: 3, temperature: 0,
      response_format: { type: "json_schema", json_schema: { name: "p", schema: schemas().find((s) => s.name === "person").schema } },
    });
    assert(c.choices[0].finish_reason === "length", `finish_reason: ${show(c.choices[0])}`);
    assert(c.choices[0].message.content.startsWith("{"), `content: ${show(c.choices[0])}`);
  },

  // Greedy under a constraint: the same answer alone and among sampled requests (with
  // speculative decoding, the server's default for greedy requests).
  async greedy_load() {
    const schema = schemas().find((s) => s.name === "nested").schema;
    const req = {
      messages: ask("Nested JSON."), temperature: 0, max_tokens: MAX,
      response_format: { type: "json_schema", json_schema: { name: "n", schema } },
    };
    const alone = (await client.chat.completions.create(req)).choices[0].message.content;
    const noise = [1, 2, 3].map((seed) =>
      client.chat.completions.create({ messages: ask("Noise " + seed), temperature: 1, seed, max_tokens: 40 }));
    const loaded = await Promise.all([client.chat.completions.create(req), ...noise]);
    assert(loaded[0].choices[0].message.content === alone,
      `greedy differs under load:\n  ${alone}\n  ${loaded[0].choices[0].message.content}`);
    checkValid("greedy", alone, validator(schema));
  },

  // Thinking on: the thought stays free, the format starts after it. A logit_bias opens the
  // thought (<|channel>, id 100) and closes it soon (<channel|>, 101): a random model would
  // rarely do either.
  async thinking() {
    const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] };
    const c = await client.chat.completions.create({
      messages: ask("Think, then answer in JSON."), reasoning_effort: "high", temperature: 1, seed: 1,
      max_tokens: MAX, logit_bias: { 100: 30, 101: 12 },
      response_format: { type: "json_schema", json_schema: { name: "ok", schema } },
    });
    const ch = c.choices[0];
    assert(ch.finish_reason === "stop" && ch.message.reasoning_content?.length > 0, `thinking: ${show(ch)}`);
    checkValid("after the thought", ch.message.content, validator(schema));
  },

  // A keyword the engine cannot enforce is a 400 naming it, in every dialect.
  async refusals() {
    const bad = { type: "array", items: { type: "integer" }, uniqueItems: true, minItems: 2 };
    let e = await refused(() => client.chat.completions.create({
      messages: ask("x"), max_tokens: 4,
      response_format: { type: "json_schema", json_schema: { name: "u", schema: bad } },
    }));
    assert(e.status === 400 && /uniqueItems/.test(e.message), `chat: ${e.status} ${e.message}`);
    e = await refused(() => client.responses.create({
      input: "x", max_output_tokens: 4, text: { format: { type: "json_schema", name: "u", schema: bad } },
    }));
    assert(e.status === 400 && /uniqueItems/.test(e.message), `responses: ${e.status} ${e.message}`);
    const ollama = new Ollama({ host: base, headers: apiKey ? { Authorization: "Bearer " + apiKey } : {} });
    e = await refused(() => ollama.chat({ model: "plume", messages: ask("x"), format: bad, stream: false }));
    assert(e.status_code === 400 && /uniqueItems/.test(e.error || e.message), `ollama: ${e.status_code} ${e.message}`);
    e = await refused(() => client.chat.completions.create({
      messages: ask("x"), max_tokens: 4, tool_choice: "required",
    }));
    assert(e.status === 400 && /tool_choice/.test(e.message), `required without tools: ${e.status} ${e.message}`);
    e = await refused(() => client.chat.completions.create({
      messages: ask("x"), max_tokens: 4, tools, tool_choice: { type: "function", function: { name: "nope" } },
    }));
    assert(e.status === 400 && /nope/.test(e.message), `unknown function: ${e.status} ${e.message}`);
  },

  // tool_choice "required": one or more calls, each of a declared function with arguments
  // valid against its parameters; a named function: exactly that one.
  async tools_required() {
    const check = { get_weather: validator(tools[0].function.parameters), ping: validator(tools[1].function.parameters) };
    const runs = await Promise.all([1, 2, 3].map((seed) => client.chat.completions.create({
      messages: ask("Weather in Paris?"), tools, tool_choice: "required", temperature: 1, seed, max_tokens: MAX,
    })));
    for (const c of runs) {
      const ch = c.choices[0];
      assert(ch.finish_reason === "tool_calls" && ch.message.tool_calls?.length >= 1, `required: ${show(ch)}`);
      for (const call of ch.message.tool_calls) {
        assert(check[call.function.name], `unknown function: ${show(call)}`);
        checkValid(`required ${call.function.name}`, call.function.arguments, check[call.function.name]);
      }
    }
    const named = await client.chat.completions.create({
      messages: ask("Weather in Paris?"), tools, temperature: 1, seed: 9, max_tokens: MAX,
      tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    const ch = named.choices[0];
    assert(ch.finish_reason === "tool_calls" && ch.message.tool_calls?.length === 1 &&
      ch.message.tool_calls[0].function.name === "get_weather", `named: ${show(ch)}`);
    checkValid("named", ch.message.tool_calls[0].function.arguments, check.get_weather);
  },

  // The Responses API's text.format, the Ollama library's format (schema and "json"), and
  // llama-server's top-level json_schema on /v1/completions.
  async other_dialects() {
    const schema = schemas().find((s) => s.name === "person").schema, v = validator(schema);
    const r = await client.responses.create({
      input: "A person.", max_output_tokens: MAX, temperature: 1,
      text: { format: { type: "json_schema", name: "person", schema, strict: true } },
    });
    assert(r.status === "completed", `responses: ${show(r)}`);
    checkValid("responses", r.output_text, v);
    const ollama = new Ollama({ host: base, headers: apiKey ? { Authorization: "Bearer " + apiKey } : {} });
    const o = await ollama.chat({ model: "plume", messages: ask("A person."), format: schema, stream: false,
      options: { num_predict: MAX, seed: 3 } });
    assert(o.done_reason === "stop", `ollama: ${show(o)}`);
    checkValid("ollama schema", o.message.content, v);
    const top = await client.completions.create({ prompt: "A person: ", max_tokens: MAX_SCHEMA, seed: 2, json_schema: schema });
    assert(top.choices[0].finish_reason === "stop", `completions json_schema: ${show(top)}`);
    checkValid("completions json_schema", top.choices[0].text, v);
    const g = await ollama.generate({ model: "plume", prompt: "JSON please", format: "json", stream: false,
      options: { num_predict: 32, temperature: 0 } });
    assert(g.response.startsWith("{"), `ollama json: ${show(g)}`);
  },

  // The Anthropic library's tool_choice {type: "tool", name}: a tool_use block of it, its
  // input valid.
  async anthropic_tool() {
    const anthropic = new Anthropic({ baseURL: base, apiKey: apiKey || "none", maxRetries: 0 });
    const m = await anthropic.messages.create({
      model: "plume", max_tokens: MAX, messages: ask("Weather in Paris?"),
      tools: [{ name: "get_weather", input_schema: tools[0].function.parameters }],
      tool_choice: { type: "tool", name: "get_weather" },
    });
    const use = m.content.find((b) => b.type === "tool_use");
    assert(m.stop_reason === "tool_use" && use && use.name === "get_weather", `anthropic: ${show(m)}`);
    assert(validator(tools[0].function.parameters)(use.input), `anthropic input: ${show(use.input)}`);
  },
};

process.exit((await runCases(cases)) ? 1 : 0);
