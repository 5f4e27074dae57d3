// The 16-row layouts of rows16.h: packing at load and a row back in ggml's layout.
#include "engine/core/rows16.h"

#include <cstring>

namespace hl {

namespace {

constexpr int64_t kBlock = 144;  // a Q4_K block: d, dmin (fp16), 12 scale bytes, 128 code bytes
constexpr int64_t kGroupBlock = 16 * kBlock;
constexpr int64_t kBlock8 = 34;   // a Q8_0 block: d (fp16), 32 codes
constexpr int64_t kGroupBlock8 = 16 * kBlock8;

// A block's eight 6-bit scales and mins from its 12 packed bytes (ggml's get_scale_min_k4).
void unpack_scales(const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    mn[j] = q[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((q[j + 8] & 15) | ((q[j] >> 6) << 4));
    mn[j + 4] = static_cast<uint8_t>((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
  }
}

// The inverse: every bit of the 12 bytes is one of the 16 six-bit values.
void pack_scales(const uint8_t* sc, const uint8_t* mn, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

// Entry of row r's scale of group g, and of its min of group m, in the sc / mn orders of the header.
constexpr int sc_entry(int r, int g) { return 16 * g + r; }
constexpr int mn_entry(int r, int m) { return 32 * (m / 2) + 2 * r + m % 2; }

void q4k16_pack(const uint8_t* rows, int64_t nb, uint8_t* group) {
  for (int64_t k = 0; k < nb; ++k) {
    uint8_t* out = group + k * kGroupBlock;
    uint8_t sc[128], mn[128];
    for (int r = 0; r < 16; ++r) {
      const uint8_t* b = rows + (r * nb + k) * kBlock;
      std::memcpy(out + 2 * r, b, 2);
      std::memcpy(out + 32 + 2 * r, b + 2, 2);
      uint8_t s[8], m[8];
      unpack_scales(b + 4, s, m);
      for (int g = 0; g < 8; ++g) {
        sc[sc_entry(r, g)] = s[g];
        mn[mn_entry(r, g)] = m[g];
      }
      for (int v = 0; v < 32; ++v) std::memcpy(out + 256 + 64 * v + 4 * r, b + 16 + 4 * v, 4);
    }
    for (int e = 0; e < 128; ++e) out[64 + e] = static_cast<uint8_t>((sc[e] & 15) | ((mn[e] & 15) << 4));
    for (int e = 0; e < 64; ++e)
      out[192 + e] = static_cast<uint8_t>((sc[e] >> 4) | ((sc[e + 64] >> 4) << 2) | ((mn[e] >> 4) << 4) |
                                          ((mn[e + 64] >> 4) << 6));
  }
}

void q4k16_row(const uint8_t* group, int64_t nb, int i, uint8_t* row) {
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* in = group + k * kGroupBlock;
    uint8_t* b = row + k * kBlock;
    std::memcpy(b, in + 2 * i, 2);
    std::memcpy(b + 2, in + 32 + 2 * i, 2);
    uint8_t s[8], m[8];
    for (int g = 0; g < 8; ++g) {
      const int e = sc_entry(i, g), f = mn_entry(i, g);
      const int se = e % 64, sh = e < 64 ? 0 : 2;  // sc[e]'s top bits: H byte e % 64, bits sh..sh+1
      const int fe = f % 64, fh = f < 64 ? 4 : 6;
      s[g] = static_cast<uint8_t>((in[64 + e] & 15) | (((in[192 + se] >> sh) & 3) << 4));
      m[g] = static_cast<uint8_t>((in[64 + f] >> 4) | (((in[192 + fe] >> fh) & 3) << 4));
    }
    pack_scales(s, m, b + 4);
    for (int v = 0; v < 32; ++v) std::memcpy(b + 16 + 4 * v, in + 256 + 64 * v + 4 * i, 4);
  }
}

// Four Q8_0 codes from `from` to `to`, each plus 128 as an unsigned byte (the same as minus 128 mod
// 256, so this is its own inverse).
void flip4(const uint8_t* from, uint8_t* to) {
  uint32_t v;
  std::memcpy(&v, from, 4);
  v ^= 0x80808080u;
  std::memcpy(to, &v, 4);
}

void q8_0_pack(const uint8_t* rows, int64_t nb, uint8_t* group) {
  for (int64_t k = 0; k < nb; ++k) {
    uint8_t* out = group + k * kGroupBlock8;
    for (int r = 0; r < 16; ++r) {
      const uint8_t* b = rows + (r * nb + k) * kBlock8;
      std::memcpy(out + 2 * r, b, 2);
      for (int c = 0; c < 8; ++c) flip4(b + 2 + 4 * c, out + 32 + 64 * c + 4 * r);
    }
  }
}

void q8_0_row(const uint8_t* group, int64_t nb, int i, uint8_t* row) {
  for (int64_t k = 0; k < nb; ++k) {
    const uint8_t* in = group + k * kGroupBlock8;
    uint8_t* b = row + k * kBlock8;
    std::memcpy(b, in + 2 * i, 2);
    for (int c = 0; c < 8; ++c) flip4(in + 32 + 64 * c + 4 * i, b + 2 + 4 * c);
  }
}

}  // namespace

bool rows16_format(DType t) {
  return t == DType::Q4_K || t == DType::Q8_0;
}

void rows16_pack(DType t, const uint8_t* rows, int64_t nb, uint8_t* group) {
  (t == DType::Q4_K ? q4k16_pack : q8_0_pack)(rows, nb, group);
}

void rows16_pack_rows(DType t, const uint8_t* rows, int64_t n, int64_t cols, uint8_t* out) {
  const int64_t gb = kGroupRows * dtype_row_bytes(t, cols);
  for (int64_t g = 0; g < n / kGroupRows; ++g) rows16_pack(t, rows + g * gb, cols / dtype_block(t), out + g * gb);
}

void rows16_row(DType t, const uint8_t* group, int64_t nb, int i, uint8_t* row) {
  (t == DType::Q4_K ? q4k16_row : q8_0_row)(group, nb, i, row);
}

}  // namespace hl
