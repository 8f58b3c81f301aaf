// Internal: C = A Bᵀ with B in MXFP4 as gpt-oss's checkpoints store their experts (OCP MX: FP4
// E2M1 entries, two to a byte, the low nibble first, and an E8M0 scale per 32 entries of a row,
// 2^(s - 127)). The rule: each few rows of B are widened to float (exactly: every MXFP4 value
// times its power of two is a float) into a buffer in L1, and multiplied by the one float product
// (row_dot_product.hpp's dot_block): C is then the bits of the float product over the decoded
// matrix, whatever the shapes, the split or the thread count, and a float checkpoint of the same
// weights gives the same logits bit for bit. A decoding step reads each byte once.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "headwise/detail/parallel.hpp"
#include "headwise/detail/row_dot_product.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// Entries per E8M0 scale, and the largest scale byte whose block stays finite in float (6 2^125).
inline constexpr Index mxfp4_block = 32;
inline constexpr unsigned mxfp4_largest_scale = 252;

/// An MXFP4 matrix as stored: row r's cols / 2 bytes at codes + r code_stride, its cols / 32 scale
/// bytes at scales + r scale_stride.
struct Mxfp4Rows {
  const std::uint8_t* codes;
  const std::uint8_t* scales;
  Index rows, cols, code_stride, scale_stride;
};

/// FP4 E2M1's sixteen values: sign, two exponent bits (bias 1), one mantissa bit.
inline constexpr float fp4_values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/// 2^(s - 127) as a float, for s <= mxfp4_largest_scale (s 0: 2^-127, a subnormal).
inline float e8m0_value(std::uint8_t s) { return std::ldexp(1.0f, int(s) - 127); }

/// Entries [first, first + count) of row r widened to float (first and count multiples of 2).
inline void widen_mxfp4(const Mxfp4Rows& b, Index r, Index first, Index count, float* out) {
  const std::uint8_t* codes = b.codes + r * b.code_stride;
  const std::uint8_t* scales = b.scales + r * b.scale_stride;
  for (Index k = first; k < first + count; k += 2) {
    const float scale = e8m0_value(scales[k / mxfp4_block]);
    const std::uint8_t byte = codes[k / 2];
    out[k - first] = fp4_values[byte & 0x0F] * scale;
    out[k - first + 1] = fp4_values[byte >> 4] * scale;
  }
}

/// C = A Bᵀ on up to `threads` threads: B's rows split between the threads in tiles of Rb, each
/// tile widened once and multiplied by every row of A (the float product's order: see the top).
inline void mxfp4_row_dot(RowMajorView<const float> a, const Mxfp4Rows& b, RowMajorView<float> c, int threads) {
  constexpr Index Rb = RowDotShape<float>::b_rows;
  if (a.rows == 0 || b.rows == 0) return;
  const Index tiles = (b.rows + Rb - 1) / Rb;
  const double flops = 2.0 * double(a.rows) * double(b.rows) * double(a.cols);
  const int parts = static_cast<int>(std::max<Index>(1, std::min<Index>(threads_for(flops, threads), tiles)));
  parallel_region(parts, [&](int part) {
    thread_local std::vector<float, Eigen::aligned_allocator<float>> widened;
    widened.resize(static_cast<std::size_t>(Rb * b.cols));
    for (Index tile = tiles * part / parts; tile < tiles * (part + 1) / parts; ++tile) {
      const Index j0 = tile * Rb, nb = std::min(Rb, b.rows - j0);
      for (Index w = 0; w < nb; ++w) widen_mxfp4(b, j0 + w, 0, b.cols, widened.data() + w * b.cols);
      const StoredRows<float> rows{{widened.data(), nb, b.cols, b.cols}, {}};
      const RowMajorView<float> cj{c.data + j0, c.rows, nb, c.stride};
      for (Index i0 = 0; i0 < a.rows; i0 += RowDotShape<float>::row_block)
        dot_block<float, float>(a, rows, cj, {i0, std::min(RowDotShape<float>::row_block, a.rows - i0), 0, nb});
    }
  });
}

}  // namespace headwise::detail
