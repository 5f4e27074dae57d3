// Lexer of the chat-template renderer (chat_ast.h): template source → text and tag tokens, with the
// whitespace control Hugging Face's apply_chat_template configures (trim_blocks, lstrip_blocks,
// `{%-`/`-%}` modifiers) and Jinja's dropping of one final newline. Not the parser.
// Reference: Jinja2 documentation, "Whitespace Control" and "Literals".
#include <cstdint>
#include <stdexcept>

#include "engine/tokenizer/chat_ast.h"

namespace hl::jinja {
namespace {

[[noreturn]] void fail(int line, const std::string& what) {
  throw std::runtime_error("line " + std::to_string(line) + ": " + what);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();  // Jinja: keep_trailing_newline=False
  }

  std::vector<Token> run() {
    bool strip_next = false;  // the previous tag ended with `-`
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_line = line_;
      advance_to(tag);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      }
      strip_next = false;
      if (tag < src_.size()) {
        const char kind = src_[tag + 1];
        const char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
        if (mod == '-') {
          while (!text.empty() && is_space(text.back())) text.pop_back();
        } else if ((kind == '%' || kind == '#') && mod != '+') {
          // lstrip_blocks: spaces and tabs between a line start and a block or comment tag.
          size_t k = tag;
          while (k > 0 && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
          if (k == 0 || src_[k - 1] == '\n') {
            const size_t drop = tag - k;
            text.erase(text.size() - std::min(drop, text.size()));
          }
        }
      }
      if (!text.empty()) out_.push_back(Token{Token::Text, std::move(text), 0, 0.0, text_line});
      if (tag >= src_.size()) break;
      strip_next = lex_tag();
    }
    out_.push_back(Token{Token::End, "", 0, 0.0, line_});
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return src_.size();
  }

  void advance_to(size_t p) {
    for (; pos_ < p && pos_ < src_.size(); ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }

  // Lexes one tag starting at pos_; returns whether it ends with the `-` modifier.
  bool lex_tag() {
    const int open_line = line_;
    const char kind = src_[pos_ + 1];
    advance_to(pos_ + 2);
    if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) advance_to(pos_ + 1);
    if (kind == '#') {
      const size_t end = src_.find("#}", pos_);
      if (end == std::string::npos) fail(open_line, "unterminated comment '{#' (no '#}')");
      const bool strip = end > pos_ && src_[end - 1] == '-';
      advance_to(end + 2);
      if (!strip) trim_newline();
      return strip;
    }
    out_.push_back(Token{kind == '{' ? Token::OutputOpen : Token::BlockOpen, "", 0, 0.0, open_line});
    const char close = kind == '{' ? '}' : '%';
    int depth = 0;
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        fail(open_line, std::string("unterminated tag '{") + kind + "' (no '" + close + "}')");
      const char c = src_[pos_];
      const char n = pos_ + 1 < src_.size() ? src_[pos_ + 1] : '\0';
      const char n2 = pos_ + 2 < src_.size() ? src_[pos_ + 2] : '\0';
      if (depth == 0 && ((c == close && n == '}') || ((c == '-' || c == '+') && n == close && n2 == '}'))) {
        const bool strip = c == '-';
        advance_to(pos_ + (c == close ? 2 : 3));
        out_.push_back(Token{kind == '{' ? Token::OutputClose : Token::BlockClose, "", 0, 0.0, line_});
        if (c == close && kind == '%') trim_newline();  // `+%}` keeps the newline
        return strip;
      }
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < src_.size() && (is_name_start(src_[e]) || is_digit(src_[e]))) ++e;
        out_.push_back(Token{Token::Name, src_.substr(pos_, e - pos_), 0, 0.0, line_});
        advance_to(e);
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* const two[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two)
          if (c == t[0] && n == t[1]) op = t;
        if (op.size() == 1 && std::string("+-*/%~<>=()[]{},.:|").find(c) == std::string::npos)
          fail(line_, std::string("unexpected character '") + (static_cast<unsigned char>(c) < 0x20 ? '?' : c) +
                          "' inside a tag");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        out_.push_back(Token{Token::Op, op, 0, 0.0, line_});
        advance_to(pos_ + op.size());
      }
    }
  }

  void trim_newline() {
    if (pos_ < src_.size() && src_[pos_] == '\n') advance_to(pos_ + 1);
  }

  void lex_number() {
    size_t e = pos_;
    while (e < src_.size() && (is_digit(src_[e]) || src_[e] == '_')) ++e;
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      is_float = true;
      ++e;
      while (e < src_.size() && (is_digit(src_[e]) || src_[e] == '_')) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && is_digit(src_[k])) {
        is_float = true;
        e = k;
        while (e < src_.size() && is_digit(src_[e])) ++e;
      }
    }
    std::string text;
    for (size_t k = pos_; k < e; ++k)
      if (src_[k] != '_') text += src_[k];
    Token t{is_float ? Token::Float : Token::Int, text, 0, 0.0, line_};
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      if (text.size() > 18) fail(line_, "integer literal " + text.substr(0, 24) + " is too large (at most 18 digits)");
      t.i = std::stoll(text);
    }
    out_.push_back(std::move(t));
    advance_to(e);
  }

  void lex_string(char quote) {
    const int start_line = line_;
    std::string v;
    size_t k = pos_ + 1;
    for (;;) {
      if (k >= src_.size()) fail(start_line, "unterminated string literal");
      const char c = src_[k];
      if (c == quote) break;
      if (c != '\\') {
        v += c;
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) fail(start_line, "unterminated string literal");
      const char e = src_[k + 1];
      k += 2;
      switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case '0': v += '\0'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case '\n': break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (k + len > src_.size()) fail(start_line, std::string("truncated \\") + e + " escape in a string literal");
          uint32_t cp = 0;
          for (size_t j = 0; j < len; ++j) {
            const char h = src_[k + j];
            const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) fail(start_line, std::string("bad hex digit in a \\") + e + " escape");
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(start_line, "escape names no Unicode scalar value");
          append_utf8(v, cp);
          k += len;
          break;
        }
        default:  // Python keeps unknown escapes as written
          v += '\\';
          v += e;
      }
    }
    out_.push_back(Token{Token::String, std::move(v), 0, 0.0, start_line});
    advance_to(k + 1);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string& src) {
  return Lexer(src).run();
}

}  // namespace hl::jinja
