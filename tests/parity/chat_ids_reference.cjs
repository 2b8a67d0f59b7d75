// Reference side of tests/test_parity_tool_turns.cpp: what Hugging Face's
// JavaScript stack feeds a model for a conversation. The chat template is
// rendered with @huggingface/jinja (what transformers.js' apply_chat_template
// runs), with the special-token variables of tokenizer_config.json, and the
// text is encoded by @huggingface/tokenizers (add_special_tokens false: a
// chat template writes its own).
//
//   node chat_ids_reference.cjs NPM_DIR TOKENIZER_DIR CASES.json OUT.json
//
// CASES.json: [{"messages": [...], "tools": [...] (optional), "add_generation_prompt": true}, ...]
// OUT.json:   [{"text": "...", "ids": [...]} or {"error": "..."}, ...] in the same order.
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [npmDir, tokenizerDir, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node chat_ids_reference.cjs NPM_DIR TOKENIZER_DIR CASES.json OUT.json");
  process.exit(2);
}
const load = createRequire(path.join(path.resolve(npmDir), "package.json"));
const { Template } = load("@huggingface/jinja");
const { Tokenizer } = load("@huggingface/tokenizers");
const readJson = (name) => JSON.parse(fs.readFileSync(path.join(tokenizerDir, name), "utf8"));
const config = readJson("tokenizer_config.json");
const tokenizer = new Tokenizer(readJson("tokenizer.json"), config);
const template = new Template(config.chat_template);
const tokenText = (value) => (value && typeof value === "object" ? value.content : value) || "";
const specials = {};
for (const name of ["bos_token", "eos_token", "pad_token", "unk_token"]) specials[name] = tokenText(config[name]);

const results = JSON.parse(fs.readFileSync(casesPath, "utf8")).map((item) => {
  try {
    const variables = { ...specials, messages: item.messages, add_generation_prompt: item.add_generation_prompt };
    if (item.tools) variables.tools = item.tools;
    const text = template.render(variables);
    return { text, ids: tokenizer.encode(text, { add_special_tokens: false }).ids.map(Number) };
  } catch (error) {
    return { error: String(error && error.message ? error.message : error) };
  }
});
fs.writeFileSync(outPath, JSON.stringify(results));
