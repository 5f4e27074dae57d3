// Values of the chat-template renderer (chat_template.h): Jinja's undefined, none, booleans,
// integers, floats, strings, lists, insertion-ordered dicts, namespaces and callables, with the
// Python semantics templates rely on (truthiness, ==, ordering, str(), tojson). Not the evaluator.
// Reference: the Jinja2 template designer documentation (pallets/jinja, templates.rst).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hl::jinja {

struct Node;
struct Value;
using List = std::vector<Value>;
// A dict keeps insertion order (Python 3.7+ dicts, and tojson relies on it); keys are strings.
using Dict = std::vector<std::pair<std::string, Value>>;

// A macro (node = its Node) or a built-in global function (builtin = its name).
struct Callable {
  const Node* node = nullptr;
  std::string builtin;
  std::string name;
  std::shared_ptr<struct Scope> closure;
  std::shared_ptr<struct Callable> caller;  // a `{% call %}` block's body, passed as caller()
};

struct Value {
  enum Kind : uint8_t { Undefined, None, Bool, Int, Float, Str, ListK, DictK, Namespace, Func };
  Kind kind = Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::shared_ptr<List> list;     // ListK
  std::shared_ptr<Dict> dict;     // DictK, Namespace (shared: `set ns.x` changes every copy)
  std::shared_ptr<Callable> fn;   // Func

  static Value none() { Value v; v.kind = None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Int; v.i = x; return v; }
  static Value real(double x) { Value v; v.kind = Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.kind = Str; v.s = std::move(x); return v; }
  static Value make_list(List x = {}) { Value v; v.kind = ListK; v.list = std::make_shared<List>(std::move(x)); return v; }
  static Value make_dict(Dict x = {}, bool ns = false) {
    Value v;
    v.kind = ns ? Namespace : DictK;
    v.dict = std::make_shared<Dict>(std::move(x));
    return v;
  }

  bool is_undefined() const { return kind == Undefined; }
  bool is_none() const { return kind == None; }
  bool is_str() const { return kind == Str; }
  bool is_list() const { return kind == ListK; }
  bool is_mapping() const { return kind == DictK || kind == Namespace; }
  bool is_number() const { return kind == Int || kind == Float || kind == Bool; }
  double as_double() const { return kind == Float ? f : kind == Bool ? (b ? 1.0 : 0.0) : static_cast<double>(i); }
};

// Dict lookup by key; nullptr when absent.
const Value* dict_get(const Dict& d, const std::string& key);
// Sets (replacing in place, or appending) `key`.
void dict_set(Dict& d, const std::string& key, Value v);

// Python truthiness: undefined/none/false/0/""/[]/{} are false.
bool truthy(const Value& v);
// Python ==: numbers by value (1 == 1.0 == true), strings, lists and dicts element-wise.
bool equal(const Value& a, const Value& b);
// Python <: numbers with numbers, strings with strings (bytewise), lists lexicographically; else throws
// std::runtime_error naming both types.
bool less(const Value& a, const Value& b);
// "undefined", "none", "boolean", "integer", "float", "string", "list", "dict", "namespace", "function".
const char* type_name(const Value& v);

// str(v) as Python Jinja prints it: undefined → "", none → "None", booleans "True"/"False", floats
// as Python repr (1.0, 0.5, 1e+20), lists and dicts as Python repr ({'a': [1, 'x']}).
std::string to_str(const Value& v);
// Python repr(v): strings quoted ('it', "it's"), the rest as to_str.
std::string repr(const Value& v);
// JSON text like Python's json.dumps(v, ensure_ascii=False) with separators (", ", ": "), or with
// `indent` spaces per level (item separator ","); undefined → null. Throws on a function value.
std::string to_json(const Value& v, int indent = -1);
// A python-style float repr ("1.0", "0.1", "1e-07", "inf", "nan").
std::string float_repr(double d);

// JSON values (nlohmann::ordered_json keeps the key order of the file) into Values and back.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace hl::jinja
