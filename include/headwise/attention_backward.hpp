// The backward of a multi-head layer: from dY = ∂L/∂Y to the gradient of X and of every parameter.
//   backward_step_by_step  through the five steps' own backward functions (Linear, ScaledScores,
//                          CausalMask, RowSoftmax, HeadSum) and the rotary embedding's, with every
//                          intermediate gradient kept, the way trace() keeps every intermediate of
//                          the forward; holds each head's (n, n) pattern: for teaching and checking.
//   layer_backward         by the fused kernels (kernels/fused_attention_backward.hpp): O(n d)
//                          memory; the forward's Q, K, V, Z and logsumexp either kept in its
//                          ForwardRecord by forward_for_backward or recomputed; QK-norms too.
//   layer_backward_from_z  the same from ∂L/∂Z, what a whole model's backward (model/backward.hpp) calls.
#pragma once

#include <memory>
#include <type_traits>
#include <vector>

#include "headwise/causal_mask.hpp"
#include "headwise/forward_record.hpp"
#include "headwise/head_sum.hpp"
#include "headwise/attend_backward.hpp"
#include "headwise/linear.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/qkv_layout.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/scores.hpp"
#include "headwise/softmax.hpp"

namespace headwise {

/// One head's gradients, in the order backward computes them.
template <class Scalar>
struct HeadGradients {
  Matrix<Scalar> dz;              ///< (n, d_head): ∂L/∂Z_h
  Matrix<Scalar> dweights;        ///< (n, n): ∂L/∂A = dZ Vᵀ
  Matrix<Scalar> dmasked_scores;  ///< (n, n): through the softmax, P ∘ (dA - rowsum(dA ∘ P))
  Matrix<Scalar> dscaled_scores;  ///< (n, n): through the mask (0 where masked)
  Matrix<Scalar> dq, dk, dv;      ///< (n, d_head): this head's share (before RoPE's backward)
};

/// The gradients of a layer's output Y with respect to its input and parameters.
template <class Scalar>
struct MultiHeadGradients {
  Matrix<Scalar> dx;                    ///< (n, d_model)
  Matrix<Scalar> dw_q, dw_k, dw_v;      ///< shaped as W_Q, W_K, W_V
  RowVector<Scalar> db_q, db_k, db_v;   ///< shaped as b_Q, b_K, b_V
  Matrix<Scalar> dw_o;                  ///< (n_heads d_head, d_model)
  RowVector<Scalar> db_o;               ///< (1, d_model)
  Vector<double> dq_norm, dk_norm;      ///< the QK-norm's weights (layer_backward; empty without)
  /// The gradients of what the attention read (layer_backward): dZ (n, n_heads d_head), and the
  /// queries, keys and values after norms and RoPE (a key/value head's the sum over its query heads).
  Matrix<Scalar> dz, dq, dk, dv;
  std::vector<HeadGradients<Scalar>> heads;  ///< per query head (step by step only)
};

namespace detail {
/// Throws unless the layer's backward differentiates everything `layer` computes with `options`:
/// projections, the QK-norm and the query scale (layer_backward only), RoPE from position 0,
/// attention with its score rule and sinks (not the sinks' own gradient), W_O (not a value norm or
/// an output gate, nor a sequence started at another position).
template <class Scalar>
void check_differentiable(const MultiHeadAttention<Scalar>& layer, const AttentionOptions& options, const char* where,
                          bool qk_norm = false) {
  const LayerConfig& c = layer.config();
  const char* what = c.qk_norm && !qk_norm ? "a QK-norm (layer_backward differentiates it)" : c.value_norm ? "a value norm"
                     : c.query_scale && !qk_norm ? "a query scale (layer_backward differentiates it)" : layer.gated() ? "an output gate"
                     : c.shares_keys_values_of ? "no keys and values of its own (KV sharing)"
                     : c.kv_storage != KvStorage::as_computed ? "keys and values stored in a narrower type (kv_storage)" : nullptr;
  if (what) invalid(where, "the layer has ", what, ", which the backward does not differentiate");
  if (options.first_key_position != 0 || options.first_query_position)
    invalid(where, "the backward runs the layer from position 0: first_key_position and first_query_position must be unset");
}

/// Throws unless dy is (n, d_model), like the layer's output, and finite (one NaN would reach every
/// token's dx, across the mask).
template <class Scalar>
void check_output_gradient(const MultiHeadAttention<Scalar>& layer, const Matrix<Scalar>& dy, Index n, const char* where) {
  if (dy.rows() != n || dy.cols() != layer.d_model())
    invalid(where, "dy is ", dy.rows(), "x", dy.cols(), ", expected ", n, "x", layer.d_model(), " (like the output)");
  require_finite(where, "dy", dy);
}

/// dX and the query, key and value parts of the fused projection's gradients, into grads.
template <class Scalar>
void take_projection_gradients(MultiHeadGradients<Scalar>& grads, LinearGradients<Scalar>&& projection, const QkvLayout& l) {
  grads.dx = std::move(projection.dx);
  grads.dw_q = l.part(projection.dw, QkvPart::query), grads.db_q = l.part(projection.db, QkvPart::query);
  grads.dw_k = l.part(projection.dw, QkvPart::key), grads.db_k = l.part(projection.db, QkvPart::key);
  grads.dw_v = l.part(projection.dw, QkvPart::value), grads.db_v = l.part(projection.db, QkvPart::value);
}
}  // namespace detail

/// The layer's forward, step by step, then its backward from dy (n, d_model) = ∂L/∂Y at x
/// (n, d_model). Grouped-query heads: dK and dV of a key/value head sum its query heads' shares.
template <class Scalar>
MultiHeadGradients<Scalar> backward_step_by_step(const MultiHeadAttention<Scalar>& layer, const Matrix<Scalar>& x,
                                                 const Matrix<Scalar>& dy, const AttentionOptions& options = {}) {
  constexpr const char* where = "backward_step_by_step";
  detail::check_differentiable(layer, options, where);
  const Index H = layer.n_heads(), d = layer.d_head(), n = x.rows();
  detail::check_output_gradient(layer, dy, n, where);
  const AttentionOptions all = layer.options_for(options);
  const double divisor = resolve_divisor<Scalar>(all, d, where);
  const QkvLayout l = layer.layout();
  constexpr QkvPart Q = QkvPart::query, K = QkvPart::key, V = QkvPart::value;

  // Forward: project (and rotate), then each head's steps, each keeping what its backward needs.
  const Linear<Scalar> projection(layer.w_qkv(), layer.b_qkv());
  Matrix<Scalar> qkv = layer.project_qkv(x);
  if (layer.rope()) layer.rope()->template rotate<Scalar>(l.queries_and_keys(qkv), 0);
  std::vector<ScaledScores<Scalar>> scores(static_cast<std::size_t>(H), ScaledScores<Scalar>(divisor));
  const auto shared = std::make_shared<const AttentionOptions>(all);  // one copy, read by every head's steps
  std::vector<CausalMask<Scalar>> masks;
  std::vector<RowSoftmax<Scalar>> softmaxes;
  Matrix<Scalar> z(n, H * d);
  std::vector<Matrix<Scalar>> weights(static_cast<std::size_t>(H));
  for (Index h = 0; h < H; ++h) {
    const auto i = static_cast<std::size_t>(h);
    const Index g = layer.kv_head_of(h);
    masks.emplace_back(shared, OneHead{h, H});
    softmaxes.emplace_back(shared, OneHead{h, H});
    weights[i] = softmaxes[i].forward(masks[i].forward(scores[i].forward(l.head(qkv, Q, h), l.head(qkv, K, g))));
    z.middleCols(h * d, d).noalias() = weights[i] * l.head(qkv, V, g);
  }
  HeadSum<Scalar> sum(layer.w_o(), layer.b_o(), H);
  sum.forward(z);

  // Backward, in the reverse order.
  MultiHeadGradients<Scalar> grads;
  const HeadSumGradients<Scalar> from_sum = sum.backward(dy);
  grads.dw_o = from_sum.dw_o, grads.db_o = from_sum.db_o;
  Matrix<Scalar> d_qkv = Matrix<Scalar>::Zero(n, qkv.cols());
  for (Index h = 0; h < H; ++h) {
    const auto i = static_cast<std::size_t>(h);
    const Index g = layer.kv_head_of(h);
    HeadGradients<Scalar> hg;
    hg.dz = from_sum.dz.middleCols(h * d, d);
    hg.dweights = hg.dz * l.head(qkv, V, g).transpose();
    hg.dv = weights[i].transpose() * hg.dz;
    hg.dmasked_scores = softmaxes[i].backward(hg.dweights);
    hg.dscaled_scores = masks[i].backward(hg.dmasked_scores);
    ScoreGradients<Scalar> sg = scores[i].backward(hg.dscaled_scores);
    hg.dq = std::move(sg.dq), hg.dk = std::move(sg.dk);
    l.head(d_qkv, Q, h) += hg.dq;
    l.head(d_qkv, K, g) += hg.dk;
    l.head(d_qkv, V, g) += hg.dv;
    grads.heads.push_back(std::move(hg));
  }
  if (layer.rope()) layer.rope()->template rotate_gradient<Scalar>(l.queries_and_keys(d_qkv), 0);
  detail::take_projection_gradients(grads, projection.backward(x, d_qkv), l);
  return grads;
}

namespace detail {
/// The attention call of a layer's fused forward and backward: its heads, the options given (the
/// layer's own already added) and the logsumexp the backward reads.
template <class Scalar>
AttentionCall layer_attention_call(const MultiHeadAttention<Scalar>& layer, const AttentionOptions& all) {
  AttentionCall call;
  call.heads = {layer.n_heads(), layer.n_kv_heads()};
  call.options = &all, call.logsumexp = true;
  return call;
}
}  // namespace detail

/// The layer's output on x (n, d_model) by its one fused forward (attend_heads), which keeps in
/// `record` (forward_record.hpp) what layer_backward reads: the queries, the keys and values, Z and
/// the logsumexp, O(n d) in all.
template <class Scalar>
Matrix<Scalar> forward_for_backward(const MultiHeadAttention<Scalar>& layer, const Matrix<Scalar>& x,
                                    ForwardRecord<Scalar>& record, const AttentionOptions& options = {}) {
  detail::check_differentiable(layer, options, "forward_for_backward", true);
  record.keep_queries = record.keep_keys_values = record.keep_logsumexp = true;
  layer.attend_heads(x, options, record);
  return layer.project_heads(record.attention.z, options.threads);
}

namespace detail {
/// Throws unless `record` holds the queries, keys, values, Z and logsumexp of n tokens.
template <class Scalar>
void check_record(const ForwardRecord<Scalar>& record, Index n, const char* where) {
  if (record.q.rows() != n || record.k.rows() != n || record.v.rows() != n || record.attention.z.rows() != n ||
      record.attention.logsumexp.cols() != n)
    invalid(where, "the record holds queries, keys and values, Z and the logsumexp of ", record.q.rows(), ", ", record.k.rows(), ", ",
            record.attention.z.rows(), " and ", record.attention.logsumexp.cols(), " tokens; x has ", n, " (forward_for_backward keeps them)");
}

/// The backward of what the projection's transform did (layer_projections.hpp), in the reverse
/// order: the query scale, the QK-norm after RoPE, RoPE, the QK-norm before it; from the gradients
/// of the attention's queries and keys to those of X W + b, in place on g.dq and g.dk; the
/// QK-norm's weight gradients into grads. x: the layer's input.
template <class Scalar>
void transform_backward(const MultiHeadAttention<Scalar>& layer, const Matrix<Scalar>& x, AttentionGradients<Scalar>& g,
                        MultiHeadGradients<Scalar>& grads, int threads) {
  const std::optional<QkNorm>& norm = layer.config().qk_norm;
  const QkvLayout l = layer.layout();
  Matrix<Scalar> before;  // [Q | K | V] as the QK-norm read it
  if (norm) {
    before = layer.project_qkv(x);
    if (norm->after_rope && layer.rope()) layer.rope()->template rotate<Scalar>(l.queries_and_keys(before), 0, threads);
  }
  if (const auto& scale = layer.config().query_scale)
    for (Index t = 0; t < g.dq.rows(); ++t) g.dq.row(t) *= static_cast<Scalar>(scale->at(t));
  const auto norm_backward = [&] {
    apply_norm_backward<Scalar>(norm->query, l.part(before, QkvPart::query), g.dq, l.d_head, &grads.dq_norm);
    apply_norm_backward<Scalar>(norm->key, l.part(before, QkvPart::key), g.dk, l.d_head, &grads.dk_norm);
  };
  if (norm && norm->after_rope) norm_backward();
  if (layer.rope()) {
    layer.rope()->template rotate_gradient<Scalar>(g.dq, 0, threads);
    layer.rope()->template rotate_gradient<Scalar>(g.dk, 0, threads);
  }
  if (norm && !norm->after_rope) norm_backward();
}
}  // namespace detail

/// The layer's gradients at x (n, d_model) from dz = ∂L/∂Z (n, n_heads d_head), Z the heads'
/// outputs before W_O, by the fused kernels: no (n, n) matrix. `record` holds the forward's
/// queries, keys, values, Z and logsumexp (forward_for_backward, or a whole model's run). W_O's
/// gradients are left empty; dz, dq, dk and dv are kept.
template <class Scalar>
MultiHeadGradients<Scalar> layer_backward_from_z(const MultiHeadAttention<Scalar>& layer, const Matrix<Scalar>& x, Matrix<Scalar> dz,
                                                 const ForwardRecord<Scalar>& record, const AttentionOptions& options = {}) {
  constexpr const char* where = "layer_backward";
  detail::check_differentiable(layer, options, where, true);
  detail::check_record(record, x.rows(), where);
  const int threads = detail::thread_count(options.threads, where);
  MultiHeadGradients<Scalar> grads;
  // Attention, then the transform's backward (RoPE, the QK-norm) on dQ and dK.
  const QkvLayout l = layer.layout();
  const AttentionOptions all = layer.options_for(options);
  AttentionGradients<Scalar> g = detail::backward_of_attend<Scalar>(record.q, record.k, record.v, record.attention, dz,
                                                                     detail::layer_attention_call(layer, all), where);
  grads.dz = std::move(dz), grads.dq = g.dq, grads.dk = g.dk, grads.dv = g.dv;
  detail::transform_backward(layer, x, g, grads, threads);
  // The projection, part by part (no (n, 3 d) matrix of gradients): dX = Σ dP W_Pᵀ, dW_P = Xᵀ dP
  // (X read transposed in place; W_P read where it is kept, when it is kept in Scalar).
  constexpr WeightType own = std::is_same_v<Scalar, double> ? WeightType::f64 : WeightType::f32;
  const QkvPart parts[3] = {QkvPart::query, QkvPart::key, QkvPart::value};
  const Matrix<Scalar>* part[3] = {&g.dq, &g.dk, &g.dv};
  Matrix<Scalar>* dw[3] = {&grads.dw_q, &grads.dw_k, &grads.dw_v};
  RowVector<Scalar>* db[3] = {&grads.db_q, &grads.db_k, &grads.db_v};
  Matrix<Scalar> term;
  for (int p = 0; p < 3; ++p) {
    const StoredMatrix w_p = layer.stored_w_qkv().middle_rows(l.first_column(parts[p]), l.part_width(parts[p]));  // [out, in]
    if (w_p.type() == own)
      detail::product<Scalar>(*part[p], Eigen::Map<const Matrix<Scalar>>(static_cast<const Scalar*>(w_p.data()), w_p.rows(), w_p.cols()), term,
                              threads);
    else
      detail::product<Scalar>(*part[p], w_p.template to_matrix<Scalar>(), term, threads);
    if (p == 0) grads.dx = std::move(term);
    else grads.dx += term;
    detail::product<Scalar>(x, *part[p], *dw[p], threads, /*transpose_a=*/true);
    *db[p] = part[p]->colwise().sum();
  }
  return grads;
}

/// The layer's gradients at x (n, d_model) from dy = ∂L/∂Y (n, d_model), by the fused kernels:
/// no (n, n) matrix. With `record` (from forward_for_backward on the same x and options) the
/// forward is not run again; without it, Q, K, V, Z and the logsumexp are recomputed. Bitwise the
/// same for any thread count. `heads` is left empty.
template <class Scalar>
MultiHeadGradients<Scalar> layer_backward(const MultiHeadAttention<Scalar>& layer, const Matrix<Scalar>& x,
                                          const Matrix<Scalar>& dy, const AttentionOptions& options = {},
                                          const ForwardRecord<Scalar>* record = nullptr) {
  constexpr const char* where = "layer_backward";
  detail::check_differentiable(layer, options, where, true);
  detail::check_output_gradient(layer, dy, x.rows(), where);
  ForwardRecord<Scalar> recomputed;
  if (!record) forward_for_backward(layer, x, recomputed, options), record = &recomputed;
  const int threads = detail::thread_count(options.threads, where);
  detail::check_record(*record, x.rows(), where);
  // The W_O sum: dZ = dY W_Oᵀ, dW_O = Zᵀ dY, db_O = Σ_rows dY. (The deterministic product reads
  // row-major operands: a transposed one is copied, and the copy of Z freed at once.)
  Matrix<Scalar> dz, dw_o;
  detail::product<Scalar>(dy, layer.stored_w_o().template to_matrix<Scalar>(), dz, threads);
  detail::product<Scalar>(Matrix<Scalar>(record->attention.z.transpose()), dy, dw_o, threads);
  MultiHeadGradients<Scalar> grads = layer_backward_from_z(layer, x, std::move(dz), *record, options);
  grads.dw_o = std::move(dw_o), grads.db_o = dy.colwise().sum();
  return grads;
}

}  // namespace headwise
