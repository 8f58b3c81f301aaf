// Studying heads from the fast path: one fused forward that keeps what per-head questions need
// (Z, Q, K, V, each row's logsumexp, per-row statistics), all O(n d_model); then exact patterns
// rebuilt for chosen heads and rows, per-head contributions, and the norms of every head's
// contribution, without rerunning the layer and without an (n, heads, d_model) tensor.
#pragma once

#include <cmath>
#include <vector>

#include "headwise/causal_mask.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/head_interventions.hpp"
#include "headwise/kernels/packed_keys_values.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"
#include "headwise/options.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {
/// T, in a context where a function template does not deduce it (so that Scalar comes from the
/// layer and x may be anything an Eigen::Ref binds to).
template <class T>
struct NonDeduced {
  using type = T;
};
}  // namespace headwise::detail

namespace headwise::interpret {

/// One fused forward, kept for inspection.
template <class Scalar>
struct Inspection {
  Matrix<Scalar> output;  ///< (n, d_model): the layer's output (with interventions, if any)
  /// The attention before W_O, as attend() returns it: every head's Z (n, n_heads d_head), before
  /// interventions; the logsumexp (n_heads, n); the statistics (n_heads, n) each: entropy, masses,
  /// largest weight.
  AttentionResult<Scalar> attention;
  Matrix<Scalar> q;                                  ///< (n, n_heads d_head): the queries
  PackedKeysValues<Scalar> keys_values{0, 1, 1, 1};  ///< the keys and values, packed
  AttentionOptions options;                          ///< the options of the run
  Index n_heads = 0, n_kv_heads = 0, d_head = 0;
  Index d_v = 0;  ///< the width of a head's Z (d_head, but v_head_dim in a latent attention layer)

  /// Head h's Z: (n, d_v).
  Matrix<Scalar> z_head(Index h) const { return attention.z.middleCols(checked(h, "z_head") * d_v, d_v); }

  /// Rows `rows` of head h's attention pattern, exactly, from the saved logsumexp:
  /// p_ij = exp(s_ij - lse_i), s_ij = q_i . k_j / divisor modified by the run's rule (cap, ALiBi,
  /// bias, sink in the lse) over the keys j that query i sees, 0 elsewhere. -> (rows.size(), n).
  Matrix<Scalar> pattern(Index h, const std::vector<Index>& rows) const {
    checked(h, "pattern");
    const Index n = q.rows(), g = h / (n_heads / n_kv_heads);
    const Scalar inv_divisor = static_cast<Scalar>(1.0 / resolve_divisor<Scalar>(options, d_head, "pattern"));
    const ScoreRule<Scalar> rule(options, n, n, n_heads, "pattern");
    Matrix<Scalar> k(n, d_head);  // head g's keys, unpacked
    for (Index j = 0; j < n; ++j)
      for (Index c = 0; c < d_head; ++c) k(j, c) = keys_values.key(g, j, c);
    Matrix<Scalar> p = Matrix<Scalar>::Zero(static_cast<Index>(rows.size()), n);
    RowVector<Scalar> s(n);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Index i = rows[r];
      if (i < 0 || i >= n) detail::invalid("pattern", "row ", i, " out of range [0, ", n, ")");
      const KeyRange keys = rule.keys(i);
      const RowVector<Scalar> q_i = q.block(i, h * d_head, 1, d_head) * inv_divisor;
      for (Index j = keys.begin; j < keys.end; ++j) s(j) = q_i.dot(k.row(j));
      rule.apply(h, i, /*first_key=*/0, s.data(), keys.begin, keys.end);
      for (Index j = keys.begin; j < keys.end; ++j) p(static_cast<Index>(r), j) = std::exp(s(j) - attention.logsumexp(h, i));
    }
    return p;
  }

  /// All rows of head h's pattern: (n, n).
  Matrix<Scalar> pattern(Index h) const {
    std::vector<Index> rows(static_cast<std::size_t>(q.rows()));
    for (Index i = 0; i < q.rows(); ++i) rows[static_cast<std::size_t>(i)] = i;
    return pattern(h, rows);
  }

 private:
  Index checked(Index h, const char* where) const {
    if (h < 0 || h >= n_heads) detail::invalid(where, "head ", h, " out of range [0, ", n_heads, ")");
    return h;
  }
};

/// inspect()'s one fused run on any layer (attend_heads with every extra, then project_heads),
/// into `run`, whose options and shape the caller has set.
template <class Layer, class Scalar>
void inspect_into(const Layer& layer, const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options,
                  const HeadInterventions<Scalar>* interventions, Inspection<Scalar>& run) {
  HeadOutputExtras<Scalar> extras;
  extras.logsumexp = true, extras.statistics = true;
  extras.q = &run.q;
  extras.keys_values = &run.keys_values;
  run.attention = layer.attend_heads(x, options, extras);
  Matrix<Scalar> z = run.attention.z;
  if (interventions) {
    if (interventions->n_heads() != layer.n_heads())
      detail::invalid("inspect", "interventions for ", interventions->n_heads(), " heads, the layer has ", layer.n_heads());
    interventions->apply(z);
  }
  run.output = layer.project_heads(z);
}

/// Runs the fused forward of `layer` on x (n, d_model), keeping what Inspection holds; with
/// interventions, the output is the intervened one (Z and the statistics are the clean ones).
template <class Scalar>
Inspection<Scalar> inspect(const MultiHeadAttention<Scalar>& layer,
                           const Eigen::Ref<const Matrix<typename detail::NonDeduced<Scalar>::type>>& x,
                           const AttentionOptions& options = {},
                           const HeadInterventions<Scalar>* interventions = nullptr) {
  Inspection<Scalar> run;
  run.options = layer.options_for(options);  // the layer's window, cap, slopes, sinks too
  run.n_heads = layer.n_heads();
  run.n_kv_heads = layer.n_kv_heads();
  run.d_head = run.d_v = layer.d_head();
  inspect_into(layer, x, options, interventions, run);
  return run;
}

/// inspect() on a latent attention layer: its fast path (the absorbed queries as q, (n, n_heads
/// latent_width); the latent as one key/value head), every head's Z (n, n_heads v_head_dim), the
/// logsumexp and statistics per head; pattern(h) gives head h's exact rows as for any layer.
template <class Scalar>
Inspection<Scalar> inspect(const MultiHeadLatentAttention<Scalar>& layer,
                           const Eigen::Ref<const Matrix<typename detail::NonDeduced<Scalar>::type>>& x,
                           const AttentionOptions& options = {},
                           const HeadInterventions<Scalar>* interventions = nullptr) {
  Inspection<Scalar> run;
  run.options = options;
  run.options.divisor = options.divisor ? *options.divisor : layer.divisor();
  run.n_heads = layer.n_heads(), run.n_kv_heads = 1, run.d_head = layer.latent_width(), run.d_v = layer.v_head_dim();
  inspect_into(layer, x, options, interventions, run);
  return run;
}

/// ‖Z_h W_O[h]‖ for every head and row, without forming Z_h W_O[h]: the squared norm of row i is
/// z_i G_h z_iᵀ with G_h = W_O[h] W_O[h]ᵀ (d x d, d the width of a head's Z). z: (n, n_heads d)
/// -> (n_heads, n). Ranks heads by direct effect at O(n n_heads d²) instead of O(n n_heads d
/// d_model) time and O(n n_heads) memory instead of (n, n_heads, d_model). Any layer with
/// n_heads() and w_o_block(h) (MultiHeadAttention, MultiHeadLatentAttention).
template <class Layer, class Scalar>
Matrix<Scalar> contribution_norms(const Layer& layer, const Matrix<Scalar>& z) {
  const Index n_heads = layer.n_heads(), d = layer.w_o().rows() / n_heads;
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
