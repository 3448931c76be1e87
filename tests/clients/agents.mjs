// agents.mjs -- the agent CLIs against `plume serve`, each with its own documented setup for a
// custom endpoint: Claude Code in print mode (`claude -p`, npm @anthropic-ai/claude-code,
// ANTHROPIC_BASE_URL + ANTHROPIC_API_KEY) and Codex CLI (`codex exec`, npm @openai/codex, a
// `model_providers` entry with wire_api = "responses" in $CODEX_HOME/config.toml).
//
// usage: node tests/clients/agents.mjs http://127.0.0.1:PORT [CASE...]
//
// Each case runs the agent in a scratch directory (HOME, CLAUDE_CONFIG_DIR / CODEX_HOME there,
// nothing of the user's), with the variables each client documents to turn telemetry, update
// checks and error reporting off, and with HTTPS_PROXY/HTTP_PROXY pointing at capture.mjs: a
// loopback proxy that forwards to plume, writes down every request, and refuses (and notes)
// any connection to another host, so the case fails if the agent calls home. The agent talks
// to plume through the same proxy (its base URL). A random model never ends an answer or a
// thought by itself, and an agent takes an answer cut by its token limit for a failure (Claude
// Code retries, then reports "exceeded the output token maximum"), so the proxy holds every
// answer to the JSON string "plume says hi" with thinking off (--answer: the dialect's own
// structured-output field, enforced by plume's constrained decoding, so the answer ends
// there) and caps the token limit as a net (--cap). The `*_tools` cases also have it force
// one tool call with fixed arguments the same way (--steer): the agent must run the tool and
// send its result back in the next request. Everything else the agent sends reaches plume as
// sent, and the log keeps the bodies as the agent wrote them.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, existsSync, rmSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { base, apiKey, deadline, assert, show, runCases } from "./lib.mjs";

deadline(380);
const here = dirname(fileURLToPath(import.meta.url));
const mods = join(here, "node_modules");
const CAP = 64; /* a net: the answers are held to ANSWER */
const ANSWER = "plume says hi";

// Run a command with a clean environment (env only, plus PATH); resolves {code, out}.
function run(cmd, argv, env, cwd, seconds) {
  return new Promise((resolve) => {
    const p = spawn(cmd, argv, { cwd, env: { PATH: "/usr/local/bin:/usr/bin:/bin", ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    p.stdout.on("data", (c) => (out += c));
    p.stderr.on("data", (c) => (out += c));
    const t = setTimeout(() => p.kill("SIGKILL"), seconds * 1000);
    p.on("close", (code, sig) => {
      clearTimeout(t);
      resolve({ code: sig ? `signal ${sig}` : code, out });
    });
  });
}

// Start capture.mjs in front of plume; resolves {url, log, stop}.
function capture(dir, extra) {
  const log = join(dir, "capture.jsonl");
  writeFileSync(log, "");
  const p = spawn(process.execPath, [join(here, "capture.mjs"), base, log, "--cap", String(CAP), "--answer", ANSWER, ...extra], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let buf = "";
    p.stdout.on("data", (c) => {
      buf += c;
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(buf);
      if (m) resolve({ url: m[1], log, stop: () => p.kill() });
    });
    p.on("exit", (code) => reject(new Error(`capture.mjs exited ${code}`)));
  });
}

// The exchanges capture.mjs wrote down.
const exchanges = (log) => readFileSync(log, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));

// The log's exchanges with plume: every one answered 200, none went elsewhere. Returns them.
function checkLog(log) {
  const all = exchanges(log);
  const home = all.filter((x) => x.home);
  assert(!home.length, `the agent called out of the machine: ${show(home)}`);
  const bad = all.filter((x) => x.status !== 200);
  assert(!bad.length, `plume refused: ${[...new Set(bad.map((x) => `${x.method} ${x.path} ${x.status} ${x.reply.slice(0, 400)}`))].join("\n")}`);
  return all;
}

// A scratch directory for one agent run, with a file the tool cases read.
function scratch(tag) {
  const dir = mkdtempSync(join(tmpdir(), `plume-${tag}-`));
  mkdirSync(join(dir, "work"));
  writeFileSync(join(dir, "work", "note.txt"), "the plume marker is 7f3a9c\n");
  return dir;
}

// ---- Claude Code ----------------------------------------------------------------------

const claudeBin = join(mods, "@anthropic-ai/claude-code/cli-wrapper.cjs");

// Claude Code's environment for a custom endpoint (its docs: "LLM gateway"), telemetry,
// error reporting, update checks and other traffic to Anthropic off.
function claudeEnv(dir, url) {
  return {
    HOME: dir,
    CLAUDE_CONFIG_DIR: join(dir, ".claude"),
    ANTHROPIC_BASE_URL: url,
    ANTHROPIC_API_KEY: apiKey || "plume",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    DISABLE_AUTOUPDATER: "1",
    HTTPS_PROXY: url,
    HTTP_PROXY: url,
    NO_PROXY: "127.0.0.1,localhost",
  };
}

async function claude(dir, url, prompt, more = []) {
  const r = await run(process.execPath, [claudeBin, "-p", prompt, "--output-format", "json", ...more], claudeEnv(dir, url), join(dir, "work"), 240);
  let res = null;
  try {
    res = JSON.parse(r.out.slice(r.out.indexOf("{")));
  } catch {
    /* reported below */
  }
  return { ...r, res };
}

// ---- Codex CLI ------------------------------------------------------------------------

const codexBin = join(mods, "@openai/codex/bin/codex.js");

// Codex's config.toml for a custom Responses endpoint (its docs: model_providers), with
// analytics, update checks and the plugin sync (github.com, chatgpt.com) off.
function codexHome(dir, url) {
  const home = join(dir, ".codex");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "config.toml"), `model = "tiny"
model_provider = "plume"
check_for_update_on_startup = false

[model_providers.plume]
name = "plume"
base_url = "${url}/v1"
wire_api = "responses"
env_key = "PLUME_API_KEY"

[analytics]
enabled = false

[features]
plugins = false
`);
  return home;
}

async function codex(dir, url, prompt, more = []) {
  const env = {
    HOME: dir,
    CODEX_HOME: codexHome(dir, url),
    PLUME_API_KEY: apiKey || "plume",
    HTTPS_PROXY: url,
    HTTP_PROXY: url,
    NO_PROXY: "127.0.0.1,localhost",
  };
  return run(process.execPath, [codexBin, "exec", "--skip-git-repo-check", "--json", ...more, prompt], env, join(dir, "work"), 240);
}

// Codex's Ollama mode (`codex exec --oss`): no provider entry, `oss_provider = "ollama"` and
// CODEX_OSS_BASE_URL (its documented variable for an Ollama that is not on localhost:11434).
// The model is named as /api/tags lists it (the bundle's name, ":latest"): Codex looks for
// the name there and asks /api/pull for it otherwise, which plume does not do.
async function codexOss(dir, url, prompt) {
  const home = join(dir, ".codex");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "config.toml"), `oss_provider = "ollama"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
`);
  const env = { HOME: dir, CODEX_HOME: home, CODEX_OSS_BASE_URL: `${url}/v1`, HTTPS_PROXY: url, HTTP_PROXY: url, NO_PROXY: "127.0.0.1,localhost" };
  return run(process.execPath, [codexBin, "exec", "--oss", "-m", "tiny:latest", "--skip-git-repo-check", "--json", prompt], env, join(dir, "work"), 240);
}

// Codex's --json events (one JSON object a line).
const codexEvents = (out) => out.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));

// ---- cases ----------------------------------------------------------------------------

const cases = {
  // Claude Code answers a question: every request it makes (system messages after the user
  // turn, adaptive thinking, effort, its default max_tokens) is accepted, the answer is the
  // text plume streamed.
  async claude_text() {
    const dir = scratch("claude");
    const cap = await capture(dir, []);
    try {
      const r = await claude(dir, cap.url, "Say hi");
      const log = checkLog(cap.log);
      assert(r.code === 0 && r.res && r.res.is_error === false && typeof r.res.result === "string", `claude -p (exit ${r.code}): ${r.out.slice(-1500)}`);
      const main = log.filter((x) => x.path.startsWith("/v1/messages") && JSON.parse(x.body).tools);
      assert(main.length >= 1, `no request with tools: ${show(log.map((x) => x.path))}`);
      assert(r.res.result.trim() === JSON.stringify(ANSWER), `result ${show(r.res.result)}, not plume's answer`);
    } finally {
      cap.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  },

  // Claude Code runs a tool plume called (Read of a file in its working directory) and sends
  // the file's content back as the tool_result of that call.
  async claude_tools() {
    const dir = scratch("claude");
    const steer = join(dir, "steer.json");
    writeFileSync(steer, JSON.stringify({ tool: "Read", input: { file_path: join(dir, "work", "note.txt") } }));
    const cap = await capture(dir, ["--steer", steer]);
    try {
      const r = await claude(dir, cap.url, "Read note.txt and tell me the marker");
      const log = checkLog(cap.log);
      assert(r.code === 0 && r.res && r.res.is_error === false, `claude -p (exit ${r.code}): ${r.out.slice(-1500)}`);
      const at = log.findIndex((x) => x.steered);
      assert(at >= 0, `no request offered the Read tool: ${show(log.map((x) => x.path))}`);
      const id = /"type":"tool_use","id":"([^"]+)","name":"Read"/.exec(log[at].reply)?.[1];
      assert(id, `plume's reply holds no Read call: ${log[at].reply.slice(0, 1500)}`);
      const later = log.slice(at + 1).map((x) => JSON.parse(x.body));
      const result = later.flatMap((b) => b.messages || []).flatMap((m) => (Array.isArray(m.content) ? m.content : []))
        .find((c) => c.type === "tool_result" && c.tool_use_id === id);
      assert(result && JSON.stringify(result.content).includes("7f3a9c"), `no tool_result for ${id} with the file: ${show(result)}`);
    } finally {
      cap.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  },

  // Codex answers a question: its Responses requests (namespace tools, web_search, reasoning,
  // include, client_metadata, ...) are accepted and the answer is plume's text.
  async codex_text() {
    const dir = scratch("codex");
    const cap = await capture(dir, []);
    try {
      const r = await codex(dir, cap.url, "Say hi");
      const log = checkLog(cap.log);
      const ev = codexEvents(r.out);
      const msg = ev.filter((e) => e.type === "item.completed" && e.item?.type === "agent_message").map((e) => e.item.text);
      assert(r.code === 0 && ev.some((e) => e.type === "turn.completed") && msg.some((t) => t.trim() === JSON.stringify(ANSWER)), `codex exec (exit ${r.code}): ${r.out.slice(-1500)}`);
      assert(log.some((x) => x.path === "/v1/responses"), `no /v1/responses request: ${show(log.map((x) => x.path))}`);
    } finally {
      cap.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  },

  // Codex's Ollama mode: /api/version is new enough, then the same Responses requests.
  async codex_oss() {
    const dir = scratch("codex");
    const cap = await capture(dir, []);
    try {
      const r = await codexOss(dir, cap.url, "Say hi");
      const log = checkLog(cap.log);
      const ev = codexEvents(r.out);
      const msg = ev.filter((e) => e.type === "item.completed" && e.item?.type === "agent_message").map((e) => e.item.text);
      assert(r.code === 0 && msg.some((t) => t.trim() === JSON.stringify(ANSWER)), `codex exec --oss (exit ${r.code}): ${r.out.slice(-1500)}`);
      assert(log.some((x) => x.path === "/api/version") && log.some((x) => x.path === "/v1/responses"), `requests: ${show(log.map((x) => x.path))}`);
    } finally {
      cap.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  },

  // Codex runs the command plume called (exec_command `cat note.txt`) and sends its output
  // back as the function_call_output of that call.
  async codex_tools() {
    const dir = scratch("codex");
    const steer = join(dir, "steer.json");
    writeFileSync(steer, JSON.stringify({ tool: "exec_command", input: { cmd: "cat note.txt" } }));
    const cap = await capture(dir, ["--steer", steer]);
    try {
      const r = await codex(dir, cap.url, "Show note.txt");
      const log = checkLog(cap.log);
      assert(r.code === 0, `codex exec (exit ${r.code}): ${r.out.slice(-1500)}`);
      const at = log.findIndex((x) => x.steered);
      assert(at >= 0, `no request offered exec_command: ${show(log.map((x) => x.path))}`);
      const id = /"type":"function_call"[^}]*"call_id":"([^"]+)"/.exec(log[at].reply)?.[1];
      assert(id, `plume's reply holds no call: ${log[at].reply.slice(0, 1500)}`);
      const out = log.slice(at + 1).flatMap((x) => JSON.parse(x.body).input || []).find((i) => i.type === "function_call_output" && i.call_id === id);
      assert(out && JSON.stringify(out.output).includes("7f3a9c"), `no function_call_output for ${id} with the file: ${show(out)}`);
    } finally {
      cap.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  },
};

for (const f of [claudeBin, codexBin]) if (!existsSync(f)) console.log(`note: ${f} is missing`);
process.exit((await runCases(cases)) ? 1 : 0);
