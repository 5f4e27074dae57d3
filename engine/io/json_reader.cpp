// JsonReader (json_reader.h): typed, range-checked field access with one message grammar,
// "SOURCE: field 'PATH': expected WHAT, got VALUE".
#include "engine/io/json_reader.h"

#include <cmath>
#include <memory>

#include "engine/core/error.h"
#include "engine/io/json_util.h"

namespace hl {

JsonReader::JsonReader(const json& obj, std::string source, std::string path)
    : j_(&obj), source_(std::move(source)), path_(std::move(path)), read_(std::make_shared<std::set<std::string>>()) {}

JsonReader JsonReader::top(const json& j, const std::string& source) {
  if (!j.is_object()) throw LoadError(source + ": top level: expected an object, got " + shown(j));
  return JsonReader(j, source);
}

std::string JsonReader::field(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

std::string JsonReader::shown(const json& v) {
  // json_text_python, not dump(): dump() would write null for NaN and the infinities.
  if (v.is_number() || v.is_boolean() || v.is_null()) return json_text_python(v);
  std::string d = json_text_python(v, -1, 40);
  if (d.size() > 40) d = d.substr(0, 40) + "...";
  return std::string(json_type_name(v)) + " " + d;
}

std::string JsonReader::integer_range(int64_t lo, int64_t hi) {
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::string JsonReader::number_range(double lo, double hi, bool lo_open) {
  return std::string(std::isfinite(lo) && std::isfinite(hi) ? "a finite number in " : "a number in ") +
         (lo_open ? "(" : "[") + json_number_text(lo) + ", " + json_number_text(hi) + "]";
}

void JsonReader::expected(const std::string& name, const std::string& what, const json& got) const {
  throw LoadError(source_ + ": field '" + name + "': expected " + what + ", got " + shown(got));
}

void JsonReader::fail(const std::string& name, const std::string& reason) const {
  throw LoadError(source_ + ": field '" + name + "': " + reason);
}

void JsonReader::fail_object(const std::string& reason) const {
  throw LoadError(source_ + ": " + (path_.empty() ? "" : "field '" + path_ + "': ") + reason);
}

const nlohmann::json* JsonReader::find(const std::string& key) const {
  read_->insert(key);
  if (!j_->is_object()) return nullptr;
  auto it = j_->find(key);
  return it == j_->end() ? nullptr : &*it;
}

const nlohmann::json& JsonReader::require(const std::string& key, const std::string& what) const {
  const json* v = find(key);
  if (!v) fail(field(key), "expected " + what + ", got nothing (the field is missing)");
  return *v;
}

JsonReader JsonReader::object(const std::string& key) const {
  const json& v = require(key, "an object");
  if (!v.is_object()) expected(field(key), "an object", v);
  return JsonReader(v, source_, field(key));
}

const nlohmann::json& JsonReader::array(const std::string& key, size_t max) const {
  const std::string what = "an array of at most " + std::to_string(max) + " entries";
  const json& v = require(key, what);
  if (!v.is_array()) expected(field(key), what, v);
  if (v.size() > max) fail(field(key), "expected " + what + ", got " + std::to_string(v.size()) + " entries");
  return v;
}

std::string JsonReader::string(const std::string& key) const {
  const json& v = require(key, "a string");
  if (!v.is_string()) expected(field(key), "a string", v);
  return v.get<std::string>();
}

bool JsonReader::boolean(const std::string& key) const {
  const json& v = require(key, "true or false");
  if (!v.is_boolean()) expected(field(key), "true or false", v);
  return v.get<bool>();
}

int64_t JsonReader::integer_value(const json& v, const std::string& name, int64_t lo, int64_t hi) const {
  const bool in_range =
      v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX) &&
                                                             v.get<int64_t>() >= lo && v.get<int64_t>() <= hi
                                                       : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi);
  if (!in_range) expected(name, integer_range(lo, hi), v);
  return v.get<int64_t>();
}

double JsonReader::number_value(const json& v, const std::string& name, double lo, double hi, bool lo_open) const {
  const std::string range = number_range(lo, hi, lo_open);
  if (!v.is_number()) expected(name, range, v);
  const double x = v.get<double>();
  // NaN fails every comparison: written as a positive test so that NaN is out of every range.
  const bool in_range = (lo_open ? x > lo : x >= lo) && x <= hi;
  if (!in_range) expected(name, range, v);
  return x;
}

int64_t JsonReader::integer(const std::string& key, int64_t lo, int64_t hi) const {
  return integer_value(require(key, integer_range(lo, hi)), field(key), lo, hi);
}

double JsonReader::number(const std::string& key, double lo, double hi, bool lo_open) const {
  return number_value(require(key, "a number"), field(key), lo, hi, lo_open);
}

std::vector<double> JsonReader::number_list(const std::string& key, size_t min_n, size_t max_n, double lo, double hi,
                                            bool lo_open) const {
  const std::string count =
      min_n == max_n ? std::to_string(min_n) : std::to_string(min_n) + " to " + std::to_string(max_n);
  const std::string what = "a list of " + count + " numbers, each " + number_range(lo, hi, lo_open);
  const json& v = require(key, what);
  if (!v.is_array()) expected(field(key), what, v);
  if (v.size() < min_n || v.size() > max_n)
    fail(field(key), "expected " + what + ", got " + std::to_string(v.size()) + " entries");
  std::vector<double> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(number_value(v[i], field(key) + "[" + std::to_string(i) + "]", lo, hi, lo_open));
  return out;
}

void JsonReader::optional_string(const std::string& key, std::string* out) const {
  if (find(key)) *out = string(key);
}

void JsonReader::optional_boolean(const std::string& key, bool* out) const {
  if (find(key)) *out = boolean(key);
}

void JsonReader::optional_integer(const std::string& key, int64_t* out, int64_t lo, int64_t hi) const {
  if (find(key)) *out = integer(key, lo, hi);
}

void JsonReader::optional_number(const std::string& key, double* out, double lo, double hi, bool lo_open) const {
  if (find(key)) *out = number(key, lo, hi, lo_open);
}

void JsonReader::optional_number_list(const std::string& key, std::vector<double>* out, size_t min_n, size_t max_n,
                                      double lo, double hi, bool lo_open) const {
  if (find(key)) *out = number_list(key, min_n, max_n, lo, hi, lo_open);
}

}  // namespace hl
