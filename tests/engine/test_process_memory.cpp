// The process's own memory for a run (engine/core/anon_buffer.h, engine/core/record_heap.h): anonymous
// buffers for weights (sized, writable, a refusal named), and the heap policy under which a second
// run's records reuse the pages the first run's records freed instead of faulting in fresh ones.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/anon_buffer.h"
#include "engine/core/error.h"
#include "engine/core/record_heap.h"
#include "tests/engine/test_util.h"

namespace hl::test {
namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// The logits of `tokens` records at a 65,536-token vocabulary, written as the LM head writes them.
long faults_of_one_run(int tokens) {
  const long before = minor_faults();
  std::vector<std::vector<float>> logits;
  for (int t = 0; t < tokens; ++t) {
    logits.emplace_back(65536);
    for (size_t v = 0; v < logits.back().size(); v += 1024) logits.back()[v] = static_cast<float>(t + v);
  }
  return minor_faults() - before;
}

TEST(RecordHeap, SecondRunReusesTheFirstRunsPages) {
  const bool in_force = keep_record_memory_in_heap();
#if defined(__GLIBC__)
  if (HL_SANITIZED_ALLOCATOR) GTEST_SKIP() << "the sanitizer's allocator ignores mallopt";
  ASSERT_TRUE(in_force) << "mallopt refused the record heap policy";
#else
  if (!in_force) GTEST_SKIP() << "no glibc: the policy is not applied";
#endif
  // 64 tokens = 16 MiB of logits, 4,096 pages of 4 KiB when fresh.
  const long first = faults_of_one_run(64);
  const long second = faults_of_one_run(64);
  EXPECT_GT(first, 1000) << "the first run should fault in its pages";
  EXPECT_LT(second, first / 10) << "the second run faulted " << second << " pages (first: " << first << ")";
}

TEST(AnonBuffer, SizedAndWritable) {
  AnonBuffer b(3 * 4096 + 5, "a test buffer");
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 3u * 4096 + 5);
  std::memset(b.data(), 0xab, b.size());
  EXPECT_EQ(b.data()[b.size() - 1], 0xab);
  AnonBuffer empty(0, "an empty buffer");  // at least one byte, never a null buffer
  EXPECT_EQ(empty.size(), 1u);
  ASSERT_NE(empty.data(), nullptr);
}

TEST(AnonBuffer, RefusedAddressSpaceNamesTheBuffer) {
  try {
    AnonBuffer b(std::numeric_limits<uint64_t>::max() / 2, "the widened GGUF tensors");
    FAIL() << "a buffer of 2^63 bytes was granted";
  } catch (const LoadError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot reserve"), std::string::npos) << m;
    EXPECT_NE(m.find("the widened GGUF tensors"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace hl::test
