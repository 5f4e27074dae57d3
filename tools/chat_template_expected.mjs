// Writes the expected renderings of the chat-template fixtures (tests/data/chat_templates/) with an
// independent Jinja implementation, @huggingface/jinja (npm), so that test_chat_template.cpp can
// compare HybridLens's renderer byte for byte. Run once when fixtures change, never at test time:
//   npm install --prefix /tmp/hfjinja @huggingface/jinja@0.5.11
//   node tools/chat_template_expected.mjs tests/data/chat_templates /tmp/hfjinja/node_modules/@huggingface/jinja
// Reads DIR/templates.json ({name: {file, bos_token, eos_token} or {dir}: a checkpoint folder}) and
// DIR/conversations.json ({name: [messages]}); writes DIR/expected.json: one row per template × conversation ×
// add_generation_prompt, with the output or the error. The clock is pinned to 2024-07-26 UTC.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [dir, jinjaDir] = process.argv.slice(2);
if (!dir || !jinjaDir) {
  console.error("usage: node tools/chat_template_expected.mjs FIXTURE_DIR PATH/TO/@huggingface/jinja");
  process.exit(2);
}
const pkg = JSON.parse(fs.readFileSync(path.join(jinjaDir, "package.json"), "utf8"));
const { Template } = await import(pathToFileURL(path.join(jinjaDir, "dist/index.js")).href);

// strftime_now reads the clock in local time: pin both (C++ tests set ChatTemplateLimits::now to it).
process.env.TZ = "UTC";
const NOW_MS = 1721952000 * 1000;  // 2024-07-26T00:00:00Z
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) {
    super(...(a.length ? a : [NOW_MS]));
  }
  static now() {
    return NOW_MS;
  }
};

const templates = JSON.parse(fs.readFileSync(path.join(dir, "templates.json"), "utf8"));
const conversations = JSON.parse(fs.readFileSync(path.join(dir, "conversations.json"), "utf8"));
const rows = [];
// A checkpoint folder's template and tokens, looked up as transformers does: chat_template.jinja,
// else chat_template.json, else tokenizer_config.json ("default" of a list of named templates).
function fromCheckpoint(folder) {
  const read = (f) => fs.readFileSync(path.join(folder, f), "utf8");
  const exists = (f) => fs.existsSync(path.join(folder, f));
  const cfg = exists("tokenizer_config.json") ? JSON.parse(read("tokenizer_config.json")) : {};
  const token = (v) => (v == null ? "" : typeof v === "string" ? v : v.content);
  const pick = (t) => (Array.isArray(t) ? t.find((x) => x.name === "default").template : t);
  const source = exists("chat_template.jinja") ? read("chat_template.jinja")
    : exists("chat_template.json") ? pick(JSON.parse(read("chat_template.json")).chat_template)
    : pick(cfg.chat_template);
  const extra = {};
  for (const k of ["pad_token", "unk_token"]) if (token(cfg[k])) extra[k] = token(cfg[k]);
  return { source, bos_token: token(cfg.bos_token), eos_token: token(cfg.eos_token), extra };
}

for (const [name, t] of Object.entries(templates)) {
  const spec = t.dir ? fromCheckpoint(path.join(dir, t.dir))
    : { source: fs.readFileSync(path.join(dir, t.file), "utf8"), bos_token: t.bos_token, eos_token: t.eos_token, extra: {} };
  const tpl = new Template(spec.source);
  for (const [conv, messages] of Object.entries(conversations)) {
    for (const agp of [false, true]) {
      const ctx = {
        messages, tools: null, documents: null, add_generation_prompt: agp,
        bos_token: spec.bos_token, eos_token: spec.eos_token, ...spec.extra,
      };
      const row = { template: name, conversation: conv, add_generation_prompt: agp };
      try {
        row.output = tpl.render(ctx);
      } catch (e) {
        row.error = String(e.message ?? e);
      }
      rows.push(row);
    }
  }
}
const out = { generator: `@huggingface/jinja ${pkg.version}`, rows };
fs.writeFileSync(path.join(dir, "expected.json"), JSON.stringify(out, null, 1) + "\n");
console.log(`${rows.length} rows (${rows.filter((r) => r.error).length} errors) -> ${path.join(dir, "expected.json")}`);
