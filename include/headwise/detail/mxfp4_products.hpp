// Internal: C = A Bᵀ with B in MXFP4 as gpt-oss's checkpoints store their experts (OCP MX: FP4
// E2M1 entries, two to a byte, the low nibble first, and an E8M0 scale per 32 entries of a row,
// 2^(s - 127)), by one of two arithmetics (WeightArithmetic, stored_matrix.hpp).
//
// Widened (the default): each few rows of B are widened to float (exactly: every MXFP4 value
// times its power of two is a float) into a buffer in L1, and multiplied by the one float product
// (row_dot_product.hpp's dot_block): C is then the bits of the float product over the decoded
// matrix, whatever the shapes, the split or the thread count, and a float checkpoint of the same
// weights gives the same logits bit for bit. A decoding step reads each byte once.
//
// Stored (as llama.cpp multiplies MXFP4 by int8 activations): each row of A is rounded to int8
// per block of 32 (d = max |x| / 127 in float; q = x / d rounded to nearest, ties to even, within
// ±127, which only a subnormal d passes; a block of zeros, or of values whose d is 0, gives
// zeros; a block holding a value that is not finite
// gives d = NaN, so that its row of C is NaN, as the widened arithmetic's is), and the FP4 values
// doubled are the integers 0, 1, 2, 3, 4, 6, 8, 12 and their negatives, each block's scale halved,
// 2^(s - 128). The blocks go in pairs (b, b + 1), laid out in 64 bytes as [b's even entries, b + 1's
// even entries, b's odd entries, b + 1's odd entries] (a lone last block beside zeros); lane L of
// 16 holds the four entries at bytes 4L .. 4L + 3, of block b + (L / 4) % 2. For each pair in
// order, each lane's integer sum of its four products p_L (exact) is added to the lane's float sum
// as acc_L = fma(p_L, d_L w_L, acc_L), d_L w_L rounded to float first (past float's range it is
// infinite, and the lane NaN or infinite, where the widened product's entries overflow too: inputs
// past about 16 against the largest scale byte, 252). C(i, j) is then the sum of
// the 16 lanes: lanes L and L + 8 added, then L and L + 4, then (x0 + x2) + (x1 + x3). The same
// bits whatever the instruction set (VectorFp4Int8 computes the same operations in registers),
// the shapes and the threads, a row of C never depending on another: decoding = the forward.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "headwise/detail/lanes.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/prefetch.hpp"
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

/// The doubled magnitudes of FP4 E2M1's sixteen codes (the sign is bit 3).
inline constexpr std::uint8_t fp4_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12};

/// The widest registers the instruction set has for the stored arithmetic (VectorFp4Int8).
using Fp4Int8Lanes = std::conditional_t<VectorFp4Int8<16>::available, VectorFp4Int8<16>, VectorFp4Int8<8>>;

/// 2^(s - 128), each block's scale for the doubled values (exact: e8m0_value halved), by s.
inline const float* e8m0_halves() {
  static const std::vector<float> halves = [] {
    std::vector<float> h(256);
    for (unsigned e = 0; e < 256; ++e) h[e] = e <= mxfp4_largest_scale ? e8m0_value(static_cast<std::uint8_t>(e)) * 0.5f : 0.0f;
    return h;
  }();
  return halves.data();
}

/// Blocks 2p and 2p + 1 (`blocks` of them here: 1 or 2) of row r of b as an Fp4Pair.
template <class Lanes = Fp4Int8Lanes>  // (a template: the registers' branch a build lacks is not compiled)
void decode_fp4_pair(const Mxfp4Rows& b, Index r, Index p, Index blocks, Fp4Pair& out) {
  const std::uint8_t* in_place = b.codes + r * b.code_stride + p * 32;
  prefetch_line(in_place, 4096);  // (the stream ahead: as the widened types' decoding step asks, row_dot_product.hpp)
  std::uint8_t lone[32] = {};  // (a lone block beside zeros)
  if (blocks == 1) std::memcpy(lone, in_place, 16);
  const std::uint8_t* codes = blocks == 2 ? in_place : lone;
  const std::uint8_t* exponents = b.scales + r * b.scale_stride + 2 * p;
  const float w0 = e8m0_halves()[exponents[0]], w1 = blocks == 2 ? e8m0_halves()[exponents[1]] : 0.0f;
  if constexpr (Lanes::available) return Lanes::decode_pair(codes, w0, w1, out);
  out.negative = 0;
  for (int e = 0; e < 64; ++e) {
    const int segment = e / 16, block = segment % 2;
    const std::uint8_t code = codes[16 * block + e % 16], nibble = segment < 2 ? code & 0x0F : code >> 4;
    out.magnitude[e] = fp4_doubled[nibble];
    if (nibble & 0x08) out.negative |= std::uint64_t(1) << e;
  }
  for (int lane = 0; lane < 16; ++lane) out.scale[lane] = (lane / 4) % 2 ? w1 : w0;
}

/// Row x of A (cols entries, whole blocks) rounded to int8 per block into its pairs (see the top).
inline void round_to_int8_pairs(const float* x, Index cols, Int8Pair* out) {
  const Index blocks = cols / mxfp4_block;
  for (Index p = 0; 2 * p < blocks; ++p) {
    Int8Pair& o = out[p];
    std::fill(std::begin(o.q), std::end(o.q), std::int8_t(0));
    std::fill(std::begin(o.scale), std::end(o.scale), 0.0f);
    for (Index half = 0; half < 2 && 2 * p + half < blocks; ++half) {
      const float* xb = x + (2 * p + half) * mxfp4_block;
      float largest = 0.0f;
      bool finite = true;
      for (Index k = 0; k < mxfp4_block; ++k) {
        const float a = std::fabs(xb[k]);
        finite = finite && a <= FLT_MAX;
        largest = std::max(largest, a);
      }
      const float d = finite ? largest / 127.0f : std::numeric_limits<float>::quiet_NaN();
      if (finite && d > 0.0f)
        for (Index k = 0; k < mxfp4_block; ++k)
          o.q[16 * (2 * (k % 2) + half) + k / 2] = static_cast<std::int8_t>(std::clamp(std::nearbyint(xb[k] / d), -127.0f, 127.0f));
      for (int lane = 0; lane < 16; ++lane)
        if ((lane / 4) % 2 == half) o.scale[lane] = d;
    }
  }
}

/// Adds `pairs` decoded pairs of a row of B times a row of A's into the 16 lanes (see the top).
template <class Lanes = Fp4Int8Lanes>
void add_fp4_pairs(const Fp4Pair* b, const Int8Pair* a, Index pairs, float* lanes) {
  if constexpr (Lanes::available) return Lanes::dot_pairs(b, a, pairs, lanes);
  for (Index p = 0; p < pairs; ++p)
    for (int lane = 0; lane < 16; ++lane) {
      std::int32_t sum = 0;
      for (int e = 4 * lane; e < 4 * lane + 4; ++e) {
        const std::int32_t q = a[p].q[e];
        sum += std::int32_t(b[p].magnitude[e]) * ((b[p].negative >> e) & 1u ? -q : q);
      }
      const float scale = a[p].scale[lane] * b[p].scale[lane];
      lanes[lane] = std::fma(static_cast<float>(sum), scale, lanes[lane]);
    }
}

/// The same for the whole pairs of row r of b read as stored, decoded pair by pair in registers
/// where the instruction set has them (a decoding step: each byte read once, nothing stored).
template <class Lanes = Fp4Int8Lanes>
void add_fp4_codes(const Mxfp4Rows& b, Index r, const Int8Pair* a, Index pairs, float* lanes) {
  const std::uint8_t* codes = b.codes + r * b.code_stride;
  const std::uint8_t* exponents = b.scales + r * b.scale_stride;
  if constexpr (Lanes::available) return Lanes::dot_codes(codes, exponents, e8m0_halves(), a, pairs, lanes);
  Fp4Pair pair;
  for (Index p = 0; p < pairs; ++p) {
    decode_fp4_pair<Lanes>(b, r, p, 2, pair);
    add_fp4_pairs<Lanes>(&pair, a + p, 1, lanes);
  }
}

/// C(i, j) from its 16 lanes (see the top).
inline float sum_fp4_lanes(float* lanes) {
  for (int lane = 0; lane < 8; ++lane) lanes[lane] += lanes[lane + 8];
  for (int lane = 0; lane < 4; ++lane) lanes[lane] += lanes[lane + 4];
  return (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
}

/// C = A Bᵀ by the stored arithmetic (see the top) on up to `threads` threads: A's rows rounded
/// once, B's rows split between the threads, each row decoded once and multiplied by every row of A.
inline void mxfp4_row_dot_stored(RowMajorView<const float> a, const Mxfp4Rows& b, RowMajorView<float> c, int threads) {
  if (a.rows == 0 || b.rows == 0) return;
  const Index blocks = b.cols / mxfp4_block, pairs = (blocks + 1) / 2;
  std::vector<Int8Pair> rounded(static_cast<std::size_t>(a.rows * pairs));
  for (Index i = 0; i < a.rows; ++i) round_to_int8_pairs(a.data + i * a.stride, a.cols, rounded.data() + i * pairs);
  const double ops = 2.0 * double(a.rows) * double(b.rows) * double(a.cols);
  const int parts = static_cast<int>(std::max<Index>(1, std::min<Index>(threads_for(ops, threads), b.rows)));
  constexpr Index decoding_rows = 4;  // (up to these rows of A, each row of B is decoded in registers for each)
  parallel_region(parts, [&](int part) {
    std::vector<Fp4Pair> row(static_cast<std::size_t>(a.rows <= decoding_rows ? blocks % 2 : pairs));
    for (Index j = b.rows * part / parts; j < b.rows * (part + 1) / parts; ++j) {
      if (a.rows <= decoding_rows) {
        if (blocks % 2) decode_fp4_pair(b, j, pairs - 1, 1, row[0]);  // (the lone last block)
        for (Index i = 0; i < a.rows; ++i) {
          float lanes[16] = {};
          add_fp4_codes(b, j, rounded.data() + i * pairs, blocks / 2, lanes);
          if (blocks % 2) add_fp4_pairs(row.data(), rounded.data() + i * pairs + pairs - 1, 1, lanes);
          c.data[i * c.stride + j] = sum_fp4_lanes(lanes);
        }
        continue;
      }
      for (Index p = 0; p < pairs; ++p) decode_fp4_pair(b, j, p, std::min<Index>(2, blocks - 2 * p), row[std::size_t(p)]);
      for (Index i = 0; i < a.rows; ++i) {
        float lanes[16] = {};
        add_fp4_pairs(row.data(), rounded.data() + i * pairs, pairs, lanes);
        c.data[i * c.stride + j] = sum_fp4_lanes(lanes);
      }
    }
  });
}

}  // namespace headwise::detail
