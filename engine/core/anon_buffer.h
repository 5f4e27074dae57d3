// Anonymous memory the process owns, for the large read-mostly arrays of a run: the weights read
// from a file (MappedFile::open_read), widened from GGUF or quantised on load, and the bandwidth
// probe's buffer. Reserved without being resident (MAP_NORESERVE) until written, and asked for in
// transparent huge pages (madvise MADV_HUGEPAGE) where the kernel offers them ("madvise" or "always"
// in /sys/kernel/mm/transparent_hugepage/enabled; elsewhere the advice is ignored): a decode step
// streams every weight once, and with 4 KiB pages each page costs a TLB miss and the hardware
// prefetchers stop at every page boundary. The probe uses the same memory, so "fraction of the
// bandwidth" compares like with like.
#pragma once
#include <cstdint>
#include <string>

namespace hl {

// mmap(PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE) of `bytes` (≥ 1), then the
// huge-page advice; nullptr with errno set when the address space is refused. Free with munmap.
uint8_t* map_anonymous(uint64_t bytes);

class AnonBuffer {
 public:
  // Throws LoadError "cannot reserve N bytes for WHAT: reason" when the address space is refused.
  AnonBuffer(uint64_t bytes, const std::string& what);
  ~AnonBuffer();
  AnonBuffer(const AnonBuffer&) = delete;
  AnonBuffer& operator=(const AnonBuffer&) = delete;
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace hl
