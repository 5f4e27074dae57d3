// Evaluator of the chat-template renderer (chat_eval.h): statements (output, if, for with loop
// variables and else, set, namespace attribute set, macros, call blocks, filter blocks) and
// expressions (operators with Python semantics, attribute/item access, slices, calls), every step
// counted against ChatTemplateLimits. Not the built-in filters/tests/methods (chat_builtins.cpp).
// Reference: Jinja2 documentation, "Template Designer Documentation".
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "engine/tokenizer/chat_eval.h"

namespace hl::jinja {

const Value* Args::get(size_t i, const char* name) const {
  if (i < pos.size()) return &pos[i];
  for (const auto& kv : kw)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

std::vector<size_t> utf8_offsets(const std::string& s) {
  std::vector<size_t> off;
  off.reserve(s.size() + 1);
  size_t k = 0;
  while (k < s.size()) {
    off.push_back(k);
    const unsigned char c = static_cast<unsigned char>(s[k]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (k + len > s.size()) len = 1;
    for (size_t j = 1; j < len; ++j)
      if ((static_cast<unsigned char>(s[k + j]) & 0xC0) != 0x80) len = 1;
    k += len;
  }
  off.push_back(s.size());
  return off;
}

Evaluator::~Evaluator() {
  for (auto& w : closures_)
    if (auto s = w.lock()) s->vars.clear();
  for (auto& w : namespaces_)
    if (auto d = w.lock()) d->clear();
}

void Evaluator::step() {
  if (++steps_ > limits_.max_steps)
    fail("rendering takes more than " + std::to_string(limits_.max_steps) + " steps (a loop too long?)");
}

void Evaluator::charge(size_t bytes) {
  bytes_ += bytes;
  if (bytes_ > limits_.max_work_bytes)
    fail("rendering makes more than " + std::to_string(limits_.max_work_bytes) + " bytes of strings");
}

void Evaluator::emit(std::string& out, const std::string& s) {
  if (out.size() + s.size() > limits_.max_output_bytes)
    fail("output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  out += s;
}

std::string Evaluator::run(const Body& body, const std::shared_ptr<Scope>& root) {
  std::string out;
  const Flow f = exec(body, root, out);
  if (f != Flow::Normal) fail(f == Flow::Break ? "{% break %} outside a loop" : "{% continue %} outside a loop");
  return out;
}

Evaluator::Flow Evaluator::exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  const Nest nest(this);
  for (const NodeP& p : body) {
    const Node& n = *p;
    line_ = n.line;
    step();
    switch (n.kind) {
      case Node::Text: emit(out, n.s); break;
      case Node::Output: {
        const Value v = eval(*n.a[0], scope);
        line_ = n.line;
        emit(out, to_str(v));
        break;
      }
      case Node::If: {
        size_t k = 0;
        for (; k < n.a.size(); ++k)
          if (truthy(eval(*n.a[k], scope))) break;
        if (k < n.blocks.size()) {
          const Flow f = exec(n.blocks[k], scope, out);
          if (f != Flow::Normal) return f;
        }
        break;
      }
      case Node::For: {
        const Flow f = exec_for(n, scope, out);
        if (f != Flow::Normal) return f;
        break;
      }
      case Node::Set: exec_set(n, scope, eval(*n.a[0], scope)); break;
      case Node::SetBlock: {
        std::string text;
        if (exec(n.blocks[0], scope, text) != Flow::Normal) fail("{% break %} / {% continue %} inside {% set %}");
        scope->vars[n.names[0]] = Value::str(std::move(text));
        break;
      }
      case Node::Macro: {
        Value v;
        v.kind = Value::Func;
        v.fn = std::make_shared<Callable>();
        v.fn->node = &n;
        v.fn->name = n.s;
        v.fn->closure = scope;
        scope->vars[n.s] = std::move(v);
        closures_.push_back(scope);
        break;
      }
      case Node::CallBlock: {
        const Node& call = *n.a[0];
        auto body_fn = std::make_shared<Callable>();
        body_fn->node = &n;
        body_fn->name = "caller";
        body_fn->closure = scope;
        const Value callee = eval(*call.a[0], scope);
        if (callee.kind != Value::Func || !callee.fn->node || callee.fn->node->kind != Node::Macro)
          fail("{% call %} needs a macro");
        Args args;
        eval_args(call, 1, scope, &args);
        Callable c = *callee.fn;
        c.caller = body_fn;
        line_ = n.line;
        emit(out, to_str(call_macro(c, args)));
        break;
      }
      case Node::FilterBlock: {
        std::string text;
        const Flow f = exec(n.blocks[0], scope, text);
        if (n.s.empty()) {
          emit(out, text);
        } else {
          Args none;
          emit(out, to_str(filter(n.s, Value::str(std::move(text)), none)));
        }
        if (f != Flow::Normal) return f;
        break;
      }
      case Node::Break: return Flow::Break;
      case Node::Continue: return Flow::Continue;
      default: fail("expression used as a statement");
    }
  }
  return Flow::Normal;
}

List Evaluator::iterate(const Value& v) {
  List items;
  switch (v.kind) {
    case Value::Undefined: break;  // Jinja's Undefined iterates as empty
    case Value::ListK: items = *v.list; break;
    case Value::DictK:
      for (const auto& kv : *v.dict) items.push_back(Value::str(kv.first));
      break;
    case Value::Str: {
      const auto off = utf8_offsets(v.s);
      for (size_t k = 0; k + 1 < off.size(); ++k) items.push_back(Value::str(v.s.substr(off[k], off[k + 1] - off[k])));
      break;
    }
    default: fail(std::string("cannot iterate over a ") + type_name(v));
  }
  for (size_t k = 0; k < items.size(); ++k) step();
  return items;
}

Evaluator::Flow Evaluator::exec_for(const Node& n, const std::shared_ptr<Scope>& scope, std::string& out) {
  const List all = iterate(eval(*n.a[0], scope));
  auto inner = std::make_shared<Scope>();
  inner->parent = scope;
  auto bind = [&](const Value& item) {
    if (n.names.size() == 1) {
      inner->vars[n.names[0]] = item;
      return;
    }
    if (!item.is_list() || item.list->size() != n.names.size())
      fail("cannot unpack a " + std::string(type_name(item)) + " into " + std::to_string(n.names.size()) + " loop variables");
    for (size_t k = 0; k < n.names.size(); ++k) inner->vars[n.names[k]] = (*item.list)[k];
  };
  List items;
  if (n.a[1]) {
    for (const Value& item : all) {
      bind(item);
      if (truthy(eval(*n.a[1], inner))) items.push_back(item);
    }
  } else {
    items = all;
  }
  if (items.empty()) {
    if (n.blocks.size() > 1) return exec(n.blocks[1], scope, out);
    return Flow::Normal;
  }
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < len; ++k) {
    line_ = n.line;
    step();
    bind(items[static_cast<size_t>(k)]);
    Dict loop{{"index", Value::integer(k + 1)},
              {"index0", Value::integer(k)},
              {"revindex", Value::integer(len - k)},
              {"revindex0", Value::integer(len - k - 1)},
              {"first", Value::boolean(k == 0)},
              {"last", Value::boolean(k == len - 1)},
              {"length", Value::integer(len)},
              {"depth", Value::integer(1)},
              {"depth0", Value::integer(0)},
              {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value()},
              {"nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value()}};
    inner->vars["loop"] = Value::make_dict(std::move(loop));
    const Flow f = exec(n.blocks[0], inner, out);
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

void Evaluator::exec_set(const Node& n, const std::shared_ptr<Scope>& scope, Value v) {
  if (!n.s.empty()) {  // set ns.attr = v
    Value target;
    for (Scope* s = scope.get(); s; s = s->parent.get()) {
      auto it = s->vars.find(n.names[0]);
      if (it != s->vars.end()) {
        target = it->second;
        break;
      }
    }
    if (target.kind != Value::Namespace)
      fail("cannot set attribute '" + n.s + "' of '" + n.names[0] + "', a " + type_name(target) + " (only a namespace())");
    dict_set(*target.dict, n.s, std::move(v));
    return;
  }
  if (n.names.size() == 1) {
    scope->vars[n.names[0]] = std::move(v);
    return;
  }
  if (!v.is_list() || v.list->size() != n.names.size())
    fail("cannot unpack a " + std::string(type_name(v)) + " into " + std::to_string(n.names.size()) + " names");
  for (size_t k = 0; k < n.names.size(); ++k) scope->vars[n.names[k]] = (*v.list)[k];
}

namespace {

// Python's index rules: negative counts from the end; nullopt when out of range.
std::optional<size_t> py_index(int64_t i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || i >= static_cast<int64_t>(n)) return std::nullopt;
  return static_cast<size_t>(i);
}

// Python slice indices [start, stop) with step for a sequence of n items.
std::vector<size_t> py_slice(const Value* a, const Value* b, const Value* c, size_t n) {
  auto get = [](const Value* v, int64_t dflt) {
    return (v && v->kind == Value::Int) ? v->i : (v && v->kind == Value::Bool) ? int64_t{v->b} : dflt;
  };
  const int64_t step = get(c, 1);
  if (step == 0) throw EvalError("slice step cannot be zero");
  const int64_t len = static_cast<int64_t>(n);
  auto clamp = [&](int64_t i, bool is_start) {
    if (i < 0) i += len;
    if (step > 0) return std::clamp<int64_t>(i, 0, len);
    (void)is_start;
    return std::clamp<int64_t>(i, -1, len - 1);
  };
  int64_t start = (a && a->kind != Value::None) ? clamp(get(a, 0), true) : (step > 0 ? 0 : len - 1);
  int64_t stop = (b && b->kind != Value::None) ? clamp(get(b, 0), false) : (step > 0 ? len : -1);
  std::vector<size_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(static_cast<size_t>(i));
  return idx;
}

}  // namespace

Value Evaluator::eval(const Node& n, const std::shared_ptr<Scope>& scope) {
  const Nest nest(this);
  line_ = n.line;
  Value r;
  switch (n.kind) {
    case Node::Literal: r = n.lit; break;
    case Node::Name: {
      for (Scope* s = scope.get(); s; s = s->parent.get()) {
        auto it = s->vars.find(n.s);
        if (it != s->vars.end()) {
          r = it->second;
          break;
        }
      }
      if (r.is_undefined()) {
        static const char* const globals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
        for (const char* g : globals)
          if (n.s == g) {
            r.kind = Value::Func;
            r.fn = std::make_shared<Callable>();
            r.fn->builtin = g;
            r.fn->name = g;
          }
      }
      break;
    }
    case Node::Attr: {
      const Value o = eval(*n.a[0], scope);
      if (o.is_mapping()) {
        if (const Value* v = dict_get(*o.dict, n.s)) r = *v;
      }
      break;  // anything else: undefined (methods are resolved by eval_call)
    }
    case Node::Item: {
      const Value o = eval(*n.a[0], scope);
      const Value k = eval(*n.a[1], scope);
      line_ = n.line;
      if (o.is_mapping()) {
        if (k.is_str()) {
          if (const Value* v = dict_get(*o.dict, k.s)) r = *v;
        }
      } else if (o.is_list() && (k.kind == Value::Int || k.kind == Value::Bool)) {
        if (auto i = py_index(k.kind == Value::Int ? k.i : k.b, o.list->size())) r = (*o.list)[*i];
      } else if (o.is_str() && k.kind == Value::Int) {
        const auto off = utf8_offsets(o.s);
        if (auto i = py_index(k.i, off.size() - 1)) r = Value::str(o.s.substr(off[*i], off[*i + 1] - off[*i]));
      } else if (!o.is_undefined() && !(o.is_list() || o.is_str())) {
        fail(std::string("cannot index a ") + type_name(o));
      }
      break;
    }
    case Node::Slice: {
      const Value o = eval(*n.a[0], scope);
      Value parts[3];
      for (int k = 0; k < 3; ++k)
        if (n.a[k + 1]) parts[k] = eval(*n.a[k + 1], scope);
      line_ = n.line;
      auto arg = [&](int k) { return n.a[k + 1] ? &parts[k] : nullptr; };
      {
        if (o.is_list()) {
          List l;
          for (size_t i : py_slice(arg(0), arg(1), arg(2), o.list->size())) {
            step();
            l.push_back((*o.list)[i]);
          }
          r = Value::make_list(std::move(l));
        } else if (o.is_str()) {
          const auto off = utf8_offsets(o.s);
          std::string s;
          for (size_t i : py_slice(arg(0), arg(1), arg(2), off.size() - 1)) s += o.s.substr(off[i], off[i + 1] - off[i]);
          r = Value::str(std::move(s));
        } else {
          fail(std::string("cannot slice a ") + type_name(o));
        }
      }
      break;
    }
    case Node::Call: r = eval_call(n, scope); break;
    case Node::Filter: {
      const Value v = eval(*n.a[0], scope);
      Args args;
      eval_args(n, 1, scope, &args);
      line_ = n.line;
      r = filter(n.s, v, args);
      break;
    }
    case Node::Test: {
      const Value v = eval(*n.a[0], scope);
      Args args;
      eval_args(n, 1, scope, &args);
      line_ = n.line;
      r = Value::boolean(test(n.s, v, args) != n.negated);
      break;
    }
    case Node::Unary: {
      const Value v = eval(*n.a[0], scope);
      line_ = n.line;
      if (n.s == "not") {
        r = Value::boolean(!truthy(v));
      } else if (v.kind == Value::Int || v.kind == Value::Bool) {
        const int64_t x = v.kind == Value::Bool ? v.b : v.i;
        if (n.s == "-" && x == std::numeric_limits<int64_t>::min()) fail("integer overflow");
        r = Value::integer(n.s == "-" ? -x : x);
      } else if (v.kind == Value::Float) {
        r = Value::real(n.s == "-" ? -v.f : v.f);
      } else {
        fail("bad operand for unary " + n.s + ": a " + type_name(v));
      }
      break;
    }
    case Node::Binary: r = eval_binary(n, scope); break;
    case Node::Ternary:
      if (truthy(eval(*n.a[0], scope))) r = eval(*n.a[1], scope);
      else if (n.a[2]) r = eval(*n.a[2], scope);
      break;
    case Node::ListLit: {
      List l;
      for (const NodeP& e : n.a) {
        step();
        l.push_back(eval(*e, scope));
      }
      r = Value::make_list(std::move(l));
      break;
    }
    case Node::DictLit: {
      Dict d;
      for (size_t k = 0; k + 1 < n.a.size(); k += 2) {
        step();
        const Value key = eval(*n.a[k], scope);
        if (!key.is_str()) fail(std::string("dict keys must be strings, not a ") + type_name(key));
        dict_set(d, key.s, eval(*n.a[k + 1], scope));
      }
      r = Value::make_dict(std::move(d));
      break;
    }
    default: fail("statement used as an expression");
  }
  if (r.is_str()) charge(r.s.size());
  line_ = n.line;
  return r;
}

void Evaluator::eval_args(const Node& n, size_t first, const std::shared_ptr<Scope>& scope, Args* args) {
  for (size_t k = first; k < n.a.size(); ++k) {
    Value v = eval(*n.a[k], scope);
    const std::string& kw = k < n.names.size() ? n.names[k] : std::string();
    if (kw == "*") {
      if (!v.is_list()) fail(std::string("*argument must be a list, not a ") + type_name(v));
      if (!args->kw.empty()) fail("positional argument after a keyword argument");
      for (const Value& e : *v.list) args->pos.push_back(e);
    } else if (kw == "**") {
      if (v.kind != Value::DictK) fail(std::string("**argument must be a dict, not a ") + type_name(v));
      for (const auto& kv : *v.dict) args->kw.emplace_back(kv.first, kv.second);
    } else if (kw.empty()) {
      if (!args->kw.empty()) fail("positional argument after a keyword argument");
      args->pos.push_back(std::move(v));
    } else {
      args->kw.emplace_back(kw, std::move(v));
    }
  }
}

Value Evaluator::eval_call(const Node& n, const std::shared_ptr<Scope>& scope) {
  const Node& callee = *n.a[0];
  Args args;
  if (callee.kind == Node::Attr) {
    const Value obj = eval(*callee.a[0], scope);
    eval_args(n, 1, scope, &args);
    line_ = n.line;
    if (obj.is_mapping()) {
      if (const Value* f = dict_get(*obj.dict, callee.s)) return call(*f, args);
    }
    bool found = false;
    Value r = method(obj, callee.s, args, &found);
    if (!found) fail(std::string("a ") + type_name(obj) + " has no method '" + callee.s + "'");
    return r;
  }
  const Value f = eval(callee, scope);
  eval_args(n, 1, scope, &args);
  line_ = n.line;
  if (f.is_undefined() && callee.kind == Node::Name) fail("'" + callee.s + "' is undefined (not a function)");
  return call(f, args);
}

Value Evaluator::call(const Value& fn, Args& args) {
  if (fn.kind != Value::Func) fail(std::string("a ") + type_name(fn) + " is not callable");
  step();
  if (!fn.fn->node) {
    bool found = false;
    Value r = global(fn.fn->builtin, args, &found);
    if (!found) fail("unknown function '" + fn.fn->builtin + "'");
    return r;
  }
  return call_macro(*fn.fn, args);
}

Value Evaluator::call_macro(const Callable& c, Args& args) {
  if (++call_depth_ > limits_.max_call_depth)
    fail("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  const Node& m = *c.node;
  const size_t first_default = m.kind == Node::CallBlock ? 1 : 0;
  auto scope = std::make_shared<Scope>();
  scope->parent = c.closure;
  List varargs;
  for (size_t k = 0; k < args.pos.size(); ++k) {
    if (k < m.names.size()) scope->vars[m.names[k]] = args.pos[k];
    else varargs.push_back(args.pos[k]);
  }
  Dict kwargs;
  for (auto& kv : args.kw) {
    bool param = false;
    for (const auto& p : m.names) param |= p == kv.first;
    if (param) scope->vars[kv.first] = kv.second;
    else dict_set(kwargs, kv.first, kv.second);
  }
  for (size_t k = 0; k < m.names.size(); ++k) {
    if (scope->vars.count(m.names[k])) continue;
    const Node* d = first_default + k < m.a.size() ? m.a[first_default + k].get() : nullptr;
    scope->vars[m.names[k]] = d ? eval(*d, scope) : Value();
  }
  scope->vars["varargs"] = Value::make_list(std::move(varargs));
  scope->vars["kwargs"] = Value::make_dict(std::move(kwargs));
  if (c.caller) {
    Value cv;
    cv.kind = Value::Func;
    cv.fn = c.caller;
    scope->vars["caller"] = std::move(cv);
  }
  std::string out;
  const int saved_line = line_;
  if (exec(m.blocks[0], scope, out) != Flow::Normal) fail("{% break %} / {% continue %} outside a loop in a macro");
  line_ = saved_line;
  --call_depth_;
  return Value::str(std::move(out));
}

}  // namespace hl::jinja
