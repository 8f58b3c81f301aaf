// The fused backward of attention, in the manner of FlashAttention-2: from Q, K, V, the output O,
// each row's saved logsumexp and dO = ∂L/∂O, the gradients dQ, dK, dV, recomputing P tile by tile
// and never holding an (n, n) matrix. Memory O(n d).
//
//   D_i  = rowsum(dO_i ∘ O_i)                          (= Σ_j P_ij dP_ij)
//   for each key tile [j0, j0 + tk) of key/value head g, and each query tile [i0, i0 + tq) of a
//   query head h of g that sees it (tiles no query sees are skipped, as in the forward):
//     S   = Q[i0:, h] K[j0:, g]ᵀ / divisor, modified by the call's rule (cap, ALiBi, bias)
//     P   = exp(S - lse) on the keys each row sees, exactly 0 elsewhere
//     dP  = dO[i0:, h] V[j0:, g]ᵀ
//     dS  = P ∘ (dP - D)                               (times 1 - tanh²(s / cap) under a soft-cap)
//     pass A  dV[j0:, g] += Pᵀ dO[i0:, h],  dK[j0:, g] += dSᵀ Q[i0:, h] / divisor
//     pass B  dQ[i0:, h] += dS K[j0:, g] / divisor
// Pass A runs one job per (key/value head, key tile), summing over the query heads of the group
// and the query tiles in a fixed order; pass B one job per (query head, query tile), over the key
// tiles in order. Every gradient entry is written by one job, in one order: results are bitwise
// the same for any thread count (no atomics). P and dS are computed twice (once per pass): seven
// tile products where the backward needs five, the price of determinism without atomics.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/kernels/fused_attention.hpp"
#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// What fused_attention_backward returns: the gradients of q, k and v, shaped as they are.
template <class Scalar>
struct AttentionGradients {
  Matrix<Scalar> dq, dk, dv;
};

namespace detail {

/// One backward call: its inputs, sizes and rule.
template <class Scalar>
struct BackwardCall {
  const Eigen::Ref<const Matrix<Scalar>>& q;    // (n_q, n_heads d)
  const Eigen::Ref<const Matrix<Scalar>>& k;    // (n_k, n_kv_heads d)
  const Eigen::Ref<const Matrix<Scalar>>& v;    // (n_k, n_kv_heads d_v)
  const Eigen::Ref<const Matrix<Scalar>>& lse;  // (n_heads, n_q)
  const Eigen::Ref<const Matrix<Scalar>>& d_o;  // (n_q, n_heads d_v)
  const Matrix<Scalar>& delta;                  // (n_heads, n_q): D = rowsum(dO ∘ O)
  const ScoreRule<Scalar>& rule;
  std::optional<double> softcap;
  Index n_heads, group, d, d_v, tq, tk;
  Scalar inv_divisor;
};

/// P and dS of query tile [i0, i0 + rows) of head h against key tile [j0, j0 + cols) of its
/// key/value head g: p, ds (rows, cols). Returns false if no row sees a key of the tile.
template <class Scalar>
bool probabilities_and_ds(const BackwardCall<Scalar>& c, Index h, Index i0, Index rows, Index j0, Index cols,
                          Matrix<Scalar>& p, Matrix<Scalar>& ds) {
  bool seen = false;
  for (Index r = 0; r < rows && !seen; ++r) seen = c.rule.sees_any(i0 + r, j0, j0 + cols);
  if (!seen) return false;
  const Index g = h / c.group;
  p.resize(rows, cols), ds.resize(rows, cols);
  p.noalias() = (c.q.block(i0, h * c.d, rows, c.d) * c.inv_divisor) * c.k.block(j0, g * c.d, cols, c.d).transpose();
  Matrix<Scalar> raw;
  if (c.softcap) raw = p;  // the scores before the cap, for its derivative
  ds.noalias() = c.d_o.block(i0, h * c.d_v, rows, c.d_v) * c.v.block(j0, g * c.d_v, cols, c.d_v).transpose();  // dP
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  for (Index r = 0; r < rows; ++r) {  // row by row, vectorised over the keys the row sees
    const Index i = i0 + r;
    const KeyRange keys = c.rule.keys(i).within(j0, j0 + cols);
    const Scalar lse = c.lse(h, i);
    auto p_row = p.row(r);
    if (keys.empty() || lse == minus_inf) {
      p_row.setZero(), ds.row(r).setZero();
      continue;
    }
    const Index begin = keys.begin - j0, count = keys.size();
    c.rule.apply(h, i, j0, p_row.data(), begin, begin + count);
    p_row.head(begin).setZero();
    p_row.tail(cols - begin - count).setZero();
    auto visible = p_row.segment(begin, count).array();
    if (c.rule.hides_keys()) visible = (visible == minus_inf).select(Scalar(0), (visible - lse).exp());  // exact 0 if hidden
    else visible = (visible - lse).exp();
    ds.row(r) = p_row.cwiseProduct((ds.row(r).array() - c.delta(h, i)).matrix());  // dS = P ∘ (dP - D)
    if (c.softcap) {
      const Scalar inv_cap = static_cast<Scalar>(1.0 / *c.softcap);
      ds.row(r).segment(begin, count).array() *= Scalar(1) - (raw.row(r).segment(begin, count).array() * inv_cap).tanh().square();
    }
  }
  return true;
}

/// Pass A, one job: dK and dV of key tile [j0, j0 + cols) of key/value head g, over every query
/// head of the group and every query tile, in order.
template <class Scalar>
void key_tile_gradients(const BackwardCall<Scalar>& c, Index g, Index j0, AttentionGradients<Scalar>& out) {
  const Index cols = std::min(c.tk, c.k.rows() - j0);
  Matrix<Scalar> p, ds;
  auto dk = out.dk.block(j0, g * c.d, cols, c.d);
  auto dv = out.dv.block(j0, g * c.d_v, cols, c.d_v);
  dk.setZero(), dv.setZero();
  for (Index h = g * c.group; h < (g + 1) * c.group; ++h)
    for (Index i0 = 0; i0 < c.q.rows(); i0 += c.tq) {
      const Index rows = std::min(c.tq, c.q.rows() - i0);
      if (!probabilities_and_ds(c, h, i0, rows, j0, cols, p, ds)) continue;
      dv.noalias() += p.transpose() * c.d_o.block(i0, h * c.d_v, rows, c.d_v);
      dk.noalias() += (ds.transpose() * c.q.block(i0, h * c.d, rows, c.d)) * c.inv_divisor;
    }
}

/// Pass B, one job: dQ of query tile [i0, i0 + rows) of head h, over the key tiles in order.
template <class Scalar>
void query_tile_gradients(const BackwardCall<Scalar>& c, Index h, Index i0, AttentionGradients<Scalar>& out) {
  const Index rows = std::min(c.tq, c.q.rows() - i0), g = h / c.group;
  Matrix<Scalar> p, ds;
  auto dq = out.dq.block(i0, h * c.d, rows, c.d);
  dq.setZero();
  for (Index j0 = 0; j0 < c.k.rows(); j0 += c.tk) {
    const Index cols = std::min(c.tk, c.k.rows() - j0);
    if (!probabilities_and_ds(c, h, i0, rows, j0, cols, p, ds)) continue;
    dq.noalias() += (ds * c.k.block(j0, g * c.d, cols, c.d)) * c.inv_divisor;
  }
}

}  // namespace detail

/// The backward of fused_multi_head_attention (same shapes, heads side by side, queries aligned
/// to the end of the keys, the same options): from o (n_q, n_heads d_v) and logsumexp (n_heads,
/// n_q) of the forward and d_o = ∂L/∂o, the gradients of q, k, v. Grouped-query heads: dK and dV of
/// a key/value head sum its query heads'. Bitwise the same for any thread count.
template <class Scalar>
AttentionGradients<Scalar> fused_attention_backward(const Eigen::Ref<const Matrix<Scalar>>& q,
                                                    const Eigen::Ref<const Matrix<Scalar>>& k,
                                                    const Eigen::Ref<const Matrix<Scalar>>& v,
                                                    const Eigen::Ref<const Matrix<Scalar>>& o,
                                                    const Eigen::Ref<const Matrix<Scalar>>& logsumexp,
                                                    const Eigen::Ref<const Matrix<Scalar>>& d_o, Index n_heads,
                                                    Index n_kv_heads, const AttentionOptions& options = {},
                                                    const FusedTiles& tiles = {}) {
  constexpr const char* where = "fused_attention_backward";
  if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    detail::invalid(where, "n_heads = ", n_heads, " must be a positive multiple of n_kv_heads = ", n_kv_heads);
  if (q.cols() % n_heads != 0 || v.cols() % n_kv_heads != 0)
    detail::invalid(where, "q has ", q.cols(), " and v ", v.cols(), " columns, not whole heads");
  const Index d = q.cols() / n_heads, d_v = v.cols() / n_kv_heads;
  if (k.cols() != n_kv_heads * d || v.rows() != k.rows())
    detail::invalid(where, "k is ", k.rows(), "x", k.cols(), ", expected ", v.rows(), "x", n_kv_heads * d);
  if (o.rows() != q.rows() || o.cols() != n_heads * d_v || d_o.rows() != o.rows() || d_o.cols() != o.cols())
    detail::invalid(where, "o and d_o must be ", q.rows(), "x", n_heads * d_v, ", got ", o.rows(), "x", o.cols(), " and ",
                    d_o.rows(), "x", d_o.cols());
  if (logsumexp.rows() != n_heads || logsumexp.cols() != q.rows())
    detail::invalid(where, "logsumexp is ", logsumexp.rows(), "x", logsumexp.cols(), ", expected ", n_heads, "x", q.rows());
  if (tiles.queries <= 0 || tiles.keys <= 0) detail::invalid(where, "tile sizes must be > 0");
  [[maybe_unused]] const int threads = detail::thread_count(options.threads, where);  // unused without OpenMP
  // A NaN anywhere would reach every gradient through the sums over rows (0 x NaN is NaN), across
  // the causal mask: refused by name. A logsumexp is finite, or -inf for a row that saw nothing.
  const auto require_finite = [&](const char* name, const Eigen::Ref<const Matrix<Scalar>>& m) {
    if (!detail::all_finite(m, threads)) detail::require_finite(where, name, m);
  };
  require_finite("q", q), require_finite("k", k), require_finite("v", v), require_finite("o", o), require_finite("d_o", d_o);
  for (Index h = 0; h < n_heads; ++h)
    for (Index i = 0; i < q.rows(); ++i)
      if (std::isnan(logsumexp(h, i)) || logsumexp(h, i) == std::numeric_limits<Scalar>::infinity())
        detail::invalid(where, "logsumexp has ", logsumexp(h, i), " for head ", h, ", row ", i,
                        " (finite, or -inf for a row that saw no key)");
  Matrix<Scalar> delta(n_heads, q.rows());
  for (Index h = 0; h < n_heads; ++h)
    delta.row(h) = o.middleCols(h * d_v, d_v).cwiseProduct(d_o.middleCols(h * d_v, d_v)).rowwise().sum().transpose();
  const ScoreRule<Scalar> rule(options, q.rows(), k.rows(), n_heads, where);
  const detail::BackwardCall<Scalar> call{q, k, v, logsumexp, d_o, delta, rule, options.softcap, n_heads, n_heads / n_kv_heads,
                                          d, d_v, std::max<Index>(std::min(tiles.queries, q.rows()), 1),
                                          std::max<Index>(std::min(tiles.keys, k.rows()), 1),
                                          static_cast<Scalar>(1.0 / resolve_divisor<Scalar>(options, d, where))};
  AttentionGradients<Scalar> out{Matrix<Scalar>(q.rows(), q.cols()), Matrix<Scalar>(k.rows(), k.cols()),
                                 Matrix<Scalar>(v.rows(), v.cols())};
  const Index key_tiles = (k.rows() + call.tk - 1) / call.tk, query_tiles = (q.rows() + call.tq - 1) / call.tq;
  detail::ExceptionCarrier carrier;
  HEADWISE_OMP(omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1))
  for (Index job = 0; job < n_kv_heads * key_tiles; ++job)  // pass A: dK, dV
    carrier.run([&] { detail::key_tile_gradients(call, job % n_kv_heads, job / n_kv_heads * call.tk, out); });
  carrier.rethrow();
  HEADWISE_OMP(omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1))
  for (Index job = 0; job < n_heads * query_tiles; ++job)  // pass B: dQ
    carrier.run([&] { detail::query_tile_gradients(call, job % n_heads, (query_tiles - 1 - job / n_heads) * call.tq, out); });
  carrier.rethrow();
  return out;
}

}  // namespace headwise
