// webui_media.mjs -- images and audio on the web chat page at /, in Debian's headless Chromium
// (playwright-core) against plume serve on a bundle with both towers: the attach and record
// buttons appear (the model's input_modalities), an image attached through the file picker is
// sent as an image_url data URL and answered, the same conversation's next turn reports the
// image as cached, an image pasted and one dropped become attachments, an audio file is sent as
// input_audio, a video file as a video_url data URL (its 32 frames in the prompt), and a
// recording from Chromium's fake microphone is encoded to WAV in the page, sent and answered.
// Screenshots at the end.
//
// usage: node tests/clients/webui_media.mjs http://127.0.0.1:PORT DATA_DIR SCREENSHOT_DIR
// DATA_DIR holds A.png, C.png and speechlike.wav; DATA_DIR/../tiny-video-a holds clip0.mp4. $CHROMIUM overrides /usr/bin/chromium.
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";
import { base, args, deadline, assert, show, runCases } from "./lib.mjs";

deadline(240);
const data = args.shift();
const shots = args.shift();
const exe = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath: exe,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
    "--autoplay-policy=no-user-gesture-required"],
});
const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
await context.grantPermissions(["microphone"], { origin: base });
const page = await context.newPage();
const outside = [], pageErrors = [], bodies = [];
page.on("request", (r) => {
  const u = r.url();
  if (!u.startsWith(base + "/") && !u.startsWith("data:") && !u.startsWith("blob:")) outside.push(u);
  if (r.method() === "POST") bodies.push(r.postData());
});
page.on("pageerror", (e) => pageErrors.push(String(e)));

const assistant = ".msg.assistant";
const lastReq = () => JSON.parse(bodies[bodies.length - 1]);

// Send what is typed and attached; wait for the answer's stats line (or an error).
async function sendAndWait(text) {
  const before = await page.locator(assistant).count();
  await page.fill("#input", text);
  await page.click("#send");
  const msg = page.locator(assistant).nth(before);
  await msg.locator(".stats, .error").first().waitFor({ timeout: 90000 });
  if (await msg.locator(".error").count()) throw new Error(`the page shows an error: ${await msg.locator(".error").first().textContent()}`);
  return msg;
}

// Put a file of the data dir into the page as a File and fire an event carrying it.
async function fireWithFile(name, type, how) {
  const b64 = fs.readFileSync(path.join(data, name)).toString("base64");
  await page.evaluate(({ b64, name, type, how }) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], name, { type }));
    if (how === "paste") document.getElementById("input").dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
    else document.getElementById("log").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, { b64, name, type, how });
}

const cases = {
  async load() {
    const r = await page.goto(base + "/", { waitUntil: "load" });
    assert(r.ok(), `GET /: HTTP ${r.status()}`);
    await page.locator("#attach").waitFor({ state: "visible", timeout: 10000 });
    await page.locator("#record").waitFor({ state: "visible", timeout: 10000 });
    await page.click("#toggle-settings");
    await page.fill("#max-tokens", "6");
    await page.fill("#temperature", "0");
    await page.fill("#system", "");
    await page.click("#toggle-settings");
  },

  async image() {
    await page.setInputFiles("#file", path.join(data, "A.png"));
    await page.locator("#attachments .chip.image img").waitFor({ timeout: 5000 });
    const msg = await sendAndWait("What is in this picture?");
    const req = lastReq();
    const parts = req.messages[req.messages.length - 1].content;
    assert(Array.isArray(parts) && parts[0].type === "image_url" && /^data:image\/png;base64,iVBOR/.test(parts[0].image_url.url) &&
      parts[1].type === "text", `request parts: ${show(parts)}`);
    assert((await page.locator(".msg.user .media img").count()) === 1, "no thumbnail in the user's message");
    assert((await page.locator("#attachments .chip").count()) === 0, "attachments left after sending");
    const stats = await msg.locator(".stats").textContent();
    assert(/prompt \d{3}/.test(stats), `the image's tokens are not in the prompt: ${show(stats)}`);
    // the next turn re-sends the image: its rows come from the cache
    const msg2 = await sendAndWait("And now?");
    const stats2 = await msg2.locator(".stats").textContent();
    const m = /prompt (\d+) \((\d+) cached\)/.exec(stats2);
    assert(m && Number(m[2]) > 256, `second turn: ${show(stats2)}`);
    const req2 = lastReq();
    assert(req2.messages.length === 3 && Array.isArray(req2.messages[0].content), `second turn's messages: ${show(req2.messages.map((x) => x.role))}`);
  },

  async paste_and_drop() {
    await page.click("#new");
    await fireWithFile("C.png", "image/png", "paste");
    await page.locator("#attachments .chip.image").first().waitFor({ timeout: 5000 });
    await fireWithFile("A.png", "image/png", "drop");
    await page.waitForFunction(() => document.querySelectorAll("#attachments .chip.image").length === 2, null, { timeout: 5000 });
    await sendAndWait("Compare them.");
    const parts = lastReq().messages.at(-1).content;
    assert(parts.filter((p) => p.type === "image_url").length === 2, `two images: ${show(parts.map((p) => p.type))}`);
  },

  async audio_file() {
    await page.click("#new");
    await page.setInputFiles("#file", path.join(data, "speechlike.wav"));
    await page.locator("#attachments .chip.audio").waitFor({ timeout: 5000 });
    await sendAndWait("What is said?");
    const parts = lastReq().messages.at(-1).content;
    assert(parts[0].type === "input_audio" && parts[0].input_audio.format === "wav" && parts[0].input_audio.data.startsWith("UklGR"),
      `audio part: ${show(parts[0]).slice(0, 200)}`);
  },

  async video_file() {
    await page.click("#new");
    assert((await page.locator("#file").getAttribute("accept")).includes("video/*"), "the file picker does not take videos");
    await page.setInputFiles("#file", path.join(data, "..", "tiny-video-a", "clip0.mp4"));
    await page.locator("#attachments .chip.video").waitFor({ timeout: 5000 });
    const msg = await sendAndWait("Describe.");
    const parts = lastReq().messages.at(-1).content;
    assert(parts[0].type === "video_url" && /^data:video\/mp4;base64,AAAA/.test(parts[0].video_url.url) && parts[1].type === "text",
      `video part: ${show(parts).slice(0, 200)}`);
    assert((await page.locator(".msg.user .media .clip").last().textContent()).includes("clip0.mp4"), "no video chip in the user's message");
    const stats = await msg.locator(".stats").textContent();
    assert(/prompt \d{4}/.test(stats), `the video's frames are not in the prompt: ${show(stats)}`);
  },

  async record() {
    await page.click("#new");
    await page.click("#record");
    await page.waitForFunction(() => document.getElementById("record").classList.contains("on"), null, { timeout: 10000 });
    await page.waitForTimeout(1500);
    await page.click("#record");
    await page.locator("#attachments .chip.audio").waitFor({ timeout: 10000 });
    const name = await page.locator("#attachments .chip.audio").textContent();
    assert(/recording [\d.]+ s/.test(name), `chip: ${show(name)}`);
    await page.screenshot({ path: path.join(shots, "webui-media-attached.png") });
    const msg = await sendAndWait("Transcribe this.");
    const p = lastReq().messages.at(-1).content[0];
    assert(p.type === "input_audio" && p.input_audio.format === "wav", `recording part: ${show(p).slice(0, 200)}`);
    const wav = Buffer.from(p.input_audio.data, "base64");
    assert(wav.toString("latin1", 0, 4) === "RIFF" && wav.toString("latin1", 8, 12) === "WAVE" && wav.readUInt16LE(34) === 16 &&
      wav.length > 44 + 2 * wav.readUInt32LE(24) * 1.0, `the recording is not a 16-bit WAV of over 1 s: ${wav.length} bytes`);
    const stats = await msg.locator(".stats").textContent();
    assert(/prompt \d+/.test(stats), `stats: ${show(stats)}`);
  },

  async screenshot() {
    fs.mkdirSync(shots, { recursive: true });
    await page.click("#new");
    await page.setInputFiles("#file", path.join(data, "A.png"));
    await page.locator("#attachments .chip.image img").waitFor({ timeout: 5000 });
    await sendAndWait("What is in this picture?");
    const file = path.join(shots, "webui-media.png");
    await page.screenshot({ path: file });
    assert(fs.statSync(file).size > 5000, "screenshot too small");
    console.log(`  screenshots: ${file}, ${path.join(shots, "webui-media-attached.png")}`);
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
