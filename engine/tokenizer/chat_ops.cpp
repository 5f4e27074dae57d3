// Binary operators of the chat-template renderer (chat_eval.h) with Python's semantics: and/or
// return an operand, comparisons, `in` / `not in` on strings, lists and dicts, `~` concatenation,
// + on strings and lists, * repetition (bounded), integer arithmetic with overflow checks, floor
// division and modulo rounding toward negative infinity, **. Reference: Python language reference.
#include <cmath>
#include <limits>

#include "engine/tokenizer/chat_eval.h"

namespace hl::jinja {

Value Evaluator::eval_binary(const Node& n, const std::shared_ptr<Scope>& scope) {
  const std::string& op = n.s;
  const Value l = eval(*n.a[0], scope);
  if (op == "and") return truthy(l) ? eval(*n.a[1], scope) : l;
  if (op == "or") return truthy(l) ? l : eval(*n.a[1], scope);
  const Value r = eval(*n.a[1], scope);
  line_ = n.line;
  if (op == "==") return Value::boolean(equal(l, r));
  if (op == "!=") return Value::boolean(!equal(l, r));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    try {
      if (op == "<") return Value::boolean(less(l, r));
      if (op == ">") return Value::boolean(less(r, l));
      if (op == "<=") return Value::boolean(!less(r, l));
      return Value::boolean(!less(l, r));
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
  }
  if (op == "in" || op == "not in") {
    bool found = false;
    if (r.is_str() && l.is_str()) {
      found = r.s.find(l.s) != std::string::npos;
    } else if (r.is_list()) {
      for (const Value& e : *r.list) {
        step();
        if (equal(e, l)) {
          found = true;
          break;
        }
      }
    } else if (r.is_mapping()) {
      found = l.is_str() && dict_get(*r.dict, l.s) != nullptr;
    } else if (!r.is_undefined()) {
      fail(std::string("'in' needs a string, list or dict on its right, not a ") + type_name(r));
    }
    return Value::boolean(found == (op == "in"));
  }
  if (op == "~") {
    std::string s = to_str(l) + to_str(r);
    charge(s.size());
    return Value::str(std::move(s));
  }
  if (op == "+" && l.is_str() && r.is_str()) {
    charge(l.s.size() + r.s.size());
    return Value::str(l.s + r.s);
  }
  if (op == "+" && l.is_list() && r.is_list()) {
    List out = *l.list;
    for (const Value& e : *r.list) {
      step();
      charge(e.s.size());
      out.push_back(e);
    }
    for (size_t k = 0; k < l.list->size(); ++k) step();
    return Value::make_list(std::move(out));
  }
  if (op == "*" && ((l.is_str() || l.is_list()) && r.kind == Value::Int)) {
    const int64_t times = std::max<int64_t>(0, r.i);
    if (l.is_str()) {
      if (!l.s.empty() && static_cast<uint64_t>(times) > limits_.max_output_bytes / l.s.size())
        fail("string repeated " + std::to_string(times) + " times exceeds the output limit");
      charge(l.s.size() * static_cast<size_t>(times));
      std::string s;
      for (int64_t k = 0; k < times; ++k) s += l.s;
      return Value::str(std::move(s));
    }
    List out;
    for (int64_t k = 0; k < times; ++k)
      for (const Value& e : *l.list) {
        step();
        out.push_back(e);
      }
    return Value::make_list(std::move(out));
  }
  if (!l.is_number() || !r.is_number())
    fail("cannot apply '" + op + "' to a " + type_name(l) + " and a " + type_name(r));
  const bool ints = l.kind != Value::Float && r.kind != Value::Float;
  const int64_t a = l.kind == Value::Bool ? l.b : l.i, b = r.kind == Value::Bool ? r.b : r.i;
  const double x = l.as_double(), y = r.as_double();
  int64_t res = 0;
  if (op == "+") {
    if (!ints) return Value::real(x + y);
    if (__builtin_add_overflow(a, b, &res)) fail("integer overflow in '+'");
    return Value::integer(res);
  }
  if (op == "-") {
    if (!ints) return Value::real(x - y);
    if (__builtin_sub_overflow(a, b, &res)) fail("integer overflow in '-'");
    return Value::integer(res);
  }
  if (op == "*") {
    if (!ints) return Value::real(x * y);
    if (__builtin_mul_overflow(a, b, &res)) fail("integer overflow in '*'");
    return Value::integer(res);
  }
  if ((op == "/" || op == "//" || op == "%") && (ints ? b == 0 : y == 0.0)) fail("division by zero");
  if (op == "/") return Value::real(x / y);
  if (op == "//") {
    if (!ints) return Value::real(std::floor(x / y));
    if (a == std::numeric_limits<int64_t>::min() && b == -1) fail("integer overflow in '//'");
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return Value::integer(q);
  }
  if (op == "%") {
    if (!ints) {
      double m = std::fmod(x, y);
      if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
      return Value::real(m);
    }
    if (b == -1) return Value::integer(0);
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return Value::integer(m);
  }
  if (op == "**") {
    if (ints && b >= 0) {
      if (a == 0 || a == 1) return Value::integer(b == 0 ? 1 : a);
      if (a == -1) return Value::integer(b % 2 == 0 ? 1 : -1);
      int64_t acc = 1;  // |a| >= 2: overflows within 63 factors
      for (int64_t k = 0; k < b; ++k)
        if (__builtin_mul_overflow(acc, a, &acc)) fail("integer overflow in '**'");
      return Value::integer(acc);
    }
    return Value::real(std::pow(x, y));
  }
  fail("unknown operator '" + op + "'");
}

}  // namespace hl::jinja
