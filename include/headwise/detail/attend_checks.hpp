// What attend() checks of a call on packed keys and values before the fused kernel runs it (the
// shapes, the tiles asked for, the scaled queries against the range the stored arithmetic rounds
// them to) and after (the ranges the kernel noted it left): each refused by name.
#pragma once

#include <atomic>
#include <limits>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/kernels/fused_call.hpp"
#include "headwise/kernels/kv_blocks.hpp"
#include "headwise/kv_storage.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// Throws unless the arguments of a fused call on packed keys and values fit together.
template <class Scalar>
void check_packed_call(const char* where, const Eigen::Ref<const Matrix<Scalar>>& q, Index n_heads,
                       const KvBlocks<Scalar>& kv, const Eigen::Ref<Matrix<Scalar>>& z, const FusedTiles& tiles) {
  if (n_heads <= 0) invalid(where, "n_heads and n_kv_heads must be > 0, got ", n_heads, " and ", kv.n_kv_heads());
  if (n_heads % kv.n_kv_heads() != 0)
    invalid(where, "n_heads = ", n_heads, " is not divisible by n_kv_heads = ", kv.n_kv_heads());
  if (q.cols() != n_heads * kv.d_head())
    invalid(where, "q has ", q.cols(), " columns, expected n_heads d_head = ", n_heads * kv.d_head());
  if (z.rows() != q.rows() || z.cols() != n_heads * kv.d_v())
    invalid(where, "z is ", z.rows(), "x", z.cols(), ", expected ", q.rows(), "x", n_heads * kv.d_v());
  check_tiles(where, tiles);
}

/// Throws unless the scaled queries (q times inv_divisor, as the kernel computes them) fit the
/// numbers `format`'s arithmetic rounds them to: F16 under the stored arithmetic, largest 65504.
template <class Scalar>
void check_scaled_queries(const char* where, const Eigen::Ref<const Matrix<Scalar>>& q, Scalar inv_divisor, const StoreFormat& format) {
  if (!format.f16_products() || q.size() == 0) return;
  const Scalar largest = q.cwiseAbs().maxCoeff() * inv_divisor;
  if (!(largest < Scalar(65520)))  // (what rounds to F16's infinity)
    invalid(where, "q / divisor reaches ", largest, ", beyond F16's largest number (65504): F16 keys under the stored arithmetic ",
            "round the scaled query to F16 (KvArithmetic::widened keeps it in float)");
}

/// Throws if a call over `format`'s store left a range the kernel noted in `overflow`: F16 chains
/// under the stored arithmetic beyond 65504 (a score a row sees, or a value chain: the result is not
/// finite; detail/f16_products.hpp), or a row's value sum beyond Scalar's largest number where its
/// scores were finite (normalise_rows). Otherwise a row whose own scores overflowed (|q|.|k| past
/// Scalar's range) stays NaN, as documented (docs/bad-input.md).
template <class Scalar>
void check_overflow(const char* where, const Matrix<Scalar>& z, const StoreFormat& format, const std::atomic<bool>& overflow,
                    int threads) {
  if (format.f16_products() && (overflow.load() || !all_finite(z, threads)))
    invalid(where, "a chain of F16 products left F16's range (beyond 65504) under the stored arithmetic: the result is not finite; ",
            "KvArithmetic::widened multiplies these keys and values in float");
  if (overflow.load())
    invalid(where, "a row's value sum overflowed: the fused kernel adds e^(s - max) v over the keys a row sees before dividing by ",
            "their sum, so |v| times that sum (up to the keys' count) must stay below ", std::numeric_limits<Scalar>::max(),
            "; scale v down, or compute in double or by AttentionPath::step_by_step");
}

}  // namespace headwise::detail
