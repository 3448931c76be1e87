// validate_answers.mjs -- compliance of the answers bench_schema --answers wrote: each is
// parsed as JSON and validated by ajv against its schema, by the schema's draft ($schema:
// draft-04 through ajv-draft-04, 06/07 ajv's default, 2019-09 and 2020-12 their classes; none
// said: 2020-12), formats by ajv-formats (full). bench/jsonschemabench.sh runs it.
//
//   AJV_DIR=DIR node bench/validate_answers.mjs ANSWERS.jsonl
//
// AJV_DIR is a folder where `npm install ajv ajv-formats ajv-draft-04` was run (default
// tests/clients). Prints one "invalid LABEL: ..." line per answer ajv refuses, then
// "answers N valid V invalid I unchecked U" (unchecked: a schema ajv itself cannot compile);
// exits 1 when any answer is invalid.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const file = process.argv[2];
if (!file) {
  console.error("usage: AJV_DIR=DIR node bench/validate_answers.mjs ANSWERS.jsonl");
  process.exit(2);
}
const require = createRequire(path.resolve(process.env.AJV_DIR || "tests/clients", "x.js"));
const Ajv = require("ajv").default;
const Ajv2019 = require("ajv/dist/2019").default;
const Ajv2020 = require("ajv/dist/2020").default;
const AjvDraft04 = require("ajv-draft-04").default;
const addFormats = require("ajv-formats").default;

// A validate function for schema: the Ajv class of its draft, formats added.
function validator(schema) {
  const s = typeof schema === "object" && schema ? String(schema.$schema || "") : "";
  const opts = { strict: false, allErrors: true, validateFormats: true, validateSchema: false, logger: false };
  let ajv;
  if (/draft-0[34]/.test(s)) ajv = new AjvDraft04(opts);
  else if (/draft-0[67]/.test(s)) {
    ajv = new Ajv(opts);
    if (/draft-06/.test(s)) ajv.addMetaSchema(require("ajv/dist/refs/json-schema-draft-06.json"));
  } else if (/2019-09/.test(s)) ajv = new Ajv2019(opts);
  else ajv = new Ajv2020(opts);
  addFormats(ajv, { mode: "full" });
  return ajv.compile(schema);
}

const lines = readFileSync(file, "utf8").split("\n").filter((l) => l.trim());
let valid = 0, invalid = 0, unchecked = 0;
for (const line of lines) {
  const { label, schema, answer } = JSON.parse(line);
  let value;
  try {
    value = JSON.parse(answer);
  } catch (e) {
    console.log(`invalid ${label}: not JSON (${e.message}): ${JSON.stringify(answer).slice(0, 300)}`);
    invalid++;
    continue;
  }
  let v;
  try {
    v = validator(schema);
  } catch (e) {
    unchecked++;
    continue;
  }
  if (v(value)) valid++;
  else {
    console.log(`invalid ${label}: ${JSON.stringify(v.errors).slice(0, 600)}\n  answer: ${answer.slice(0, 600)}`);
    invalid++;
  }
}
console.log(`answers ${lines.length} valid ${valid} invalid ${invalid} unchecked ${unchecked}`);
process.exit(invalid ? 1 : 0);
