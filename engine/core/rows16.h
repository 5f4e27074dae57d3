// Block-quantised matrices in groups of 16 rows, interleaved block by block, for the CPU's decode
// product: one pass of the product multiplies 16 rows at once, each 32-bit lane of a 512-bit vector
// one row, with x's codes broadcast four at a time (AVX-512 VNNI's vpdpbusd), and ends with 16
// finished sums, no horizontal additions (the idea of llama.cpp's CPU "repack" layouts; these layouts
// are our own). Two formats have one, Q4_K and Q8_0. The bytes are those of ggml's rows, rearranged:
// a group of 16 rows of nb blocks takes 16·nb·(block bytes) as the rows did, so sizes and the address
// of a group's first row are unchanged, and every bit comes back (rows16_row).
//
// Q4_K: block k of a group (2304 bytes at 2304·k), for rows r = 0..15:
//   [0, 32)      d of each row (fp16, row order)      [32, 64)  dmin of each row (fp16)
//   [64, 192)    L: the low 4 bits of the scales and mins: byte e = (sc[e] & 15) | (mn[e] & 15) << 4
//   [192, 256)   H: their top 2 bits: byte e = sc[e] >> 4 | (sc[e + 64] >> 4) << 2
//                                              | (mn[e] >> 4) << 4 | (mn[e + 64] >> 4) << 6
//   [256, 2304)  the codes: 32 vectors of 64 bytes; vector 8p + c holds, for each row r, the row's
//                qs bytes [32p + 4c, 32p + 4c + 4) at bytes [4r, 4r + 4) (low nibbles: group 2p's
//                values 4c..4c+3, high nibbles group 2p + 1's)
// where sc[e] for e = 16g + r is row r's 6-bit scale of group g (ggml's get_scale_min_k4), and mn[e]
// for e = 32k + 2r + j is row r's min of group 2k + j (so a pair of mins is one 32-bit lane once
// widened to int16). Every bit of the 12 packed scale bytes is kept.
//
// Q8_0: block k of a group (544 bytes at 544·k), for rows r = 0..15:
//   [0, 32)      d of each row (fp16, row order)
//   [32, 544)    the codes: 8 vectors of 64 bytes; vector c holds, for each row r, the row's codes
//                [4c, 4c + 4) at bytes [4r, 4r + 4), each plus 128 as an unsigned byte (code ^ 0x80),
//                the unsigned side of vpdpbusd: Σ (w + 128)·q − 128·Σ q = Σ w·q exactly.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"

namespace hl {

constexpr int64_t kGroupRows = 16;

// Whether format t has a 16-row layout (Q4_K, Q8_0).
bool rows16_format(DType t);
// 16 consecutive rows of format t, nb blocks each (ggml's layout) → one group at `group` (no overlap).
void rows16_pack(DType t, const uint8_t* rows, int64_t nb, uint8_t* group);
// `n` rows (a multiple of 16) of format t and `cols` columns in ggml's layout → n / 16 groups at `out`
// (no overlap): rows16_pack for each 16.
void rows16_pack_rows(DType t, const uint8_t* rows, int64_t n, int64_t cols, uint8_t* out);
// Row i (0..15) of a group of format t in ggml's layout (nb blocks at `row`).
void rows16_row(DType t, const uint8_t* group, int64_t nb, int i, uint8_t* row);

// Whether matrices of format t are laid out in groups (quantise on load, a GGUF file's in place): when
// the CPU kernels in use have a product that reads them (AVX-512 VNNI; backend/cpu/cpu_simd.cpp defines
// this), unless $HL_ROWS16=0 (for comparisons). Every reader of a matrix's bytes handles both layouts.
bool rows16_preferred(DType t);

}  // namespace hl
