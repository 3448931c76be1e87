// lib.mjs -- what the client scripts share: arguments, a bounded run, and one line per case.
//
// Each script is `node tests/clients/NAME.mjs BASE_URL [OPTIONS...] [CASE...]`; it prints
// "ok CASE" or "not ok CASE: why" per case and exits 1 when any failed. tests/test_clients.c
// starts the server and runs the scripts; PLUME_API_KEY is the key the server was given.

export const base = (process.argv[2] || "").replace(/\/+$/, "");
if (!/^http:\/\/127\.0\.0\.1:\d+$/.test(base)) {
  console.error("usage: node " + process.argv[1] + " http://127.0.0.1:PORT [CASE...]  (127.0.0.1 only)");
  process.exit(2);
}
export const apiKey = process.env.PLUME_API_KEY || "";
export const args = process.argv.slice(3);

// The whole script must end within `seconds`, whatever the server does.
export function deadline(seconds) {
  const t = setTimeout(() => {
    console.log(`not ok timeout: the script did not finish within ${seconds} s`);
    process.exit(1);
  }, seconds * 1000);
  t.unref();
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

export const show = (v) => {
  const s = JSON.stringify(v);
  return s && s.length > 600 ? s.slice(0, 600) + "..." : s;
};

// Run the chosen cases (all when none is named) one after another; returns how many failed.
export async function runCases(cases) {
  const names = args.filter((a) => !a.startsWith("--"));
  const chosen = names.length ? names : Object.keys(cases);
  let failed = 0;
  for (const name of chosen) {
    if (!cases[name]) {
      console.log(`not ok ${name}: no such case (${Object.keys(cases).join(", ")})`);
      failed++;
      continue;
    }
    const t0 = Date.now();
    try {
      await cases[name]();
      console.log(`ok ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      console.log(`not ok ${name}: ${e && e.stack ? e.stack : e}`);
      failed++;
    }
  }
  return failed;
}

export function authHeaders() {
  return apiKey ? { Authorization: "Bearer " + apiKey } : {};
}

// GET /metrics as text.
export async function metrics() {
  const r = await fetch(base + "/metrics", { headers: authHeaders() });
  assert(r.ok, `/metrics: HTTP ${r.status}`);
  return r.text();
}

// The value of the first sample of a Prometheus metric whose name matches re, or null.
export function metricValue(text, re) {
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m && re.test(m[1])) return Number(m[3]);
  }
  return null;
}

// Wait (up to `seconds`) until /metrics shows no busy slot and an empty queue; returns the
// last /metrics text. Throws, with the text, if that never happens.
export async function waitIdle(seconds, busyRe = /^plume_slots_busy$/, queueRe = /^plume_queue_length$/) {
  let text = "";
  for (let i = 0; i < seconds * 10; i++) {
    text = await metrics();
    const busy = metricValue(text, busyRe), queue = metricValue(text, queueRe);
    assert(busy !== null && queue !== null, `/metrics has no busy-slot or queue metric:\n${text}`);
    if (busy === 0 && queue === 0) return text;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`slots still busy or queue not empty after ${seconds} s:\n${text}`);
}

// The OpenAI chat endpoint's answer to a body (the reference the other dialects must match):
// the parsed reply. Throws on an HTTP error.
export async function openaiChat(body) {
  const r = await fetch(base + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...authHeaders() },
    body: JSON.stringify(body),
  });
  const j = await r.json();
  assert(r.ok, `/v1/chat/completions: HTTP ${r.status} ${show(j)}`);
  return j;
}
