// Attribution patching (Nanda, 2023; Syed et al., 2023): the first-order estimate of what patching
// each head's output at each position from a corrupted run into the clean run does to a metric,
// from one clean forward, one corrupted forward and one backward, where activation patching
// (HeadInterventions::patch) needs one forward per head:
//   effect(h, i) ≈ (z_corrupt - z_clean)_{h,i} · ∂metric/∂z_{h,i}   (at the clean run)
// The metric is linear in the output, metric = Σ_{i,c} out_{i,c} direction_{i,c} (a logit
// difference, say, given as a direction on the positions that matter). Within one layer the W_O
// sum is linear in Z, so the estimate equals activation patching up to rounding; stacked under
// later layers it is an estimate, as in the papers.
#pragma once

#include "headwise/detail/errors.hpp"
#include "headwise/head_sum.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"
#include "headwise/types.hpp"

namespace headwise::interpret {

/// What attribution_patching returns.
template <class Scalar>
struct Attribution {
  Matrix<Scalar> per_position;  ///< (n_heads, n): the estimated effect of patching head h at position i
  Vector<Scalar> per_head;      ///< (n_heads): of patching head h at every position (the row sums)
  Matrix<Scalar> grad_z;        ///< (n, n_heads d_head): ∂metric/∂Z at the clean run
};

/// clean, corrupted: (n, d_model) inputs of the same length; direction: (n, d_model), the metric's
/// gradient with respect to the layer's output. Any layer with head_outputs, w_o and b_o
/// (MultiHeadAttention, MultiHeadLatentAttention).
template <class Layer, class Scalar>
Attribution<Scalar> attribution_patching(const Layer& layer, const Matrix<Scalar>& clean,
                                         const Matrix<Scalar>& corrupted, const Matrix<Scalar>& direction,
                                         const AttentionOptions& options = {}) {
  constexpr const char* where = "attribution_patching";
  if (corrupted.rows() != clean.rows() || direction.rows() != clean.rows() || direction.cols() != layer.d_model())
    detail::invalid(where, "clean is ", clean.rows(), "x", clean.cols(), ", corrupted ", corrupted.rows(), "x",
                    corrupted.cols(), " and direction ", direction.rows(), "x", direction.cols(), ": expected (n, ",
                    layer.d_model(), ") each");
  const Matrix<Scalar> w_o = layer.w_o();  // (widened once, for a layer that keeps it stored)
  const Index H = layer.n_heads(), d = w_o.rows() / H;  // the width of a head's Z
  const Matrix<Scalar> z_clean = layer.head_outputs(clean, options), z_corrupt = layer.head_outputs(corrupted, options);
  HeadSum<Scalar> sum(w_o, layer.b_o(), H);  // the backward from the metric to Z
  sum.forward(z_clean);
  Attribution<Scalar> a;
  a.grad_z = sum.backward(direction).dz;
  a.per_position.resize(H, clean.rows());
  const Matrix<Scalar> change = z_corrupt - z_clean;
  for (Index h = 0; h < H; ++h)
    a.per_position.row(h) = change.middleCols(h * d, d).cwiseProduct(a.grad_z.middleCols(h * d, d)).rowwise().sum().transpose();
  a.per_head = a.per_position.rowwise().sum();
  return a;
}

}  // namespace headwise::interpret
