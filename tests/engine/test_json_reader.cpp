// The checked JSON reader (issue 14 item 7): one error grammar, "SOURCE: field 'PATH': expected
// WHAT, got VALUE", for every type, range and missing-field defect, nested paths named in full;
// and the three files that read through it (config.json, adapter_config.json, the session
// manifest) word the same defect the same way. Label `cpu`.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "engine/core/error.h"
#include "engine/io/adapter.h"
#include "engine/io/config.h"
#include "engine/io/json_reader.h"

namespace hl {
namespace {

using json = nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const LoadError& e) {
    return e.what();
  }
  return "(no error)";
}

const json kDoc = json::parse(R"({"n": 5, "big": 18446744073709551615, "x": 2.5, "s": "text", "b": true,
                                  "list": [1, 2, 3], "obj": {"inner": {"k": "v"}, "depth": -1}, "nul": null})");

TEST(JsonReader, EachDefectOneLineInOneGrammar) {
  const JsonReader r(kDoc, "f.json");
  const std::pair<std::function<void()>, std::string> rows[] = {
      {[&] { r.integer("n", 6, 9); }, "f.json: field 'n': expected an integer in [6, 9], got 5"},
      {[&] { r.integer("x", 0, 9); }, "f.json: field 'x': expected an integer in [0, 9], got 2.5"},
      {[&] { r.integer("s", 0, 9); }, "f.json: field 's': expected an integer in [0, 9], got string \"text\""},
      {[&] { r.integer("big", 0, INT64_MAX); },
       "f.json: field 'big': expected an integer in [0, 9223372036854775807], got 18446744073709551615"},
      {[&] { r.integer("missing", 0, 1); },
       "f.json: field 'missing': expected an integer in [0, 1], got nothing (the field is missing)"},
      {[&] { r.number("x", 0, 1); }, "f.json: field 'x': expected a finite number in [0.0, 1.0], got 2.5"},
      {[&] { r.number("n", 5, 9, true); }, "f.json: field 'n': expected a finite number in (5.0, 9.0], got 5"},
      {[&] { r.number("b", 0, 1); }, "f.json: field 'b': expected a finite number in [0.0, 1.0], got true"},
      {[&] { r.string("n"); }, "f.json: field 'n': expected a string, got 5"},
      {[&] { r.boolean("nul"); }, "f.json: field 'nul': expected true or false, got null"},
      {[&] { r.object("list"); }, "f.json: field 'list': expected an object, got array [1,2,3]"},
      {[&] { r.array("list", 2); }, "f.json: field 'list': expected an array of at most 2 entries, got 3 entries"},
      {[&] { r.array("s", 2); }, "f.json: field 's': expected an array of at most 2 entries, got string \"text\""},
      {[&] { r.object("obj").object("inner").integer("k", 0, 1); },
       "f.json: field 'obj.inner.k': expected an integer in [0, 1], got string \"v\""},
      {[&] { r.object("obj").integer("depth", 0, 1); },
       "f.json: field 'obj.depth': expected an integer in [0, 1], got -1"},
      {[&] { r.integer_value(kDoc["list"][2], "list[2]", 0, 2); },
       "f.json: field 'list[2]': expected an integer in [0, 2], got 3"},
      {[&] { JsonReader::top(kDoc["list"], "f.json"); }, "f.json: top level: expected an object, got array [1,2,3]"},
  };
  for (const auto& [f, want] : rows) EXPECT_EQ(error_of(f), want);
}

TEST(JsonReader, LongValuesAreCutInMessages) {
  const json j = {{"s", std::string(200, 'a')}};
  const std::string m = error_of([&] { JsonReader(j, "f.json").integer("s", 0, 1); });
  EXPECT_LT(m.size(), 120u) << m;
  EXPECT_NE(m.find("..."), std::string::npos) << m;
}

TEST(JsonReader, ValuesInRangeAndOptionalFieldsRead) {
  const JsonReader r(kDoc, "f.json");
  EXPECT_EQ(r.integer("n", 5, 5), 5);
  EXPECT_DOUBLE_EQ(r.number("x", 2.5, 2.5), 2.5);
  EXPECT_EQ(r.string("s"), "text");
  EXPECT_TRUE(r.boolean("b"));
  EXPECT_EQ(r.object("obj").object("inner").string("k"), "v");
  int64_t n = 42;
  r.optional_integer("absent", &n, 0, 1);  // absent: the default stays
  EXPECT_EQ(n, 42);
  r.optional_integer("n", &n, 0, 10);
  EXPECT_EQ(n, 5);
  EXPECT_TRUE(r.read_keys().count("absent"));
  EXPECT_FALSE(r.read_keys().count("list"));
}

// The same defect, an integer out of its range, in each of the three files read through the
// reader: worded the same way, naming the file, the field and the range.
TEST(JsonReader, ConfigAdapterAndManifestShareTheGrammar) {
  EXPECT_EQ(error_of([] { parse_config(R"({"model_type":"jamba","num_hidden_layers":0})", "config.json"); }),
            "config.json: field 'num_hidden_layers': expected an integer in [1, 1024], got 0");
  EXPECT_EQ(error_of([] { parse_adapter_config(R"({"peft_type":"LORA","r":0})", "adapter_config.json"); }),
            "adapter_config.json: field 'r': expected an integer in [1, 65536], got 0");
  // The manifest's corruption table (test_session_corrupt.cpp) checks its rows in this grammar;
  // here the reader it uses, with the source it passes.
  const json manifest = {{"runs", json::array({{{"n_tokens", -1}}})}};
  const JsonReader m(manifest["runs"][0], "s.hlsession: manifest", "runs[0]");
  EXPECT_EQ(error_of([&] { m.integer("n_tokens", 0, 1048576); }),
            "s.hlsession: manifest: field 'runs[0].n_tokens': expected an integer in [0, 1048576], got -1");
}

}  // namespace
}  // namespace hl
