#include "engine/core/record_heap.h"

#include <cstdlib>  // defines __GLIBC__ under glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hl {

bool keep_record_memory_in_heap() {
#if defined(__GLIBC__)
  // 32 MiB is glibc's largest accepted mmap threshold on 64-bit (HEAP_MAX_SIZE / 2); setting it also
  // stops glibc's own threshold from moving, so the policy is the same in every run.
  constexpr int kServeFromHeap = 32 << 20;
  constexpr int kKeepFreed = 256 << 20;
  return mallopt(M_MMAP_THRESHOLD, kServeFromHeap) == 1 && mallopt(M_TRIM_THRESHOLD, kKeepFreed) == 1;
#else
  return false;
#endif
}

}  // namespace hl
