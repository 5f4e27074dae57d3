// One checked reader over the JSON objects of untrusted files (issue 14 item 7): config.json,
// adapter_config.json and the session manifest read their fields through it, so every error has
// one grammar: "SOURCE: field 'PATH': expected WHAT, got VALUE" (a type, a range, a set of values)
// or "SOURCE: field 'PATH': REASON" for rules across fields. Not the parser: json_util.h.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hl {

class JsonReader {
 public:
  using json = nlohmann::json;
  // obj: the object read; source: the file as messages name it ("config.json",
  // "run.hlsession: manifest"); path: where obj sits in the file ("" for the top level, "runs[0]").
  JsonReader(const json& obj, std::string source, std::string path = "");

  // The reader of a parsed file's top level, which must be an object:
  // "SOURCE: top level: expected an object, got array [1,2]" otherwise.
  static JsonReader top(const json& j, const std::string& source);

  const json& value() const { return *j_; }
  const std::string& source() const { return source_; }
  // "path.key" ("key" at the top level): the field name messages use.
  std::string field(const std::string& key) const;

  // The member `key`, or nullptr when absent. Remembers the key as read (read_keys()).
  const json* find(const std::string& key) const;
  // The member `key`; absent: "expected WHAT, got nothing (the field is missing)".
  const json& require(const std::string& key, const std::string& what) const;
  // A reader over the object member `key` (required).
  JsonReader object(const std::string& key) const;
  // The array member `key` (required) with at most `max` entries.
  const json& array(const std::string& key, size_t max) const;
  std::string string(const std::string& key) const;
  bool boolean(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const;
  // A number in [lo, hi] ((lo, hi] when lo_open). NaN never passes; an infinity passes only where
  // its bound is that infinity, so finite bounds ask for "a finite number in [lo, hi]".
  double number(const std::string& key, double lo, double hi, bool lo_open = false) const;

  // The array member `key` (required) of min_n to max_n numbers, each in [lo, hi] as number() checks
  // it (hi = +inf admits Infinity, as in time_step_limit [0.0, Infinity]); entries are named
  // "key[i]" in messages.
  std::vector<double> number_list(const std::string& key, size_t min_n, size_t max_n, double lo, double hi,
                                  bool lo_open = false) const;

  // Optional fields: absent leaves *out as it is (the default); present is checked as above.
  void optional_string(const std::string& key, std::string* out) const;
  void optional_boolean(const std::string& key, bool* out) const;
  void optional_integer(const std::string& key, int64_t* out, int64_t lo, int64_t hi) const;
  void optional_number(const std::string& key, double* out, double lo, double hi, bool lo_open = false) const;
  void optional_number_list(const std::string& key, std::vector<double>* out, size_t min_n, size_t max_n, double lo,
                            double hi, bool lo_open = false) const;

  // Checks of a value already in hand (an array entry, a pattern value); `name` is the field's
  // full path as messages show it.
  int64_t integer_value(const json& v, const std::string& name, int64_t lo, int64_t hi) const;
  double number_value(const json& v, const std::string& name, double lo, double hi, bool lo_open = false) const;

  // "SOURCE: field 'NAME': expected WHAT, got VALUE".
  [[noreturn]] void expected(const std::string& name, const std::string& what, const json& got) const;
  // "SOURCE: field 'NAME': REASON".
  [[noreturn]] void fail(const std::string& name, const std::string& reason) const;
  // "SOURCE: REASON" about the object itself (its path, when it has one, named).
  [[noreturn]] void fail_object(const std::string& reason) const;

  // A value as messages show it: numbers, true, false and null as written (Infinity, -Infinity and
  // NaN as Python writes them), strings, arrays and
  // objects as their type and (up to 40 characters of) their text: "string \"4.5\"", "array [1,2]".
  static std::string shown(const json& v);
  // "an integer in [lo, hi]".
  static std::string integer_range(int64_t lo, int64_t hi);
  // "a finite number in [lo, hi]" ("(lo" when lo_open); "a number in [lo, Infinity]" when a bound is infinite.
  static std::string number_range(double lo, double hi, bool lo_open);

  // The keys find() looked up so far (for "fields this reader did not use").
  const std::set<std::string>& read_keys() const { return *read_; }

 private:
  const json* j_;
  std::string source_, path_;
  std::shared_ptr<std::set<std::string>> read_;
};

}  // namespace hl
