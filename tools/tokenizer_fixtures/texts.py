# The hard texts of the tokenizer exactness tests (tests/engine/test_hf_tokenizer.cpp): written for
# this project. Run to write tests/data/tokenizers/texts.json; gen_expected.js encodes each with
# Hugging Face's own tokenizers (the Rust library through its Node binding).
import json, sys
T = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog. It's 3:45pm, isn't it? We'll see; they've gone, I'd say.",
    "I'M SHOUTING and I'm not; YOU'LL see, you'Ll see.",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "مرحبا بالعالم، هذا نص عربي.",
    "שלום עולם, זה טקסט בעברית.",
    "नमस्ते दुनिया, यह हिन्दी पाठ है।",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε, αβγδε ΑΒΓΔΕ.",
    "Emoji 😀👍🏽 family 👨‍👩‍👧‍👦 and 🏳️‍🌈 flags 🇩🇪🇯🇵🇺🇸",
    "Ligatures ﬁ ﬂ ﬃ and full-width ＡＢＣ１２３！ and ½ ² ℃ ㎏",
    "  two leading spaces, three   inside,\ttab\t\tdouble tab  ",
    "line one\nline two\n\n\nthree newlines\r\nCRLF\r\n\r\nend",
    "non\u00a0breaking\u00a0spaces and\u2003em\u2003space and \u200bzero width",
    "def f(x):\n    return [i**2 for i in range(x) if i % 3 == 0]  # comment\n",
    "int main() {\n\tprintf(\"%d\\n\", a[i] >> 2);\n\treturn 0;\n}\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" * 3,
    "ababababababababababababab " * 4,
    "!!!!!!????....,,,,;;;;----____====",
    "1234567890 3.14159 1,000,000 -42 +7e-10 0x1F 2026-12-01",
    "Café naïve résumé coöperate Ångström e\u0301 (decomposed)",
    "<s>not special</s> <|endoftext|> text <|im_start|>user\nhi<|im_end|> [CLS] [SEP] <unk> </s>",
    "<|begin_of_text|>Hello<|eot_id|> and <|start_header_id|>",
    " ",
    "",
    "\n",
    "a",
    "Mixed: English, Русский, 中文, العربية, हिन्दी, ελληνικά, עברית 🙂",
    "Tabs\tand\vvertical\ftab and \x01 control \x7f chars",
    "URL https://example.com/path?q=1&r=two#frag and email a.b@c.de",
    "HeLLo WoRLD, camelCaseWord and snake_case_word and kebab-case-word",
    "😀😀😀😀😀 💩 🫠 ❤️ ✈️ ☃",
    "   ",
    "end with space ",
]
if __name__ == "__main__":
    json.dump(T, open(sys.argv[1], "w", encoding="utf-8"), ensure_ascii=False, indent=0)
