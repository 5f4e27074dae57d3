// The session reader's corruption table (DESIGN.md reliability rules, issue 6 item 6, issue 10):
// each malformed file gives a LoadError with its own message and never a crash; the fuzz seed
// corpus (tests/fuzz/corpus/session) loads or fails the same way; every truncation fails cleanly.
#include <dirent.h>

#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "sessions/session_file.h"
#include "tests/engine/session_test_util.h"
#include "tests/engine/test_util.h"

namespace hl::test {
namespace {

// A valid two-run session of the tiny config (V 64, 1 attention, 3 Mamba, 2 MoE layers), 4 tokens.
const std::vector<uint8_t>& valid_bytes() {
  static const std::vector<uint8_t> bytes = [] {
    Recording rec = synthetic_recording(tiny_config(), 4, 5);
    rec.runs.push_back(synthetic_run(tiny_config(), 4, 2, 6, "B"));
    return serialize_session(rec);
  }();
  return bytes;
}

std::string parse_error(const std::vector<uint8_t>& b) {
  return load_error_of([&] { parse_session(b.data(), b.size(), "bad.hlsession"); });
}

struct Case {
  const char* name;
  std::function<std::vector<uint8_t>(const std::vector<uint8_t>&)> corrupt;
  const char* message;  // a part of the expected LoadError message
};

std::vector<Case> corruption_table() {
  using B = std::vector<uint8_t>;
  return {
      {"truncated in the data", [](const B& b) { return B(b.begin(), b.end() - 100); }, "the file is truncated"},
      {"truncated to 5 bytes", [](const B& b) { return B(b.begin(), b.begin() + 5); }, "too short"},
      {"truncated in the header", [](const B& b) { return B(b.begin(), b.begin() + 200); }, "runs past the end"},
      {"not a session (no manifest)",
       [](const B& b) { return edit_header(b, [](ojson& h) { h["__metadata__"].erase(kSessionMetadataKey); }); },
       "not a HybridLens session"},
      {"manifest is not JSON", [](const B& b) { return set_manifest_text(b, "{\"format\": hybridlens"); },
       "manifest: invalid JSON"},
      {"manifest is an array", [](const B& b) { return set_manifest_text(b, "[1, 2]"); },
       "manifest: is array, expected an object"},
      {"manifest nested too deep",
       [](const B& b) { return set_manifest_text(b, std::string(40, '[') + std::string(40, ']')); }, "depth"},
      {"wrong format name", [](const B& b) { return edit_manifest(b, [](ojson& m) { m["format"] = "trace"; }); },
       "'format' is \"trace\""},
      {"newer format_version", [](const B& b) { return edit_manifest(b, [](ojson& m) { m["format_version"] = 2; }); },
       "format_version 2 is not supported (this build reads format_version 1)"},
      {"format_version as a string",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["format_version"] = "1"; }); },
       "format_version \"1\" is not supported"},
      {"missing checkpoint", [](const B& b) { return edit_manifest(b, [](ojson& m) { m.erase("checkpoint"); }); },
       "missing key 'checkpoint'"},
      {"config out of range",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["config"]["vocab_size"] = 0; }); }, "vocab_size"},
      {"absurd declared token count",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][0]["n_tokens"] = 1000000000000LL; }); },
       "run 'A': 'n_tokens' is 1000000000000, allowed an integer in [0, 1048576]"},
      {"absurd declared registers",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][1]["n_reg"] = 1LL << 40; }); },
       "'n_reg' is 1099511627776"},
      {"too many runs",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) {
           for (int i = 0; i < 70; ++i) m["runs"].push_back(m["runs"][0]);
         });
       },
       "'runs' has 72 entries, at most 64 allowed"},
      {"T inconsistent across the manifest",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) {
           m["runs"][0]["n_tokens"] = 3;
           m["runs"][0]["prompt_tokens"] = 3;
         });
       },
       "'step_seconds' has 4 entries, expected n_tokens 3"},
      {"T inconsistent with a tensor",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) {
           m["runs"][0]["n_tokens"] = 3;
           m["runs"][0]["prompt_tokens"] = 3;
           m["runs"][0]["timings"]["step_seconds"].erase(3);
         });
       },
       "tensor 'runs/A/token_ids': shape (4,), expected (3,) = n_tokens 3 from the manifest"},
      {"tensor shape inconsistent with the config",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["config"]["vocab_size"] = 65; }); },
       "tensor 'runs/A/logits': shape (4, 64), expected (4, 65)"},
      {"tokens count inconsistent", [](const B& b) { return edit_manifest(b, [](ojson& m) { m["n_tokens"] = 5; }); },
       "'token_text' has 4 entries, expected n_tokens 5"},
      {"missing tensor",
       [](const B& b) {
         return edit_header(b, [](ojson& h) {
           ojson t = h["runs/B/logits"];
           h.erase("runs/B/logits");
           h["runs/B/logitz"] = t;
         });
       },
       "missing tensor 'runs/B/logits' (listed in the manifest's run 'B' fields)"},
      {"unexpected tensor",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) {
           ojson& f = m["runs"][0]["fields"];
           for (size_t i = 0; i < f.size(); ++i)
             if (f[i] == "router_lse") f.erase(i);
         });
       },
       "unexpected tensor 'runs/A/router_lse'"},
      {"wrong tensor dtype",
       [](const B& b) { return edit_header(b, [](ojson& h) { h["runs/A/position"]["dtype"] = "F32"; }); },
       "tensor 'runs/A/position': dtype F32, expected I32"},
      {"unknown field listed",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][0]["fields"][3] = "vibes"; }); },
       "'fields' lists \"vibes\", not a known field name"},
      {"scalar field not listed",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) {
           ojson& f = m["runs"][0]["fields"];
           f.erase(1);  // "position"
         });
       },
       "'fields' does not list \"position\""},
      {"duplicate run label",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][1]["label"] = "A"; }); },
       "label \"A\" is used twice"},
      {"run label escaping the tensor namespace",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][1]["label"] = "../B"; }); },
       "label \"../B\" is not 1-32 characters"},
      {"registers_used disagrees with n_reg",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][1]["settings"]["registers_used"] = 1; }); },
       "settings registers_used 1 differs from n_reg 2"},
      {"bad normalizer",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][0]["settings"]["normalizer"] = "max"; }); },
       "'normalizer' is \"max\""},
      {"negative timing",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][0]["timings"]["load_seconds"] = -1; }); },
       "'load_seconds' is -1"},
      {"absent list out of order",
       [](const B& b) { return edit_manifest(b, [](ojson& m) {
                          m["runs"][0]["absent"] = {{"attn_rows", {2, 1}}};
                        }); },
       "token index is 1, allowed an integer in [3, 3]"},
      {"absent names a scalar",
       [](const B& b) { return edit_manifest(b, [](ojson& m) {
                          m["runs"][0]["absent"] = {{"position", {0}}};
                        }); },
       "'absent' names \"position\""},
      {"token id outside the vocabulary", [](const B& b) { return poke_i32(b, "tokens", 2, 64); },
       "tensor 'tokens': token 2 is 64, outside the vocabulary [0, 64)"},
      {"run token id negative", [](const B& b) { return poke_i32(b, "runs/A/token_ids", 1, -5); },
       "tensor 'runs/A/token_ids': token 1: token id -5 outside the vocabulary"},
      {"position not its index", [](const B& b) { return poke_i32(b, "runs/B/position", 3, 0); },
       "tensor 'runs/B/position': token 3: position 0, expected 3"},
      {"router expert out of range", [](const B& b) { return poke_i32(b, "runs/A/router_topk", 5, 4); },
       "tensor 'runs/A/router_topk': token 1: expert 4 outside [0, 4)"},
      {"nonfinite layer out of range", [](const B& b) { return poke_i32(b, "runs/A/nonfinite_layer", 0, 6); },
       "layer 6 outside [-1, 5] (L: the final norm, L + 1: the LM head)"},
  };
}

TEST(SessionCorruption, Table_EachCaseGivesItsOwnLoadError) {
  ASSERT_NO_THROW(parse_session(valid_bytes().data(), valid_bytes().size(), "good.hlsession"));
  for (const Case& c : corruption_table()) {
    SCOPED_TRACE(c.name);
    const std::string msg = parse_error(c.corrupt(valid_bytes()));
    EXPECT_NE(msg.find(c.message), std::string::npos) << "message: " << msg;
    EXPECT_EQ(msg.rfind("bad.hlsession: ", 0), 0u) << "the message names the file: " << msg;
  }
}

TEST(SessionCorruption, File_MissingEmptyOrFolder_LoadError) {
  TempDir dir;
  EXPECT_NE(load_error_of([&] { load_session(dir / "nope.hlsession"); }).find("cannot open"), std::string::npos);
  write_text(dir / "empty.hlsession", "");
  EXPECT_NE(load_error_of([&] { load_session(dir / "empty.hlsession"); }).find("empty file"), std::string::npos);
  EXPECT_NE(load_error_of([&] { load_session(dir.path); }).find("is a folder"), std::string::npos);
  EXPECT_NE(load_error_of([&] { read_session_summary(dir / "empty.hlsession"); }).find("empty"), std::string::npos);
}

TEST(SessionCorruption, EveryTruncation_LoadErrorNeverCrash) {
  const std::vector<uint8_t>& b = valid_bytes();
  for (size_t n = 0; n < b.size(); n += 61) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(parse_error(cut).empty()) << "length " << n;
  }
}

TEST(SessionCorruption, ByteFlipsInTheHeader_LoadErrorOrValid) {
  const std::vector<uint8_t>& b = valid_bytes();
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  for (uint64_t i = 8; i < 8 + n; i += 13) {
    std::vector<uint8_t> x = b;
    x[i] ^= 0x5a;
    try {
      parse_session(x.data(), x.size(), "flip.hlsession");
    } catch (const LoadError&) {
    }  // anything else escapes and fails the test
  }
}

TEST(SessionCorruption, FuzzSeedCorpus_ValidLoadNearValidFail) {
  const std::string dir = std::string(HL_SOURCE_DIR) + "/tests/fuzz/corpus/session";
  DIR* d = ::opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  int valid = 0, bad = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n[0] == '.') continue;
    SCOPED_TRACE(n);
    if (n.rfind("valid_", 0) == 0) {
      EXPECT_NO_THROW(load_session(dir + "/" + n));
      ++valid;
    } else {
      EXPECT_FALSE(load_error_of([&] { load_session(dir + "/" + n); }).empty());
      ++bad;
    }
  }
  ::closedir(d);
  EXPECT_GE(valid, 3);
  EXPECT_GE(bad, 5);
}

}  // namespace
}  // namespace hl::test
