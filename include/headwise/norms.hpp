// Norms of one token's values, the one implementation the layers and the whole model use: the
// RMS norm (v / sqrt(mean(v²) + eps) · w) and LayerNorm's centred form ((v - mean) / sqrt(var +
// eps)), each from row_moments(), which sums in index order in double: the same bits whatever the
// row's address (a vectorised reduction's order follows the row's alignment, so a token decoded
// alone would not get the bits it gets inside a batch of rows). And their backward
// (detail::norm_backward, apply_norm_backward: dx and the weight's gradient, in double), for
// attention_backward.hpp and model/backward.hpp.
//
// The norms of the projected queries, keys and values, as the current model families apply them
// between the projection and the scores (QK-norm: Qwen3, Gemma 3, OLMo 2, Llama 4, Qwen3-Next,
// Gemma 4; the value norm: Gemma 4), are RMS norms of one token's values with w the stored weight
// (Qwen3, OLMo 2, Gemma 4), 1 + w for Gemma's zero-centred weights (Gemma 3, Qwen3-Next), or 1
// with no weight (Llama 4's L2 norm, Gemma 4's value norm), taken over each head's d_head values,
// or over the whole projection of all heads before the split (OLMo 2). The whole model's norms
// (model/norm.hpp: LayerNorm, RMSNorm, Gemma's RMSNorm with 1 + w) and latent attention's use
// row_moments() too.
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

/// What a norm of one token's values needs: their mean (0 unless centred) and 1 / sqrt(the mean
/// of squares about it + eps).
struct RowMoments {
  double mean = 0, inverse = 1;
};

/// The moments of the `width` values at x (stride `stride`), summed in index order in double.
template <class Scalar>
RowMoments row_moments(const Scalar* x, Index width, bool centred, double eps, Index stride = 1) {
  double mean = 0;
  if (centred) {
    for (Index i = 0; i < width; ++i) mean += double(x[i * stride]);
    mean /= double(width);
  }
  double squares = 0;
  for (Index i = 0; i < width; ++i) squares += (double(x[i * stride]) - mean) * (double(x[i * stride]) - mean);
  return {mean, 1.0 / std::sqrt(squares / double(width) + eps)};
}

/// Normalises, in place, the `width` values at x: each divided by the RMS and multiplied by its
/// weight.
template <class Scalar>
void rms_normalise(Scalar* x, Index width, const RmsNorm& norm) {
  const double inverse = row_moments(x, width, /*centred=*/false, norm.eps).inverse;
  for (Index i = 0; i < width; ++i) {
    const double w = norm.weight.size() ? norm.weight(i) + (norm.zero_centred ? 1.0 : 0.0) : 1.0;
    x[i] = static_cast<Scalar>(double(x[i]) * inverse * w);
  }
}

/// The backward of one norm of the `width` values x (y_i = (x_i - mean) r w_i, r from
/// row_moments; mean 0 unless centred): dx from dy, and dy_i (x_i - mean) r added to dw[i] when
/// dw is given (the weight's gradient; with 1 + w the same). w(i): the multiplier of value i.
/// In double, as the forward: dx_i = r (g_i - mean(g) [centred] - x̂_i mean(g x̂)), g = dy ∘ w.
template <class Scalar, class Multiplier>
void norm_backward(const Scalar* x, const Scalar* dy, Index width, bool centred, double eps, const Multiplier& w, Scalar* dx,
                   double* dw = nullptr) {
  const RowMoments m = row_moments(x, width, centred, eps);
  double mean_g = 0, mean_gx = 0;
  for (Index i = 0; i < width; ++i) {
    const double g = double(dy[i]) * w(i), xhat = (double(x[i]) - m.mean) * m.inverse;
    mean_g += g, mean_gx += g * xhat;
    if (dw) dw[i] += double(dy[i]) * xhat;
  }
  mean_g = centred ? mean_g / double(width) : 0.0, mean_gx /= double(width);
  for (Index i = 0; i < width; ++i) {
    const double xhat = (double(x[i]) - m.mean) * m.inverse;
    dx[i] = static_cast<Scalar>(m.inverse * (double(dy[i]) * w(i) - mean_g - xhat * mean_gx));
  }
}

}  // namespace detail

/// The backward of apply_norm on x (m, heads d_head, as it was before the norm): dx from dy, in
/// place (dy becomes dx), and the weight's gradient added to dw (its size) when the norm has one.
template <class Scalar>
void apply_norm_backward(const RmsNorm& norm, const Eigen::Ref<const Matrix<Scalar>>& x, Eigen::Ref<Matrix<Scalar>> dy, Index d_head,
                         Vector<double>* dw) {
  const Index width = norm.over == RmsNorm::Over::head ? d_head : x.cols();
  const auto w = [&](Index i) { return norm.weight.size() ? norm.weight(i) + (norm.zero_centred ? 1.0 : 0.0) : 1.0; };
  const bool weighted = dw && norm.weight.size();
  if (weighted && dw->size() != width) *dw = Vector<double>::Zero(width);
  RowVector<Scalar> row(width);
  for (Index t = 0; t < x.rows(); ++t)
    for (Index c0 = 0; c0 < x.cols(); c0 += width) {
      row = x.row(t).segment(c0, width);
      RowVector<Scalar> d = dy.row(t).segment(c0, width);
      detail::norm_backward(row.data(), d.data(), width, false, norm.eps, w, d.data(), weighted ? dw->data() : nullptr);
      dy.row(t).segment(c0, width) = d;
    }
}

/// Applies `norm`, in place, to every row of x: (m, heads d_head), one token per row.
template <class Scalar>
void apply_norm(const RmsNorm& norm, Eigen::Ref<Matrix<Scalar>> x, Index d_head) {
  const Index width = norm.over == RmsNorm::Over::head ? d_head : x.cols();
  for (Index t = 0; t < x.rows(); ++t)
    for (Index c0 = 0; c0 < x.cols(); c0 += width) detail::rms_normalise(x.row(t).data() + c0, width, norm);
}

}  // namespace headwise
