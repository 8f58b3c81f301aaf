// The attention core, step by step, for one head: from Q, K, V to
// Z = softmax(mask(modify(Q Kᵀ / divisor))) V, the call's soft-cap, ALiBi, bias and sinks
// (ScoreRule, score_rule.hpp) included, with each row's logsumexp (CoreOutput); attention_weights
// gives the pattern A alone.
//
// This is the readable reference path: it holds the whole (n_q, n_k) pattern. The fused kernel
// (kernels/fused_attention.hpp) computes the same function without it.
#pragma once

#include <utility>

#include "headwise/causal_mask.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/scores.hpp"
#include "headwise/softmax.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// What an attention core returns: the output rows and each query row's logsumexp.
template <class Scalar>
struct CoreOutput {
  Matrix<Scalar> z;          ///< (n_q, d_head): each query's weighted average of the values
  Vector<Scalar> logsumexp;  ///< (n_q): log of each row's softmax denominator; -inf if it sees nothing
};

namespace detail {
template <class DerivedQ, class DerivedK, class DerivedV>
void check_core_shapes(const char* where, const Eigen::MatrixBase<DerivedQ>& q,
                       const Eigen::MatrixBase<DerivedK>& k, const Eigen::MatrixBase<DerivedV>& v) {
  if (q.cols() != k.cols())
    invalid(where, "q has ", q.cols(), " columns but k has ", k.cols(), " (both must be d_head)");
  if (v.rows() != k.rows())
    invalid(where, "v has ", v.rows(), " rows but k has ", k.rows(), " (one per key)");
  // Finite inputs only: a masked weight is an exact 0, and 0 x inf in A V would carry a later
  // key's value into earlier rows. (Scores that overflow make their own row NaN, and no other.)
  require_finite(where, "q", q.derived());
  require_finite(where, "k", k.derived());
  require_finite(where, "v", v.derived());
}
}  // namespace detail

namespace detail {

/// The steps of a pattern before its softmax, kept for a trace (HeadTrace, attention_head.hpp).
template <class Scalar>
struct PatternSteps {
  Matrix<Scalar> scores;         ///< Q Kᵀ
  Matrix<Scalar> scaled_scores;  ///< Q Kᵀ / divisor
  Matrix<Scalar> masked_scores;  ///< as the rule modifies and masks them
};

/// A = softmax(rule(Q Kᵀ / divisor)) for head h of the rule, with each row's logsumexp, and (with
/// `steps`) the steps before the softmax kept: the one computation of a pattern, for the
/// step-by-step path and the traces alike.
template <class DerivedQ, class DerivedK>
Matrix<typename DerivedQ::Scalar> weights_of_head(const Eigen::MatrixBase<DerivedQ>& q, const Eigen::MatrixBase<DerivedK>& k,
                                                  double divisor, const ScoreRule<typename DerivedQ::Scalar>& rule, Index h,
                                                  Vector<typename DerivedQ::Scalar>* logsumexp,
                                                  PatternSteps<typename DerivedQ::Scalar>* steps = nullptr) {
  Matrix<typename DerivedQ::Scalar> a = scaled_scores(q, k, divisor);
  if (steps) {
    steps->scaled_scores = a;
    steps->scores = scores(q, k);
  }
  a = masked_scores(a, rule, h);
  if (steps) steps->masked_scores = a;
  auto lse = softmax_rows(a, rule, h);
  if (logsumexp) *logsumexp = std::move(lse);
  return a;
}

}  // namespace detail

/// Attention weights A = softmax(mask(modify(Q Kᵀ / divisor))), with each row's logsumexp.
/// q: (n_q, d_head), k: (n_k, d_head) -> weights (n_q, n_k), logsumexp (n_q). One head: per-head
/// options (alibi_slopes, sinks) have one entry.
template <class DerivedQ, class DerivedK>
Matrix<typename DerivedQ::Scalar> attention_weights(const Eigen::MatrixBase<DerivedQ>& q,
                                                    const Eigen::MatrixBase<DerivedK>& k,
                                                    const AttentionOptions& options = {},
                                                    Vector<typename DerivedQ::Scalar>* logsumexp = nullptr) {
  const double divisor = resolve_divisor<typename DerivedQ::Scalar>(options, q.cols(), "attention_weights");
  const ScoreRule<typename DerivedQ::Scalar> rule(options, q.rows(), k.rows(), 1, "attention_weights");
  return detail::weights_of_head(q, k, divisor, rule, 0, logsumexp);
}

/// The attention core, step by step: Z = A V with A = softmax(mask(modify(Q Kᵀ / divisor))).
/// q: (n_q, d_head), k: (n_k, d_head), v: (n_k, d_v) -> z (n_q, d_v), logsumexp (n_q).
/// A query that sees no key gets a zero row.
template <class DerivedQ, class DerivedK, class DerivedV>
CoreOutput<typename DerivedQ::Scalar> attention(const Eigen::MatrixBase<DerivedQ>& q,
                                                const Eigen::MatrixBase<DerivedK>& k,
                                                const Eigen::MatrixBase<DerivedV>& v,
                                                const AttentionOptions& options = {}) {
  detail::check_core_shapes("attention", q, k, v);
  CoreOutput<typename DerivedQ::Scalar> out;
  const auto a = attention_weights(q, k, options, &out.logsumexp);
  detail::product<typename DerivedQ::Scalar>(a, v, out.z, 1);  // the one product, as scores() (scores.hpp)
  return out;
}

}  // namespace headwise
