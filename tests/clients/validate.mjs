// validate.mjs -- the independent check of plume's structured outputs: every answer must be
// JSON valid against its schema, as ajv (draft 2020-12, with ajv-formats' full formats) says.
//
// usage: node tests/clients/validate.mjs FILE.jsonl
// Each line of FILE is {"label": "...", "schema": <JSON Schema>, "answer": "<text>"}, written
// by tests/test_structured.c. Prints "ok N answers" or one "not ok LABEL: why" per failure
// (the answer, ajv's errors) and exits 1 when any answer is not valid JSON or not valid.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const file = process.argv[2];
if (!file) {
  console.error("usage: node tests/clients/validate.mjs FILE.jsonl");
  process.exit(2);
}

const compiled = new Map(); // schema text -> validate function (one Ajv per schema: $id may repeat)
function validator(schema) {
  const key = JSON.stringify(schema);
  if (!compiled.has(key)) {
    const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
    addFormats(ajv, { mode: "full" });
    compiled.set(key, ajv.compile(schema));
  }
  return compiled.get(key);
}

const lines = readFileSync(file, "utf8").split("\n").filter((l) => l.trim());
let bad = 0;
for (const line of lines) {
  const { label, schema, answer } = JSON.parse(line);
  let value;
  try {
    value = JSON.parse(answer);
  } catch (e) {
    console.log(`not ok ${label}: not JSON (${e.message}): ${JSON.stringify(answer)}`);
    bad++;
    continue;
  }
  const v = validator(schema);
  if (!v(value)) {
    console.log(`not ok ${label}: ${JSON.stringify(v.errors)}\n  answer: ${answer}`);
    bad++;
  }
}
if (lines.length === 0) {
  console.log("not ok: no answers in " + file);
  process.exit(1);
}
console.log(bad ? `${bad} of ${lines.length} answers invalid` : `ok ${lines.length} answers`);
process.exit(bad ? 1 : 0);
