// RowStatistics: what the fused kernel can say of each query row's attention without holding the
// pattern: its entropy, the mass on the first and on the previous token, the largest weight and
// where it lies, and the share that went to an attention sink. Computed on the fly with the
// online softmax.
#pragma once

#include <Eigen/Core>

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
