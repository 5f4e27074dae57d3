// The Python dialect of the checked JSON parser (json_util.h, JsonDialect::Python): the bare
// Infinity, -Infinity and NaN that Python's json.dumps writes read as doubles outside strings, never
// inside them; every near miss stays a one-line error naming the file and the position; strict
// readers still reject the constants; the reader's range checks reject NaN everywhere and the
// infinities wherever the range is finite. Label `cpu`.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/adapter.h"
#include "engine/io/json_reader.h"
#include "engine/io/json_util.h"
#include "tests/engine/test_util.h"

namespace hl {
namespace {

using json = nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using test::load_error_of;

json parse_py(const std::string& text) {
  return parse_json_checked(text, "config.json", 16, JsonDialect::Python);
}

// Same tree, same types (an integer is not a float), numbers equal in meaning (NaN matches NaN, -0.0
// only -0.0): json's operator== says NaN != NaN and cannot tell a float from an equal integer.
bool same(const json& a, const json& b, std::string* where, const std::string& path = "") {
  const bool both_integers = a.is_number_integer() && b.is_number_integer();  // signed or unsigned
  if (a.type() != b.type() && !both_integers) {
    *where = path + ": type " + json_type_name(a) + " vs " + json_type_name(b);
    return false;
  }
  if (a.is_number_float()) {
    const double x = a.get<double>(), y = b.get<double>();
    const bool eq = std::isnan(x) ? std::isnan(y) : x == y && std::signbit(x) == std::signbit(y);
    if (!eq) *where = path + ": " + json_number_text(x) + " vs " + json_number_text(y);
    return eq;
  }
  if (a.is_array() || a.is_object()) {
    if (a.size() != b.size()) {
      *where = path + ": size";
      return false;
    }
    auto ib = b.begin();
    for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib) {
      const std::string p = path + "/" + (a.is_object() ? ia.key() : "");
      if (a.is_object() && ia.key() != ib.key()) {
        *where = p + ": key " + ib.key();
        return false;
      }
      if (!same(*ia, *ib, where, p)) return false;
    }
    return true;
  }
  if (a != b) *where = path + ": " + a.dump() + " vs " + b.dump();
  return a == b;
}

// Each row: the text Python could write, and the same values built here directly. Strings that hold
// the constants' words, escaped quotes and backslashes sit next to the constants, so a tokenizer
// that misplaces a string's end would change one of them.
TEST(JsonPython, ConstantsReadAsDoublesAndStringsStayStrings) {
  const struct {
    const char* text;
    json want;
  } rows[] = {
      {"[Infinity, -Infinity, NaN]", json::array({kInf, -kInf, kNaN})},
      {R"({"time_step_limit": [0.0, Infinity]})", {{"time_step_limit", {0.0, kInf}}}},
      {R"({"a":NaN,"b":{"c":[1,-Infinity,{"d":Infinity}]}})",
       {{"a", kNaN}, {"b", {{"c", json::array({1, -kInf, {{"d", kInf}}})}}}}},
      {" \n\t[ Infinity ,\r\n NaN\t]\n ", json::array({kInf, kNaN})},
      {"NaN", kNaN},
      {"-Infinity", -kInf},
      {R"({"Infinity": "Infinity", "NaN": NaN, "s": "NaN -Infinity x"})",
       {{"Infinity", "Infinity"}, {"NaN", kNaN}, {"s", "NaN -Infinity x"}}},
      {R"(["a\"NaN\"b", NaN, "\\", Infinity, "\\\"", -Infinity, "\"Infinity\""])",
       json::array({"a\"NaN\"b", kNaN, "\\", kInf, "\\\"", -kInf, "\"Infinity\""})},
      {R"(["\u0022NaN", NaN, "\\\\\"]Infinity", 1])", json::array({"\"NaN", kNaN, "\\\\\"]Infinity", 1})},
      // The markers the parser substitutes are numbers: other numbers and a string spelled like a
      // marker keep their values and places.
      {R"([0, NaN, 0, "0  ", Infinity, -0.0, 1e5, -2.5E-3, "0       "])",
       json::array({0, kNaN, 0, "0  ", kInf, -0.0, 1e5, -2.5e-3, "0       "})},
      {"[true, NaN, null, false, Infinity]", json::array({true, kNaN, nullptr, false, kInf})},
      {"\xEF\xBB\xBF[NaN]", json::array({kNaN})},
      {"{\"k\":\n  [0.0,\n   Infinity]}", {{"k", {0.0, kInf}}}},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.text);
    std::string where;
    const json got = parse_py(row.text);
    EXPECT_TRUE(same(got, row.want, &where)) << where;
    // The ordered variant reads the same values.
    const json ordered(parse_json_checked_ordered(row.text, "config.json", 16, JsonDialect::Python));
    EXPECT_TRUE(same(ordered, row.want, &where)) << where;
  }
  // The substituted values are the exact IEEE doubles: +inf, -inf and a quiet NaN.
  const json j = parse_py("[Infinity, -Infinity, NaN]");
  EXPECT_EQ(j[0].get<double>(), kInf);
  EXPECT_EQ(j[1].get<double>(), -kInf);
  EXPECT_TRUE(std::isnan(j[2].get<double>()));
  EXPECT_TRUE(j[0].is_number_float() && j[2].is_number_float());
}

// One row per near miss of a constant; each an ordinary one-line syntax error naming the file and
// the line and column nlohmann reports on the original text.
TEST(JsonPython, NearMissesAreRejectedWithTheirPosition) {
  const struct {
    const char* text;
    const char* fragment;
  } rows[] = {
      {"[NaNx]", "line 1, column 2: syntax error while parsing value - invalid literal; last read: '[N'"},
      {"[Infinityy]", "line 1, column 2: syntax error while parsing value - invalid literal; last read: '[I'"},
      {"[-NaN]",
       "line 1, column 3: syntax error while parsing value - invalid number; expected digit after '-'; last read: "
       "'-N'"},
      {"[+Infinity]", "line 1, column 2: syntax error while parsing value - invalid literal; last read: '[+'"},
      {"[infinity]", "line 1, column 2: syntax error while parsing value - invalid literal; last read: '[i'"},
      {"[nan]", "line 1, column 3: syntax error while parsing value - invalid literal; last read: '[na'"},
      {"[INFINITY]", "line 1, column 2: syntax error while parsing value - invalid literal; last read: '[I'"},
      {"[Inf]", "line 1, column 2: syntax error while parsing value - invalid literal; last read: '[I'"},
      {"[--Infinity]",
       "line 1, column 3: syntax error while parsing value - invalid number; expected digit after '-'; last read: "
       "'--'"},
      {"[1Infinity]", "line 1, column 3: syntax error while parsing array - invalid literal; last read: '1I'"},
      // A constant where a key must be is read as the number it is, and refused as one.
      {"{NaN: 1}",
       "line 1, column 2: syntax error while parsing object key - unexpected number literal; expected string literal"},
      {R"({"a" NaN})",
       "line 1, column 6: syntax error while parsing object separator - unexpected number literal; expected ':'"},
      {"[NaN NaN]", "line 1, column 6: syntax error while parsing array - unexpected number literal; expected ']'"},
      {"[NaN,]", "line 1, column 6: syntax error while parsing value - unexpected ']'"},
      {"[\"Infinity]", "syntax error while parsing value - invalid string: missing closing quote"},
      {"{\"k\":\n  [0.0,\n   Infinityx]}",
       "line 3, column 4: syntax error while parsing value - invalid literal; last read: '"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.text);
    const std::string m = load_error_of([&] { parse_py(row.text); });
    EXPECT_EQ(m.rfind("config.json: invalid JSON: parse error at ", 0), 0u) << m;
    EXPECT_NE(m.find(row.fragment), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// Readers of files Python does not write (checkpoint index, chat templates, session manifests) keep
// strict JSON: the same constants are syntax errors there, ordered or not.
TEST(JsonPython, StrictReadersRejectTheConstants) {
  for (const char* text : {"[Infinity]", "[-Infinity]", "[NaN]", R"({"time_step_limit": [0.0, Infinity]})"}) {
    SCOPED_TRACE(text);
    const std::string m = load_error_of([&] { parse_json_checked(text, "index.json", 8); });
    EXPECT_EQ(m.rfind("index.json: invalid JSON: parse error at line 1", 0), 0u) << m;
    const std::string o = load_error_of([&] { parse_json_checked_ordered(text, "tokenizer_config.json", 8); });
    EXPECT_EQ(o.rfind("tokenizer_config.json: invalid JSON: parse error at line 1", 0), 0u) << o;
  }
  // The strings are still fine in strict mode.
  EXPECT_EQ(parse_json_checked(R"(["NaN", "Infinity"])", "index.json", 8), json::array({"NaN", "Infinity"}));
}

// Depth and duplicate-key checks hold in the Python dialect as well.
TEST(JsonPython, DepthAndDuplicateKeysStillChecked) {
  EXPECT_EQ(load_error_of([] { parse_json_checked("[[[NaN]]]", "config.json", 2, JsonDialect::Python); }),
            "config.json: JSON nesting depth exceeds 2");
  EXPECT_EQ(load_error_of([] { parse_py(R"({"a": NaN, "a": Infinity})"); }),
            "config.json: key 'a' appears twice in the same JSON object");
}

TEST(JsonPython, NumbersAndValuesPrintAsPythonWritesThem) {
  EXPECT_EQ(json_number_text(kInf), "Infinity");
  EXPECT_EQ(json_number_text(-kInf), "-Infinity");
  EXPECT_EQ(json_number_text(kNaN), "NaN");
  EXPECT_EQ(json_number_text(0.5), "0.5");
  EXPECT_EQ(JsonReader::shown(json::array({0.0, kInf, kNaN})), "array [0.0,Infinity,NaN]");
  EXPECT_EQ(JsonReader::shown(json{{"a", -kInf}}), "object {\"a\":-Infinity}");
  // Python's own spelling reads back to the same values: the printed text is the dialect's input.
  std::string where;
  const json j = {{"a", {kInf, -kInf, kNaN, 1, "NaN"}}, {"b", nullptr}};
  EXPECT_TRUE(same(parse_py(json_text_python(j)), j, &where)) << where;
  EXPECT_EQ(json_text_python(j), R"({"a":[Infinity,-Infinity,NaN,1,"NaN"],"b":null})");
}

// For values without NaN or infinities, json_text_python is nlohmann's dump byte for byte (the
// session manifest is written with it): compact and indented, nested, empty containers, escapes and
// ill-formed UTF-8 (replaced) included.
TEST(JsonPython, PythonTextIsDumpForFiniteValues) {
  const json j = json::parse(R"({"a": [1, -2, 0.5, 1e-05, [], {}, [[]]], "b": {"c": "x\"y\\z\n", "d": null},
                                 "e": true, "f": 18446744073709551615, "g": -9223372036854775808, "h": 1e300})");
  json k = j;
  k["bad_utf8"] = std::string(
      "a\xff\xc3"
      "b");
  for (int indent : {-1, 0, 2, 4}) {
    SCOPED_TRACE(indent);
    EXPECT_EQ(json_text_python(k, indent), k.dump(indent, ' ', false, json::error_handler_t::replace));
  }
  // With an infinity inside, only its token differs: Python's json.dumps(indent=2) layout.
  const json limit = {{"time_step_limit", {0.0, kInf}}};
  EXPECT_EQ(json_text_python(limit, 2), "{\n  \"time_step_limit\": [\n    0.0,\n    Infinity\n  ]\n}");
  EXPECT_EQ(limit.dump(2), "{\n  \"time_step_limit\": [\n    0.0,\n    null\n  ]\n}");  // why dump is not used
}

// The reader's range checks on the constants: NaN is out of every range, an infinity only inside a
// range whose bound is that infinity.
TEST(JsonPython, RangeChecksRejectNaNAndInfinitiesOutsideTheirRange) {
  const json j = parse_py(R"({"inf": Infinity, "ninf": -Infinity, "nan": NaN, "one": 1.0,
                              "limit": [0.0, Infinity], "bad_nan": [0.0, NaN], "bad_neg": [-Infinity, 1.0],
                              "three": [0.0, 1.0, 2.0], "strs": ["0.0", "Infinity"], "n": 5})");
  const JsonReader r = JsonReader::top(j, "config.json");
  const std::pair<std::function<void()>, std::string> rows[] = {
      {[&] { r.number("inf", 0.0, 1.0, true); },
       "config.json: field 'inf': expected a finite number in (0.0, 1.0], got Infinity"},
      {[&] { r.number("ninf", -1e6, 1e6); },
       "config.json: field 'ninf': expected a finite number in [-1000000.0, 1000000.0], got -Infinity"},
      {[&] { r.number("nan", 0.0, 1.0, true); },
       "config.json: field 'nan': expected a finite number in (0.0, 1.0], got NaN"},
      {[&] { r.number("nan", -kInf, kInf); },
       "config.json: field 'nan': expected a number in [-Infinity, Infinity], got NaN"},
      {[&] { r.number("ninf", 0.0, kInf); },
       "config.json: field 'ninf': expected a number in [0.0, Infinity], got -Infinity"},
      {[&] {
         double x = 0;
         r.optional_number("inf", &x, 0.0, 1.0, true);
       },
       "config.json: field 'inf': expected a finite number in (0.0, 1.0], got Infinity"},
      {[&] { r.integer("nan", 0, 9); }, "config.json: field 'nan': expected an integer in [0, 9], got NaN"},
      {[&] { r.integer("inf", 0, 9); }, "config.json: field 'inf': expected an integer in [0, 9], got Infinity"},
      {[&] { r.number_list("bad_nan", 2, 2, 0.0, kInf); },
       "config.json: field 'bad_nan[1]': expected a number in [0.0, Infinity], got NaN"},
      {[&] { r.number_list("bad_neg", 2, 2, 0.0, kInf); },
       "config.json: field 'bad_neg[0]': expected a number in [0.0, Infinity], got -Infinity"},
      {[&] { r.number_list("limit", 2, 2, 0.0, 1.0); },
       "config.json: field 'limit[1]': expected a finite number in [0.0, 1.0], got Infinity"},
      {[&] { r.number_list("three", 2, 2, 0.0, kInf); },
       "config.json: field 'three': expected a list of 2 numbers, each a number in [0.0, Infinity], got 3 entries"},
      {[&] { r.number_list("three", 1, 2, 0.0, kInf); },
       "config.json: field 'three': expected a list of 1 to 2 numbers, each a number in [0.0, Infinity], got 3 "
       "entries"},
      {[&] { r.number_list("strs", 2, 2, 0.0, kInf); },
       "config.json: field 'strs[0]': expected a number in [0.0, Infinity], got string \"0.0\""},
      {[&] { r.number_list("n", 2, 2, 0.0, kInf); },
       "config.json: field 'n': expected a list of 2 numbers, each a number in [0.0, Infinity], got 5"},
      {[&] { r.number_list("absent", 2, 2, 0.0, kInf); },
       "config.json: field 'absent': expected a list of 2 numbers, each a number in [0.0, Infinity], got nothing "
       "(the field is missing)"},
  };
  for (const auto& [f, want] : rows) EXPECT_EQ(load_error_of(f), want);

  // In range: an infinite bound admits its infinity, and the list keeps its order.
  EXPECT_EQ(r.number("inf", 0.0, kInf), kInf);
  EXPECT_EQ(r.number("ninf", -kInf, 0.0), -kInf);
  EXPECT_EQ(r.number_list("limit", 2, 2, 0.0, kInf), (std::vector<double>{0.0, kInf}));
  EXPECT_EQ(r.number_list("three", 1, 3, 0.0, 2.0), (std::vector<double>{0.0, 1.0, 2.0}));
  std::vector<double> limit = {0.0, kInf};
  r.optional_number_list("absent", &limit, 2, 2, 0.0, 1.0);  // absent: the default stays
  EXPECT_EQ(limit, (std::vector<double>{0.0, kInf}));
  r.optional_number_list("three", &limit, 1, 3, 0.0, 2.0);
  EXPECT_EQ(limit, (std::vector<double>{0.0, 1.0, 2.0}));
}

// adapter_config.json is written by PEFT with Python's json.dumps: the constants parse, fields the
// adapter ignores may hold them, fields it uses reject them in the reader's grammar.
TEST(JsonPython, AdapterConfigReadsTheDialect) {
  const std::string base = R"("peft_type": "LORA", "r": 4, "target_modules": ["q_proj"])";
  const AdapterConfig c =
      parse_adapter_config("{" + base + R"(, "lora_dropout": NaN, "lora_alpha": 16})", "adapter_config.json");
  EXPECT_EQ(c.lora_alpha, 16.0);
  EXPECT_EQ(load_error_of([&] { parse_adapter_config("{" + base + R"(, "lora_alpha": NaN})", "adapter_config.json"); }),
            "adapter_config.json: field 'lora_alpha': expected a finite number in [-1000000.0, 1000000.0], got NaN");
  EXPECT_EQ(load_error_of([&] {
              parse_adapter_config("{" + base + R"(, "alpha_pattern": {"q_proj": Infinity}})", "adapter_config.json");
            }),
            "adapter_config.json: field 'alpha_pattern['q_proj']': expected a finite number in [-1000000.0, "
            "1000000.0], got Infinity");
}

}  // namespace
}  // namespace hl
