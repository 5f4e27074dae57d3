// Values of the chat-template renderer (chat_value.h): truthiness, equality, ordering, str(), repr()
// and tojson with Python's spelling (json.dumps separators, float repr). Not the evaluator.
// Reference: Python's float.__repr__ (shortest round-trip digits) and json.dumps.
#include "engine/tokenizer/chat_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace hl::jinja {

const Value* dict_get(const Dict& d, const std::string& key) {
  for (const auto& kv : d)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void dict_set(Dict& d, const std::string& key, Value v) {
  for (auto& kv : d)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  d.emplace_back(key, std::move(v));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Undefined:
    case Value::None: return false;
    case Value::Bool: return v.b;
    case Value::Int: return v.i != 0;
    case Value::Float: return v.f != 0.0;
    case Value::Str: return !v.s.empty();
    case Value::ListK: return !v.list->empty();
    case Value::DictK: return !v.dict->empty();
    case Value::Namespace:
    case Value::Func: return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Float && b.kind != Value::Float)
      return (a.kind == Value::Bool ? a.b : a.i) == (b.kind == Value::Bool ? b.b : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Undefined:
    case Value::None: return true;
    case Value::Str: return a.s == b.s;
    case Value::ListK: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case Value::DictK:
    case Value::Namespace: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& kv : *a.dict) {
        const Value* o = dict_get(*b.dict, kv.first);
        if (!o || !equal(kv.second, *o)) return false;
      }
      return true;
    }
    case Value::Func: return a.fn == b.fn;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Float && b.kind != Value::Float)
      return (a.kind == Value::Bool ? a.b : a.i) < (b.kind == Value::Bool ? b.b : b.i);
    return a.as_double() < b.as_double();
  }
  if (a.is_str() && b.is_str()) return a.s < b.s;
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      if (less((*a.list)[k], (*b.list)[k])) return true;
      if (less((*b.list)[k], (*a.list)[k])) return false;
    }
    return a.list->size() < b.list->size();
  }
  throw std::runtime_error(std::string("cannot order ") + type_name(a) + " and " + type_name(b));
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Undefined: return "undefined";
    case Value::None: return "none";
    case Value::Bool: return "boolean";
    case Value::Int: return "integer";
    case Value::Float: return "float";
    case Value::Str: return "string";
    case Value::ListK: return "list";
    case Value::DictK: return "dict";
    case Value::Namespace: return "namespace";
    case Value::Func: return "function";
  }
  return "?";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  // Shortest round-trip digits in scientific form, e.g. "1.2345e+02"; Python's repr then picks
  // positional notation for exponents in [-4, 16).
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out.assign("0.").append(static_cast<size_t>(-exp - 1), '0').append(digits);
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out.append(1, '.').append(digits, 1, std::string::npos);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string py_quote(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_into(const Value& v, int indent, int depth, std::string& out) {
  if (depth > 512) throw std::runtime_error("tojson: value nested deeper than 512 levels");
  // "\n" and the indentation of the items (pad) and of the closing bracket (end_pad).
  std::string pad, end_pad;
  if (indent >= 0) {
    pad.assign(1, '\n').append(static_cast<size_t>(indent) * static_cast<size_t>(depth + 1), ' ');
    end_pad.assign(1, '\n').append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
  }
  const char* sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Undefined:
    case Value::None: out += "null"; return;
    case Value::Bool: out += v.b ? "true" : "false"; return;
    case Value::Int: out += std::to_string(v.i); return;
    case Value::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += float_repr(v.f);
      return;
    case Value::Str: json_string(v.s, out); return;
    case Value::ListK: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += sep;
        out += pad;
        json_into((*v.list)[k], indent, depth + 1, out);
      }
      out += end_pad + "]";
      return;
    }
    case Value::DictK:
    case Value::Namespace: {
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& kv : *v.dict) {
        if (!first) out += sep;
        first = false;
        out += pad;
        json_string(kv.first, out);
        out += ": ";
        json_into(kv.second, indent, depth + 1, out);
      }
      out += end_pad + "}";
      return;
    }
    case Value::Func: throw std::runtime_error("tojson: a function is not JSON");
  }
}

void repr_into(const Value& v, int depth, std::string& out) {
  if (depth > 512) throw std::runtime_error("string: value nested deeper than 512 levels");
  switch (v.kind) {
    case Value::Str: out += py_quote(v.s); return;
    case Value::ListK: {
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        repr_into((*v.list)[k], depth + 1, out);
      }
      out += ']';
      return;
    }
    case Value::DictK:
    case Value::Namespace: {
      out += v.kind == Value::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& kv : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += py_quote(kv.first) + ": ";
        repr_into(kv.second, depth + 1, out);
      }
      out += v.kind == Value::Namespace ? "}>" : "}";
      return;
    }
    case Value::Undefined: out += "Undefined"; return;
    default: out += to_str(v); return;
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Undefined: return "";
    case Value::None: return "None";
    case Value::Bool: return v.b ? "True" : "False";
    case Value::Int: return std::to_string(v.i);
    case Value::Float: return float_repr(v.f);
    case Value::Str: return v.s;
    case Value::Func: return "<function " + v.fn->name + ">";
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(v, 0, out);
  return out;
}

std::string to_json(const Value& v, int indent) {
  std::string out;
  json_into(v, indent, 0, out);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value::real(static_cast<double>(u))
                                                   : Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::make_list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), from_json(it.value()));
      return Value::make_dict(std::move(d));
    }
    default: return Value::none();
  }
}

}  // namespace hl::jinja
