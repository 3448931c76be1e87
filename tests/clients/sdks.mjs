// sdks.mjs -- the agent frameworks' model layers against `plume serve`: the Vercel AI SDK
// (`ai` with `@ai-sdk/openai-compatible` on /v1/chat/completions, `@ai-sdk/openai` on the
// Responses API, `ollama-ai-provider-v2` on /api/chat) and LangChain.js (`ChatOpenAI`,
// `ChatAnthropic`, `ChatOllama`), each as its docs set it up for a custom endpoint. Per
// provider: text, stream, a forced tool call with its result sent back (a round trip), an
// auto tool choice, structured output (the framework's own JSON-schema path, the answer
// checked by ajv), and a forced call cut short by the token limit, which must still come back
// as a call.
//
// usage: node tests/clients/sdks.mjs http://127.0.0.1:PORT [CASE...]
//   cases: PROVIDER_WHAT, PROVIDER one of ai_compat, ai_responses, ai_ollama, lc_openai,
//   lc_anthropic, lc_ollama; WHAT one of text, stream, tools, auto, structured, cut.
//
// The model is tiny and random: a forced call (and a structured answer) is what plume's
// constrained decoding makes it write; auto and free text are whatever it samples, kept short.
import { generateText, streamText, tool, jsonSchema, Output, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { createOpenAI } from "@ai-sdk/openai";
import { createOllama } from "ollama-ai-provider-v2";
import { ChatOpenAI } from "@langchain/openai";
import { ChatAnthropic } from "@langchain/anthropic";
import { ChatOllama } from "@langchain/ollama";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import Ajv from "ajv";
import { base, apiKey, deadline, assert, show, runCases } from "./lib.mjs";

deadline(360);
process.env.LANGSMITH_TRACING = "false"; /* LangChain's tracing (off unless set; said here) */
const key = apiKey || "plume";
const MAX = 12; // a free answer's length
const CALL = 64; // room for a whole forced call (or a structured answer)

// The tool and the structured answer's schema: enums and booleans, so that a random model's
// constrained answer is short and whole.
const weatherParams = {
  type: "object",
  properties: { city: { type: "string", enum: ["Paris", "Rome"] } },
  required: ["city"],
  additionalProperties: false,
};
const answerSchema = {
  type: "object",
  properties: { city: { type: "string", enum: ["Paris", "Rome"] }, sunny: { type: "boolean" } },
  required: ["city", "sunny"],
  additionalProperties: false,
};
const validAnswer = new Ajv().compile(answerSchema);
// LangChain's ChatAnthropic moves the keywords Anthropic's structured output lacks (enum, ...)
// into descriptions before sending: the schema plume gets has types only.
const plainSchema = {
  type: "object",
  properties: { city: { type: "string" }, sunny: { type: "boolean" } },
  required: ["city", "sunny"],
  additionalProperties: false,
};
const validPlain = new Ajv().compile(plainSchema);
const QUESTION = "What is the weather in Paris?";
const RESULT = '{"temperature_c": 21, "sky": "clear"}';

// ---- the Vercel AI SDK ----------------------------------------------------------------

const aiModels = {
  ai_compat: () =>
    createOpenAICompatible({ name: "plume", baseURL: `${base}/v1`, apiKey: key, supportsStructuredOutputs: true, includeUsage: true })("tiny"),
  ai_responses: () => createOpenAI({ baseURL: `${base}/v1`, apiKey: key }).responses("tiny"),
  ai_ollama: () => createOllama({ baseURL: `${base}/api`, headers: { Authorization: `Bearer ${key}` } })("tiny"),
};

// The request bodies a generateText/streamText result sent, per step (what the SDK sent).
const bodies = (r) => r.steps.map((s) => (typeof s.request?.body === "string" ? s.request.body : JSON.stringify(s.request?.body ?? "")));

function aiCases(name, model, forced) {
  const weather = (execute) =>
    tool({ description: "Current weather of a city", inputSchema: jsonSchema(weatherParams), ...(execute ? { execute } : {}) });
  return {
    async [`${name}_text`]() {
      const r = await generateText({ model: model(), prompt: "Say hi", maxOutputTokens: MAX, temperature: 0, maxRetries: 0 });
      assert(typeof r.text === "string" && r.text.length > 0 && r.finishReason === "length" && r.usage.outputTokens === MAX,
        `generateText: ${show({ text: r.text, finishReason: r.finishReason, usage: r.usage })}`);
    },
    async [`${name}_stream`]() {
      const whole = await generateText({ model: model(), prompt: "Say hi", maxOutputTokens: MAX, temperature: 0, maxRetries: 0 });
      const s = streamText({ model: model(), prompt: "Say hi", maxOutputTokens: MAX, temperature: 0, maxRetries: 0, onError: () => {} });
      let text = "";
      for await (const part of s.textStream) text += part;
      assert(text === whole.text && (await s.finishReason) === "length", `streamed ${show(text)} vs whole ${show(whole.text)}, ${await s.finishReason}`);
    },
    // A forced call, the tool run by the SDK, its result sent back in the next step. Ollama's
    // API has no tool_choice: there the call is the model's own if it makes one, else one
    // written into the history, and the result goes back the same way.
    async [`${name}_tools`]() {
      if (!forced) {
        const first = await generateText({ model: model(), prompt: QUESTION, maxOutputTokens: MAX, temperature: 0, maxRetries: 0, tools: { get_weather: weather() } });
        const call = first.toolCalls[0] || { toolCallId: "call_1", toolName: "get_weather", input: { city: "Paris" } };
        const messages = [
          { role: "user", content: QUESTION },
          { role: "assistant", content: [{ type: "tool-call", toolCallId: call.toolCallId, toolName: "get_weather", input: call.input }] },
          { role: "tool", content: [{ type: "tool-result", toolCallId: call.toolCallId, toolName: "get_weather", output: { type: "text", value: RESULT } }] },
        ];
        const next = await generateText({ model: model(), messages, maxOutputTokens: MAX, temperature: 0, maxRetries: 0, tools: { get_weather: weather() } });
        assert(next.usage.inputTokens > first.usage.inputTokens + 10, `the result did not reach the prompt: ${first.usage.inputTokens} then ${next.usage.inputTokens}`);
        return;
      }
      let ran = null;
      const r = await generateText({
        model: model(), prompt: QUESTION, maxOutputTokens: CALL, temperature: 0, maxRetries: 0,
        tools: { get_weather: weather(async (input) => ((ran = input), RESULT)) },
        toolChoice: { type: "tool", toolName: "get_weather" },
        prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: "auto", maxOutputTokens: MAX } : {}),
        stopWhen: stepCountIs(2),
      });
      const call = r.steps[0].toolCalls[0];
      assert(call?.toolName === "get_weather" && ["Paris", "Rome"].includes(call.input.city) && r.steps[0].finishReason === "tool-calls",
        `step 1: ${show(r.steps[0].content)} ${r.steps[0].finishReason}`);
      assert(ran && ran.city === call.input.city, `the tool did not run with the call's input: ${show(ran)}`);
      assert(r.steps.length === 2 && r.steps[1].usage.inputTokens > r.steps[0].usage.inputTokens + 10,
        `step 2 did not send the result back: ${show(r.steps.map((s) => s.usage))}`);
    },
    // Auto: the model may call or answer; either comes back whole, never an error.
    async [`${name}_auto`]() {
      const r = await generateText({
        model: model(), prompt: QUESTION, maxOutputTokens: MAX, temperature: 0, maxRetries: 0,
        tools: { get_weather: weather() }, toolChoice: "auto",
      });
      assert(r.toolCalls.every((c) => c.toolName === "get_weather") && (r.toolCalls.length > 0 || typeof r.text === "string"),
        `auto: ${show(r.content)}`);
      assert(r.toolCalls.length ? r.finishReason === "tool-calls" : r.finishReason === "length", `auto: ${r.finishReason}`);
    },
    async [`${name}_structured`]() {
      const r = await generateText({
        model: model(), prompt: "Weather in Paris as JSON", maxOutputTokens: CALL, temperature: 0, maxRetries: 0,
        output: Output.object({ schema: jsonSchema(answerSchema) }),
      });
      assert(validAnswer(r.output), `structured: ${show(r.output)} ${show(validAnswer.errors)}`);
    },
    // A forced call cut by the token limit is still a call (never text, never markup).
    async [`${name}_cut`]() {
      const r = await generateText({
        model: model(), prompt: QUESTION, maxOutputTokens: 2, temperature: 0, maxRetries: 0,
        tools: { get_weather: weather() }, toolChoice: { type: "tool", toolName: "get_weather" },
      });
      const parts = r.content.filter((p) => p.type === "tool-call" || p.type === "tool-error");
      assert(parts.length === 1 && parts[0].toolName === "get_weather" && !/<\|/.test(r.text), `cut: ${show(r.content)} ${r.finishReason}`);
      // ollama-ai-provider-v2 says tool-calls whenever a call came, whatever done_reason says
      assert(r.finishReason === (name === "ai_ollama" ? "tool-calls" : "length"), `cut: finishReason ${r.finishReason}`);
    },
  };
}

// ---- LangChain.js ---------------------------------------------------------------------

const lcModels = {
  lc_openai: (o = {}) => new ChatOpenAI({ model: "tiny", apiKey: key, configuration: { baseURL: `${base}/v1` }, temperature: 0, maxRetries: 0, ...o }),
  lc_anthropic: (o = {}) => new ChatAnthropic({ model: "tiny", apiKey: key, anthropicApiUrl: base, temperature: 0, maxRetries: 0, ...o }),
  lc_ollama: (o = {}) => new ChatOllama({ model: "tiny", baseUrl: base, headers: { Authorization: `Bearer ${key}` }, temperature: 0, maxRetries: 0, ...o }),
};
// Each class's name for the token limit.
const lcMax = { lc_openai: (n) => ({ maxTokens: n }), lc_anthropic: (n) => ({ maxTokens: n }), lc_ollama: (n) => ({ numPredict: n }) };
const lcForced = { lc_openai: true, lc_anthropic: true, lc_ollama: false };
const lcTool = { type: "function", function: { name: "get_weather", description: "Current weather of a city", parameters: weatherParams } };

function lcCases(name, make, forced) {
  const model = (n = MAX) => make(lcMax[name](n));
  return {
    async [`${name}_text`]() {
      const m = await model().invoke([new HumanMessage("Say hi")]);
      assert(typeof m.content === "string" && m.content.length > 0, `invoke: ${show(m)}`);
    },
    async [`${name}_stream`]() {
      const whole = await model().invoke([new HumanMessage("Say hi")]);
      let text = "";
      for await (const c of await model().stream([new HumanMessage("Say hi")])) text += typeof c.content === "string" ? c.content : "";
      assert(text === whole.content, `streamed ${show(text)} vs whole ${show(whole.content)}`);
    },
    // A forced call (Ollama's API has none: the model's own call, else one written into the
    // history), then the tool's result sent back.
    async [`${name}_tools`]() {
      const q = new HumanMessage(QUESTION);
      let ai = await model(CALL).bindTools([lcTool], forced ? { tool_choice: "get_weather" } : {}).invoke([q]);
      if (!forced && !ai.tool_calls?.length)
        ai = new AIMessage({ content: "", tool_calls: [{ id: "call_1", name: "get_weather", args: { city: "Paris" }, type: "tool_call" }] });
      const call = ai.tool_calls?.[0];
      assert(call?.name === "get_weather" && ["Paris", "Rome"].includes(call.args.city), `forced call: ${show(ai)}`);
      const next = await model().bindTools([lcTool]).invoke([q, ai, new ToolMessage({ content: RESULT, tool_call_id: call.id })]);
      const used = (m) => m.usage_metadata?.input_tokens ?? 0;
      assert(used(next) > used(ai) + 10 || (!forced && used(next) > 20), `the result did not reach the prompt: ${show(next.usage_metadata)}`);
    },
    async [`${name}_auto`]() {
      const ai = await model().bindTools([lcTool], { tool_choice: "auto" }).invoke([new HumanMessage(QUESTION)]);
      assert((ai.tool_calls || []).every((c) => c.name === "get_weather") && !(ai.invalid_tool_calls || []).length, `auto: ${show(ai)}`);
    },
    async [`${name}_structured`]() {
      const [schema, valid] = name === "lc_anthropic" ? [plainSchema, validPlain] : [answerSchema, validAnswer];
      const out = await model(CALL).withStructuredOutput(schema, { method: "jsonSchema", name: "answer" }).invoke("Weather in Paris as JSON");
      assert(valid(out), `structured: ${show(out)} ${show(valid.errors)}`);
    },
    async [`${name}_cut`]() {
      const ai = await model(2).bindTools([lcTool], { tool_choice: "get_weather" }).invoke([new HumanMessage(QUESTION)]);
      const calls = [...(ai.tool_calls || []), ...(ai.invalid_tool_calls || [])];
      const text = typeof ai.content === "string" ? ai.content : JSON.stringify(ai.content);
      assert(calls.length === 1 && calls[0].name === "get_weather" && !/<\|/.test(text), `cut: ${show(ai)}`);
    },
  };
}

const cases = {};
// ollama-ai-provider-v2 sends maxOutputTokens, temperature, topP and the tool choice as
// top-level `max_output_tokens`, `temperature`, `top_p`, `tool_choice` (no Ollama fields:
// Ollama drops them); plume honours them (docs/SERVER.md), so its calls can be forced too.
for (const [name, model] of Object.entries(aiModels)) Object.assign(cases, aiCases(name, model, true));
for (const [name, make] of Object.entries(lcModels)) Object.assign(cases, lcCases(name, make, lcForced[name]));
// Ollama's API has no tool_choice (ChatOllama drops it): no forced call to cut.
delete cases.lc_ollama_cut;
process.exit((await runCases(cases)) ? 1 : 0);
