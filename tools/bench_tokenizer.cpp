// hl-bench-tokenizer: load time and single-core encode speed (MB/s) of a tokenizer (tokenizer.json
// or tokenizer.model), on English-like text: words of tests/data/tiny_spm_corpus.txt in a seeded
// random order, --rare percent of the words (default 3) replaced by random letter strings (words the
// BPE word cache has not seen, as names and rare words in real text), with numbers and line breaks;
// or on a given text file.
// usage: hl-bench-tokenizer --tokenizer DIR [--text-file F] [--mb N (default 20)] [--seed S] [--rare P]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw hl::Error(path + ": cannot open");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string english_like(const std::string& corpus, size_t bytes, uint32_t seed, uint32_t rare_percent) {
  std::vector<std::string> words;
  std::istringstream in(corpus);
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) throw hl::Error("the corpus has no words");
  std::mt19937 rng(seed);
  std::string out;
  out.reserve(bytes + 64);
  size_t line = 0;
  while (out.size() < bytes) {
    const uint32_t r = rng() % 100;
    if (r < rare_percent) {  // a rare word: random letters, 3..12 of them
      const int n = 3 + static_cast<int>(rng() % 10);
      for (int k = 0; k < n; ++k) out += static_cast<char>('a' + rng() % 26);
    } else if (r < rare_percent + 2) {
      out += std::to_string(rng() % 100000);
    } else {
      out += words[rng() % words.size()];
    }
    line += 1;
    if (line % 14 == 0) out += (rng() % 4 == 0) ? "\n\n" : "\n";
    else out += ' ';
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of this thread: the speed on one core even when other processes share the machine.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, text_file;
  double mb = 20;
  uint32_t seed = 1, rare = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--tokenizer" && has_value) dir = argv[++i];
    else if (a == "--text-file" && has_value) text_file = argv[++i];
    else if (a == "--mb" && has_value) mb = std::atof(argv[++i]);
    else if (a == "--seed" && has_value) seed = static_cast<uint32_t>(std::atol(argv[++i]));
    else if (a == "--rare" && has_value) rare = static_cast<uint32_t>(std::atol(argv[++i]));
    else {
      std::fprintf(stderr, "usage: hl-bench-tokenizer --tokenizer DIR [--text-file F] [--mb N] [--seed S] [--rare PERCENT]\n");
      return 2;
    }
  }
  if (dir.empty() || !(mb > 0 && mb <= 4096) || rare > 90) {
    std::fprintf(stderr, "usage: hl-bench-tokenizer --tokenizer DIR [--text-file F] [--mb N (0..4096]] [--seed S] [--rare PERCENT (0..90)]\n");
    return 2;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    const std::unique_ptr<hl::Tokenizer> tok = hl::Tokenizer::load(dir);
    const double load_s = seconds_since(t0), load_cpu = thread_cpu_seconds() - c0;
    const std::string text = text_file.empty()
                                 ? english_like(read_all(std::string(HL_SOURCE_DIR) + "/tests/data/tiny_spm_corpus.txt"),
                                                static_cast<size_t>(mb * 1e6), seed, rare)
                                 : read_all(text_file);
    // Encode in chunks of about 64 KB (whole lines), as a prompt or a document would come.
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = thread_cpu_seconds();
    size_t tokens = 0;
    for (size_t at = 0; at < text.size();) {
      size_t end = std::min(text.size(), at + 65536);
      const size_t nl = text.find('\n', end);
      end = nl == std::string::npos ? text.size() : nl + 1;
      tokens += tok->encode(text.substr(at, end - at)).size();
      at = end;
    }
    const double enc_s = seconds_since(t1), enc_cpu = thread_cpu_seconds() - c1;
    std::printf("tokenizer   %s (%s, %lld ids)\n", dir.c_str(), tok->kind().c_str(), static_cast<long long>(tok->vocab_size()));
    std::printf("load        %.3f s CPU (%.3f s wall)\n", load_cpu, load_s);
    std::printf("text        %.1f MB (%s), %zu tokens, %.2f bytes/token\n", text.size() / 1e6,
                text_file.empty() ? "English-like, generated" : text_file.c_str(), tokens,
                tokens ? static_cast<double>(text.size()) / static_cast<double>(tokens) : 0.0);
    std::printf("encode      %.3f s CPU, %.1f MB/s on one core (wall %.3f s, %.1f MB/s)\n", enc_cpu,
                text.size() / 1e6 / enc_cpu, enc_s, text.size() / 1e6 / enc_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hl-bench-tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
