// The causal mask: which keys each query may see (visible_keys), the -inf picture of masked
// scores (masked_scores_for_display), and CausalMask, the mask step with its backward as the
// step-by-step backward (attention_backward.hpp) chains it: it applies the call's whole ScoreRule
// (score_rule.hpp: causal mask, window, masks; soft-cap, ALiBi, bias), not the causal mask alone.
//
// Queries are aligned with the END of the keys, as in incremental decoding: with n_q queries and
// n_k keys, query i sits at position (n_k - n_q) + i and sees keys 0 .. (n_k - n_q) + i. When
// n_q == n_k this is the familiar lower triangle: query i sees keys 0..i.
#pragma once

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// How many keys (a prefix 0..count-1) query i of n_q may see among n_k keys.
/// Without the causal mask every query sees all n_k keys. The count can be 0 (n_q > n_k).
/// The causal rule of key_range.hpp (causal_range) at query i's position n_k - n_q + i.
inline Index visible_keys(Index i, Index n_q, Index n_k, bool causal) {
  return causal_range(n_k - n_q + i, n_k, causal).end;
}

/// A copy of the scores with -inf where the causal mask hides a key: for printing and teaching.
/// scores: (n_q, n_k). masked_scores (score_rule.hpp) with the causal mask alone. The computation
/// never relies on exp(-inf): see softmax.hpp.
template <class Scalar>
Matrix<Scalar> masked_scores_for_display(const Matrix<Scalar>& scores, bool causal = true) {
  AttentionOptions options;
  options.causal = causal;
  return masked_scores(scores, ScoreRule<Scalar>(options, scores.rows(), scores.cols(), 1, "masked_scores_for_display"));
}

/// The mask step with its backward: from the scaled scores to what the softmax sees, by the call's
/// rule (causal mask, window, masks; soft-cap, ALiBi, bias): masked_scores in score_rule.hpp. One
/// head: by default per-head options (alibi_slopes, sinks) have one entry; given a OneHead, they
/// are a multi-head call's, shared with its other heads' steps, and this step reads head
/// head.index's. Gradients stop
/// at masked entries; through a soft-cap they are scaled by 1 - tanh²(s / cap). forward keeps the
/// scaled scores.
///   CausalMask<double> mask;                       // the causal mask alone
///   Matrix<double> m = mask.forward(scaled);        // -inf above the diagonal
///   Matrix<double> d_scaled = mask.backward(d_m);   // 0 above the diagonal
template <class Scalar>
class CausalMask {
 public:
  explicit CausalMask(AttentionOptions options = {})
      : options_(std::make_shared<const AttentionOptions>(std::move(options))) {}
  /// Head head.index of a multi-head call's options, shared (not copied).
  CausalMask(std::shared_ptr<const AttentionOptions> options, OneHead head)
      : options_(detail::shared_options(std::move(options), head, "CausalMask")), head_(head) {}
  const AttentionOptions& options() const { return *options_; }

  /// scaled: (n_q, n_k) -> (n_q, n_k), -inf where a query may not see a key.
  Matrix<Scalar> forward(const Matrix<Scalar>& scaled) {
    scaled_ = scaled;
    return masked_scores(scaled_, rule(), head_.index);
  }

  /// From ∂L/∂(masked scores), ∂L/∂(scaled scores) for the last forward.
  Matrix<Scalar> backward(const Eigen::Ref<const Matrix<Scalar>>& d_masked) const {
    if (d_masked.rows() != scaled_.rows() || d_masked.cols() != scaled_.cols())
      detail::invalid("CausalMask::backward", "d_masked is ", d_masked.rows(), "x", d_masked.cols(), ", expected ",
                      scaled_.rows(), "x", scaled_.cols(), " (the last forward's scores)");
    const ScoreRule<Scalar> r = rule();
    Matrix<Scalar> d = Matrix<Scalar>::Zero(scaled_.rows(), scaled_.cols());
    for (Index i = 0; i < d.rows(); ++i)
      for (Index j = r.keys(i).begin; j < r.keys(i).end; ++j) {
        if (r.hides_keys() && r.hidden(i, j)) continue;
        Scalar g = d_masked(i, j);
        if (options_->softcap) {
          const Scalar t = std::tanh(scaled_(i, j) / static_cast<Scalar>(*options_->softcap));
          g *= Scalar(1) - t * t;
        }
        d(i, j) = g;
      }
    return d;
  }

 private:
  ScoreRule<Scalar> rule() const {
    return ScoreRule<Scalar>(*options_, scaled_.rows(), scaled_.cols(), head_.n_heads, "CausalMask");
  }

  std::shared_ptr<const AttentionOptions> options_;
  OneHead head_;
  Matrix<Scalar> scaled_;  // the last forward's input
};

}  // namespace headwise
