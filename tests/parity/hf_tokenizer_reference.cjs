// The reference side of the tokenizer parity test: Hugging Face's own
// JavaScript tokenizers (@huggingface/tokenizers, the library
// @huggingface/transformers' AutoTokenizer runs) encode and decode the test
// strings. sao's side is tests/test_parity_tokenizer.cpp.
//
//   node hf_tokenizer_reference.cjs NPM_DIR TOKENIZER_DIR IN.jsonl OUT.jsonl
//
// NPM_DIR holds node_modules/@huggingface/tokenizers. Each input line is
// {"hex": "<the string's bytes>"}; invalid UTF-8 in it is decoded the way
// every UTF-8 reader in the HF stack does (U+FFFD per maximal bad sequence,
// WHATWG TextDecoder). Each output line is {"ids": [...] (no special tokens
// added), "decoded_hex": hex of decode(ids), "skip_hex": hex of decode(ids,
// skip_special_tokens), "round_trips": decode(ids) == the decoded input}.
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [npmDir, tokenizerDir, inPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node hf_tokenizer_reference.cjs NPM_DIR TOKENIZER_DIR IN.jsonl OUT.jsonl");
  process.exit(2);
}
const { Tokenizer } = createRequire(path.join(path.resolve(npmDir), "package.json"))("@huggingface/tokenizers");
const readJson = (name) => JSON.parse(fs.readFileSync(path.join(tokenizerDir, name), "utf8"));
const configPath = path.join(tokenizerDir, "tokenizer_config.json");
const tokenizer = new Tokenizer(readJson("tokenizer.json"), fs.existsSync(configPath) ? readJson("tokenizer_config.json") : {});
// ignoreBOM keeps a leading U+FEFF as text (by default TextDecoder eats it).
const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const hex = (text) => Buffer.from(text, "utf8").toString("hex");

const out = [];
for (const line of fs.readFileSync(inPath, "utf8").split("\n")) {
  if (!line) continue;
  const text = utf8.decode(Buffer.from(JSON.parse(line).hex, "hex"));
  const ids = tokenizer.encode(text, { add_special_tokens: false }).ids.map(Number);
  // decode() refuses an empty list; nothing decodes to nothing.
  const decoded = ids.length ? tokenizer.decode(ids) : "";
  const skipped = ids.length ? tokenizer.decode(ids, { skip_special_tokens: true }) : "";
  out.push(JSON.stringify({ ids, decoded_hex: hex(decoded), skip_hex: hex(skipped), round_trips: decoded === text }));
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
