// Studying heads from the fast path: one fused forward that keeps what per-head questions need
// (Z, Q, K, V, each row's logsumexp, per-row statistics), all O(n d_model); then exact patterns
// rebuilt for chosen heads and rows, per-head contributions, and the norms of every head's
// contribution, without rerunning the layer and without an (n, heads, d_model) tensor.
#pragma once

#include <cmath>
#include <vector>

#include "headwise/causal_mask.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/hook_function.hpp"
#include "headwise/kernels/packed_keys_values.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"
#include "headwise/options.hpp"
#include "headwise/types.hpp"

namespace headwise::interpret {

/// inspect()'s one fused run on any layer: attend_heads keeping everything, then project_heads
/// (with the z_hook on a copy of Z: the record's Z and statistics are the clean ones).
template <class Layer, class Scalar>
ForwardRecord<Scalar> inspect_layer(const Layer& layer, const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options,
                                    const HookFunction<Scalar>& z_hook) {
  ForwardRecord<Scalar> run = ForwardRecord<Scalar>::everything();
  layer.attend_heads(x, options, run);
  Matrix<Scalar> z = run.attention.z;
  call_hook(z_hook, z, HookPoint{"hook_z", layer.n_heads(), 0}, "inspect");
  run.output = layer.project_heads(z);
  return run;
}

/// Runs the fused forward of `layer` on x (n, d_model), keeping everything a ForwardRecord holds
/// (forward_record.hpp: Z, the logsumexp and statistics, the queries, keys and values, the
/// options with the layer's own, the output); with a z_hook (head_interventions.hpp), the output is
/// the one it changes (Z and the statistics are the clean ones).
template <class Scalar>
ForwardRecord<Scalar> inspect(const MultiHeadAttention<Scalar>& layer,
                              const Eigen::Ref<const Matrix<typename detail::NonDeduced<Scalar>::type>>& x,
                              const AttentionOptions& options = {}, const HookFunction<Scalar>& z_hook = {}) {
  return inspect_layer<MultiHeadAttention<Scalar>, Scalar>(layer, x, options, z_hook);
}

/// inspect() on a latent attention layer: its fast path (the absorbed queries as q, (n, n_heads
/// latent_width); the latent as one key/value head), every head's Z (n, n_heads v_head_dim), the
/// logsumexp and statistics per head; pattern(h) gives head h's exact rows as for any layer.
template <class Scalar>
ForwardRecord<Scalar> inspect(const MultiHeadLatentAttention<Scalar>& layer,
                              const Eigen::Ref<const Matrix<typename detail::NonDeduced<Scalar>::type>>& x,
                              const AttentionOptions& options = {}, const HookFunction<Scalar>& z_hook = {}) {
  return inspect_layer<MultiHeadLatentAttention<Scalar>, Scalar>(layer, x, options, z_hook);
}

/// ‖Z_h W_O[h]‖ for every head and row, without forming Z_h W_O[h]: the squared norm of row i is
/// z_i G_h z_iᵀ with G_h = W_O[h] W_O[h]ᵀ (d x d, d the width of a head's Z). z: (n, n_heads d)
/// -> (n_heads, n). Ranks heads by direct effect at O(n n_heads d²) instead of O(n n_heads d
/// d_model) time and O(n n_heads) memory instead of (n, n_heads, d_model). Any layer with
/// n_heads() and w_o_block(h) (MultiHeadAttention, MultiHeadLatentAttention).
template <class Layer, class Scalar>
Matrix<Scalar> contribution_norms(const Layer& layer, const Matrix<Scalar>& z) {
  const Index n_heads = layer.n_heads(), d = layer.w_o_block(0).rows();  // (one head's block, not all of W_O)
  if (z.cols() != n_heads * d)
    detail::invalid("contribution_norms", "z has ", z.cols(), " columns, expected n_heads d_head = ", n_heads * d);
  Matrix<Scalar> norms(n_heads, z.rows());
  for (Index h = 0; h < n_heads; ++h) {
    const Matrix<Scalar> w = layer.w_o_block(h);
    Matrix<Scalar> gram(d, d);
    gram.noalias() = w * w.transpose();
    Matrix<Scalar> zg(z.rows(), d);
    zg.noalias() = z.middleCols(h * d, d) * gram;
    norms.row(h) = zg.cwiseProduct(z.middleCols(h * d, d)).rowwise().sum().cwiseMax(Scalar(0)).cwiseSqrt().transpose();
  }
  return norms;
}

}  // namespace headwise::interpret
