// RowStatistics: what the fused kernel can say of each query row's attention without holding the
// pattern: its entropy, the mass on the first and on the previous token, the largest weight and
// where it lies, and the share that went to an attention sink. Computed on the fly with the
// online softmax. And the same statistics of a pattern held whole (the step-by-step path's, a
// study's), for the fused kernel's to be checked against.
#pragma once

#include <cmath>

#include <Eigen/Core>

#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Per (head, query) statistics of the attention pattern; each matrix is (n_heads, n_q).
/// With p_ij = exp(s_ij - lse_i) over the keys j that query i sees (s the scaled scores):
template <class Scalar>
struct RowStatistics {
  Matrix<Scalar> entropy;              ///< -Σ_j p_ij log p_ij = lse_i - Σ_j p_ij s_ij (nats)
  Matrix<Scalar> first_token_mass;     ///< p_i0
  Matrix<Scalar> previous_token_mass;  ///< p_i,pos(i)-1: the token just before the query; 0 for the first
  Matrix<Scalar> max_weight;           ///< max_j p_ij
  Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> argmax;  ///< its key (first if tied); -1 if none
  /// With attention sinks (gpt-oss): the share of the row's probability the sink took,
  /// exp(sink_h - lse_i) = 1 - Σ_j p_ij (1 for a row that sees no key); 0 without sinks.
  Matrix<Scalar> sink_mass;

  void resize(Index n_heads, Index n_q) {
    entropy.resize(n_heads, n_q);
    first_token_mass.resize(n_heads, n_q);
    previous_token_mass.resize(n_heads, n_q);
    max_weight.resize(n_heads, n_q);
    argmax.resize(n_heads, n_q);
    sink_mass.resize(n_heads, n_q);
  }
};

}  // namespace headwise

namespace headwise::detail {

/// The statistics of row i of one head's weights a (n_q, n_k), as the fused kernel records them:
/// entropy over the keys, the mass on the key at position 0 and on the key just before the
/// query, the largest weight with its key (-1 if the row sees nothing), and what a sink took,
/// 1 - Σ_j a_ij.
template <class Scalar>
void record_statistics_of_weights(const Matrix<Scalar>& a, const ScoreRule<Scalar>& rule, Index h,
                                  RowStatistics<Scalar>& out) {
  for (Index i = 0; i < a.rows(); ++i) {
    Scalar entropy = 0, best = 0, sum = 0;
    Index best_at = -1;
    for (Index j = 0; j < a.cols(); ++j) {
      const Scalar p = a(i, j);
      if (p > Scalar(0)) entropy -= p * std::log(p);
      if (p > best) best = p, best_at = j;
      sum += p;
    }
    const Index first = -rule.first_key(), previous = rule.position(i) - 1 - rule.first_key();
    out.entropy(h, i) = entropy;
    out.first_token_mass(h, i) = first >= 0 && first < a.cols() ? a(i, first) : Scalar(0);
    out.previous_token_mass(h, i) = previous >= 0 && previous < a.cols() ? a(i, previous) : Scalar(0);
    out.max_weight(h, i) = best;
    out.argmax(h, i) = best_at;
    out.sink_mass(h, i) = rule.has_sinks() ? Scalar(1) - sum : Scalar(0);
  }
}

}  // namespace headwise::detail
