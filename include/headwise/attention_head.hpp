// One attention head: from the residual stream X and its three projections to Z = A V, with
// every intermediate kept (the trace; MultiHeadTrace holds a layer's) for teaching and inspection.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "headwise/attention_core.hpp"
#include "headwise/causal_mask.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/linear.hpp"
#include "headwise/options.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/scores.hpp"
#include "headwise/softmax.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Every intermediate of one head on one input, in the order the equation computes them.
template <class Scalar>
struct HeadTrace {
  Matrix<Scalar> q, k;            ///< (n, d_head) each: the projections of X
  Matrix<Scalar> v;               ///< (n, d_v): the values A mixes (after a layer's value norm, Gemma 4)
  Matrix<Scalar> q_normed, k_normed;    ///< (n, d_head): after a QK-norm that comes before RoPE (= q, k without one)
  Matrix<Scalar> q_rotated, k_rotated;  ///< (n, d_head): Q and K as they enter Q Kᵀ: after every norm, the
                                        ///< rotary embedding and a query scale (= q_normed, k_normed without them)
  Matrix<Scalar> scores;          ///< (n, n): Q Kᵀ
  double divisor = 0;             ///< what the scores were divided by
  Matrix<Scalar> scaled_scores;   ///< (n, n): Q Kᵀ / divisor
  Matrix<Scalar> masked_scores;   ///< (n, n): the scaled scores as modified (cap, ALiBi, bias), -inf where hidden
  Matrix<Scalar> weights;         ///< (n, n): A, each row a softmax over what it sees
  Vector<Scalar> logsumexp;       ///< (n): each row's log softmax denominator
  Matrix<Scalar> z;               ///< (n, d_v): A V
  Matrix<Scalar> gate;            ///< (n, d_v): σ(X W_G + b_G), an output gate (Qwen3-Next); W_O reads z ∘ gate. Empty: none
};

/// Every intermediate of a multi-head layer on one input.
template <class Scalar>
struct MultiHeadTrace {
  std::vector<HeadTrace<Scalar>> heads;       ///< per head: Q, K, V, scores, weights, Z, ...
  std::vector<Matrix<Scalar>> contributions;  ///< per head: Z_h W_O[h], (n, d_model)
  Matrix<Scalar> output;                      ///< (n, d_model): Σ_h contributions + b_O
};

namespace detail {
/// Steps 3 to 7 of a trace whose t.q_rotated, t.k_rotated and t.v are set: scores, divisor, mask and
/// modifiers, softmax (weights_of_head, the step-by-step path's), Z. `options` are a call's on
/// head.n_heads heads; head.index's slope and sink.
template <class Scalar>
void trace_scores(HeadTrace<Scalar>& t, const AttentionOptions& options, OneHead head, const char* where) {
  t.divisor = resolve_divisor<Scalar>(options, t.q_rotated.cols(), where);
  if (head.index < 0 || head.index >= head.n_heads) invalid(where, "head ", head.index, " of ", head.n_heads, " is not a head");
  const ScoreRule<Scalar> rule(options, t.q_rotated.rows(), t.k_rotated.rows(), head.n_heads, where);
  PatternSteps<Scalar> steps;
  t.weights = weights_of_head(t.q_rotated, t.k_rotated, t.divisor, rule, head.index, &t.logsumexp, &steps);  // steps 3-6
  t.scores = std::move(steps.scores);
  t.scaled_scores = std::move(steps.scaled_scores);
  t.masked_scores = std::move(steps.masked_scores);
  t.z.resize(t.q_rotated.rows(), t.v.cols());  // step 7: mix the values
  t.z.noalias() = t.weights * t.v;
}
}  // namespace detail

/// One head: Q = X W_Q + b_Q, K = X W_K + b_K, V = X W_V + b_V, optionally rotated (RoPE, positions
/// 0 .. n-1), Z = softmax(mask(modify(Q Kᵀ / div))) V.
///   AttentionHead<double> head(Linear<double>(w_q), Linear<double>(w_k), Linear<double>(w_v));
///   HeadTrace<double> t = head.trace(x);   // t.q, t.scores, t.weights, t.z, ...
template <class Scalar>
class AttentionHead {
 public:
  /// query, key: (d_model, d_head) maps; value: (d_model, d_v) with d_v usually d_head.
  AttentionHead(Linear<Scalar> query, Linear<Scalar> key, Linear<Scalar> value,
                std::optional<RotaryEmbedding> rope = std::nullopt)
      : query_(std::move(query)), key_(std::move(key)), value_(std::move(value)), rope_(std::move(rope)) {
    if (key_.in_features() != query_.in_features() || value_.in_features() != query_.in_features())
      detail::invalid("AttentionHead", "projections take ", query_.in_features(), ", ",
                      key_.in_features(), " and ", value_.in_features(),
                      " inputs (Q, K, V), expected the same d_model");
    if (key_.out_features() != query_.out_features())
      detail::invalid("AttentionHead", "W_Q has ", query_.out_features(), " columns but W_K has ",
                      key_.out_features(), " (both must be d_head)");
    if (rope_ && rope_->d_head() != query_.out_features())
      detail::invalid("AttentionHead", "the rotary embedding is for d_head = ", rope_->d_head(), ", W_Q has ",
                      query_.out_features(), " columns");
  }

  Index d_model() const { return query_.in_features(); }
  Index d_head() const { return query_.out_features(); }
  const Linear<Scalar>& query() const { return query_; }
  const Linear<Scalar>& key() const { return key_; }
  const Linear<Scalar>& value() const { return value_; }
  const std::optional<RotaryEmbedding>& rope() const { return rope_; }

  /// Every intermediate. x: (n, d_model). With a OneHead, `options` are a multi-head call's and
  /// this head reads head.index's slope and sink (the layer's trace passes its options so, once).
  HeadTrace<Scalar> trace(const Eigen::Ref<const Matrix<Scalar>>& x, const AttentionOptions& options = {},
                          OneHead head = {}) const {
    check_input(x, "AttentionHead::trace");
    HeadTrace<Scalar> t;
    resolve_divisor<Scalar>(options, d_head(), "AttentionHead::trace");  // (a bad divisor refused before any work)
    t.q = query_.forward(x);                                      // step 1: project
    t.k = key_.forward(x);
    t.v = value_.forward(x);
    detail::require_finite("AttentionHead::trace", "the query projection x W_Q + b_Q", t.q);
    detail::require_finite("AttentionHead::trace", "the key projection x W_K + b_K", t.k);
    detail::require_finite("AttentionHead::trace", "the value projection x W_V + b_V", t.v);
    t.q_normed = t.q, t.k_normed = t.k;
    t.q_rotated = t.q, t.k_rotated = t.k;                         // step 2: rotate (RoPE)
    if (rope_) rope_->rotate<Scalar>(t.q_rotated, 0), rope_->rotate<Scalar>(t.k_rotated, 0);
    detail::trace_scores(t, options, head, "AttentionHead::trace");  // steps 3-7
    return t;
  }

  /// The head's output Z = A V. x: (n, d_model) -> (n, d_v).
  Matrix<Scalar> forward(const Eigen::Ref<const Matrix<Scalar>>& x,
                         const AttentionOptions& options = {}) const {
    check_input(x, "AttentionHead::forward");
    Matrix<Scalar> q = query_.forward(x), k = key_.forward(x);
    if (rope_) rope_->rotate<Scalar>(q, 0), rope_->rotate<Scalar>(k, 0);
    return attention(q, k, value_.forward(x), options).z;
  }

 private:
  void check_input(const Eigen::Ref<const Matrix<Scalar>>& x, const char* where) const {
    if (x.cols() != d_model())
      detail::invalid(where, "x has ", x.cols(), " columns, expected d_model = ", d_model());
    detail::require_finite(where, "x", x);
  }

  Linear<Scalar> query_, key_, value_;
  std::optional<RotaryEmbedding> rope_;
};

}  // namespace headwise
