// Internal to the chat-template renderer: the token stream of the lexer (chat_lexer.cpp) and the
// syntax tree the parser (chat_parser.cpp) builds and the evaluator (chat_eval.cpp) walks.
// Not a public interface: chat_template.h is. Reference: Jinja2 template designer documentation.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/chat_value.h"

namespace hl::jinja {

// Nesting limits of the parser (expressions and blocks) and the evaluator (macro calls).
constexpr int kMaxNesting = 128;

struct Token {
  enum Kind : uint8_t { Text, OutputOpen, OutputClose, BlockOpen, BlockClose, Name, String, Int, Float, Op, End };
  Kind kind = End;
  std::string s;  // text, name, string value, operator
  int64_t i = 0;
  double f = 0.0;
  int line = 1;
};

// Splits `src` into text and tag tokens with Jinja's whitespace control as Hugging Face configures
// it (trim_blocks, lstrip_blocks, `-` modifiers, the final newline dropped); comments vanish.
// Throws std::runtime_error "line N: ..." on an unterminated tag, string or bad character.
std::vector<Token> lex(const std::string& src);

struct Node;
using NodeP = std::unique_ptr<Node>;
using Body = std::vector<NodeP>;

struct Node {
  enum Kind : uint8_t {
    // expressions
    Literal, Name, Attr, Item, Slice, Call, Filter, Test, Unary, Binary, Ternary, ListLit, DictLit,
    // statements
    Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue
  };
  Kind kind = Literal;
  int line = 1;
  std::string s;                   // name, attribute, operator, filter/test name
  Value lit;                       // Literal
  std::vector<NodeP> a;            // operands; Call/Filter/Test: a[0] is the callee/operand
  std::vector<std::string> names;  // keyword names parallel to a[1..] (Call/Filter/Test), for
                                   // targets, set targets, macro parameters
  std::vector<Body> blocks;        // statement bodies
  bool negated = false;            // Test: `is not`
};

// Parses the token stream into the template's statement list. Throws std::runtime_error "line N: ...".
Body parse(const std::vector<Token>& tokens);

}  // namespace hl::jinja
