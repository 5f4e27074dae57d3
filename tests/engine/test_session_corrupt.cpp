// The session reader's corruption table (DESIGN.md reliability rules, issue 6 item 6, issue 10):
// each malformed file gives a LoadError with its own message and never a crash; the fuzz seed
// corpus (tests/fuzz/corpus/session) loads or fails the same way; every truncation fails cleanly.
#include <dirent.h>

#include <xxhash.h>

#include <cstdio>
#include <fstream>
#include <iterator>
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

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// b with byte i of a tensor's data XORed with mask (no checksum resealed).
std::vector<uint8_t> flip_in_tensor(std::vector<uint8_t> b, const std::string& tensor, size_t i, uint8_t mask) {
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  b[8 + n + ojson::parse(header_text(b))[tensor]["data_offsets"][0].get<uint64_t>() + i] ^= mask;
  return b;
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
       "manifest: top level: expected an object, got array [1,2]"},
      {"manifest nested too deep",
       [](const B& b) { return set_manifest_text(b, std::string(40, '[') + std::string(40, ']')); }, "depth"},
      {"wrong format name", [](const B& b) { return edit_manifest(b, [](ojson& m) { m["format"] = "trace"; }); },
       "manifest: field 'format': expected \"hybridlens-session\", got string \"trace\""},
      {"newer format_version", [](const B& b) { return edit_manifest(b, [](ojson& m) { m["format_version"] = 2; }); },
       "field 'format_version': expected format_version 1 (what this build reads), got 2"},
      {"format_version as a string",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["format_version"] = "1"; }); },
       "field 'format_version': expected format_version 1 (what this build reads), got string \"1\""},
      {"missing checkpoint", [](const B& b) { return edit_manifest(b, [](ojson& m) { m.erase("checkpoint"); }); },
       "field 'checkpoint': expected an object, got nothing (the field is missing)"},
      {"config out of range",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["config"]["vocab_size"] = 0; }); }, "vocab_size"},
      {"absurd declared token count",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][0]["n_tokens"] = 1000000000000LL; }); },
       "field 'runs[0].n_tokens': expected an integer in [0, 1048576], got 1000000000000"},
      {"absurd declared registers",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][1]["n_reg"] = 1LL << 40; }); },
       "field 'runs[1].n_reg': expected an integer in [0, 65536], got 1099511627776"},
      {"too many runs",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) {
           for (int i = 0; i < 70; ++i) m["runs"].push_back(m["runs"][0]);
         });
       },
       "field 'runs': expected an array of at most 64 entries, got 72 entries"},
      {"T inconsistent across the manifest",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) {
           m["runs"][0]["n_tokens"] = 3;
           m["runs"][0]["prompt_tokens"] = 3;
         });
       },
       "field 'runs[0].timings.step_seconds': expected n_tokens 3 entries, got 4"},
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
       "field 'token_text': expected n_tokens 5 entries (or none), got 4"},
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
       "field 'runs[0].fields[3]': expected a known field name, got string \"vibes\""},
      {"scalar field not listed",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) {
           ojson& f = m["runs"][0]["fields"];
           f.erase(1);  // "position"
         });
       },
       "field 'runs[0].fields': expected every always-stored field, got no \"position\""},
      {"duplicate run label",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][1]["label"] = "A"; }); },
       "field 'runs[1].label': expected a label no other run has, got \"A\" (used twice)"},
      {"run label escaping the tensor namespace",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][1]["label"] = "../B"; }); },
       "field 'runs[1].label': expected 1-32 characters of A-Z a-z 0-9 _ . -, got string \"../B\""},
      {"registers_used disagrees with n_reg",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][1]["settings"]["registers_used"] = 1; }); },
       "field 'runs[1].settings.registers_used': expected n_reg 2, got 1"},
      {"bad normalizer",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][0]["settings"]["normalizer"] = "max"; }); },
       "field 'runs[0].settings.normalizer': expected as-trained, softmax, softmax1 or sink, got string \"max\""},
      {"negative timing",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["runs"][0]["timings"]["load_seconds"] = -1; }); },
       "field 'runs[0].timings.load_seconds': expected a finite number in [0.0, 1000000000.0], got -1"},
      {"absent list out of order",
       [](const B& b) { return edit_manifest(b, [](ojson& m) {
                          m["runs"][0]["absent"] = {{"attn_rows", {2, 1}}};
                        }); },
       "field 'runs[0].absent.attn_rows[1]': expected an integer in [3, 3], got 1"},
      {"absent names a scalar",
       [](const B& b) { return edit_manifest(b, [](ojson& m) {
                          m["runs"][0]["absent"] = {{"position", {0}}};
                        }); },
       "field 'runs[0].absent.position': expected the name of a stored vector field of this run, got \"position\""},
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
      // Checksums (issue 18 item 9): damage the checks above cannot see.
      {"tensor data damaged (a value still in range)",
       [](const B& b) { return flip_in_tensor(b, "runs/A/logits", 5, 0x01); },
       "tensor 'runs/A/logits': checksum mismatch (stored "},
      {"manifest damaged (a field still valid)",
       [](const B& b) {
         return edit_header(
             b,
             [](ojson& h) {
               std::string m = h["__metadata__"][kSessionMetadataKey].get<std::string>();
               m.replace(m.find("a prompt"), 8, "b prompt");
               h["__metadata__"][kSessionMetadataKey] = m;
             },
             false);
       },
       "manifest: checksum mismatch (stored "},
      {"manifest checksum not hex",
       [](const B& b) {
         return edit_header(
             b, [](ojson& h) { h["__metadata__"][kSessionManifestChecksumKey] = "xyz"; }, false);
       },
       "'hybridlens_session_xxh3' is 'xyz', expected 16 hex digits"},
      {"manifest checksum removed, tensor checksums kept",
       [](const B& b) {
         return edit_header(
             b, [](ojson& h) { h["__metadata__"].erase(kSessionManifestChecksumKey); }, false);
       },
       "field 'checksums': expected __metadata__ to hold the manifest's own 'hybridlens_session_xxh3' alongside, got "
       "none"},
      {"unknown checksum algorithm",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["checksums"]["algorithm"] = "crc32"; }); },
       "field 'checksums.algorithm': expected \"xxh3_64\", got string \"crc32\""},
      {"tensor checksum not hex",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["checksums"]["tensors"]["ghost"] = "nope"; }); },
       "field 'checksums.tensors.ghost': expected 16 hex digits, got string \"nope\""},
      {"checksum of a tensor the file lacks",
       [](const B& b) {
         return edit_manifest(b, [](ojson& m) { m["checksums"]["tensors"]["ghost"] = std::string(16, '0'); });
       },
       "manifest checksums: tensor 'ghost' is not in the file"},
      {"tensor without a checksum",
       [](const B& b) { return edit_manifest(b, [](ojson& m) { m["checksums"]["tensors"].erase("tokens"); }); },
       "tensor 'tokens' has no checksum in the manifest"},
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

// Issue 18 item 9: single-bit flips across a session — every bit of the 8-byte length, one byte in
// 23 of the header (tensor table, manifest, padding) and the first, middle and last byte of every
// tensor, three bits each — are each refused with a one-line LoadError naming the file, or load
// into exactly the recording of the undamaged file (re-serialised byte for byte). Every flip inside
// a tensor is a checksum mismatch naming that tensor.
TEST(SessionChecksums, SingleBitFlips_RefusedOrProvablyHarmless) {
  const std::vector<uint8_t>& b = valid_bytes();
  const std::vector<uint8_t> again = serialize_session(parse_session(b.data(), b.size(), "good.hlsession"));
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  std::vector<std::pair<size_t, std::string>> at;  // byte position, the tensor it lies in ("" = header)
  for (size_t i = 0; i < 8; ++i) at.push_back({i, ""});
  for (size_t i = 8; i < 8 + n; i += 23) at.push_back({i, ""});
  at.push_back({8 + n - 1, ""});  // the last header byte (padding when there is any)
  const ojson h = ojson::parse(header_text(b));
  int tensors = 0;
  for (const auto& el : h.items()) {
    if (el.key() == "__metadata__") continue;
    const uint64_t lo = el.value()["data_offsets"][0].get<uint64_t>(),
                   hi = el.value()["data_offsets"][1].get<uint64_t>();
    if (hi == lo) continue;
    ++tensors;
    for (uint64_t o : {lo, lo + (hi - lo) / 2, hi - 1}) at.push_back({8 + n + o, el.key()});
  }
  int refused = 0, harmless = 0, flips = 0;
  for (const auto& [pos, tensor] : at) {
    for (int bit : {0, 4, 7}) {
      if (pos < 8 && bit == 4) continue;
      ++flips;
      std::vector<uint8_t> x = b;
      x[pos] ^= static_cast<uint8_t>(1u << bit);
      SCOPED_TRACE("byte " + std::to_string(pos) + " bit " + std::to_string(bit) + " " + tensor);
      try {
        const Recording r = parse_session(x.data(), x.size(), "flip.hlsession");
        EXPECT_EQ(serialize_session(r), again) << "loaded with changed values";
        ++harmless;
      } catch (const LoadError& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("flip.hlsession: ", 0), 0u) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        if (!tensor.empty()) {
          EXPECT_NE(msg.find("tensor '" + tensor + "': checksum mismatch"), std::string::npos) << msg;
        }
        ++refused;
      }
    }
  }
  EXPECT_GE(tensors, 27);
  EXPECT_GE(flips, 27 * 3);
  EXPECT_EQ(refused + harmless, flips);
  std::printf("[ single-bit flips: %d, refused %d, loaded unchanged %d ]\n", flips, refused, harmless);
}

// The writer stores XXH3-64 (computed here by libxxhash directly) of every tensor's bytes and of the manifest.
TEST(SessionChecksums, Writer_StoresXxh3OfEveryTensorAndTheManifest) {
  const std::vector<uint8_t>& b = valid_bytes();
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  const ojson h = ojson::parse(header_text(b));
  const std::string manifest = h["__metadata__"][kSessionMetadataKey].get<std::string>();
  char want[17];
  std::snprintf(want, sizeof want, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(manifest.data(), manifest.size())));
  EXPECT_EQ(h["__metadata__"][kSessionManifestChecksumKey].get<std::string>(), want);
  const ojson sums = ojson::parse(manifest)["checksums"]["tensors"];
  size_t seen = 0;
  for (const auto& el : h.items()) {
    if (el.key() == "__metadata__") continue;
    const uint64_t lo = el.value()["data_offsets"][0].get<uint64_t>(),
                   hi = el.value()["data_offsets"][1].get<uint64_t>();
    std::snprintf(want, sizeof want, "%016llx",
                  static_cast<unsigned long long>(XXH3_64bits(b.data() + 8 + n + lo, hi - lo)));
    EXPECT_EQ(sums[el.key()].get<std::string>(), want) << el.key();
    ++seen;
  }
  EXPECT_EQ(seen, sums.size());
}

// A file written before checksums existed (tests/data/README.md) has neither field and still opens,
// with the records it holds: saved again (now with checksums) it reads back to the same records.
TEST(SessionChecksums, FileWrittenBeforeChecksums_StillOpens) {
  const std::string path = std::string(HL_SOURCE_DIR) + "/tests/data/session_before_checksums.hlsession";
  const std::string header = header_text(read_bytes(path));
  ASSERT_EQ(header.find(kSessionManifestChecksumKey), std::string::npos) << "not an old file";
  ASSERT_EQ(header.find("checksums"), std::string::npos) << "not an old file";
  const Recording old = load_session(path);
  ASSERT_EQ(old.runs.size(), 2u);
  const std::vector<uint8_t> now = serialize_session(old);
  ASSERT_NE(header_text(now).find(kSessionManifestChecksumKey), std::string::npos);
  const Recording back = parse_session(now.data(), now.size(), "resaved.hlsession");
  for (size_t i = 0; i < 2; ++i) expect_runs_equal(old.runs[i], back.runs[i], true);
  EXPECT_EQ(read_session_summary(path).run_labels.size(), 2u);
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
