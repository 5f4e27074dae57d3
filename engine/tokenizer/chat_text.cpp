// Text helpers of the chat-template renderer (chat_text.h): Python's str.strip/split/replace/
// title/capitalize/format with its whitespace set, ASCII case mapping, dotted attribute lookup,
// HTML escaping and argument coercion shared by the filters and methods. Not the filters themselves.
// Reference: Python str methods; Jinja2 filters `attr`, `escape`.
#include "engine/tokenizer/chat_text.h"

#include <algorithm>

namespace hl::jinja {

namespace {
std::string ascii_map(std::string s, int (*f)(int)) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

bool is_ascii_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

size_t space_len(const std::string& s, size_t k) {
  const unsigned char c = static_cast<unsigned char>(s[k]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  auto at = [&](size_t j) { return k + j < s.size() ? static_cast<unsigned char>(s[k + j]) : 0u; };
  if (c == 0xC2 && (at(1) == 0x85 || at(1) == 0xA0)) return 2;
  if (c == 0xE1 && at(1) == 0x9A && at(2) == 0x80) return 3;
  if (c == 0xE2 && at(1) == 0x80 && (at(2) <= 0x8A || at(2) == 0xA8 || at(2) == 0xA9 || at(2) == 0xAF)) return 3;
  if (c == 0xE2 && at(1) == 0x81 && at(2) == 0x9F) return 3;
  if (c == 0xE3 && at(1) == 0x80 && at(2) == 0x80) return 3;
  return 0;
}

// Python's str.strip/lstrip/rstrip: whitespace, or any of the characters (code points) of `chars`.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  const bool ws = !chars || chars->is_none() || chars->is_undefined();
  std::vector<std::string> set;
  if (!ws) {
    const auto off = utf8_offsets(chars->s);
    for (size_t k = 0; k + 1 < off.size(); ++k) set.push_back(chars->s.substr(off[k], off[k + 1] - off[k]));
  }
  const auto off = utf8_offsets(s);
  size_t b = 0, e = off.size() - 1;  // character indices [b, e)
  auto strippable = [&](size_t ci) {
    const std::string ch = s.substr(off[ci], off[ci + 1] - off[ci]);
    if (ws) return space_len(s, off[ci]) == ch.size();
    return std::find(set.begin(), set.end(), ch) != set.end();
  };
  if (left)
    while (b < e && strippable(b)) ++b;
  if (right)
    while (e > b && strippable(e - 1)) --e;
  return s.substr(off[b], off[e] - off[b]);
}

std::string upper(const std::string& s) { return ascii_map(s, [](int c) { return (c >= 'a' && c <= 'z') ? c - 32 : c; }); }
std::string lower(const std::string& s) { return ascii_map(s, [](int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }); }

// Python's str.title(): a letter after a non-letter starts a word.
std::string title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (is_ascii_alpha(u)) {
      c = static_cast<char>(prev_letter ? lower(std::string(1, c))[0] : upper(std::string(1, c))[0]);
      prev_letter = true;
    } else {
      prev_letter = u >= 0x80;  // continuation of a non-ASCII letter keeps the word going
    }
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = upper(out.substr(0, 1))[0];
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                        Evaluator& ev) {
  std::string out;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` around every character
    const auto off = utf8_offsets(s);
    for (size_t k = 0; k + 1 < off.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += s.substr(off[k], off[k + 1] - off[k]);
      ev.charge(to.size() + 1);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t pos = 0;
  for (;;) {
    const size_t hit = (count >= 0 && done >= count) ? std::string::npos : s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    ev.charge(to.size());
    ++done;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python's str.split(sep=None, maxsplit=-1) and rsplit.
List split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right, Evaluator& ev) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    std::string cur;
    bool in_word = false;
    size_t k = 0;
    std::vector<std::pair<size_t, size_t>> words;
    while (k < s.size()) {
      const size_t sp = space_len(s, k);
      if (sp) {
        if (in_word) words.back().second = k;
        in_word = false;
        k += sp;
      } else {
        if (!in_word) words.emplace_back(k, s.size());
        in_word = true;
        ++k;
      }
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      if (!from_right) {
        for (int64_t w = 0; w < maxsplit; ++w) parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
        parts.push_back(py_strip(s.substr(words[maxsplit].first), nullptr, false, true));
      } else {
        const size_t first = words.size() - static_cast<size_t>(maxsplit);
        parts.push_back(py_strip(s.substr(0, words[first - 1].second), nullptr, true, false));
        for (size_t w = first; w < words.size(); ++w) parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
      }
    } else {
      for (auto& w : words) parts.push_back(s.substr(w.first, w.second - w.first));
    }
  } else {
    if (!sep->is_str()) ev.fail(std::string("split: the separator must be a string, not a ") + type_name(*sep));
    const std::string& d = sep->s;
    if (d.empty()) ev.fail("split: empty separator");
    std::vector<size_t> hits;
    for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, p + d.size())) hits.push_back(p);
    if (maxsplit >= 0 && static_cast<int64_t>(hits.size()) > maxsplit) {
      if (from_right) hits.erase(hits.begin(), hits.end() - maxsplit);
      else hits.resize(static_cast<size_t>(maxsplit));
    }
    size_t pos = 0;
    for (size_t h : hits) {
      parts.push_back(s.substr(pos, h - pos));
      pos = h + d.size();
    }
    parts.push_back(s.substr(pos));
  }
  List out;
  for (auto& p : parts) {
    ev.step();
    out.push_back(Value::str(std::move(p)));
  }
  return out;
}

bool starts_or_ends(const std::string& s, const Value& pat, bool start, Evaluator& ev) {
  auto one = [&](const Value& p) {
    if (!p.is_str()) ev.fail(std::string(start ? "startswith" : "endswith") + ": expected a string, not a " + type_name(p));
    if (p.s.size() > s.size()) return false;
    return start ? s.compare(0, p.s.size(), p.s) == 0 : s.compare(s.size() - p.s.size(), p.s.size(), p.s) == 0;
  };
  if (pat.is_list()) {
    for (const Value& p : *pat.list)
      if (one(p)) return true;
    return false;
  }
  return one(pat);
}

// Python's str.format with {} / {0} / {name} fields (no format specs).
std::string format(const std::string& fmt, const Args& args, Evaluator& ev) {
  std::string out;
  size_t auto_index = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    const char c = fmt[k];
    if ((c == '{' || c == '}') && k + 1 < fmt.size() && fmt[k + 1] == c) {
      out += c;
      ++k;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', k);
    if (close == std::string::npos) ev.fail("format: unmatched '{'");
    const std::string field = fmt.substr(k + 1, close - k - 1);
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.pos.size() ? &args.pos[auto_index++] : nullptr;
    } else if (field.find_first_not_of("0123456789") == std::string::npos && field.size() < 6) {
      const size_t i = static_cast<size_t>(std::stoul(field));
      v = i < args.pos.size() ? &args.pos[i] : nullptr;
    } else {
      for (const auto& kv : args.kw)
        if (kv.first == field) v = &kv.second;
    }
    if (!v) ev.fail("format: no argument for field '{" + field + "}'");
    out += to_str(*v);
    ev.charge(out.size());
    k = close;
  }
  return out;
}

// attribute "a.b" or "0" of v (dict keys, list indices), undefined when absent.
Value attribute(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (cur.is_mapping()) {
      const Value* n = dict_get(*cur.dict, part);
      cur = n ? *n : Value();
    } else if (cur.is_list() && !part.empty() && part.size() < 10 &&
               part.find_first_not_of("0123456789") == std::string::npos) {
      const size_t i = static_cast<size_t>(std::stoul(part));
      cur = i < cur.list->size() ? (*cur.list)[i] : Value();
    } else {
      return Value();
    }
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

int64_t int_arg(const Value* v, int64_t dflt, const char* what, Evaluator& ev) {
  if (!v || v->is_none()) return dflt;
  if (v->kind == Value::Int) return v->i;
  if (v->kind == Value::Bool) return v->b;
  ev.fail(std::string(what) + ": expected an integer, not a " + type_name(*v));
}

std::string str_arg(const Value* v, const std::string& dflt, const char* what, Evaluator& ev) {
  if (!v || v->is_none()) return dflt;
  if (!v->is_str()) ev.fail(std::string(what) + ": expected a string, not a " + type_name(*v));
  return v->s;
}

// Comparison key for sort/unique/min/max: strings lowered unless case_sensitive.
Value sort_key(const Value& v, const std::string& attr, bool case_sensitive) {
  Value k = attr.empty() ? v : attribute(v, attr);
  if (k.is_str() && !case_sensitive) k.s = lower(k.s);
  return k;
}

}  // namespace hl::jinja
