// The gated delta rule (Gated DeltaNet, Qwen3-Next's linear attention), one value head at a time.
// A head keeps a state S (d_k, d_v) in place of a growing KV cache; per token t, with its query
// q_t (d_k, already scaled), key k_t (d_k, unit length), value v_t (d_v), write strength β_t and
// log decay g_t <= 0:
//
//   S ← e^{g_t} S;  δ_t = β_t (v_t − Sᵀ k_t);  S ← S + k_t δ_tᵀ;  o_t = Sᵀ q_t        (1)
//
// recurrent_delta_rule is (1) as written, the readable reference. DeltaRuleState computes the
// same outputs in chunks of C tokens (Yang et al. 2024, as Hugging Face's chunked prefill): with
// S_0 the state where the chunk starts and G_t = Σ g over the chunk's tokens up to t,
//
//   δ_t = β_t (v_t − e^{G_t} S_0ᵀ k_t) − Σ_{j<t} β_t e^{G_t − G_j} (k_t·k_j) δ_j
//   o_t = e^{G_t} S_0ᵀ q_t + Σ_{j<=t} e^{G_t − G_j} (q_t·k_j) δ_j                         (2)
//   S_0 ← e^{G_last} S_0 + Σ_j e^{G_last − G_j} k_j δ_jᵀ   (when the chunk is full)
//
// (unrolling (1) over the chunk gives (2)). The products with S_0 and the chunk's keys are
// matrix products (detail/tile_product.hpp: each element one ascending chain, whatever the
// shapes), the rest plain loops over a row's earlier rows: row t's bits depend only on S_0 and
// rows <= t of its chunk. The state keeps the open chunk's rows, so tokens given one at a time
// (decoding) get the bits of tokens given all at once (the forward), chunks counted from the
// state's first token.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Rows of a row-major matrix read in place: row t at data + t stride (one head's columns of a
/// matrix holding every head side by side).
template <class Scalar>
struct HeadRows {
  const Scalar* data;
  Index stride;
  const Scalar* row(Index t) const { return data + t * stride; }
};

/// One token range of one value head: queries and keys (d_k each, the key head's), values (d_v),
/// β and g (one number per token, at column `column` of their (n, value heads) matrices).
template <class Scalar>
struct DeltaRuleInputs {
  HeadRows<Scalar> q, k, v, beta, g;
  Index n = 0;
};

/// (1) token by token from state s (d_k, d_v), which it leaves after the last token: the outputs
/// (n, d_v). The definition, in plain loops; DeltaRuleState computes the same in chunks.
template <class Scalar>
Matrix<Scalar> recurrent_delta_rule(const DeltaRuleInputs<Scalar>& in, Matrix<Scalar>& s) {
  const Index d_k = s.rows(), d_v = s.cols();
  Matrix<Scalar> o = Matrix<Scalar>::Zero(in.n, d_v);
  std::vector<Scalar> delta(static_cast<std::size_t>(d_v));
  for (Index t = 0; t < in.n; ++t) {
    const Scalar* q = in.q.row(t);
    const Scalar* k = in.k.row(t);
    const Scalar* v = in.v.row(t);
    s *= std::exp(*in.g.row(t));
    for (Index c = 0; c < d_v; ++c) {
      Scalar memory = 0;  // (Sᵀ k)_c
      for (Index i = 0; i < d_k; ++i) memory += s(i, c) * k[i];
      delta[std::size_t(c)] = *in.beta.row(t) * (v[c] - memory);
    }
    for (Index i = 0; i < d_k; ++i)
      for (Index c = 0; c < d_v; ++c) s(i, c) += k[i] * delta[std::size_t(c)];
    for (Index c = 0; c < d_v; ++c)
      for (Index i = 0; i < d_k; ++i) o(t, c) += s(i, c) * q[i];
  }
  return o;
}

/// One value head's state for (2): S_0 where the open chunk starts and the open chunk's rows
/// (keys, δ, G). Advance it by any number of tokens; state() is S after the last one.
template <class Scalar>
class DeltaRuleState {
 public:
  DeltaRuleState(Index d_k, Index d_v, Index chunk)
      : s0_(Matrix<Scalar>::Zero(d_k, d_v)), keys_t_(d_k, chunk), deltas_(chunk, d_v), cumulative_(static_cast<std::size_t>(chunk)) {
    if (d_k <= 0 || d_v <= 0 || chunk <= 0) detail::invalid("DeltaRuleState", "d_k = ", d_k, ", d_v = ", d_v, ", chunk = ", chunk, " (each >= 1)");
  }
  Index d_k() const { return s0_.rows(); }
  Index d_v() const { return s0_.cols(); }
  Index chunk() const { return deltas_.rows(); }
  /// Rows of the open chunk (tokens since the last full chunk).
  Index open_rows() const { return rows_; }

  /// S after the last token (d_k, d_v): what (1) holds there.
  Matrix<Scalar> state() const {
    Matrix<Scalar> s = s0_;
    if (rows_ > 0) close_into(s);
    return s;
  }
  /// Starts over from S = s (d_k, d_v), no open rows (a state another implementation computed).
  void set_state(const Eigen::Ref<const Matrix<Scalar>>& s) {
    if (s.rows() != d_k() || s.cols() != d_v())
      detail::invalid("DeltaRuleState::set_state", "s is ", s.rows(), "x", s.cols(), ", the head's state ", d_k(), "x", d_v());
    s0_ = s, rows_ = 0;
  }

  /// The outputs of the next in.n tokens into o (rows t at o + t ldo, d_v each), the state moved
  /// past them. scratch: the products' buffers (one per thread).
  void advance(DeltaRuleInputs<Scalar> in, Scalar* o, Index ldo, detail::ProductScratch<Scalar>& scratch) {
    while (in.n > 0) {
      const Index m = std::min(in.n, chunk() - rows_);
      rows_in_chunk(in, m, o, ldo, scratch);
      if (rows_ == chunk()) {
        close_into(s0_);
        rows_ = 0;
      }
      for (HeadRows<Scalar>* r : {&in.q, &in.k, &in.v, &in.beta, &in.g}) r->data += m * r->stride;
      o += m * ldo, in.n -= m;
    }
  }

 private:
  /// (2) for the next m tokens, which fit in the open chunk: pass 1 their products with S_0 and
  /// with the chunk's keys, pass 2 row by row δ and o from the earlier rows.
  void rows_in_chunk(const DeltaRuleInputs<Scalar>& in, Index m, Scalar* o, Index ldo, detail::ProductScratch<Scalar>& scratch) {
    const Index d_k = this->d_k(), d_v = this->d_v(), first = rows_, seen = rows_ + m;
    for (Index t = 0; t < m; ++t) {
      const Index row = first + t;
      for (Index i = 0; i < d_k; ++i) keys_t_(i, row) = in.k.row(t)[i];
      cumulative_[std::size_t(row)] = (row == 0 ? Scalar(0) : cumulative_[std::size_t(row - 1)]) + *in.g.row(t);
    }
    using detail::ALayout;
    // pass 1: S_0ᵀ k_t and S_0ᵀ q_t (m, d_v) each; k_t·k_j and q_t·k_j for the rows so far (m, seen)
    key_state_.setZero(m, d_v), query_state_.setZero(m, d_v), key_key_.setZero(m, seen), query_key_.setZero(m, seen);
    detail::add_product_in_place<Scalar, ALayout::rows>(m, d_v, d_k, in.k.data, in.k.stride, s0_.data(), d_v, key_state_.data(), d_v, scratch);
    detail::add_product_in_place<Scalar, ALayout::rows>(m, d_v, d_k, in.q.data, in.q.stride, s0_.data(), d_v, query_state_.data(), d_v, scratch);
    detail::add_product_in_place<Scalar, ALayout::rows>(m, seen, d_k, in.k.data, in.k.stride, keys_t_.data(), chunk(), key_key_.data(), seen, scratch);
    detail::add_product_in_place<Scalar, ALayout::rows>(m, seen, d_k, in.q.data, in.q.stride, keys_t_.data(), chunk(), query_key_.data(), seen, scratch);
    // pass 2: row by row, each from the rows before it
    for (Index t = 0; t < m; ++t) {
      const Index row = first + t;
      const Scalar g_row = cumulative_[std::size_t(row)], beta = *in.beta.row(t), decay = std::exp(g_row);
      const Scalar* v = in.v.row(t);
      Scalar* delta = deltas_.row(row).data();
      for (Index c = 0; c < d_v; ++c) delta[c] = beta * (v[c] - decay * key_state_(t, c));
      for (Index j = 0; j < row; ++j) {
        const Scalar a = -beta * std::exp(g_row - cumulative_[std::size_t(j)]) * key_key_(t, j);
        const Scalar* earlier = deltas_.row(j).data();
        for (Index c = 0; c < d_v; ++c) delta[c] += a * earlier[c];
      }
      Scalar* out = o + t * ldo;
      for (Index c = 0; c < d_v; ++c) out[c] = decay * query_state_(t, c);
      for (Index j = 0; j <= row; ++j) {
        const Scalar a = std::exp(g_row - cumulative_[std::size_t(j)]) * query_key_(t, j);
        const Scalar* earlier = deltas_.row(j).data();
        for (Index c = 0; c < d_v; ++c) out[c] += a * earlier[c];
      }
    }
    rows_ = seen;
  }

  /// s ← e^{G_last} s + Σ_j e^{G_last − G_j} k_j δ_jᵀ over the open rows: s_0 is S_0, or a copy.
  void close_into(Matrix<Scalar>& s) const {
    const Scalar last = cumulative_[std::size_t(rows_ - 1)];
    s *= std::exp(last);
    Matrix<Scalar> decayed_keys_t(d_k(), rows_);  // e^{G_last − G_j} k_j, column j
    for (Index j = 0; j < rows_; ++j) decayed_keys_t.col(j) = keys_t_.col(j) * std::exp(last - cumulative_[std::size_t(j)]);
    detail::ProductScratch<Scalar> scratch;
    detail::add_product_in_place<Scalar, detail::ALayout::rows>(d_k(), d_v(), rows_, decayed_keys_t.data(), rows_, deltas_.data(), d_v(),
                                                                s.data(), d_v(), scratch);
  }

  Matrix<Scalar> s0_;      // (d_k, d_v): S where the open chunk starts
  Matrix<Scalar> keys_t_;  // (d_k, chunk): the open chunk's keys, column j row j's
  Matrix<Scalar> deltas_;  // (chunk, d_v): their δ
  std::vector<Scalar> cumulative_;  // their G
  Index rows_ = 0;
  Matrix<Scalar> key_state_, query_state_, key_key_, query_key_;  // pass 1's products (scratch)
};

}  // namespace headwise
