// Internal to the chat-template renderer: the evaluator that walks the syntax tree (chat_eval.cpp)
// and its built-ins — filters, tests, string/dict methods, global functions (chat_builtins.cpp).
// Every step, byte made and call nests is counted against ChatTemplateLimits. Not a public interface.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/tokenizer/chat_ast.h"
#include "engine/tokenizer/chat_template.h"

namespace hl::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

// Call arguments: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument number `i` or keyword `name`; nullptr when neither was given.
  const Value* get(size_t i, const char* name) const;
};

// A failure while rendering: the line is added by the evaluator.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Evaluator {
 public:
  explicit Evaluator(const ChatTemplateLimits& limits) : limits_(limits) {}
  // Breaks the reference cycles a render can make (a macro held by the scope it closes over, a
  // namespace holding itself) by clearing every such scope and namespace.
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;
  // Renders `body` with `root` holding the template's variables; throws EvalError / RaiseError.
  std::string run(const Body& body, const std::shared_ptr<Scope>& root);
  int line() const { return line_; }

  // ---- for the built-ins ----
  [[noreturn]] void fail(const std::string& what) const { throw EvalError(what); }
  void step();                  // one more unit of work (loop iteration, element copied, call)
  void charge(size_t bytes);    // bytes of string made
  Value call(const Value& fn, Args& args);
  Value filter(const std::string& name, const Value& v, Args& args);
  bool test(const std::string& name, const Value& v, Args& args);
  // A method of a string, dict or list (`s.strip()`, `d.items()`); *found false when none.
  Value method(const Value& obj, const std::string& name, Args& args, bool* found);
  // A global function (range, namespace, dict, raise_exception, strftime_now); *found false when none.
  // Namespaces it makes are remembered (see ~Evaluator).
  Value global(const std::string& name, Args& args, bool* found);
  // Items a for loop or a filter walks: list elements, dict keys, string characters; undefined → none.
  List iterate(const Value& v);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_for(const Node& n, const std::shared_ptr<Scope>& scope, std::string& out);
  void exec_set(const Node& n, const std::shared_ptr<Scope>& scope, Value v);
  Value eval(const Node& n, const std::shared_ptr<Scope>& scope);
  Value eval_binary(const Node& n, const std::shared_ptr<Scope>& scope);
  Value eval_call(const Node& n, const std::shared_ptr<Scope>& scope);
  void eval_args(const Node& n, size_t first, const std::shared_ptr<Scope>& scope, Args* args);
  Value call_macro(const Callable& c, Args& args);
  void emit(std::string& out, const std::string& s);

  // Counts one level of evaluation recursion (eval, exec) for its lifetime.
  struct Nest {
    explicit Nest(Evaluator* e) : e_(e) {
      if (++e_->nest_ > kMaxEvalNesting)
        e_->fail("rendering nests deeper than " + std::to_string(kMaxEvalNesting) + " levels (recursive macros?)");
    }
    ~Nest() { --e_->nest_; }
    Evaluator* e_;
  };
  static constexpr int kMaxEvalNesting = 512;  // stack frames of ~1 KB each at most

  const ChatTemplateLimits& limits_;
  std::vector<std::weak_ptr<Scope>> closures_;   // scopes a macro was defined in
  std::vector<std::weak_ptr<Dict>> namespaces_;  // every namespace() made
  int nest_ = 0;
  int line_ = 1;
  int64_t steps_ = 0;
  uint64_t bytes_ = 0;
  int call_depth_ = 0;
};

// Code-point boundaries of UTF-8 text (invalid bytes count as one character each): offsets of
// each character's first byte, then s.size().
std::vector<size_t> utf8_offsets(const std::string& s);

}  // namespace hl::jinja
