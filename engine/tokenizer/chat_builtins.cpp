// Built-in filters and tests of the chat-template renderer (chat_eval.h): Jinja's filters (trim,
// tojson, length, join, map, selectattr, sort, unique, default, indent, ...) and tests (defined,
// none, string, mapping, iterable, divisibleby, ...). Not string/dict methods (chat_methods.cpp).
// Reference: Jinja2 documentation, "List of Builtin Filters" and "List of Builtin Tests".
#include <algorithm>
#include <cerrno>
#include <cmath>

#include "engine/tokenizer/chat_text.h"

namespace hl::jinja {

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


}  // namespace hl::jinja
