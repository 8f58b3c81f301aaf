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

#include "headwise/detail/compiled.hpp"
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
  RowVector<Scalar> memory(d_v), delta(d_v);
  for (Index t = 0; t < in.n; ++t) {  // (S's rows in order: each loop over c is one contiguous row)
    const Scalar* q = in.q.row(t);
    const Scalar* k = in.k.row(t);
    const Scalar* v = in.v.row(t);
    s *= std::exp(*in.g.row(t));
    memory.setZero();  // Sᵀ k
    for (Index i = 0; i < d_k; ++i)
      for (Index c = 0; c < d_v; ++c) memory(c) += k[i] * s(i, c);
    for (Index c = 0; c < d_v; ++c) delta(c) = *in.beta.row(t) * (v[c] - memory(c));
    for (Index i = 0; i < d_k; ++i)
      for (Index c = 0; c < d_v; ++c) s(i, c) += k[i] * delta(c);
    for (Index i = 0; i < d_k; ++i)  // Sᵀ q
      for (Index c = 0; c < d_v; ++c) o(t, c) += q[i] * s(i, c);
  }
  return o;
}

/// The buffers of DeltaRuleState::advance's products, one per thread, shared by the heads it
/// advances (a model's heads are many; their scratch would be read from memory each token).
template <class Scalar>
struct DeltaRuleScratch {
  detail::ProductScratch<Scalar> product;
  Matrix<Scalar> stacked, stacked_t, with_state, with_keys;
  std::vector<Scalar> to_delta, to_out;  // pass 2's coefficients of the earlier rows' δ
};

/// One value head's state for (2): S_0 where the open chunk starts and the open chunk's rows
/// (keys, δ, G). Advance it by any number of tokens; state() is S after the last one. S_0 is kept
/// in panels of W columns (d_k rows of W each, one after the other), the layout its products read:
/// a decoding step streams it from memory in order.
template <class Scalar>
class HEADWISE_ISA_TAG DeltaRuleState {  // (its panels are W columns wide: the instruction set's)
  static constexpr Index W = detail::TileShape<Scalar>::lanes;

 public:
  DeltaRuleState(Index d_k, Index d_v, Index chunk) : d_k_(d_k), d_v_(d_v), panels_((d_v + W - 1) / W) {
    if (d_k <= 0 || d_v <= 0 || chunk <= 0) detail::invalid("DeltaRuleState", "d_k = ", d_k, ", d_v = ", d_v, ", chunk = ", chunk, " (each >= 1)");
    s0_ = Matrix<Scalar>::Zero(panels_ * d_k, W), keys_.resize(chunk, d_k), deltas_ = Matrix<Scalar>::Zero(chunk, panels_ * W);
    cumulative_.resize(static_cast<std::size_t>(chunk));
  }
  Index d_k() const { return d_k_; }
  Index d_v() const { return d_v_; }
  Index chunk() const { return keys_.rows(); }
  /// Rows of the open chunk (tokens since the last full chunk).
  Index open_rows() const { return rows_; }

  /// S after the last token (d_k, d_v): what (1) holds there.
  Matrix<Scalar> state() const {
    Matrix<Scalar> panelled = s0_;
    if (rows_ > 0) close_into(panelled);
    Matrix<Scalar> s(d_k_, d_v_);
    for (Index c = 0; c < d_v_; ++c) s.col(c) = panelled.col(c % W).segment(c / W * d_k_, d_k_);
    return s;
  }
  /// Starts over from S = s (d_k, d_v), no open rows (a state another implementation computed).
  void set_state(const Eigen::Ref<const Matrix<Scalar>>& s) {
    if (s.rows() != d_k_ || s.cols() != d_v_)
      detail::invalid("DeltaRuleState::set_state", "s is ", s.rows(), "x", s.cols(), ", the head's state ", d_k_, "x", d_v_);
    for (Index c = 0; c < d_v_; ++c) s0_.col(c % W).segment(c / W * d_k_, d_k_) = s.col(c);
    rows_ = 0;
  }

  /// The outputs of the next in.n tokens into o (rows t at o + t ldo, d_v each), the state moved
  /// past them. scratch: the products' buffers (one per thread).
  void advance(DeltaRuleInputs<Scalar> in, Scalar* o, Index ldo, DeltaRuleScratch<Scalar>& scratch) {
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
  void rows_in_chunk(const DeltaRuleInputs<Scalar>& in, Index m, Scalar* o, Index ldo, DeltaRuleScratch<Scalar>& scratch) {
    const Index first = rows_, seen = rows_ + m, width = (2 * m + W - 1) / W * W;  // (whole panels: columns past 2 m are not read)
    Matrix<Scalar>&stacked = scratch.stacked, &stacked_t = scratch.stacked_t, &with_state = scratch.with_state, &with_keys = scratch.with_keys;
    if (stacked_t.rows() != d_k_ || stacked_t.cols() < width) stacked_t = Matrix<Scalar>::Zero(d_k_, width);
    stacked.resize(2 * m, d_k_);
    for (Index t = 0; t < m; ++t) {
      const Index row = first + t;
      std::copy_n(in.k.row(t), d_k_, keys_.row(row).data());
      cumulative_[std::size_t(row)] = (row == 0 ? Scalar(0) : cumulative_[std::size_t(row - 1)]) + *in.g.row(t);
      std::copy_n(in.k.row(t), d_k_, stacked.row(t).data()), std::copy_n(in.q.row(t), d_k_, stacked.row(m + t).data());
      for (Index i = 0; i < d_k_; ++i) stacked_t(i, t) = in.k.row(t)[i], stacked_t(i, m + t) = in.q.row(t)[i];
    }
    // pass 1, on the keys and queries stacked (one read of S_0 and of the chunk's keys for both):
    // rows t and m + t of with_state are S_0ᵀ k_t and S_0ᵀ q_t; columns t and m + t of with_keys,
    // k_j·k_t and k_j·q_t for the rows j so far
    using detail::ALayout;
    with_state.setZero(2 * m, panels_ * W), with_keys.setZero(seen, width);
    for (Index p = 0; p < panels_; ++p)
      detail::add_product_in_place<Scalar, ALayout::rows>(2 * m, W, d_k_, stacked.data(), d_k_, s0_.data() + p * d_k_ * W, W,
                                                          with_state.data() + p * W, with_state.cols(), scratch.product);
    detail::add_product_in_place<Scalar, ALayout::rows>(seen, width, d_k_, keys_.data(), d_k_, stacked_t.data(), stacked_t.cols(),
                                                        with_keys.data(), width, scratch.product);
    // pass 2: row by row, δ_t then o_t, each its first term plus the earlier rows' δ in
    // ascending order
    std::vector<Scalar>& to_delta = scratch.to_delta;
    std::vector<Scalar>& to_out = scratch.to_out;
    to_delta.resize(std::size_t(chunk())), to_out.resize(std::size_t(chunk()));
    for (Index t = 0; t < m; ++t) {
      const Index row = first + t;
      const Scalar g_row = cumulative_[std::size_t(row)], beta = *in.beta.row(t), decay = std::exp(g_row);
      for (Index j = 0; j <= row; ++j) {
        const Scalar between = std::exp(g_row - cumulative_[std::size_t(j)]);  // e^{G_t − G_j}
        to_delta[std::size_t(j)] = -beta * between * with_keys(j, t), to_out[std::size_t(j)] = between * with_keys(j, m + t);
      }
      const Scalar* v = in.v.row(t);
      Scalar* delta = deltas_.row(row).data();
      for (Index c = 0; c < d_v_; ++c) delta[c] = beta * (v[c] - decay * with_state(t, c));
      for (Index j = 0; j < row; ++j) {
        const Scalar a = to_delta[std::size_t(j)];
        const Scalar* earlier = deltas_.row(j).data();
        for (Index c = 0; c < d_v_; ++c) delta[c] += a * earlier[c];
      }
      Scalar* out = o + t * ldo;
      for (Index c = 0; c < d_v_; ++c) out[c] = decay * with_state(m + t, c);
      for (Index j = 0; j <= row; ++j) {
        const Scalar a = to_out[std::size_t(j)];
        const Scalar* earlier = deltas_.row(j).data();
        for (Index c = 0; c < d_v_; ++c) out[c] += a * earlier[c];
      }
    }
    rows_ = seen;
  }

  /// s ← e^{G_last} s + Σ_j e^{G_last − G_j} k_j δ_jᵀ over the open rows, s in S_0's panels (S_0
  /// itself, or a copy).
  void close_into(Matrix<Scalar>& s) const {
    const Scalar last = cumulative_[std::size_t(rows_ - 1)];
    s *= std::exp(last);
    Matrix<Scalar> decayed_keys(rows_, d_k_);  // e^{G_last − G_j} k_j, row j
    for (Index j = 0; j < rows_; ++j) decayed_keys.row(j) = keys_.row(j) * std::exp(last - cumulative_[std::size_t(j)]);
    detail::ProductScratch<Scalar> scratch;
    for (Index p = 0; p < panels_; ++p)
      detail::add_product_in_place<Scalar, detail::ALayout::columns>(d_k_, W, rows_, decayed_keys.data(), d_k_, deltas_.data() + p * W,
                                                                     deltas_.cols(), s.data() + p * d_k_ * W, W, scratch);
  }

  Index d_k_, d_v_, panels_;
  Matrix<Scalar> s0_;      // (panels d_k, W): S where the open chunk starts, panel p in rows p d_k ..
  Matrix<Scalar> keys_;    // (chunk, d_k): the open chunk's keys
  Matrix<Scalar> deltas_;  // (chunk, panels W): their δ (zeros past d_v)
  std::vector<Scalar> cumulative_;  // their G
  Index rows_ = 0;
};

/// The compiled mode's instantiations (detail/compiled.hpp).
#define HEADWISE_DELTA_RULE_INSTANTIATIONS(PREFIX, S)                                                   \
  PREFIX template Matrix<S> recurrent_delta_rule<S>(const DeltaRuleInputs<S>&, Matrix<S>&); \
  PREFIX template class DeltaRuleState<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_DELTA_RULE_INSTANTIATIONS)

}  // namespace headwise
