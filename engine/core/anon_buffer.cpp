#include "engine/core/anon_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace hl {

uint8_t* map_anonymous(uint64_t bytes) {
  const size_t n = static_cast<size_t>(std::max<uint64_t>(bytes, 1));
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
  const int saved = errno;
  (void)::madvise(p, n, MADV_HUGEPAGE);  // advice only: EINVAL where THP is compiled out changes nothing
  errno = saved;
#endif
  return static_cast<uint8_t*>(p);
}

AnonBuffer::AnonBuffer(uint64_t bytes, const std::string& what) : size_(std::max<uint64_t>(bytes, 1)) {
  data_ = map_anonymous(size_);
  if (!data_) throw LoadError("cannot reserve " + std::to_string(size_) + " bytes for " + what + ": " + std::strerror(errno));
}

AnonBuffer::~AnonBuffer() { ::munmap(data_, static_cast<size_t>(size_)); }

}  // namespace hl
