// Parser of the chat-template renderer (chat_ast.h): tokens → syntax tree, by recursive descent with
// Jinja's operator precedence (or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary
// < postfix, filters and tests). Nesting is bounded (kMaxNesting). Not the evaluator.
// Reference: Jinja2 documentation, "Expressions" and "List of Control Structures".
#include <initializer_list>
#include <stdexcept>

#include "engine/tokenizer/chat_ast.h"

namespace hl::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body run() {
    std::string end;
    Body b = body({}, &end);
    return b;
  }

 private:
  struct Depth {
    explicit Depth(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxNesting)
        p_->fail("template nested deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~Depth() { --p_->depth_; }
    Parser* p_;
  };

  // A chain (a + b + c, x.y.z, v|f|g) nests its nodes one level per link: each link counts as a
  // level of nesting until the chain ends, so that no tree is deeper than kMaxNesting (its
  // evaluation and its destruction recurse once per level).
  struct Chain {
    explicit Chain(Parser* p) : p_(p) {}
    ~Chain() { p_->depth_ -= links_; }
    void deeper() {
      ++links_;
      if (++p_->depth_ > kMaxNesting)
        p_->fail("template nested deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    Parser* p_;
    int links_ = 0;
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("line " + std::to_string(cur().line) + ": " + what);
  }
  const Token& cur() const { return t_[std::min(i_, t_.size() - 1)]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().kind == Token::Op && cur().s == op; }
  bool is_name(const char* n) const { return cur().kind == Token::Name && cur().s == n; }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Token::Text: return "text";
      case Token::OutputOpen: return "'{{'";
      case Token::OutputClose: return "'}}'";
      case Token::BlockOpen: return "'{%'";
      case Token::BlockClose: return "'%}'";
      case Token::Name: return "'" + t.s + "'";
      case Token::String: return "a string";
      case Token::Int:
      case Token::Float: return "a number";
      case Token::Op: return "'" + t.s + "'";
      case Token::End: return "the end of the template";
    }
    return "?";
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', found " + describe(cur()));
    ++i_;
  }
  std::string expect_name() {
    if (cur().kind != Token::Name) fail("expected a name, found " + describe(cur()));
    return t_[i_++].s;
  }
  void expect_block_close() {
    if (cur().kind != Token::BlockClose) fail("expected '%}', found " + describe(cur()));
    ++i_;
  }
  NodeP node(Node::Kind k, int line) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }

  // Statements until one of `ends` (a block tag name) or the end of the template; *end gets the
  // tag found ("" at the end of the template). The end tag's name is consumed, not its '%}'.
  Body body(const std::vector<std::string>& ends, std::string* end) {
    Depth d(this);
    Body out;
    for (;;) {
      const Token& t = cur();
      if (t.kind == Token::End) {
        if (!ends.empty()) fail("unexpected end of the template: missing {% " + ends.back() + " %}");
        *end = "";
        return out;
      }
      if (t.kind == Token::Text) {
        auto n = node(Node::Text, t.line);
        n->s = t.s;
        out.push_back(std::move(n));
        ++i_;
      } else if (t.kind == Token::OutputOpen) {
        auto n = node(Node::Output, t.line);
        ++i_;
        n->a.push_back(expr());
        if (cur().kind != Token::OutputClose) fail("expected '}}', found " + describe(cur()));
        ++i_;
        out.push_back(std::move(n));
      } else if (t.kind == Token::BlockOpen) {
        const int line = t.line;
        ++i_;
        const std::string name = expect_name();
        for (const auto& e : ends)
          if (e == name) {
            *end = name;
            return out;
          }
        out.push_back(statement(name, line));
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  NodeP statement(const std::string& name, int line) {
    if (name == "if") return if_stmt(line);
    if (name == "for") return for_stmt(line);
    if (name == "set") return set_stmt(line);
    if (name == "macro") return macro_stmt(line);
    if (name == "call") return call_stmt(line);
    if (name == "filter" || name == "generation") {
      auto n = node(Node::FilterBlock, line);
      if (name == "filter") n->s = expect_name();
      expect_block_close();
      std::string end;
      n->blocks.push_back(body({name == "filter" ? "endfilter" : "endgeneration"}, &end));
      expect_block_close();
      return n;
    }
    if (name == "break" || name == "continue") {
      expect_block_close();
      return node(name == "break" ? Node::Break : Node::Continue, line);
    }
    fail("unknown or unsupported tag '" + name + "'");
  }

  NodeP if_stmt(int line) {
    auto n = node(Node::If, line);
    n->a.push_back(expr());
    expect_block_close();
    for (;;) {
      std::string end;
      n->blocks.push_back(body({"elif", "else", "endif"}, &end));
      if (end == "endif") break;
      if (end == "elif") {
        n->a.push_back(expr());
        expect_block_close();
        continue;
      }
      expect_block_close();  // else
      n->blocks.push_back(body({"endif"}, &end));
      break;
    }
    expect_block_close();
    return n;
  }

  NodeP for_stmt(int line) {
    auto n = node(Node::For, line);
    n->names.push_back(expect_name());
    while (is_op(",")) {
      ++i_;
      n->names.push_back(expect_name());
    }
    if (!is_name("in")) fail("expected 'in' in a for loop, found " + describe(cur()));
    ++i_;
    n->a.push_back(or_expr());
    if (is_name("if")) {
      ++i_;
      n->a.push_back(or_expr());
    } else {
      n->a.push_back(nullptr);
    }
    if (is_name("recursive")) fail("recursive for loops are not supported");
    expect_block_close();
    std::string end;
    n->blocks.push_back(body({"else", "endfor"}, &end));
    if (end == "else") {
      expect_block_close();
      n->blocks.push_back(body({"endfor"}, &end));
    }
    expect_block_close();
    return n;
  }

  NodeP set_stmt(int line) {
    std::vector<std::string> targets{expect_name()};
    std::string attr;
    if (is_op(".")) {
      ++i_;
      attr = expect_name();
    }
    while (attr.empty() && is_op(",")) {
      ++i_;
      targets.push_back(expect_name());
    }
    if (cur().kind == Token::BlockClose && targets.size() == 1 && attr.empty()) {
      ++i_;
      auto n = node(Node::SetBlock, line);
      n->names = targets;
      std::string end;
      n->blocks.push_back(body({"endset"}, &end));
      expect_block_close();
      return n;
    }
    expect_op("=");
    auto n = node(Node::Set, line);
    n->names = targets;
    n->s = attr;  // non-empty: `set ns.attr = ...`
    n->a.push_back(expr());
    while (is_op(",")) {  // `set a, b = 1, 2`: the right side is a tuple
      ++i_;
      if (n->a.size() == 1) {
        auto l = node(Node::ListLit, line);
        l->a.push_back(std::move(n->a[0]));
        n->a[0] = std::move(l);
      }
      n->a[0]->a.push_back(expr());
    }
    expect_block_close();
    return n;
  }

  // Parameters "(a, b=1)" of a macro or call block into names / a (defaults, nullptr when none).
  void params(Node* n) {
    expect_op("(");
    while (!is_op(")")) {
      n->names.push_back(expect_name());
      if (is_op("=")) {
        ++i_;
        n->a.push_back(expr());
      } else {
        n->a.push_back(nullptr);
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  NodeP macro_stmt(int line) {
    auto n = node(Node::Macro, line);
    n->s = expect_name();
    params(n.get());
    expect_block_close();
    std::string end;
    n->blocks.push_back(body({"endmacro"}, &end));
    if (cur().kind == Token::Name) ++i_;  // `{% endmacro name %}`
    expect_block_close();
    return n;
  }

  NodeP call_stmt(int line) {
    auto n = node(Node::CallBlock, line);
    if (is_op("(")) params(n.get());
    NodeP call = expr();
    if (call->kind != Node::Call) fail("{% call %} needs a macro call");
    n->a.insert(n->a.begin(), std::move(call));  // a[0] the call, a[1..] the caller's defaults
    expect_block_close();
    std::string end;
    n->blocks.push_back(body({"endcall"}, &end));
    expect_block_close();
    return n;
  }

  // ---- expressions ----
  NodeP expr() {
    Depth d(this);
    NodeP e = or_expr();
    if (is_name("if")) {
      const int line = cur().line;
      ++i_;
      auto t = node(Node::Ternary, line);
      t->a.push_back(or_expr());  // condition
      t->a.push_back(std::move(e));
      if (is_name("else")) {
        ++i_;
        t->a.push_back(expr());
      } else {
        t->a.push_back(nullptr);  // undefined when false
      }
      return t;
    }
    return e;
  }

  NodeP binary(const std::string& op, NodeP l, NodeP r, int line) {
    auto n = node(Node::Binary, line);
    n->s = op;
    n->a.push_back(std::move(l));
    n->a.push_back(std::move(r));
    return n;
  }

  // One left-associative precedence level: operands from `next`, joined by the operators `ops`
  // (operator tokens, or keyword names when `keywords`).
  NodeP level(NodeP (Parser::*next)(), std::initializer_list<const char*> ops, bool keywords = false) {
    NodeP l = (this->*next)();
    Chain chain(this);
    for (;;) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (keywords ? is_name(op) : is_op(op)) hit = op;
      if (!hit) return l;
      const int line = cur().line;
      ++i_;
      chain.deeper();
      l = binary(hit, std::move(l), (this->*next)(), line);
    }
  }
  NodeP or_expr() { return level(&Parser::and_expr, {"or"}, true); }
  NodeP and_expr() { return level(&Parser::not_expr, {"and"}, true); }
  NodeP not_expr() {
    if (is_name("not")) {
      Depth d(this);
      auto n = node(Node::Unary, cur().line);
      ++i_;
      n->s = "not";
      n->a.push_back(not_expr());
      return n;
    }
    return compare();
  }
  NodeP compare() {
    NodeP l = math1();
    for (;;) {
      const int line = cur().line;
      std::string op;
      if (cur().kind == Token::Op &&
          (cur().s == "==" || cur().s == "!=" || cur().s == "<" || cur().s == ">" || cur().s == "<=" || cur().s == ">=")) {
        op = cur().s;
        ++i_;
      } else if (is_name("in")) {
        op = "in";
        ++i_;
      } else if (is_name("not") && peek().kind == Token::Name && peek().s == "in") {
        op = "not in";
        i_ += 2;
      } else {
        return l;
      }
      l = binary(op, std::move(l), math1(), line);
    }
  }
  NodeP math1() { return level(&Parser::concat, {"+", "-"}); }
  NodeP concat() { return level(&Parser::math2, {"~"}); }
  NodeP math2() { return level(&Parser::power, {"*", "/", "//", "%"}); }
  NodeP power() { return level(&Parser::unary_filtered, {"**"}); }
  NodeP unary_filtered() { return unary(true); }
  // Jinja: `-x|f` is `(-x)|f`, so the operand of a sign takes no filters.
  NodeP unary(bool with_filters = true) {
    Depth d(this);
    NodeP n;
    if (is_op("-") || is_op("+")) {
      n = node(Node::Unary, cur().line);
      n->s = t_[i_++].s;
      n->a.push_back(unary(false));
    } else {
      n = postfix(primary());
    }
    return with_filters ? filters(std::move(n)) : std::move(n);
  }

  // Call arguments after '(' up to ')': positional then name=value, into n->a / n->names.
  void call_args(Node* n) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) {  // f(*list) / f(**dict)
        n->names.push_back(t_[i_++].s);
      } else if (cur().kind == Token::Name && peek().kind == Token::Op && peek().s == "=") {
        n->names.push_back(t_[i_].s);
        i_ += 2;
      } else {
        n->names.emplace_back();
      }
      n->a.push_back(expr());
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  NodeP postfix(NodeP e) {
    Chain chain(this);
    for (;;) {
      const int line = cur().line;
      if (is_op(".") || is_op("[") || is_op("(")) chain.deeper();
      if (is_op(".")) {
        ++i_;
        if (cur().kind == Token::Int) {
          auto n = node(Node::Item, line);
          n->a.push_back(std::move(e));
          auto lit = node(Node::Literal, line);
          lit->lit = Value::integer(t_[i_++].i);
          n->a.push_back(std::move(lit));
          e = std::move(n);
        } else {
          auto n = node(Node::Attr, line);
          n->s = expect_name();
          n->a.push_back(std::move(e));
          e = std::move(n);
        }
      } else if (is_op("[")) {
        ++i_;
        NodeP parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = expr();
          if (k < 2 && is_op(":")) {
            slice = true;
            ++i_;
          } else {
            break;
          }
        }
        expect_op("]");
        auto n = node(slice ? Node::Slice : Node::Item, line);
        n->a.push_back(std::move(e));
        if (!slice && !parts[0]) fail("empty subscript '[]'");
        for (int k = 0; k < (slice ? 3 : 1); ++k) n->a.push_back(std::move(parts[k]));
        e = std::move(n);
      } else if (is_op("(")) {
        auto n = node(Node::Call, line);
        n->a.push_back(std::move(e));
        n->names.emplace_back();
        call_args(n.get());
        e = std::move(n);
      } else {
        return e;
      }
    }
  }

  NodeP filters(NodeP e) {
    Chain chain(this);
    for (;;) {
      const int line = cur().line;
      if (is_op("|") || is_name("is")) chain.deeper();
      if (is_op("|")) {
        ++i_;
        auto n = node(Node::Filter, line);
        n->s = expect_name();
        n->a.push_back(std::move(e));
        n->names.emplace_back();
        if (is_op("(")) call_args(n.get());
        e = std::move(n);
      } else if (is_name("is")) {
        ++i_;
        auto n = node(Node::Test, line);
        if (is_name("not")) {
          n->negated = true;
          ++i_;
        }
        n->s = expect_name();
        n->a.push_back(std::move(e));
        n->names.emplace_back();
        if (is_op("(")) {
          call_args(n.get());
        } else if (starts_primary()) {
          n->names.emplace_back();
          n->a.push_back(postfix(primary()));
        }
        e = std::move(n);
      } else {
        return e;
      }
    }
  }

  bool starts_primary() const {
    const Token& t = cur();
    if (t.kind == Token::String || t.kind == Token::Int || t.kind == Token::Float) return true;
    if (t.kind != Token::Name) return false;
    for (const char* kw : {"and", "or", "not", "if", "else", "in", "is"})
      if (t.s == kw) return false;
    return true;
  }

  NodeP primary() {
    Depth d(this);
    const Token& t = cur();
    const int line = t.line;
    auto lit = [&](Value v) {
      auto n = node(Node::Literal, line);
      n->lit = std::move(v);
      return n;
    };
    switch (t.kind) {
      case Token::String: {
        std::string s = t.s;
        ++i_;
        while (cur().kind == Token::String) s += t_[i_++].s;  // adjacent literals join
        return lit(Value::str(std::move(s)));
      }
      case Token::Int: ++i_; return lit(Value::integer(t.i));
      case Token::Float: ++i_; return lit(Value::real(t.f));
      case Token::Name: {
        ++i_;
        if (t.s == "true" || t.s == "True") return lit(Value::boolean(true));
        if (t.s == "false" || t.s == "False") return lit(Value::boolean(false));
        if (t.s == "none" || t.s == "None") return lit(Value::none());
        auto n = node(Node::Name, line);
        n->s = t.s;
        return n;
      }
      case Token::Op:
        if (t.s == "(") {
          ++i_;
          if (is_op(")")) {
            ++i_;
            return node(Node::ListLit, line);
          }
          NodeP e = expr();
          if (is_op(",")) {
            auto l = node(Node::ListLit, line);
            l->a.push_back(std::move(e));
            while (is_op(",")) {
              ++i_;
              if (is_op(")")) break;
              l->a.push_back(expr());
            }
            e = std::move(l);
          }
          expect_op(")");
          return e;
        }
        if (t.s == "[") {
          ++i_;
          auto l = node(Node::ListLit, line);
          while (!is_op("]")) {
            l->a.push_back(expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return l;
        }
        if (t.s == "{") {
          ++i_;
          auto l = node(Node::DictLit, line);
          while (!is_op("}")) {
            l->a.push_back(expr());
            expect_op(":");
            l->a.push_back(expr());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return l;
        }
        break;
      default: break;
    }
    fail("expected an expression, found " + describe(t));
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  return Parser(tokens).run();
}

}  // namespace hl::jinja
