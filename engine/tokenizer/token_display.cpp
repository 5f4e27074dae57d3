// Token text as people read it (tokenizer.h): display_pieces over a sequence of ids, joining the
// bytes of byte-level and byte-fallback pieces into characters (a character split across tokens is
// shown where it completes, the bytes before it as \xNN escapes), and encode_prompt, the one rule for
// special tokens callers share. Not tokenization itself. Reference: Unicode Standard §3.9 (UTF-8).
#include <cstdio>

#include "engine/tokenizer/tokenizer.h"

namespace hl {
namespace {

// Bytes of the UTF-8 sequence a lead byte starts (0: not a lead byte).
size_t seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Whether s[0..n) is a valid UTF-8 prefix of one character (checks the second-byte ranges too).
bool valid_prefix(const std::string& s, size_t n) {
  const unsigned char c = static_cast<unsigned char>(s[0]);
  const size_t len = seq_len(c);
  if (len == 0 || n > len) return false;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char t = static_cast<unsigned char>(s[k]);
    unsigned lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (t < lo || t > hi) return false;
  }
  return true;
}

void escape_byte(std::string& out, unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", b);
  out += buf;
}

void append_char(std::string& out, const std::string& ch) {
  if (ch.size() == 1) {
    const unsigned char b = static_cast<unsigned char>(ch[0]);
    if (b == '\n') out += "\\n";
    else if (b == '\t') out += "\\t";
    else if (b == '\r') out += "\\r";
    else if (b < 0x20 || b == 0x7F) escape_byte(out, b);
    else out += ch;
    return;
  }
  out += ch;
}

}  // namespace

std::vector<std::string> display_pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out(ids.size());
  std::string pending;  // the start of a character the previous tokens began
  const int64_t n_vocab = tok.vocab_size();
  for (size_t t = 0; t < ids.size(); ++t) {
    const int32_t id = ids[t];
    std::string& disp = out[t];
    if (id < 0 || id >= n_vocab || tok.raw_piece(id).empty()) {
      disp = "<id " + std::to_string(id) + ">";
      pending.clear();
      continue;
    }
    const std::string bytes = tok.token_bytes(id);
    if (tok.is_special(id)) {
      disp = bytes;
      pending.clear();
      continue;
    }
    size_t i = 0;
    if (!pending.empty()) {
      const std::string trial = pending + bytes;
      const size_t need = seq_len(static_cast<unsigned char>(trial[0]));
      if (trial.size() >= need && valid_prefix(trial, need)) {
        disp += trial.substr(0, need);  // the character completes here
        i = need - pending.size();
        pending.clear();
      } else if (trial.size() < need && valid_prefix(trial, trial.size())) {
        for (unsigned char b : bytes) escape_byte(disp, b);  // still incomplete: carry on
        pending = trial;
        continue;
      } else {
        pending.clear();
      }
    }
    while (i < bytes.size()) {
      const size_t need = seq_len(static_cast<unsigned char>(bytes[i]));
      const size_t left = bytes.size() - i;
      const std::string rest = bytes.substr(i, need == 0 ? 1 : std::min(need, left));
      if (need != 0 && left >= need && valid_prefix(rest, need)) {
        append_char(disp, rest);
        i += need;
      } else if (need != 0 && left < need && valid_prefix(rest, left)) {
        for (unsigned char b : rest) escape_byte(disp, b);  // begins a character the next token ends
        pending = rest;
        i = bytes.size();
      } else {
        escape_byte(disp, static_cast<unsigned char>(bytes[i]));
        ++i;
      }
    }
  }
  return out;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text, bool add_special, int64_t bos_token_id) {
  if (!add_special) return tok.encode(text);
  if (tok.adds_special_tokens()) return tok.encode_special(text);
  std::vector<int32_t> ids;
  if (bos_token_id >= 0) ids.push_back(static_cast<int32_t>(bos_token_id));
  for (int32_t id : tok.encode(text)) ids.push_back(id);
  return ids;
}

}  // namespace hl
