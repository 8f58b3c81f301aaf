// MixtureOfExperts: a whole model's sparse block (Qwen3-MoE's, gpt-oss's, Llama 4's, DeepSeek-V3's,
// Qwen3-Next's, Gemma 4's), one router and the rules by which each family chooses and weighs its
// experts, and Routing: what it chose.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "headwise/model/feed_forward.hpp"
#include "headwise/model/norm.hpp"
#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// What a sparse block chose, per token: the router's logits, the experts (most probable first)
/// and their weights.
template <class Scalar>
struct Routing {
  Matrix<Scalar> logits;                                                         ///< (n, experts)
  Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> experts;  ///< (n, top_k)
  Matrix<Scalar> weights;                                                        ///< (n, top_k)
  Matrix<Scalar> shared_output;  ///< (n, d_model): the shared expert's output, before Qwen3-Next's gate; empty without one
};

/// A sparse block: per token the router's logits r = m W_routerᵀ (+ b_router, gpt-oss), each
/// expert's score p (Score::softmax: over all experts, Qwen3-MoE and gpt-oss; Score::sigmoid:
/// each its own, Llama 4 and DeepSeek-V3), the top_k experts by score (+ choice_bias, DeepSeek:
/// the bias only chooses), among the top_groups of `groups` contiguous groups ranked by the sum of
/// their two best (DeepSeek; 1 group: all), the best first and ties to the lower expert; their
/// weights p_e, over Σ p_chosen where normalise_top_k, times routed_scaling. The output is
/// Σ_j w_j expert_j(m), or Σ_j expert_j(w_j m) where the weight scales the input (Llama 4), plus
/// the shared expert's (Llama 4, DeepSeek-V3). gpt-oss's softmax over the top_k logits is the
/// softmax rule normalised.
template <class Scalar>
struct MixtureOfExperts {
  enum class Score { softmax, sigmoid };
  StoredMatrix router;            ///< [experts, d_model]
  RowVector<Scalar> router_bias;  ///< gpt-oss's; empty: none
  std::vector<FeedForward<Scalar>> experts;
  std::optional<FeedForward<Scalar>> shared_expert;  ///< Llama 4, DeepSeek-V3, Qwen3-Next
  /// [1, d_model]: Qwen3-Next's gate on the shared expert, whose output is scaled by
  /// sigmoid(m · gate) per token; empty: none.
  StoredMatrix shared_gate;
  Index top_k = 1;
  bool normalise_top_k = true;
  Score score = Score::softmax;
  bool scales_input = false;      ///< Llama 4
  RowVector<Scalar> choice_bias;  ///< DeepSeek-V3's e_score_correction_bias; empty: none
  Index groups = 1, top_groups = 1;
  double routed_scaling = 1.0;
  /// Gemma 4: the router reads rms(x) ∘ router_scale / sqrt(d_model) (rms without a weight, eps
  /// router_eps) of its own input (forward's router_input), and each chosen weight, once
  /// normalised, is times its expert's expert_scale (per_expert_scale). Empty: neither.
  RowVector<Scalar> router_scale, expert_scale;
  double router_eps = 1e-6;

  /// Qwen3-MoE's rule (the one the backward differentiates): softmax, no bias, nothing shared.
  bool softmax_only() const {
    return score == Score::softmax && !router_bias.size() && !shared_expert && !scales_input && !choice_bias.size() && groups == 1 &&
           routed_scaling == 1.0 && experts.front().activation != Activation::clamped_swiglu;
  }

  /// The block's output on m (n, d_model); the router reads router_input where given (Gemma 4's
  /// reads the residual stream, the experts a norm of it), else m.
  Matrix<Scalar> forward(const Matrix<Scalar>& m, Routing<Scalar>* routing = nullptr, int threads = 0,
                         const Matrix<Scalar>* router_input = nullptr) const {
    Matrix<Scalar> logits = times_transposed<Scalar>(router_scale.size() ? scaled_for_router(router_input ? *router_input : m) : m, router, threads);
    if (router_bias.size()) logits.rowwise() += router_bias;
    const Index n = m.rows();
    Matrix<Scalar> out = shared_expert ? shared_expert->forward(m, threads) : Matrix<Scalar>::Zero(n, m.cols());
    if (routing && shared_expert) routing->shared_output = out;
    if (shared_gate.rows()) {
      const Matrix<Scalar> gate = times_transposed<Scalar>(m, shared_gate, threads);
      for (Index t = 0; t < n; ++t) out.row(t) *= Scalar(1) / (Scalar(1) + std::exp(-gate(t, 0)));
    }
    if (routing) routing->logits = logits, routing->experts.resize(n, top_k), routing->weights.resize(n, top_k);
    std::vector<std::pair<Index, Scalar>> chosen;
    for (Index t = 0; t < n; ++t) {
      choose(logits.row(t), chosen);
      for (Index j = 0; j < top_k; ++j) {
        const auto [e, w] = chosen[static_cast<std::size_t>(j)];
        const FeedForward<Scalar>& expert = experts[static_cast<std::size_t>(e)];
        if (scales_input) out.row(t) += expert.forward(Matrix<Scalar>(w * m.row(t)), threads);
        else out.row(t) += w * expert.forward(Matrix<Scalar>(m.row(t)), threads);
        if (routing) routing->experts(t, j) = e, routing->weights(t, j) = w;
      }
    }
    return out;
  }

 private:
  /// One token's top_k (expert, weight), the best first.
  void choose(const RowVector<Scalar>& r, std::vector<std::pair<Index, Scalar>>& chosen) const {
    const Index E = r.size(), per_group = E / groups;
    RowVector<Scalar> p = score == Score::softmax ? RowVector<Scalar>((r.array() - r.maxCoeff()).exp().matrix())
                                                  : RowVector<Scalar>((Scalar(1) + (-r.array()).exp()).inverse().matrix());
    RowVector<Scalar> c = choice_bias.size() ? RowVector<Scalar>(p + choice_bias) : p;
    std::vector<Index> order(static_cast<std::size_t>(E));
    if (groups > 1) {  // each group's best two, summed; the groups not kept take no part
      std::vector<Scalar> best(static_cast<std::size_t>(groups));
      for (Index g = 0; g < groups; ++g) {
        Eigen::Matrix<Scalar, 1, Eigen::Dynamic> v = c.segment(g * per_group, per_group);
        std::sort(v.data(), v.data() + v.size(), std::greater<Scalar>());
        best[static_cast<std::size_t>(g)] = v(0) + (per_group > 1 ? v(1) : Scalar(0));
      }
      std::vector<Index> rank(static_cast<std::size_t>(groups));
      std::iota(rank.begin(), rank.end(), Index(0));
      std::stable_sort(rank.begin(), rank.end(), [&](Index a, Index b) { return best[std::size_t(a)] > best[std::size_t(b)]; });
      for (Index g = top_groups; g < groups; ++g)
        c.segment(rank[static_cast<std::size_t>(g)] * per_group, per_group).setConstant(-std::numeric_limits<Scalar>::infinity());
    }
    std::iota(order.begin(), order.end(), Index(0));
    std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) { return c(a) > c(b); });
    Scalar sum = 0;
    for (Index j = 0; j < top_k; ++j) sum += p(order[static_cast<std::size_t>(j)]);
    const Scalar total = normalise_top_k ? sum : score == Score::softmax ? p.sum() : Scalar(1);
    chosen.clear();
    for (Index j = 0; j < top_k; ++j) {
      const Index e = order[static_cast<std::size_t>(j)];
      const Scalar w = static_cast<Scalar>(p(e) / total * Scalar(routed_scaling));
      chosen.emplace_back(e, expert_scale.size() ? Scalar(w * expert_scale(e)) : w);
    }
  }
  Matrix<Scalar> scaled_for_router(const Matrix<Scalar>& x) const {
    const Norm<Scalar> rms{Norm<Scalar>::Kind::rms, router_eps, RowVector<Scalar>::Ones(x.cols()), {}};
    Matrix<Scalar> y = rms.apply(x);
    for (Index t = 0; t < y.rows(); ++t) y.row(t) = y.row(t).cwiseProduct(router_scale) * static_cast<Scalar>(1.0 / std::sqrt(double(x.cols())));
    return y;
  }
};

}  // namespace headwise::model
