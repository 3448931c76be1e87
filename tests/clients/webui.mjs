// webui.mjs -- the web chat page at / in a real browser: Debian's headless Chromium driven by
// playwright-core. Loads the page (no request may leave the server: the page works offline),
// types a message, sends it, waits for the streamed answer in the DOM and its tokens/s line,
// stops a long answer with the stop button, checks the markdown renderer never turns model
// text into HTML, and saves a screenshot.
//
// usage: node tests/clients/webui.mjs http://127.0.0.1:PORT SCREENSHOT_DIR
// $CHROMIUM overrides /usr/bin/chromium.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { base, apiKey, args, deadline, assert, show, runCases, waitIdle } from "./lib.mjs";

deadline(240);
const shots = args[0] && !args[0].startsWith("--") ? args.shift() : os.tmpdir();
const exe = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath: exe,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"], // playwright gives it a fresh profile
});
const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
const outside = [], pageErrors = [], bodies = [];
page.on("request", (r) => {
  if (!r.url().startsWith(base + "/") && !r.url().startsWith("data:")) outside.push(r.url());
  if (r.method() === "POST") bodies.push(r.postData());
});
page.on("pageerror", (e) => pageErrors.push(String(e)));

const assistant = ".msg.assistant";

async function openSettings() {
  if (!(await page.locator("#settings").isVisible())) await page.click("#toggle-settings");
}

// Send text and wait until the answer is finished (its stats line appears).
async function ask(text) {
  const before = await page.locator(assistant).count();
  await page.fill("#input", text);
  await page.click("#send");
  const msg = page.locator(assistant).nth(before);
  await msg.locator(".stats, .error").first().waitFor({ timeout: 90000 });
  return msg;
}

const cases = {
  async load() {
    const r = await page.goto(base + "/", { waitUntil: "load" });
    assert(r.ok(), `GET /: HTTP ${r.status()}`);
    assert((r.headers()["content-type"] || "").startsWith("text/html"), `content-type ${r.headers()["content-type"]}`);
    assert((await page.title()) === "plume", `title ${await page.title()}`);
    if (apiKey) {
      // /v1/models answered 401: the page opens its settings at the key field.
      await page.locator("#api-key").waitFor({ state: "visible", timeout: 5000 });
      assert(/API key/i.test(await page.locator("#model").textContent()), "the 401 message is not shown");
      await page.fill("#api-key", apiKey);
      await page.locator("#api-key").dispatchEvent("change");
    }
    // The model's name comes from /v1/models.
    await page.waitForFunction(() => !/connecting|unreachable|HTTP|key/i.test(document.getElementById("model").textContent), null, { timeout: 10000 });
  },

  async answer() {
    await openSettings();
    await page.fill("#max-tokens", "24");
    await page.fill("#temperature", "0");
    await page.fill("#system", "You are a test.");
    await page.click("#toggle-settings");
    const msg = await ask("Hello! Say something.");
    if (await msg.locator(".error").count()) throw new Error(`the page shows an error: ${await msg.locator(".error").first().textContent()}`);
    const text = await msg.locator(".content").textContent();
    assert(text.length > 0, "the answer is empty in the DOM");
    const stats = await msg.locator(".stats").textContent();
    assert(/\d+ tokens/.test(stats) && /[\d.]+ tok\/s/.test(stats), `stats line: ${show(stats)}`);
    assert(!/approx/.test(stats), `the page had no usage chunk (include_usage): ${show(stats)}`);
    const user = await page.locator(".msg.user").last().textContent();
    assert(user === "Hello! Say something.", `user bubble: ${show(user)}`);
    // What the page sent: a streamed request with the system prompt and usage asked for.
    const req = JSON.parse(bodies[bodies.length - 1]);
    assert(req.stream === true && req.stream_options.include_usage === true, `request: ${show(req)}`);
    assert(req.messages[0].role === "system" && req.messages[0].content === "You are a test.", `request: ${show(req)}`);
    assert(req.temperature === 0 && req.max_tokens === 24, `request: ${show(req)}`);
  },

  async multiturn() {
    await ask("And a second turn.");
    // The history went back: system, the first exchange, the new question.
    const req = JSON.parse(bodies[bodies.length - 1]);
    const roles = req.messages.map((m) => m.role).join(",");
    assert(roles === "system,user,assistant,user", `second turn's messages: ${roles}`);
    await openSettings();
    await page.check("#thinking");
    await page.click("#toggle-settings");
    const msg = await ask("Think first.");
    const req2 = JSON.parse(bodies[bodies.length - 1]);
    assert(req2.chat_template_kwargs && req2.chat_template_kwargs.enable_thinking === true, `thinking request: ${show(req2)}`);
    if (await msg.locator(".error").count()) throw new Error(`thinking turn failed: ${await msg.locator(".error").first().textContent()}`);
    await openSettings();
    await page.uncheck("#thinking");
    await page.click("#toggle-settings");
  },

  async stop() {
    await openSettings();
    await page.fill("#max-tokens", ""); // no limit: the answer runs until the context is full
    await page.fill("#temperature", "1");
    await page.click("#toggle-settings");
    const before = await page.locator(assistant).count();
    await page.fill("#input", "Write a very long story.");
    await page.click("#send");
    const msg = page.locator(assistant).nth(before);
    await page.locator("#stop").waitFor({ state: "visible", timeout: 10000 });
    // Some text has streamed in, then stop.
    await page.waitForFunction((i) => document.querySelectorAll(".msg.assistant .content")[i].textContent.length > 8, before, { timeout: 60000 });
    await page.click("#stop");
    const stats = await msg.locator(".stats").textContent({ timeout: 10000 });
    assert(/stopped/.test(stats), `stats after stop: ${show(stats)}`);
    assert(await page.locator("#send").isVisible(), "send button not back after stop");
    // The server noticed the client going away and freed the slot.
    await waitIdle(3); // sooner than the rest of the answer would take
  },

  async error() {
    // A request the server refuses (a prompt longer than the context; max_tokens beyond it is
    // no error: the answer stops when the context is full): its OpenAI-shaped error message is
    // shown, and the failed turn is not sent again.
    const refused = "This one is refused. " + "word ".repeat(5000);
    const msg = await ask(refused);
    const err = await msg.locator(".error").textContent().catch(() => "");
    assert(/context/.test(err), `error shown: ${show(err)}`);
    await openSettings();
    await page.fill("#max-tokens", "8");
    await page.click("#toggle-settings");
    const ok = await ask("And this one is answered.");
    if (await ok.locator(".error").count()) throw new Error(`after an error: ${await ok.locator(".error").first().textContent()}`);
    const req = JSON.parse(bodies[bodies.length - 1]);
    assert(!req.messages.some((m) => m.content === refused), `the refused turn was sent again: ${show(req.messages.map((m) => m.content.slice(0, 40)))}`);
  },

  async newchat() {
    // "New chat" in the middle of a streamed answer: the answer stops, and the next question
    // goes alone (with the system prompt), nothing of the old conversation with it.
    await openSettings();
    await page.fill("#max-tokens", "");
    await page.click("#toggle-settings");
    await page.fill("#input", "A long answer, please.");
    await page.click("#send");
    await page.waitForFunction(() => { const c = document.querySelectorAll(".msg.assistant .content"); return c.length && c[c.length - 1].textContent.length > 8; }, null, { timeout: 60000 });
    await page.click("#new");
    assert((await page.locator(".msg").count()) === 0, "messages left after New chat");
    await page.locator("#send").waitFor({ state: "visible", timeout: 5000 });
    await openSettings();
    await page.fill("#max-tokens", "8");
    await page.click("#toggle-settings");
    const msg = await ask("A fresh start.");
    if (await msg.locator(".error").count()) throw new Error(`after New chat: ${await msg.locator(".error").first().textContent()}`);
    const req = JSON.parse(bodies[bodies.length - 1]);
    assert(req.messages.map((m) => m.role).join() === "system,user" && req.messages[1].content === "A fresh start.", `after New chat: ${show(req.messages)}`);
    await waitIdle(3);
  },

  async reasoning() {
    // How the page shows reasoning_content and tool calls, on a canned stream (a random model
    // neither thinks nor calls): a collapsible "Thinking" block above the answer, closed once
    // the answer starts; a tool call streamed in pieces shown whole after the text.
    const chunk = (delta, finish = null) => "data: " + JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] }) + "\n\n";
    const body = chunk({ role: "assistant" }) + chunk({ reasoning_content: "Let me think " }) + chunk({ reasoning_content: "<i>hard</i>." }) +
      chunk({ content: "The answer is `42`." }) +
      chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: "" } }] }) +
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }) + chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }) +
      chunk({}, "tool_calls") +
      "data: " + JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 } }) + "\n\ndata: [DONE]\n\n";
    await page.route("**/v1/chat/completions", (route) => route.fulfill({ status: 200, contentType: "text/event-stream", body }));
    try {
      const msg = await ask("Think about it.");
      const think = msg.locator("details.think");
      assert((await think.count()) === 1, "no Thinking block");
      assert((await think.locator(".reasoning").textContent()) === "Let me think <i>hard</i>.", "reasoning text");
      assert((await think.getAttribute("open")) === null, "the Thinking block stays open after the answer started");
      assert((await msg.locator(".content code").textContent()) === "42", "inline code in the answer");
      const tool = await msg.locator(".content pre.tool").textContent();
      assert(tool === '\u2192 get_weather({"city":"Paris"})', `tool call pieces: ${show(tool)}`);
      const stats = await msg.locator(".stats").textContent();
      assert(/7 tokens/.test(stats) && /tool_calls/.test(stats), `stats of the canned stream: ${show(stats)}`);
    } finally {
      await page.unroute("**/v1/chat/completions");
    }
  },

  async csp() {
    // The page's Content-Security-Policy refuses anything from another origin.
    const v = await page.evaluate(() => new Promise((resolve) => {
      document.addEventListener("securitypolicyviolation", (e) => resolve(e.violatedDirective), { once: true });
      const img = document.createElement("img");
      img.src = "http://127.0.0.2:9/x.png";
      document.body.appendChild(img);
      setTimeout(() => resolve("no violation"), 3000);
    }));
    assert(/^img-src/.test(v), `an image from another origin was not refused: ${v}`);
    await page.evaluate(() => document.querySelectorAll("body > img").forEach((i) => i.remove()));
    const own = outside.filter((u) => u !== "http://127.0.0.2:9/x.png"); // that one was the test's
    outside.length = 0;
    outside.push(...own);
  },

  async markdown() {
    // The renderer builds nodes from text: tags in model text stay text.
    const r = await page.evaluate(() => {
      const d = document.createElement("div");
      renderMarkdown(d, "Use `<b>x</b>` and <img src=x onerror=alert(1)> **bold**\n\n```js\nif (a < b) { <script>alert(1)</script> }\n```\nafter");
      return { html: d.innerHTML, imgs: d.querySelectorAll("img,script,b").length, code: d.querySelector("pre code").textContent, strong: d.querySelectorAll("strong").length, ps: d.querySelectorAll("p").length };
    });
    assert(r.imgs === 0, `model text became HTML elements: ${r.html}`);
    assert(r.code === "if (a < b) { <script>alert(1)</script> }", `code block: ${show(r.code)}`);
    assert(r.strong === 1 && r.ps === 2, `markdown: ${r.html}`);
    const r2 = await page.evaluate(() => {
      const d = document.createElement("div");
      renderMarkdown(d, "Two blocks:\n```python\ndef f(x):\n    return x * 2\n```\nbetween `a`\n\n```\n```\n```c\nint main(void) {\n  return 0;");
      return { codes: [...d.querySelectorAll("pre code")].map((c) => c.textContent), ps: [...d.querySelectorAll("p")].map((p) => p.textContent), langs: [...d.querySelectorAll("pre .lang")].map((l) => l.textContent) };
    });
    // Multi-line blocks, an empty one, and one still open (streaming) that runs to the end.
    assert(JSON.stringify(r2.codes) === JSON.stringify(["def f(x):\n    return x * 2", "", "int main(void) {\n  return 0;"]), `code blocks: ${show(r2)}`);
    assert(JSON.stringify(r2.ps) === JSON.stringify(["Two blocks:", "between a"]) && r2.langs.join() === "python,c", `around the blocks: ${show(r2)}`);
  },

  async screenshot() {
    fs.mkdirSync(shots, { recursive: true });
    const file = path.join(shots, "webui.png");
    await page.screenshot({ path: file, fullPage: false });
    assert(fs.statSync(file).size > 5000, "screenshot too small");
    await page.emulateMedia({ colorScheme: "dark" });
    await page.screenshot({ path: path.join(shots, "webui-dark.png") });
    console.log(`  screenshots: ${file}, ${path.join(shots, "webui-dark.png")}`);
    assert(!outside.length, `requests left the server: ${show(outside)}`);
    assert(!pageErrors.length, `errors in the page: ${show(pageErrors)}`);
  },
};

let failed = 1;
try {
  failed = await runCases(cases);
} finally {
  await browser.close().catch(() => {});
}
process.exit(failed ? 1 : 0);
