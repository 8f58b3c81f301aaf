// FeedForward: a whole model's dense MLP (GPT-2's gelu_new, SwiGLU, GeGLU, gpt-oss's clamped
// SwiGLU), its weights kept as stored ([out, in]; multiplied by times_transposed,
// stored_matrix.hpp), its activations (Activation, activate) and what a forward records (Record).
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>

#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// The MLP's activation: gelu_new / gelu_pytorch_tanh (the tanh approximation), SiLU, or gpt-oss's
/// clamped SwiGLU (FeedForward::forward: two inputs, not one).
enum class Activation { gelu_tanh, silu, clamped_swiglu };

template <class Scalar>
Scalar activate(Activation a, Scalar u) {
  if (a == Activation::silu) return u / (Scalar(1) + std::exp(-u));
  const Scalar c = static_cast<Scalar>(std::sqrt(2.0 / std::acos(-1.0)));
  return Scalar(0.5) * u * (Scalar(1) + std::tanh(c * (u + Scalar(0.044715) * u * u * u)));
}

/// A dense MLP: gated (SwiGLU, GeGLU: act(m W_gateᵀ) ∘ (m W_upᵀ) W_downᵀ) when w_gate is set, else
/// GPT-2's act(m W_upᵀ + b_up) W_downᵀ + b_down. Weights [out, in], as a checkpoint stores them.
/// gpt-oss's experts (Activation::clamped_swiglu): g = m W_upᵀ + b_up with w_up its gate_up
/// projection [2 inner, d], the columns interleaved (2u unit u's gate, 2u + 1 its up); gate =
/// min(g_2u, limit), up = clamp(g_2u+1, -limit, limit), h = (up + 1) gate σ(alpha gate), then
/// h W_downᵀ + b_down.
template <class Scalar>
struct FeedForward {
  Activation activation = Activation::silu;
  StoredMatrix w_gate, w_up, w_down;
  RowVector<Scalar> b_up, b_down;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;  ///< clamped_swiglu's

  /// What a forward keeps on request, by TransformerLens's names: hook_pre (the activation's input:
  /// m W_gateᵀ, or GPT-2's m W_upᵀ + b_up), hook_pre_linear (gated: m W_upᵀ), hook_post (what
  /// W_down reads). (n, inner) each.
  struct Record {
    Matrix<Scalar> pre, pre_linear, post;
  };

  Matrix<Scalar> forward(const Matrix<Scalar>& m, int threads = 0, Record* record = nullptr) const {
    Matrix<Scalar> up = times_transposed<Scalar>(m, w_up, threads);
    if (b_up.size()) up.rowwise() += b_up;
    if (activation == Activation::clamped_swiglu) return clamped_swiglu(up, threads, record);
    const Activation a = activation;
    const auto act = [a](Scalar u) { return activate(a, u); };
    Matrix<Scalar> pre = w_gate.rows() ? times_transposed<Scalar>(m, w_gate, threads) : Matrix<Scalar>();
    Matrix<Scalar> h = w_gate.rows() ? Matrix<Scalar>(pre.unaryExpr(act).array() * up.array()) : Matrix<Scalar>(up.unaryExpr(act));
    Matrix<Scalar> out = times_transposed<Scalar>(h, w_down, threads);
    if (b_down.size()) out.rowwise() += b_down;
    if (record) {  // (moved, not copied)
      if (w_gate.rows()) record->pre = std::move(pre), record->pre_linear = std::move(up);
      else record->pre = std::move(up);
      record->post = std::move(h);
    }
    return out;
  }

 private:
  /// gpt-oss's experts from g = m W_upᵀ + b_up (interleaved): Record's pre the gates, pre_linear
  /// the ups (both before the clamps), post h.
  Matrix<Scalar> clamped_swiglu(const Matrix<Scalar>& g, int threads, Record* record) const {
    const Index inner = g.cols() / 2;
    const Scalar alpha = static_cast<Scalar>(swiglu_alpha), limit = static_cast<Scalar>(swiglu_limit);
    Matrix<Scalar> h(g.rows(), inner);
    for (Index t = 0; t < g.rows(); ++t)
      for (Index u = 0; u < inner; ++u) {
        const Scalar gate = std::min(g(t, 2 * u), limit), up = std::clamp(g(t, 2 * u + 1), -limit, limit);
        h(t, u) = (up + Scalar(1)) * (gate / (Scalar(1) + std::exp(-alpha * gate)));
      }
    Matrix<Scalar> out = times_transposed<Scalar>(h, w_down, threads);
    if (b_down.size()) out.rowwise() += b_down;
    if (record) {
      using Every2nd = Eigen::Map<const Matrix<Scalar>, 0, Eigen::Stride<Eigen::Dynamic, 2>>;
      record->pre = Every2nd(g.data(), g.rows(), inner, Eigen::Stride<Eigen::Dynamic, 2>(g.cols(), 2));
      record->pre_linear = Every2nd(g.data() + 1, g.rows(), inner, Eigen::Stride<Eigen::Dynamic, 2>(g.cols(), 2));
      record->post = std::move(h);
    }
    return out;
  }
};

}  // namespace headwise::model
