// Expected ids for the tokenizer exactness tests, produced once by Hugging Face's own tokenizers
// (the Rust library through its Node binding, npm `tokenizers`), never at test time.
// usage: node gen_expected.js tokenizer.json texts.json out.json  (run by make_fixtures.sh)
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
async function main() {
  const [file, textsFile, out] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(file);
  const texts = JSON.parse(fs.readFileSync(textsFile, 'utf8'));
  const cases = [];
  for (const text of texts) {
    const withSpecial = await tok.encode(text, null, { addSpecialTokens: true });
    const plain = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = withSpecial.getIds();
    cases.push({
      text,
      ids,
      ids_no_special: plain.getIds(),
      tokens: withSpecial.getTokens(),
      decoded: await tok.decode(ids, false),
    });
  }
  fs.writeFileSync(out, JSON.stringify({ generator: 'npm tokenizers ' + require('tokenizers/package.json').version, cases }) + '\n');
}
main().catch((e) => { console.error(e); process.exit(1); });
