// A layer's projections: from X to the queries, keys and values its scores read. X [W_Q | W_K | W_V]
// + b in one product (stored_matrix.hpp's, over W_QKV kept [out, in] in its stored type: a token's
// row never depends on the other tokens computed with it, what incremental decoding needs), every entry
// checked finite; then what comes between the projection and the scores (layer_config.hpp): the
// QK-norm before or after RoPE, RoPE, the value norm, the query scale. And the output gate
// σ(X W_G + b_G) of a gated layer. MultiHeadAttention holds one.
#pragma once

#include <cmath>
#include <optional>
#include <utility>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/layer_config.hpp"
#include "headwise/multi_head_weights.hpp"
#include "headwise/norms.hpp"
#include "headwise/qkv_layout.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The positions of a call's rows: row t at first + t; `end`, one past the sequence's last position
/// (LongRoPE chooses its factors by it).
struct RowPositions {
  Index first = 0, end = 0;
};

template <class Scalar>
class LayerProjections {
 public:
  LayerProjections() = default;
  /// From weights detail::check_weights accepted (with `layout`; W_Q, W_K, W_V and the gate kept
  /// as w.kept_as, the biases moved out of w) and the layer's config: its rotary embedding made here (the
  /// frequencies computed once), its norms and query scale checked against the heads.
  LayerProjections(MultiHeadWeights<Scalar>& w, const QkvLayout& layout, const LayerConfig& config, const char* where)
      : layout_(layout), qk_norm_(config.qk_norm), value_norm_(config.value_norm), query_scale_(config.query_scale) {
    const QkvLayout& l = layout_;
    Matrix<Scalar> rows(l.width(), w.w_q.rows());  // one pass over X instead of three
    rows << w.w_q.transpose(), w.w_k.transpose(), w.w_v.transpose();
    const auto* fp8 = w.fp8_scales ? &*w.fp8_scales : nullptr;
    const BlockScales qkv_scales =
        fp8 ? stacked({fp8->q.rows(0, l.query_width()), fp8->k.rows(0, l.key_value_width()), fp8->v.rows(0, l.key_value_width())}) : BlockScales{};
    w_qkv_ = detail::kept_weights(rows, w, &qkv_scales);
    b_qkv_ = RowVector<Scalar>::Zero(l.width());
    if (w.b_q.size()) b_qkv_.segment(l.first_column(QkvPart::query), l.query_width()) = w.b_q;
    if (w.b_k.size()) b_qkv_.segment(l.first_column(QkvPart::key), l.key_value_width()) = w.b_k;
    if (w.b_v.size()) b_qkv_.segment(l.first_column(QkvPart::value), l.key_value_width()) = w.b_v;
    if (w.w_gate.size() || w.b_gate.size()) {
      w_gate_ = detail::kept_weights(w.w_gate.transpose(), w, fp8 ? &fp8->gate : nullptr);
      b_gate_ = w.b_gate.size() ? std::move(w.b_gate) : RowVector<Scalar>::Zero(l.query_width());
    }
    if (config.rope) {
      RopeConfig rope = *config.rope;
      if (rope.d_head == 0) rope.d_head = l.d_head;
      if (rope.d_head != l.d_head)
        detail::invalid(where, "the rotary embedding is for d_head = ", rope.d_head, ", the layer's heads have ", l.d_head);
      rope_.emplace(rope);
      if (!std::isfinite(static_cast<Scalar>(rope_->attention_factor())))
        detail::invalid(where, "the rotary embedding's attention factor ", rope_->attention_factor(), " is not finite in ",
                        detail::scalar_name<Scalar>());
    }
    if (qk_norm_) {
      detail::check_norm(qk_norm_->query, l.n_heads, l.d_head, where, "the query norm");
      detail::check_norm(qk_norm_->key, l.n_kv_heads, l.d_head, where, "the key norm");
    }
    if (value_norm_) detail::check_norm(*value_norm_, l.n_kv_heads, l.d_head, where, "the value norm");
    if (query_scale_) query_scale_->check(where);
  }

  const QkvLayout& layout() const { return layout_; }
  Index d_model() const { return w_qkv_.cols(); }
  /// W_Q | W_K | W_V side by side as kept: [layout().width(), d_model], a row per column of X W;
  /// and its bias.
  const StoredMatrix& stored_w_qkv() const { return w_qkv_; }
  const RowVector<Scalar>& b_qkv() const { return b_qkv_; }
  /// The output gate's W_G as kept, [n_heads d_head, d_model], and b_G; empty without a gate.
  bool gated() const { return w_gate_.rows() != 0; }
  const StoredMatrix& stored_w_gate() const { return w_gate_; }
  const RowVector<Scalar>& b_gate() const { return b_gate_; }
  const std::optional<RotaryEmbedding>& rope() const { return rope_; }

  /// X W_QKV + b_QKV, rows at positions first ..; throws naming the first entry that is not finite.
  Matrix<Scalar> project(const Eigen::Ref<const Matrix<Scalar>>& x, int threads, Index first, const char* where) const {
    Matrix<Scalar> qkv = times_transposed<Scalar>(x, w_qkv_, threads);
    qkv.rowwise() += b_qkv_;
    check_finite(qkv, first, where, threads);
    return qkv;
  }
  /// Rows [Q | 0 | 0]: the queries X W_Q + b_Q alone (K and V left zero: a KV-sharing layer's).
  Matrix<Scalar> project_queries(const Eigen::Ref<const Matrix<Scalar>>& x, int threads, Index first, const char* where) const {
    const Index width = layout_.query_width();
    const Matrix<Scalar> queries = times_transposed<Scalar>(x, w_qkv_.middle_rows(0, width), threads);
    Matrix<Scalar> qkv = Matrix<Scalar>::Zero(x.rows(), layout_.width());
    layout_.part(qkv, QkvPart::query) = queries.rowwise() + b_qkv_.head(width);
    check_finite(qkv, first, where, threads);
    return qkv;
  }

  /// Throws unless every Q, K and V of the projected rows qkv (row t at position first + t) is
  /// finite, naming the token, the part and the head. With finite x and weights this catches
  /// X W + b overflowing (|x| near 1e38 in float).
  void check_finite(const Matrix<Scalar>& qkv, Index first, const char* where, int threads = 1) const {
    if (detail::all_finite(qkv, threads)) return;
    for (Index t = 0; t < qkv.rows(); ++t)
      for (Index c = 0; c < qkv.cols(); ++c) {
        if (std::isfinite(qkv(t, c))) continue;
        const QkvPart part = layout_.part_of(c);
        const char* name = part == QkvPart::query ? "query" : part == QkvPart::key ? "key" : "value";
        detail::invalid(where, "the ", name, " of the token at position ", first + t, " (head ", layout_.head_of(c),
                        ") is not finite (", qkv(t, c), "): x W + b overflowed; scale x or the weights down");
      }
  }

  /// Between the projection and the scores, in place on rows of [Q | K | V] at `at`: the QK-norm
  /// (before or after RoPE), RoPE, the value norm and the query scale. With `normed`, a copy of the
  /// rows after a QK-norm that comes before RoPE (left empty otherwise).
  void transform(Eigen::Ref<Matrix<Scalar>> qkv, RowPositions at, int threads, Matrix<Scalar>* normed = nullptr) const {
    const QkvLayout& l = layout_;
    if (qk_norm_ && !qk_norm_->after_rope) apply_qk_norm(qkv);
    if (normed && qk_norm_ && !qk_norm_->after_rope) *normed = qkv;
    if (rope_) rope_->rotate<Scalar>(l.queries_and_keys(qkv), at.first, threads, at.end);
    if (qk_norm_ && qk_norm_->after_rope) apply_qk_norm(qkv);
    if (value_norm_) apply_norm<Scalar>(*value_norm_, l.part(qkv, QkvPart::value), l.d_head);
    if (query_scale_)
      for (Index t = 0; t < qkv.rows(); ++t)
        l.part(qkv, QkvPart::query).row(t) *= static_cast<Scalar>(query_scale_->at(at.first + t));
  }

  /// σ(X W_G + b_G): (m, n_heads d_head), by the deterministic product.
  Matrix<Scalar> gate_of(const Eigen::Ref<const Matrix<Scalar>>& x, int threads) const {
    Matrix<Scalar> g = times_transposed<Scalar>(x, w_gate_, threads);
    g.rowwise() += b_gate_;
    return g.unaryExpr([](Scalar v) { return Scalar(1) / (Scalar(1) + std::exp(-v)); });
  }
  /// Z <- Z ∘ σ(X W_G + b_G) for a gated layer; nothing otherwise.
  void apply_gate(const Eigen::Ref<const Matrix<Scalar>>& x, Matrix<Scalar>& z, int threads) const {
    if (gated()) z.array() *= gate_of(x, threads).array();
  }

 private:
  void apply_qk_norm(Eigen::Ref<Matrix<Scalar>> qkv) const {
    apply_norm<Scalar>(qk_norm_->query, layout_.part(qkv, QkvPart::query), layout_.d_head);
    apply_norm<Scalar>(qk_norm_->key, layout_.part(qkv, QkvPart::key), layout_.d_head);
  }

  QkvLayout layout_;
  StoredMatrix w_qkv_, w_gate_;  ///< [out, in]: a row per column of X W
  RowVector<Scalar> b_qkv_, b_gate_;
  std::optional<RotaryEmbedding> rope_;
  std::optional<QkNorm> qk_norm_;
  std::optional<RmsNorm> value_norm_;
  std::optional<QueryScale> query_scale_;
};

}  // namespace headwise
