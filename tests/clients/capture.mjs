// capture.mjs -- a loopback HTTP proxy in front of `plume serve` that writes down what a client
// sends, for the agent tests (agents.mjs) and for anyone who wants to see a client's requests.
//
// usage: node tests/clients/capture.mjs http://127.0.0.1:PLUME_PORT LOG.jsonl [--steer FILE] [--cap N]
//                                       [--answer TEXT]
//   Listens on 127.0.0.1 (a free port, printed as "capture listening on http://127.0.0.1:N").
//   Every request is forwarded to plume unchanged and the reply streamed back unchanged; one
//   JSON line per exchange goes to LOG.jsonl: {method, path, headers, body, status, reply}
//   (the reply's first 64 KiB). It also answers as an HTTPS proxy (CONNECT) and as a plain
//   HTTP proxy to any other host by refusing with 403 and logging {"home": "host:port"}: the
//   agents run with HTTPS_PROXY/HTTP_PROXY pointing here, so a client that tries to call its
//   vendor (telemetry, update checks, login) is seen and fails at once instead of hanging.
//   --steer FILE: a JSON object {"tool": NAME, "input": {...}}: the first request that offers
//   a tool named NAME with tool_choice auto (or none given) is sent on to plume with that tool
//   forced (the dialect's own tool_choice) and its parameters narrowed to exactly `input`
//   (a JSON schema of consts), so that plume's own constrained decoding writes that call, in
//   its own writer's bytes: a random model never calls a tool by itself. Later requests are
//   forwarded unchanged. The log line of the steered request carries "steered": true and the
//   body as the client sent it.
//   --cap N: every generating request's token limit is lowered to N (max_tokens,
//   max_output_tokens, options.num_predict; set when absent): a random model's answer never
//   ends by itself, and an agent asks for up to the whole context (the log keeps the client's
//   own value).
//   --answer TEXT: every other generating request gets the dialect's structured-output field
//   with a schema that admits only the JSON string TEXT, and thinking off (the steered one
//   too): a random model's answer and thought never end by themselves, and an agent takes a
//   turn cut by its token limit for a failure (Claude Code retries it, then gives up). The
//   answer is then "TEXT" (quoted), written by plume's constrained decoding, and ends there.
import http from "node:http";
import { appendFileSync, readFileSync } from "node:fs";

const upstream = new URL(process.argv[2] || "");
const logFile = process.argv[3];
if (upstream.hostname !== "127.0.0.1" || !logFile) {
  console.error("usage: node capture.mjs http://127.0.0.1:PORT LOG.jsonl [--steer FILE]");
  process.exit(2);
}
const steerAt = process.argv.indexOf("--steer");
const steer = steerAt > 0 ? JSON.parse(readFileSync(process.argv[steerAt + 1], "utf8")) : null;
let steered = false;
const capAt = process.argv.indexOf("--cap");
const cap = capAt > 0 ? Number(process.argv[capAt + 1]) : 0;

const answerAt = process.argv.indexOf("--answer");
const answer = answerAt > 0 ? process.argv[answerAt + 1] : null;

// Hold the request's answer to the JSON string `answer`, thinking off (the dialect's own
// fields); true when it changed the body. A steered request keeps its forced call.
function answerBody(path, b, isSteered) {
  if (answer === null) return false;
  const schema = { type: "string", enum: [answer] };
  if (path.startsWith("/v1/messages") && !path.includes("count_tokens")) {
    b.thinking = { type: "disabled" };
    if (!isSteered) b.output_config = { ...(b.output_config || {}), format: { type: "json_schema", schema } };
  } else if (path.startsWith("/v1/responses")) {
    b.reasoning = { ...(b.reasoning || {}), effort: "none" };
    if (!isSteered) b.text = { ...(b.text || {}), format: { type: "json_schema", name: "answer", schema, strict: true } };
  } else if (path.startsWith("/v1/chat/completions")) {
    b.reasoning_effort = "none";
    if (!isSteered) b.response_format = { type: "json_schema", json_schema: { name: "answer", schema, strict: true } };
  } else if (path.startsWith("/api/chat") || path.startsWith("/api/generate")) {
    b.think = false;
    if (!isSteered) b.format = schema;
  } else return false;
  return true;
}

// Lower the request's token limit to cap (the dialect's own field); true when it changed.
function capBody(path, b) {
  if (!cap) return false;
  const lower = (o, k) => {
    if (typeof o[k] === "number" && o[k] <= cap) return false;
    o[k] = cap;
    return true;
  };
  if (path.startsWith("/v1/messages") && !path.includes("count_tokens")) return lower(b, "max_tokens");
  if (path.startsWith("/v1/responses")) return lower(b, "max_output_tokens");
  if (path.startsWith("/v1/chat/completions")) return lower(b, b.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens");
  if (path.startsWith("/api/chat") || path.startsWith("/api/generate")) return lower((b.options ||= {}), "num_predict");
  return false;
}

const log = (o) => appendFileSync(logFile, JSON.stringify(o) + "\n");

// A JSON schema that admits exactly the value v.
function exactly(v) {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return { const: v };
  const keys = Object.keys(v);
  return {
    type: "object",
    properties: Object.fromEntries(keys.map((k) => [k, exactly(v[k])])),
    required: keys,
    additionalProperties: false,
  };
}

// Rewrite a request body (parsed) so that the steered tool is forced with the steered input;
// returns true when it did. Knows the three dialects' tool shapes.
function steerBody(path, b) {
  if (!steer || steered || !Array.isArray(b.tools)) return false;
  const auto = (c) => c === undefined || c === "auto" || (c && c.type === "auto");
  if (!auto(b.tool_choice)) return false;
  const schema = exactly(steer.input);
  if (path.startsWith("/v1/messages")) {
    const t = b.tools.find((t) => t.name === steer.tool);
    if (!t) return false;
    t.input_schema = schema;
    b.tool_choice = { type: "tool", name: steer.tool };
  } else if (path.startsWith("/v1/responses")) {
    // Top-level function tools, or the functions of a namespace tool.
    let t = b.tools.find((t) => t.type === "function" && t.name === steer.tool);
    for (const ns of b.tools) if (!t && Array.isArray(ns.tools)) t = ns.tools.find((x) => x.name === steer.tool);
    if (!t) return false;
    t.parameters = schema;
    t.strict = false;
    b.tool_choice = { type: "function", name: steer.tool };
  } else {
    const t = b.tools.find((t) => t.function && t.function.name === steer.tool);
    if (!t) return false;
    t.function.parameters = schema;
    b.tool_choice = path.startsWith("/api/") ? b.tool_choice : { type: "function", function: { name: steer.tool } };
  }
  steered = true;
  return true;
}

const server = http.createServer((req, res) => {
  // An absolute URL to another host: a plain-HTTP proxy request, i.e. a call home.
  if (/^https?:\/\//.test(req.url) && !req.url.startsWith(upstream.origin)) {
    log({ home: req.url, method: req.method });
    res.writeHead(403).end("plume tests: no network\n");
    return;
  }
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    let body = Buffer.concat(chunks);
    const path = req.url.replace(/^https?:\/\/[^/]+/, "");
    const entry = { method: req.method, path, headers: req.headers, body: body.toString("utf8") };
    if (body.length && /json/.test(req.headers["content-type"] || "")) {
      try {
        const b = JSON.parse(body);
        if (steerBody(path, b)) entry.steered = true;
        if (answerBody(path, b, entry.steered)) entry.answered = true;
        if (capBody(path, b)) entry.capped = cap;
        if (entry.steered || entry.answered || entry.capped) body = Buffer.from(JSON.stringify(b));
      } catch {
        /* not JSON: forwarded as it is, plume answers */
      }
    }
    const headers = { ...req.headers, host: upstream.host, "content-length": String(body.length) };
    delete headers["transfer-encoding"];
    const up = http.request({ host: upstream.hostname, port: upstream.port, method: req.method, path, headers }, (ur) => {
      res.writeHead(ur.statusCode, ur.headers);
      const got = [];
      let size = 0;
      ur.on("data", (c) => {
        if (size < 65536) got.push(c);
        size += c.length;
        res.write(c);
      });
      ur.on("end", () => {
        res.end();
        log({ ...entry, status: ur.statusCode, reply: Buffer.concat(got).toString("utf8").slice(0, 65536) });
      });
    });
    up.on("error", (e) => {
      log({ ...entry, status: 502, reply: String(e) });
      res.writeHead(502).end(String(e));
    });
    up.end(body);
  });
});
// CONNECT: an HTTPS request through the proxy, i.e. a call home.
server.on("connect", (req, sock) => {
  log({ home: req.url, method: "CONNECT" });
  sock.end("HTTP/1.1 403 Forbidden\r\n\r\n");
});
server.listen(0, "127.0.0.1", () => console.log(`capture listening on http://127.0.0.1:${server.address().port}`));
