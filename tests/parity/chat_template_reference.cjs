// Reference side of tests/test_parity_chat_template.cpp: renders chat
// templates with Hugging Face's JavaScript Jinja (@huggingface/jinja, what
// transformers.js' apply_chat_template runs).
//
//   node chat_template_reference.cjs NODE_MODULES CASES.json OUT.json
//
// CASES.json: [{"template": "...", "variables": {...}}, ...]
// OUT.json:   [{"text": "..."} or {"error": "..."}, ...] in the same order.
"use strict";
const fs = require("fs");
const path = require("path");

const [modules, casesPath, outPath] = process.argv.slice(2);
const { Template } = require(path.join(modules, "@huggingface/jinja"));
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const compiled = new Map();
const results = cases.map((item) => {
  try {
    if (!compiled.has(item.template)) compiled.set(item.template, new Template(item.template));
    return { text: compiled.get(item.template).render(item.variables) };
  } catch (error) {
    return { error: String(error && error.message ? error.message : error) };
  }
});
fs.writeFileSync(outPath, JSON.stringify(results));
