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
#include <cstring>
#include <vector>

#include "headwise/detail/lanes.hpp"
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
inline float e8m0_value(std::uint8_t s) {
  const std::uint32_t bits = s ? std::uint32_t(s) << 23 : 0x00400000u;  // (the exponent field; 2^-127: a subnormal's mantissa)
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

/// Entry (r, k) widened to float.
inline float mxfp4_entry(const Mxfp4Rows& b, Index r, Index k) {
  const std::uint8_t byte = b.codes[r * b.code_stride + k / 2];
  return fp4_values[k % 2 ? byte >> 4 : byte & 0x0F] * e8m0_value(b.scales[r * b.scale_stride + k / mxfp4_block]);
}

/// 32 entries (a block: 16 bytes at codes) times `scale` into out: in registers where the
/// instruction set has them (VectorFp4, detail/lanes.hpp), else entry by entry, the low nibble of
/// each byte first.
template <int Wide = 16, int Narrow = 8>  // (a template: the registers' branches a build lacks are not compiled)
inline void widen_mxfp4_block(const std::uint8_t* codes, float scale, float* out) {
  if constexpr (VectorFp4<Wide>::available) {
    VectorFp4<Wide>::widen(codes, fp4_values, scale, out);
  } else if constexpr (VectorFp4<Narrow>::available) {
    VectorFp4<Narrow>::widen(codes, fp4_values, scale, out);
  } else {
    for (Index j = 0; j < mxfp4_block / 2; ++j) {
      out[2 * j] = fp4_values[codes[j] & 0x0F] * scale;
      out[2 * j + 1] = fp4_values[codes[j] >> 4] * scale;
    }
  }
}

/// Row r widened to float into out (cols entries), block by block.
inline void widen_mxfp4_row(const Mxfp4Rows& b, Index r, float* out) {
  const std::uint8_t* codes = b.codes + r * b.code_stride;
  const std::uint8_t* scales = b.scales + r * b.scale_stride;
  for (Index g = 0; g < b.cols / mxfp4_block; ++g) widen_mxfp4_block(codes + g * mxfp4_block / 2, e8m0_value(scales[g]), out + g * mxfp4_block);
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
      for (Index w = 0; w < nb; ++w) widen_mxfp4_row(b, j0 + w, widened.data() + w * b.cols);
      const StoredRows<float> rows{{widened.data(), nb, b.cols, b.cols}, {}};
      const RowMajorView<float> cj{c.data + j0, c.rows, nb, c.stride};
      for (Index i0 = 0; i0 < a.rows; i0 += RowDotShape<float>::row_block)
        dot_block<float, float>(a, rows, cj, {i0, std::min(RowDotShape<float>::row_block, a.rows - i0), 0, nb});
    }
  });
}

}  // namespace headwise::detail
