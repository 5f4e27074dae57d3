// The heap policy for a run's records. Every token's record holds arrays the size of the vocabulary
// (the logits: 256 KiB at a 65,536-token vocabulary) and a run keeps them all. glibc serves blocks
// above 128 KiB with a fresh mmap and returns them to the kernel on free, so every token writes
// memory the kernel must first zero page by page: measured here (a virtual machine) ~700 µs per
// 256 KiB against ~20 µs to rewrite memory already held, a fifth of a 4 ms quantised decode step.
// keep_record_memory_in_heap() (called once by main, before any thread starts) serves blocks up to
// 32 MiB from the heap and keeps up to 256 MiB of freed heap memory for reuse, so a second run of
// the same session — a rerun with a toggle, the other side of a compare, the next bench round —
// writes into pages it already holds. The first run still pays the first touch (quantization.md,
// "Speed").
#pragma once

namespace hl {

// mallopt(M_MMAP_THRESHOLD, 32 MiB) and mallopt(M_TRIM_THRESHOLD, 256 MiB) under glibc; nothing
// elsewhere. Returns whether the policy is in force.
bool keep_record_memory_in_heap();

}  // namespace hl
