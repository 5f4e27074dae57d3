// Methods and globals of the chat-template renderer (chat_eval.h): the Python str and dict methods
// templates call (strip, split, startswith, replace, format, join, items, get, ...) and the globals
// transformers provides (range, namespace, dict, raise_exception, strftime_now). Case mapping is
// ASCII only. Reference: Python str/dict methods; transformers' chat template globals.
#include <ctime>

#include "engine/tokenizer/chat_text.h"

namespace hl::jinja {

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
        else if (name == "isalpha") ok &= is_ascii_alpha(c);
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
    Value v = Value::make_dict(std::move(d), name == "namespace");
    if (name == "namespace") namespaces_.push_back(v.dict);
    return v;
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
