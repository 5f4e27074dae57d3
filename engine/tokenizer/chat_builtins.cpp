// Built-ins of the chat-template renderer (chat_eval.h): Jinja filters, tests, the string and
// dict methods templates call (Python's str/dict), and the globals transformers provides (range,
// namespace, dict, raise_exception, strftime_now). Case mapping is ASCII only. Not the evaluator.
// Reference: Jinja2 documentation, "List of Builtin Filters/Tests"; Python str methods.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "engine/tokenizer/chat_eval.h"

namespace hl::jinja {
namespace {

// Length in bytes of a Python whitespace character at s[k] (ASCII and the Unicode spaces), else 0.
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

std::string ascii_map(std::string s, int (*f)(int)) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(const std::string& s) { return ascii_map(s, [](int c) { return (c >= 'a' && c <= 'z') ? c - 32 : c; }); }
std::string lower(const std::string& s) { return ascii_map(s, [](int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }); }
bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Python's str.title(): a letter after a non-letter starts a word.
std::string title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (is_alpha(u)) {
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

}  // namespace

bool Evaluator::test(const std::string& name, const Value& v, Args& args) {
  const Value* a = args.get(0, "value");
  auto need = [&]() -> const Value& {
    if (!a) fail("test '" + name + "' needs an argument");
    return *a;
  };
  auto cmp = [&](bool (*f)(const Value&, const Value&)) {
    try {
      return f(v, need());
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_str();
  if (name == "number") return v.kind == Value::Int || v.kind == Value::Float;
  if (name == "integer") return v.kind == Value::Int;
  if (name == "float") return v.kind == Value::Float;
  if (name == "boolean") return v.kind == Value::Bool;
  if (name == "true") return v.kind == Value::Bool && v.b;
  if (name == "false") return v.kind == Value::Bool && !v.b;
  if (name == "mapping") return v.kind == Value::DictK;
  if (name == "iterable") return v.is_str() || v.is_list() || v.kind == Value::DictK;
  if (name == "sequence") return v.is_str() || v.is_list() || v.kind == Value::DictK;
  if (name == "callable") return v.kind == Value::Func;
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind != Value::Int) fail("test '" + name + "' needs an integer, not a " + type_name(v));
    if (name == "odd") return v.i % 2 != 0;
    if (name == "even") return v.i % 2 == 0;
    const int64_t d = int_arg(&need(), 1, "divisibleby", *this);
    if (d == 0) fail("divisibleby(0)");
    return v.i % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, need());
  if (name == "ne" || name == "!=") return !equal(v, need());
  if (name == "lt" || name == "lessthan" || name == "<") return cmp([](const Value& x, const Value& y) { return less(x, y); });
  if (name == "gt" || name == "greaterthan" || name == ">") return cmp([](const Value& x, const Value& y) { return less(y, x); });
  if (name == "le" || name == "<=") return cmp([](const Value& x, const Value& y) { return !less(y, x); });
  if (name == "ge" || name == ">=") return cmp([](const Value& x, const Value& y) { return !less(x, y); });
  if (name == "sameas") return equal(v, need()) && v.kind == need().kind;
  if (name == "in") {
    const Value& c = need();
    if (c.is_str() && v.is_str()) return c.s.find(v.s) != std::string::npos;
    if (c.is_list()) return std::any_of(c.list->begin(), c.list->end(), [&](const Value& e) { return equal(e, v); });
    if (c.is_mapping()) return v.is_str() && dict_get(*c.dict, v.s);
    return false;
  }
  if (name == "lower") return v.is_str() && lower(v.s) == v.s;
  if (name == "upper") return v.is_str() && upper(v.s) == v.s;
  fail("unknown test '" + name + "'");
}

Value Evaluator::filter(const std::string& name, const Value& v, Args& args) {
  const Value* a0 = args.pos.empty() ? nullptr : &args.pos[0];
  if (name == "trim" || name == "strip") {
    if (!v.is_str()) fail("filter trim: expected a string, not a " + std::string(type_name(v)));
    return Value::str(py_strip(v.s, args.get(0, "chars"), true, true));
  }
  if (name == "safe" || name == "string") return v.is_str() ? v : Value::str(to_str(v));
  if (name == "tojson") {
    const Value* ind = args.get(0, "indent");
    try {
      return Value::str(to_json(v, ind && !ind->is_none() ? static_cast<int>(std::clamp<int64_t>(int_arg(ind, 0, "tojson", *this), 0, 64)) : -1));
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
  }
  if (name == "length" || name == "count") {
    if (v.is_str()) return Value::integer(static_cast<int64_t>(utf8_offsets(v.s).size() - 1));
    if (v.is_list()) return Value::integer(static_cast<int64_t>(v.list->size()));
    if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.dict->size()));
    if (v.is_undefined()) return Value::integer(0);
    fail(std::string("filter length: a ") + type_name(v) + " has no length");
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "escape" || name == "e") {
    const std::string s = to_str(v);
    if (name == "upper") return Value::str(upper(s));
    if (name == "lower") return Value::str(lower(s));
    if (name == "title") return Value::str(title(s));
    if (name == "capitalize") return Value::str(capitalize(s));
    return Value::str(html_escape(s));
  }
  if (name == "replace") {
    if (args.pos.size() < 2) fail("filter replace needs (old, new)");
    return Value::str(replace_all(to_str(v), to_str(args.pos[0]), to_str(args.pos[1]),
                                  int_arg(args.get(2, "count"), -1, "replace", *this), *this));
  }
  if (name == "join") {
    const std::string sep = a0 ? to_str(*a0) : str_arg(args.get(0, "d"), "", "join", *this);
    const std::string attr = str_arg(args.get(1, "attribute"), "", "join", *this);
    std::string out;
    bool first = true;
    for (const Value& e : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attr.empty() ? e : attribute(e, attr));
      charge(sep.size());
    }
    return Value::str(std::move(out));
  }
  if (name == "first" || name == "last") {
    const List items = iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::make_list();
    if (!v.is_mapping()) fail(std::string("filter items: expected a dict, not a ") + type_name(v));
    return method(v, "items", args, nullptr);
  }
  if (name == "int" || name == "float") {
    const Value* dflt = args.get(0, "default");
    const bool as_int = name == "int";
    Value fallback = dflt ? *dflt : (as_int ? Value::integer(0) : Value::real(0.0));
    if (v.kind == Value::Int || v.kind == Value::Bool) return as_int ? Value::integer(v.kind == Value::Bool ? v.b : v.i) : Value::real(v.as_double());
    if (v.kind == Value::Float) {
      if (!as_int) return v;
      if (!std::isfinite(v.f) || std::fabs(v.f) > 9.2e18) return fallback;
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.is_str()) {
      const std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      if (as_int) {
        const long long x = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::integer(x);
      } else {
        const double x = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size()) return Value::real(x);
      }
    }
    return fallback;
  }
  if (name == "default" || name == "d") {
    const Value* b = args.get(1, "boolean");
    const bool use = (b && truthy(*b)) ? !truthy(v) : v.is_undefined();
    if (!use) return v;
    const Value* d = args.get(0, "default_value");
    return d ? *d : Value::str("");
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep = name == "selectattr" || name == "select";
    size_t k = 0;
    std::string attr;
    if (by_attr) {
      if (args.pos.empty() || !args.pos[0].is_str()) fail("filter " + name + " needs an attribute name");
      attr = args.pos[k++].s;
    }
    std::string test_name;
    if (k < args.pos.size()) {
      if (!args.pos[k].is_str()) fail("filter " + name + ": the test must be named by a string");
      test_name = args.pos[k++].s;
    }
    Args targs;
    for (; k < args.pos.size(); ++k) targs.pos.push_back(args.pos[k]);
    List out;
    for (const Value& e : iterate(v)) {
      const Value x = by_attr ? attribute(e, attr) : e;
      const bool ok = test_name.empty() ? truthy(x) : test(test_name, x, targs);
      if (ok == keep) out.push_back(e);
    }
    return Value::make_list(std::move(out));
  }
  if (name == "map") {
    const Value* attr = nullptr;
    for (const auto& kv : args.kw)
      if (kv.first == "attribute") attr = &kv.second;
    List out;
    if (attr) {
      const std::string path = to_str(*attr);
      const Value* dflt = nullptr;
      for (const auto& kv : args.kw)
        if (kv.first == "default") dflt = &kv.second;
      for (const Value& e : iterate(v)) {
        Value x = attribute(e, path);
        out.push_back(x.is_undefined() && dflt ? *dflt : x);
      }
    } else {
      if (!a0 || !a0->is_str()) fail("filter map needs attribute= or a filter name");
      Args fargs;
      fargs.pos.assign(args.pos.begin() + 1, args.pos.end());
      fargs.kw = args.kw;
      for (const Value& e : iterate(v)) out.push_back(filter(a0->s, e, fargs));
    }
    return Value::make_list(std::move(out));
  }
  if (name == "unique" || name == "sort" || name == "min" || name == "max") {
    const Value* cs = args.get(name == "sort" ? 1 : 0, "case_sensitive");
    const bool case_sensitive = cs && truthy(*cs);
    const std::string attr = str_arg(args.get(name == "sort" ? 2 : 1, "attribute"), "", name.c_str(), *this);
    List items = iterate(v);
    try {
      if (name == "unique") {
        List out, keys;
        for (const Value& e : items) {
          const Value key = sort_key(e, attr, case_sensitive);
          bool seen = false;
          for (const Value& k : keys) {
            step();
            if (equal(k, key)) {
              seen = true;
              break;
            }
          }
          if (!seen) {
            keys.push_back(key);
            out.push_back(e);
          }
        }
        return Value::make_list(std::move(out));
      }
      auto lt = [&](const Value& x, const Value& y) {
        step();
        return less(sort_key(x, attr, case_sensitive), sort_key(y, attr, case_sensitive));
      };
      if (name == "sort") {
        const Value* rev = args.get(0, "reverse");
        std::stable_sort(items.begin(), items.end(), lt);
        if (rev && truthy(*rev)) std::reverse(items.begin(), items.end());
        return Value::make_list(std::move(items));
      }
      if (items.empty()) return Value();
      return name == "min" ? *std::min_element(items.begin(), items.end(), lt)
                           : *std::max_element(items.begin(), items.end(), lt);
    } catch (const EvalError&) {
      throw;
    } catch (const std::runtime_error& e) {
      fail("filter " + name + ": " + e.what());
    }
  }
  if (name == "reverse") {
    if (v.is_str()) {
      const auto off = utf8_offsets(v.s);
      std::string out;
      for (size_t k = off.size() - 1; k > 0; --k) out += v.s.substr(off[k - 1], off[k] - off[k - 1]);
      return Value::str(std::move(out));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "abs") {
    if (v.kind == Value::Int) {
      if (v.i == INT64_MIN) fail("integer overflow in abs");
      return Value::integer(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == Value::Float) return Value::real(std::fabs(v.f));
    fail(std::string("filter abs: expected a number, not a ") + type_name(v));
  }
  if (name == "round") {
    if (!v.is_number()) fail(std::string("filter round: expected a number, not a ") + type_name(v));
    const int64_t prec = std::clamp<int64_t>(int_arg(args.get(0, "precision"), 0, "round", *this), -20, 20);
    const std::string method = str_arg(args.get(1, "method"), "common", "round", *this);
    const double scale = std::pow(10.0, static_cast<double>(prec));
    const double x = v.as_double() * scale;
    double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::round(x);
    if (method != "common" && method != "floor" && method != "ceil") fail("filter round: method must be common, ceil or floor");
    return Value::real(r / scale);
  }
  if (name == "indent") {
    const Value* w = args.get(0, "width");
    const std::string pad = (w && w->is_str()) ? w->s : std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg(w, 4, "indent", *this), 0, 256)), ' ');
    const Value* first = args.get(1, "first");
    const Value* blank = args.get(2, "blank");
    const std::string s = to_str(v);
    std::string out;
    size_t pos = 0;
    bool line0 = true;
    while (pos <= s.size()) {
      const size_t nl = s.find('\n', pos);
      const std::string ln = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      const bool indent = line0 ? (first && truthy(*first)) : (!ln.empty() || (blank && truthy(*blank)));
      if (indent) out += pad;
      out += ln;
      charge(pad.size() + ln.size());
      if (nl == std::string::npos) break;
      out += '\n';
      pos = nl + 1;
      line0 = false;
    }
    return Value::str(std::move(out));
  }
  if (name == "sum") {
    const std::string attr = str_arg(args.get(0, "attribute"), "", "sum", *this);
    const Value* start = args.get(1, "start");
    Value acc = start ? *start : Value::integer(0);
    for (const Value& e : iterate(v)) {
      const Value x = attr.empty() ? e : attribute(e, attr);
      if (!x.is_number() || !acc.is_number()) fail(std::string("filter sum: cannot add a ") + type_name(x));
      if (acc.kind == Value::Float || x.kind == Value::Float) acc = Value::real(acc.as_double() + x.as_double());
      else if (__builtin_add_overflow(acc.kind == Value::Bool ? acc.b : acc.i, x.kind == Value::Bool ? x.b : x.i, &acc.i)) fail("integer overflow in sum");
      else acc.kind = Value::Int;
    }
    return acc;
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) fail(std::string("filter dictsort: expected a dict, not a ") + type_name(v));
    Dict d = *v.dict;
    std::stable_sort(d.begin(), d.end(), [&](const auto& x, const auto& y) { step(); return lower(x.first) < lower(y.first); });
    List out;
    for (auto& kv : d) out.push_back(Value::make_list({Value::str(kv.first), kv.second}));
    return Value::make_list(std::move(out));
  }
  fail("unknown filter '" + name + "'");
}

Value Evaluator::method(const Value& obj, const std::string& name, Args& args, bool* found) {
  if (found) *found = true;
  const Value* a0 = args.get(0, "");
  if (obj.is_str()) {
    const std::string& s = obj.s;
    if (name == "strip") return Value::str(py_strip(s, a0, true, true));
    if (name == "lstrip") return Value::str(py_strip(s, a0, true, false));
    if (name == "rstrip") return Value::str(py_strip(s, a0, false, true));
    if (name == "upper") return Value::str(upper(s));
    if (name == "lower") return Value::str(lower(s));
    if (name == "title") return Value::str(title(s));
    if (name == "capitalize") return Value::str(capitalize(s));
    if (name == "startswith" || name == "endswith") {
      if (!a0) fail(name + "() needs an argument");
      return Value::boolean(starts_or_ends(s, *a0, name == "startswith", *this));
    }
    if (name == "split" || name == "rsplit")
      return Value::make_list(split(s, args.get(0, "sep"), int_arg(args.get(1, "maxsplit"), -1, name.c_str(), *this), name == "rsplit", *this));
    if (name == "splitlines") {
      Value nl = Value::str("\n");
      List parts = split(replace_all(s, "\r\n", "\n", -1, *this), &nl, -1, false, *this);
      if (!parts.empty() && parts.back().s.empty()) parts.pop_back();
      return Value::make_list(std::move(parts));
    }
    if (name == "replace") {
      if (args.pos.size() < 2 || !args.pos[0].is_str() || !args.pos[1].is_str()) fail("replace() needs two strings");
      return Value::str(replace_all(s, args.pos[0].s, args.pos[1].s, int_arg(args.get(2, "count"), -1, "replace", *this), *this));
    }
    if (name == "format") return Value::str(format(s, args, *this));
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& e : iterate(a0 ? *a0 : Value())) {
        if (!e.is_str()) fail(std::string("join() needs strings, found a ") + type_name(e));
        if (!first) out += s;
        first = false;
        out += e.s;
        charge(s.size() + e.s.size());
      }
      return Value::str(std::move(out));
    }
    if (name == "find" || name == "count") {
      const std::string sub = str_arg(a0, "", name.c_str(), *this);
      if (name == "find") {
        const size_t p = s.find(sub);
        if (p == std::string::npos) return Value::integer(-1);
        return Value::integer(static_cast<int64_t>(utf8_offsets(s.substr(0, p)).size() - 1));
      }
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_offsets(s).size()));
      int64_t c = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++c;
      return Value::integer(c);
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "islower" || name == "isupper") {
      if (s.empty()) return Value::boolean(false);
      bool ok = true, cased = false;
      for (unsigned char c : s) {
        if (name == "isdigit") ok &= c >= '0' && c <= '9';
        else if (name == "isalpha") ok &= is_alpha(c);
        else if (name == "isspace") ok &= space_len(std::string(1, static_cast<char>(c)), 0) == 1;
        else if (name == "islower") { ok &= !(c >= 'A' && c <= 'Z'); cased |= c >= 'a' && c <= 'z'; }
        else { ok &= !(c >= 'a' && c <= 'z'); cased |= c >= 'A' && c <= 'Z'; }
      }
      return Value::boolean(ok && (name.substr(0, 3) != "isl" && name.substr(0, 3) != "isu" ? true : cased));
    }
  } else if (obj.kind == Value::DictK) {
    const Dict& d = *obj.dict;
    if (name == "items" || name == "keys" || name == "values") {
      List out;
      for (const auto& kv : d) {
        step();
        if (name == "items") out.push_back(Value::make_list({Value::str(kv.first), kv.second}));
        else if (name == "keys") out.push_back(Value::str(kv.first));
        else out.push_back(kv.second);
      }
      return Value::make_list(std::move(out));
    }
    if (name == "get") {
      if (!a0) fail("get() needs a key");
      const Value* v = a0->is_str() ? dict_get(d, a0->s) : nullptr;
      if (v) return *v;
      const Value* dflt = args.get(1, "default");
      return dflt ? *dflt : Value::none();
    }
  }
  if (found) *found = false;
  return Value();
}

Value Evaluator::global(const std::string& name, Args& args, bool* found) {
  *found = true;
  if (name == "range") {
    if (args.pos.empty() || args.pos.size() > 3) fail("range() takes 1 to 3 integers");
    int64_t start = 0, stop = 0, stride = 1;
    if (args.pos.size() == 1) {
      stop = int_arg(&args.pos[0], 0, "range", *this);
    } else {
      start = int_arg(&args.pos[0], 0, "range", *this);
      stop = int_arg(&args.pos[1], 0, "range", *this);
      if (args.pos.size() == 3) stride = int_arg(&args.pos[2], 1, "range", *this);
    }
    if (stride == 0) fail("range() step must not be zero");
    List out;
    for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
      step();
      out.push_back(Value::integer(i));
      if ((stride > 0 && i > INT64_MAX - stride) || (stride < 0 && i < INT64_MIN - stride)) break;
    }
    return Value::make_list(std::move(out));
  }
  if (name == "namespace" || name == "dict") {
    Dict d;
    for (const Value& p : args.pos) {
      if (!p.is_mapping()) fail(name + "() takes a dict or keyword arguments, not a " + type_name(p));
      for (const auto& kv : *p.dict) dict_set(d, kv.first, kv.second);
    }
    for (const auto& kv : args.kw) dict_set(d, kv.first, kv.second);
    return Value::make_dict(std::move(d), name == "namespace");
  }
  if (name == "raise_exception") {
    throw EvalError("template error: " + (args.pos.empty() ? std::string("(no message)") : to_str(args.pos[0])));
  }
  if (name == "strftime_now") {
    const std::string fmt = str_arg(args.get(0, "format"), "", "strftime_now", *this);
    if (fmt.size() > 256) fail("strftime_now: format longer than 256 bytes");
    std::tm tm{};
    if (limits_.now >= 0) {
      const std::time_t t = static_cast<std::time_t>(limits_.now);
      gmtime_r(&t, &tm);
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    char buf[2048];
    const size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::str(std::string(buf, n));
  }
  *found = false;
  return Value();
}

}  // namespace hl::jinja
