// bench_tokenizer's reference side: seconds Hugging Face's JavaScript
// tokenizers take to encode the documents (a JSON array of strings), after
// one warm-up pass over the first tenth.
//   node tokenizer_reference_speed.cjs NPM_DIR TOKENIZER_DIR DOCUMENTS.json
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");
const [npmDir, tokenizerDir, documentsPath] = process.argv.slice(2);
const { Tokenizer } = createRequire(path.join(path.resolve(npmDir), "package.json"))("@huggingface/tokenizers");
const read = (name) => JSON.parse(fs.readFileSync(path.join(tokenizerDir, name), "utf8"));
const config = fs.existsSync(path.join(tokenizerDir, "tokenizer_config.json")) ? read("tokenizer_config.json") : {};
const tokenizer = new Tokenizer(read("tokenizer.json"), config);
const documents = JSON.parse(fs.readFileSync(documentsPath, "utf8"));
for (const d of documents.slice(0, Math.ceil(documents.length / 10))) tokenizer.encode(d, { add_special_tokens: false });
const start = process.hrtime.bigint();
for (const d of documents) tokenizer.encode(d, { add_special_tokens: false });
console.log(Number(process.hrtime.bigint() - start) / 1e9);
