// Norms of the projected queries, keys and values, as the current model families apply them
// between the projection and the scores (QK-norm: Qwen3, Gemma 3, OLMo 2, Llama 4, Qwen3-Next,
// Gemma 4; the value norm: Gemma 4). Each is an RMS norm of one token's values:
//   v' = v / sqrt(mean(v²) + eps) · w
// with w the stored weight (Qwen3, OLMo 2, Gemma 4), 1 + w for Gemma's zero-centred weights
// (Gemma 3, Qwen3-Next), or 1 with no weight (Llama 4's L2 norm, Gemma 4's value norm), taken over
// each head's d_head values, or over the whole projection of all heads before the split (OLMo 2).
#pragma once

#include <cmath>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// One RMS norm, over each head or over the whole projection.
struct RmsNorm {
  enum class Over { head, projection };
  Over over = Over::head;
  double eps = 1e-6;
  /// d_head entries (over a head) or heads d_head (over the projection); empty: no weight (1).
  Vector<double> weight;
  /// Gemma's weights are stored as w - 1: the norm multiplies by 1 + weight.
  bool zero_centred = false;
};

/// QK-norm: a norm of the queries and one of the keys, before the rotary embedding (Qwen3, Gemma 3,
/// OLMo 2, Qwen3-Next, Gemma 4) or after it (Llama 4).
struct QkNorm {
  RmsNorm query, key;
  bool after_rope = false;
};

namespace detail {

/// Throws unless `norm` fits a part of `heads` heads of d_head values.
inline void check_norm(const RmsNorm& norm, Index heads, Index d_head, const char* where, const char* name) {
  if (!(norm.eps > 0.0) || !std::isfinite(norm.eps)) invalid(where, name, " eps must be finite and > 0, got ", norm.eps);
  const Index width = norm.over == RmsNorm::Over::head ? d_head : heads * d_head;
  if (norm.weight.size() != 0 && norm.weight.size() != width)
    invalid(where, name, " has ", norm.weight.size(), " weights, expected ", width,
            norm.over == RmsNorm::Over::head ? " (d_head)" : " (heads d_head: over the whole projection)");
  for (Index i = 0; i < norm.weight.size(); ++i)
    if (!std::isfinite(norm.weight(i))) invalid(where, name, " weight ", i, " is not finite (", norm.weight(i), ")");
}

/// Normalises, in place, the `width` values at x: mean of squares in double, then each value
/// divided by the RMS and multiplied by its weight.
template <class Scalar>
void rms_normalise(Scalar* x, Index width, const RmsNorm& norm) {
  double squares = 0;
  for (Index i = 0; i < width; ++i) squares += double(x[i]) * double(x[i]);
  const double inverse = 1.0 / std::sqrt(squares / double(width) + norm.eps);
  for (Index i = 0; i < width; ++i) {
    const double w = norm.weight.size() ? norm.weight(i) + (norm.zero_centred ? 1.0 : 0.0) : 1.0;
    x[i] = static_cast<Scalar>(double(x[i]) * inverse * w);
  }
}

}  // namespace detail

/// Applies `norm`, in place, to every row of x: (m, heads d_head), one token per row.
template <class Scalar>
void apply_norm(const RmsNorm& norm, Eigen::Ref<Matrix<Scalar>> x, Index d_head) {
  const Index width = norm.over == RmsNorm::Over::head ? d_head : x.cols();
  for (Index t = 0; t < x.rows(); ++t)
    for (Index c0 = 0; c0 < x.cols(); c0 += width) detail::rms_normalise(x.row(t).data() + c0, width, norm);
}

}  // namespace headwise
