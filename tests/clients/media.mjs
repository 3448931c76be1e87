// media.mjs -- images and audio through the official OpenAI library (npm `openai`) against
// plume serve on a bundle with both towers (tiny-mm-a): a chat with an image as a data URL, the
// same conversation re-sent (the image's rows come from the cache: cached_tokens), an
// input_audio part, audio.transcriptions.create as Whisper clients call it (json, text,
// verbose_json, srt), /v1/models' input_modalities and a bad image mapped to BadRequestError.
//
// usage: node tests/clients/media.mjs http://127.0.0.1:PORT DATA_DIR [CASE...]
// DATA_DIR holds A.png and speechlike.wav. The model is tiny and random: the checks are on
// shapes, counts and equalities, never on what the words say.
import fs from "node:fs";
import path from "node:path";
import OpenAI, { toFile } from "openai";
import { base, apiKey, args, deadline, assert, show, runCases } from "./lib.mjs";

deadline(240);
const data = args.shift();
const client = new OpenAI({ baseURL: base + "/v1", apiKey: apiKey || "none", maxRetries: 0, timeout: 120000 });
const png = fs.readFileSync(path.join(data, "A.png"));
const wav = fs.readFileSync(path.join(data, "speechlike.wav"));
const imageUrl = "data:image/png;base64," + png.toString("base64");

async function modelId() {
  const page = await client.models.list();
  return page.data[0].id;
}

function imageChat(model) {
  return {
    model, max_tokens: 8, temperature: 0,
    messages: [{ role: "user", content: [
      { type: "image_url", image_url: { url: imageUrl } },
      { type: "text", text: "What is in this picture?" },
    ] }],
  };
}

const cases = {
  async models() {
    const page = await client.models.list();
    const m = page.data[0];
    assert(JSON.stringify(m.input_modalities) === JSON.stringify(["text", "image", "audio", "video"]), `input_modalities: ${show(m)}`);
  },

  async image() {
    const c = await client.chat.completions.create(imageChat(await modelId()));
    assert(c.object === "chat.completion" && c.choices.length === 1, show(c));
    assert(typeof c.choices[0].message.content === "string", show(c));
    // the image's run: its tokens are in the prompt (tiny-mm-a: 64 x 64 -> far more than the text)
    assert(c.usage.prompt_tokens > 100 && c.usage.completion_tokens > 0, `usage: ${show(c.usage)}`);
  },

  async cached() {
    const model = await modelId();
    const first = await client.chat.completions.create(imageChat(model));
    const again = await client.chat.completions.create(imageChat(model));
    const cached = again.usage.prompt_tokens_details && again.usage.prompt_tokens_details.cached_tokens;
    assert(cached === again.usage.prompt_tokens - 1, `re-sent: cached ${cached} of ${again.usage.prompt_tokens}`);
    assert(first.choices[0].message.content === again.choices[0].message.content, "greedy answers differ");
  },

  async stream() {
    const model = await modelId();
    const plain = await client.chat.completions.create(imageChat(model));
    const s = await client.chat.completions.create({ ...imageChat(model), stream: true });
    let text = "";
    for await (const ch of s) text += (ch.choices[0] && ch.choices[0].delta.content) || "";
    assert(text === plain.choices[0].message.content, `streamed ${show(text)} vs ${show(plain.choices[0].message.content)}`);
  },

  async audio() {
    const c = await client.chat.completions.create({
      model: await modelId(), max_tokens: 8, temperature: 0,
      messages: [{ role: "user", content: [
        { type: "input_audio", input_audio: { data: wav.toString("base64"), format: "wav" } },
        { type: "text", text: "What is said?" },
      ] }],
    });
    assert(typeof c.choices[0].message.content === "string", show(c));
    assert(c.usage.prompt_tokens > 58, `the clip's 58 tokens are not in the prompt: ${show(c.usage)}`);
  },

  async transcribe_json() {
    const t = await client.audio.transcriptions.create({ file: await toFile(wav, "speech.wav"), model: "whisper-1" });
    assert(typeof t.text === "string", `json: ${show(t)}`);
    const again = await client.audio.transcriptions.create({ file: fs.createReadStream(path.join(data, "speechlike.wav")),
      model: "whisper-1", response_format: "json", temperature: 0 });
    assert(again.text === t.text, `two greedy transcriptions differ: ${show(t)} ${show(again)}`);
  },

  async transcribe_text() {
    const t = await client.audio.transcriptions.create({ file: await toFile(wav, "speech.wav"), model: "whisper-1",
      response_format: "text" });
    assert(typeof t === "string", `text: ${show(t)}`);
    const j = await client.audio.transcriptions.create({ file: await toFile(wav, "speech.wav"), model: "whisper-1" });
    assert(t.trim() === j.text, `text ${show(t)} vs json ${show(j.text)}`);
  },

  async transcribe_verbose() {
    const v = await client.audio.transcriptions.create({ file: await toFile(wav, "speech.wav"), model: "whisper-1",
      response_format: "verbose_json", language: "en" });
    assert(Math.abs(v.duration - 2.3) < 0.01 && v.language === "en" && Array.isArray(v.segments), `verbose: ${show(v)}`);
    const srt = await client.audio.transcriptions.create({ file: await toFile(wav, "speech.wav"), model: "whisper-1",
      response_format: "srt" });
    assert(/^1\n00:00:00,000 --> 00:00:02,300\n/.test(srt), `srt: ${show(srt)}`);
  },

  async errors() {
    let e = null;
    try {
      await client.chat.completions.create({ model: await modelId(), max_tokens: 4, messages: [{ role: "user", content: [
        { type: "image_url", image_url: { url: "data:image/png;base64," + png.subarray(0, 100).toString("base64") } },
        { type: "text", text: "hi" }] }] });
    } catch (err) {
      e = err;
    }
    assert(e instanceof OpenAI.BadRequestError, `a truncated image: ${e}`);
    assert(e.param === "messages[0].content[0]" && /truncated/.test(e.message), `the part is not named: ${show(e.error)}`);
    e = null;
    try {
      await client.audio.transcriptions.create({ file: await toFile(Buffer.from("not audio at all"), "x.wav"), model: "w" });
    } catch (err) {
      e = err;
    }
    assert(e instanceof OpenAI.BadRequestError && e.param === "file", `junk audio: ${e}`);
  },
};

process.exit((await runCases(cases)) ? 1 : 0);
