// Reading a matrix's rows in ggml's layout whatever the layout it is held in (mat.h).
#include "engine/model/mat.h"

#include "engine/core/rows16.h"

namespace hl {

const uint8_t* plain_rows(const Mat& W, int64_t r0, int64_t n, std::vector<uint8_t>& scratch) {
  if (!W.rows16) return W.row_ptr(r0);
  const int64_t rb = W.row_bytes(), nb = W.cols / dtype_block(W.dtype);
  if (scratch.size() < static_cast<size_t>(n * rb)) scratch.resize(static_cast<size_t>(n * rb));
  for (int64_t r = r0; r < r0 + n; ++r)
    rows16_row(W.dtype, W.row_ptr(r - r % kGroupRows), nb, static_cast<int>(r % kGroupRows), scratch.data() + (r - r0) * rb);
  return scratch.data();
}

}  // namespace hl
