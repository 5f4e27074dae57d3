// Internal to the chat-template renderer: text helpers shared by the filters (chat_builtins.cpp)
// and the methods (chat_methods.cpp), with Python's semantics (str.strip's whitespace set,
// str.split/rsplit, str.replace, str.title, str.format with {} {0} {name}); case mapping is ASCII.
// Not a public interface.
#pragma once
#include <cstdint>
#include <string>

#include "engine/tokenizer/chat_eval.h"

namespace hl::jinja {

bool is_ascii_alpha(unsigned char c);
// Bytes of the Python whitespace character at s[k] (ASCII and the Unicode spaces), else 0.
size_t space_len(const std::string& s, size_t k);
// str.strip / lstrip / rstrip: whitespace, or the characters (code points) of `chars`.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string upper(const std::string& s);
std::string lower(const std::string& s);
std::string title(const std::string& s);
std::string capitalize(const std::string& s);
// str.replace(from, to, count) (count < 0: all), charging the bytes made to `ev`.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                        Evaluator& ev);
// str.split(sep=None, maxsplit=-1), or rsplit when from_right.
List split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right, Evaluator& ev);
// str.startswith / endswith with a string or a list (tuple) of strings.
bool starts_or_ends(const std::string& s, const Value& pat, bool start, Evaluator& ev);
// str.format with {} / {0} / {name} fields (no format specs).
std::string format(const std::string& fmt, const Args& args, Evaluator& ev);
// Attribute "a.b" or "0" of v (dict keys, list indices); undefined when absent.
Value attribute(const Value& v, const std::string& path);
std::string html_escape(const std::string& s);
// An integer / string argument (dflt when absent or none); fails naming `what` otherwise.
int64_t int_arg(const Value* v, int64_t dflt, const char* what, Evaluator& ev);
std::string str_arg(const Value* v, const std::string& dflt, const char* what, Evaluator& ev);
// Comparison key for sort/unique/min/max: the attribute, strings lowered unless case_sensitive.
Value sort_key(const Value& v, const std::string& attr, bool case_sensitive);

}  // namespace hl::jinja
