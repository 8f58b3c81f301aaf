// The weights of a multi-head attention layer (W_Q, W_K, W_V, W_O, their biases, an output gate)
// as Hugging Face GPT-2 lays them out ([in, out]), the type the layer keeps them in (kept_as: F32,
// F64, BF16, F16, or FP8 with fp8_scales), and their checks: the shapes that fit together, finite
// numbers, a kept type the scalar can use. MultiHeadAttention (multi_head_attention.hpp) is made
// from them (detail::kept_weights).
#pragma once

#include <optional>
#include <type_traits>

#include "headwise/detail/errors.hpp"
#include "headwise/qkv_layout.hpp"
#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The weights of a multi-head attention layer, as Hugging Face GPT-2 lays them out.
/// Inside W_Q head h owns columns [h d_head, (h+1) d_head), and likewise inside W_O the rows with
/// those numbers, W_O[h]. W_K and W_V hold n_kv_heads heads of d_head columns each: n_kv_heads =
/// n_heads for multi-head attention, fewer for grouped-query attention (1: multi-query), where
/// query head h uses key/value head h / (n_heads / n_kv_heads).
template <class Scalar>
struct MultiHeadWeights {
  Matrix<Scalar> w_q;               ///< (d_model, n_heads d_head)
  Matrix<Scalar> w_k, w_v;          ///< (d_model, n_kv_heads d_head) each
  RowVector<Scalar> b_q, b_k, b_v;  ///< matching (1, ...) biases, or empty for no bias
  Matrix<Scalar> w_o;               ///< (n_heads d_head, d_model)
  RowVector<Scalar> b_o;            ///< (1, d_model), or empty for no bias
  /// An output gate (Qwen3-Next): Z_h <- Z_h ∘ σ(X W_G + b_G) per head before W_O; (d_model,
  /// n_heads d_head), or empty for none; and its bias, or empty.
  Matrix<Scalar> w_gate;
  RowVector<Scalar> b_gate;
  /// The type the layer keeps W_Q | W_K | W_V, W_O and W_G in (stored_matrix.hpp), [out, in], and
  /// multiplies by widened in registers: F32 for float and F64 for double by default. BF16 or F16
  /// (a float layer) rounds them once, to nearest even: exact for weights a checkpoint stores so,
  /// half the bytes a decoding step streams.
  WeightType kept_as = std::is_same_v<Scalar, double> ? WeightType::f64 : WeightType::f32;
  /// With kept_as F8_E4M3 or F8_E5M2 (a float layer): the block scales the layer rounds W_Qᵀ, W_Kᵀ,
  /// W_Vᵀ, W_Oᵀ and W_Gᵀ ([out, in], as a checkpoint stores them) to FP8 by
  /// (StoredMatrix::from: exact for an FP8 checkpoint's weights widened); none otherwise.
  struct Fp8Scales {
    BlockScales q, k, v, o, gate;
  };
  std::optional<Fp8Scales> fp8_scales;
};

namespace detail {

template <class Scalar>
void check_weight_shape(const char* where, const char* name, const Matrix<Scalar>& m, Index rows, Index cols) {
  if (m.rows() != rows || m.cols() != cols) invalid(where, name, " is ", m.rows(), "x", m.cols(), ", expected ", rows, "x", cols);
}
template <class Scalar>
void check_bias(const char* where, const char* name, const RowVector<Scalar>& b, Index size) {
  if (b.size() != 0 && b.size() != size) invalid(where, name, " has ", b.size(), " entries, expected 0 or ", size);
}

/// Throws unless w holds n_heads query heads and a whole number of key/value heads of one d_head
/// (read from W_Q's width), every shape and bias fitting, every number finite; returns the layout.
template <class Scalar>
QkvLayout check_weights(const MultiHeadWeights<Scalar>& w, Index n_heads, const char* where) {
  if (n_heads <= 0) invalid(where, "n_heads must be > 0, got ", n_heads);
  const Index d_model = w.w_q.rows(), width = w.w_q.cols();
  if (d_model == 0) invalid(where, "w_q has 0 rows, expected d_model > 0");
  if (width % n_heads != 0) {
    if (width == d_model) invalid(where, "d_model = ", d_model, " is not divisible by n_heads = ", n_heads);
    invalid(where, "w_q has ", width, " columns, not divisible by n_heads = ", n_heads);
  }
  if (width == 0) invalid(where, "w_q has 0 columns, expected n_heads d_head > 0");
  const Index d_head = width / n_heads;
  if (w.w_k.rows() != d_model || w.w_k.cols() == 0 || w.w_k.cols() % d_head != 0)
    invalid(where, "w_k is ", w.w_k.rows(), "x", w.w_k.cols(), ", expected ", d_model, "x(n_kv_heads d_head) with d_head = ", d_head);
  const Index n_kv_heads = w.w_k.cols() / d_head;
  if (n_heads % n_kv_heads != 0) invalid(where, "n_heads = ", n_heads, " is not divisible by n_kv_heads = ", n_kv_heads);
  const Index kv_width = n_kv_heads * d_head;
  check_weight_shape(where, "w_v", w.w_v, d_model, kv_width);
  check_weight_shape(where, "w_o", w.w_o, width, d_model);
  check_bias(where, "b_q", w.b_q, width);
  check_bias(where, "b_k", w.b_k, kv_width);
  check_bias(where, "b_v", w.b_v, kv_width);
  check_bias(where, "b_o", w.b_o, d_model);
  if (w.w_gate.size() || w.b_gate.size()) {
    check_weight_shape(where, "w_gate", w.w_gate, d_model, width);
    check_bias(where, "b_gate", w.b_gate, width);
  }
  // Non-finite weights are refused: a NaN would make every output NaN, or (worse) a masked 0 x inf
  // would carry a later token into earlier rows.
  require_finite(where, "w_q", w.w_q);
  require_finite(where, "w_k", w.w_k);
  require_finite(where, "w_v", w.w_v);
  require_finite(where, "w_o", w.w_o);
  require_finite(where, "b_q", w.b_q);
  require_finite(where, "b_k", w.b_k);
  require_finite(where, "b_v", w.b_v);
  require_finite(where, "b_o", w.b_o);
  require_finite(where, "w_gate", w.w_gate);
  require_finite(where, "b_gate", w.b_gate);
  if (std::is_same_v<Scalar, double> != (w.kept_as == WeightType::f64))
    invalid(where, "kept_as is ", weight_type_name(w.kept_as), ": a ",
            std::is_same_v<Scalar, double> ? "float64 layer keeps F64" : "float layer keeps F32, BF16, F16 or FP8", " weights");
  if (is_fp8(w.kept_as) != w.fp8_scales.has_value())
    invalid(where, "kept_as is ", weight_type_name(w.kept_as), is_fp8(w.kept_as) ? " but fp8_scales are not given" : " but fp8_scales are given (they are for FP8)");
  return {n_heads, n_kv_heads, d_head};
}

/// out_in ([out, in]) kept as w.kept_as; FP8 by `scales` (of out_in's rows).
template <class Scalar, class Derived>
StoredMatrix kept_weights(const Eigen::MatrixBase<Derived>& out_in, const MultiHeadWeights<Scalar>& w, const BlockScales* scales) {
  return is_fp8(w.kept_as) ? StoredMatrix::from(out_in, w.kept_as, *scales) : StoredMatrix::from(out_in, w.kept_as);
}

}  // namespace detail
}  // namespace headwise
