// The fused backward of attention, in the manner of FlashAttention-2: from Q, K, V, the output O,
// each row's saved logsumexp and dO = ∂L/∂O, the gradients dQ, dK, dV, recomputing P tile by tile
// and never holding an (n, n) matrix. Memory O(n d). The public way in is attend_backward()
// (attend_backward.hpp), the backward of attend(), taking the forward's call.
//
//   D_i  = rowsum(dO_i ∘ O_i)                          (= Σ_j P_ij dP_ij)
//   for each key tile [j0, j0 + tk) of key/value head g, and each query tile [i0, i0 + tq) of a
//   query head h of g that sees it (tiles no query sees are skipped, as in the forward):
//     Qs  = Q[i0:, h] / divisor                        (scaled once, as the forward scales it)
//     S   = Qs K[j0:, g]ᵀ, modified by the call's rule (cap, ALiBi, bias)
//     P   = exp(S - lse) on the keys each row sees, exactly 0 elsewhere
//     dP  = dO[i0:, h] V[j0:, g]ᵀ
//     dS  = P ∘ (dP - D)                               (times 1 - tanh²(s / cap) under a soft-cap)
//     pass A  dV[j0:, g] += Pᵀ dO[i0:, h],  dK[j0:, g] += dSᵀ Qs
//     pass B  dQ[i0:, h] += dS K[j0:, g]               (divided by the divisor once, at the end)
// Pass A runs one job per (key/value head, key tile), summing over the query heads of the group
// and the query tiles in a fixed order; pass B one job per (query head, query tile), over the key
// tiles in order. Every gradient entry is written by one job, in one order: results are bitwise
// the same for any thread count (no atomics). P and dS are computed twice (once per pass): seven
// tile products where the backward needs five, the price of determinism without atomics.
// The products are the forward's register-tile micro-kernel (detail/tile_product.hpp): S and dP
// sliver by sliver over the key panels the sliver's rows see (the part of a diagonal tile above
// the diagonal is not computed), with only the key tile's Kᵀ and Vᵀ packed (by register
// transposes); dV, dK and dQ with every operand read in place from the tiles (Pᵀ and dSᵀ as the
// transposes they are, add_product_in_place): nothing else is copied per tile pair. Whether the
// rule modifies scores is a branch per row, as in the forward; every buffer is per-thread scratch, allocated before the parallel loops (the
// padded edge buffers of add_product_in_place on first use, inside a job, where an allocation
// failure reaches the caller as any job's exception does).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/fused_jobs.hpp"
#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// What attend_backward returns: the gradients of q, k and v, shaped as they are.
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
  Index n_heads, group;  // query heads; query heads per key/value head
  Index d, d_v;          // widths of a query/key head and of a value head
  Index tq, tk;          // query and key tile sizes (tk a multiple of W)
  Scalar inv_divisor, inv_softcap;  // inv_softcap 0: no soft-cap

  Index n_q() const { return q.rows(); }
  Index n_k() const { return k.rows(); }
};

/// Per-thread scratch of the backward, allocated once per call before the parallel loops and
/// reused by every job of the thread (no allocation per tile pair, soft-capped or not).
template <class Scalar>
struct BackwardScratch {
  Matrix<Scalar> scaled;             // (tq, d): Qs = the query tile / divisor, row-major
  std::vector<Scalar> keys, values;  // the key tile's Kᵀ and Vᵀ packed in W-column panels (pack_b)
  // (tq, tk): P and dS, row r at r tk. Eigen's aligned storage, like every row's start (tk is a
  // multiple of the packet): Eigen's vectorised exp and tanh below then split each row between
  // packets and single entries at the same places on every thread, so the bits do not depend on
  // which thread's scratch a tile pair lands in.
  Matrix<Scalar> p, ds;
  RowVector<Scalar> raw;           // soft-cap only: one row of scores before the cap
  std::vector<KeyRange> spans;     // (tq / R): the keys of the key tile each sliver sees
  ProductScratch<Scalar> product;  // the tile products with a transposed or row-major operand

  void allocate(const BackwardCall<Scalar>& c) {
    constexpr const char* where = "attend_backward";
    constexpr Index R = TileShape<Scalar>::rows;
    const Index rows = (c.tq + R - 1) / R * R;
    checked_size<Scalar>(where, "a query tile", rows, c.d);
    scaled.resize(rows, c.d);
    detail::allocate(keys, checked_size<Scalar>(where, "a key tile", c.tk, c.d), Scalar(0), where, "a key tile");
    detail::allocate(values, checked_size<Scalar>(where, "a value tile", c.tk, c.d_v), Scalar(0), where, "a value tile");
    checked_size<Scalar>(where, "a tile of P", rows, c.tk);
    p.resize(rows, c.tk), ds.resize(rows, c.tk);
    if (c.inv_softcap != Scalar(0)) raw.resize(c.tk);
    spans.resize(static_cast<std::size_t>(rows / R + 1));
  }
};

/// One tile pair: query rows i0 .. i0 + rows - 1 of head h against keys j0 .. j0 + cols - 1.
struct TilePair {
  Index head;
  Index i0, rows;  // the query tile
  Index j0, cols;  // the key tile
};

/// Loads the query tile of head h (rows i0 .. i0 + rows - 1): Qs, scaled once as the forward
/// scales it. (The products read it, and the dO tile, in place.)
template <class Scalar>
void load_query_tile(const BackwardCall<Scalar>& c, BackwardScratch<Scalar>& w, Index h, Index i0, Index rows) {
  auto scaled = w.scaled.topRows(rows);
  scaled.noalias() = c.q.block(i0, h * c.d, rows, c.d) * c.inv_divisor;
}

/// The dO tile of head h from row i0: its first entry (rows at c.d_o.outerStride()).
template <class Scalar>
const Scalar* d_o_tile(const BackwardCall<Scalar>& c, Index h, Index i0) {
  return c.d_o.data() + i0 * c.d_o.outerStride() + h * c.d_v;
}

/// Packs key tile [j0, j0 + cols) of key/value head g: Kᵀ and Vᵀ in W-column panels.
template <class Scalar>
void load_key_tile(const BackwardCall<Scalar>& c, BackwardScratch<Scalar>& w, Index g, Index j0, Index cols) {
  pack_b<Scalar>(c.d, cols, {c.k.data() + j0 * c.k.outerStride() + g * c.d, c.k.outerStride(), true}, w.keys.data());
  pack_b<Scalar>(c.d_v, cols, {c.v.data() + j0 * c.v.outerStride() + g * c.d_v, c.v.outerStride(), true}, w.values.data());
}

/// What each sliver of the pair's query rows sees of its key tile (w.spans); false if no row sees
/// any key of it (the tile pair is skipped, as in the forward). Interior tiles (every row sees
/// them whole) need no row's range.
template <class Scalar>
bool tile_spans(const BackwardCall<Scalar>& c, BackwardScratch<Scalar>& w, const TilePair& t) {
  constexpr Index R = TileShape<Scalar>::rows;
  const Index i0 = t.i0, rows = t.rows, j0 = t.j0, cols = t.cols;
  if (c.rule.hides_keys() && !tile_seen(c.rule, i0, rows, j0, cols)) return false;
  const bool whole = c.rule.sees_whole(i0, rows, j0, j0 + cols);
  bool seen = false;
  for (Index r0 = 0; r0 < rows; r0 += R) {
    const KeyRange span = whole ? KeyRange{0, cols} : sliver_keys(c.rule, i0 + r0, std::min(R, rows - r0), j0, cols);
    w.spans[static_cast<std::size_t>(r0 / R)] = span;
    seen = seen || !span.empty();
  }
  return seen;
}

/// S = Qs Kᵀ and dP = dO Vᵀ for the tile pair, sliver by sliver, each over the key panels its rows
/// see, with the forward's register-tile micro-kernel: Qs and dO read in place, the key tile's
/// panels packed (the tiles are loaded, the spans set).
template <class Scalar>
void score_and_dp_products(const BackwardCall<Scalar>& c, BackwardScratch<Scalar>& w, const TilePair& t) {
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const Index rows = t.rows, cols = t.cols;
  const Scalar* d_o = d_o_tile(c, t.head, t.i0);
  const Index ld_o = c.d_o.outerStride();
  for (Index c0 = 0; c0 < cols; c0 += W)
    for (Index r0 = 0; r0 < rows; r0 += R) {
      const Index nr = std::min(R, rows - r0);
      const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
      if (c0 >= span.end || c0 + W <= span.begin) continue;  // no row of the sliver sees this panel
      micro_kernel_rows<Scalar, ALayout::rows, /*Accumulate=*/false>(nr, c.d, w.scaled.data() + r0 * c.d, c.d,
                                                                    w.keys.data() + c0 / W * c.d * W, W,
                                                                    w.p.data() + r0 * c.tk + c0, c.tk);
      micro_kernel_rows<Scalar, ALayout::rows, /*Accumulate=*/false>(nr, c.d_v, d_o + r0 * ld_o, ld_o,
                                                                    w.values.data() + c0 / W * c.d_v * W, W,
                                                                    w.ds.data() + r0 * c.tk + c0, c.tk);
    }
}

/// P and dS of the tile pair from the products: the rule modifies the scores (if it modifies any), P = exp(S - lse)
/// on the keys each row sees (exact 0 elsewhere, as far as the tile's columns), dS = P ∘ (dP - D),
/// times 1 - tanh²(s / cap) under a soft-cap (s the score before the cap, kept in w.raw).
template <class Scalar>
void probabilities_and_ds(const BackwardCall<Scalar>& c, BackwardScratch<Scalar>& w, const TilePair& t) {
  const Index h = t.head, i0 = t.i0, rows = t.rows, j0 = t.j0, cols = t.cols;
  using Row = Eigen::Map<Eigen::Array<Scalar, 1, Eigen::Dynamic>>;
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  for (Index r = 0; r < rows; ++r) {  // row by row, vectorised over the keys the row sees
    const Index i = i0 + r;
    const KeyRange keys = keys_in_tile(c.rule, i, j0, cols);
    const Scalar lse = c.lse(h, i);
    Scalar *p = w.p.data() + r * c.tk, *ds = w.ds.data() + r * c.tk;
    if (keys.empty() || lse == minus_inf) {
      std::fill(p, p + cols, Scalar(0)), std::fill(ds, ds + cols, Scalar(0));
      continue;
    }
    const Index n = keys.size();
    if (c.inv_softcap != Scalar(0)) std::copy(p + keys.begin, p + keys.end, w.raw.data());
    const bool modifies = c.rule.modifies_scores();  // and then may hide a key: -inf, an exact 0
    if (modifies) c.rule.apply(h, i, j0, p, keys.begin, keys.end);
    std::fill(p, p + keys.begin, Scalar(0)), std::fill(p + keys.end, p + cols, Scalar(0));
    std::fill(ds, ds + keys.begin, Scalar(0)), std::fill(ds + keys.end, ds + cols, Scalar(0));
    Row visible(p + keys.begin, n), d_s(ds + keys.begin, n);
    if (modifies) visible = (visible == minus_inf).select(Scalar(0), (visible - lse).exp());
    else visible = (visible - lse).exp();
    d_s = visible * (d_s - c.delta(h, i));  // dS = P ∘ (dP - D)
    if (c.inv_softcap != Scalar(0))
      d_s *= Scalar(1) - (Row(w.raw.data(), n) * c.inv_softcap).tanh().square();
  }
}

/// Pass A, one job: dK and dV of key tile [j0, j0 + cols) of key/value head g, over every query
/// head of the group and every query tile that sees it, in order:
/// dV += Pᵀ dO, dK += dSᵀ Qs (= dSᵀ Q / divisor).
template <class Scalar>
void key_tile_gradients(const BackwardCall<Scalar>& c, BackwardScratch<Scalar>& w, Index g, Index j0,
                        AttentionGradients<Scalar>& out) {
  const Index cols = std::min(c.tk, c.n_k() - j0);
  const Index ldk = out.dk.cols(), ldv = out.dv.cols();
  Scalar* dk = out.dk.data() + j0 * ldk + g * c.d;
  Scalar* dv = out.dv.data() + j0 * ldv + g * c.d_v;
  out.dk.block(j0, g * c.d, cols, c.d).setZero(), out.dv.block(j0, g * c.d_v, cols, c.d_v).setZero();
  load_key_tile(c, w, g, j0, cols);
  for (Index h = g * c.group; h < (g + 1) * c.group; ++h)
    for (Index i0 = 0; i0 < c.n_q(); i0 += c.tq) {
      const TilePair t{h, i0, std::min(c.tq, c.n_q() - i0), j0, cols};
      if (!tile_spans(c, w, t)) continue;
      load_query_tile(c, w, h, i0, t.rows);
      score_and_dp_products(c, w, t), probabilities_and_ds(c, w, t);
      const Index rows = t.rows;
      // Pᵀ and dSᵀ read in place from their tiles (a[k tk + r]); dO and Qs are the rows of B.
      add_product_in_place<Scalar, ALayout::columns>(cols, c.d_v, rows, w.p.data(), c.tk, d_o_tile(c, h, i0),
                                                     c.d_o.outerStride(), dv, ldv, w.product);
      add_product_in_place<Scalar, ALayout::columns>(cols, c.d, rows, w.ds.data(), c.tk, w.scaled.data(), c.d, dk, ldk,
                                                     w.product);
    }
}

/// Pass B, one job: dQ of query tile [i0, i0 + rows) of head h, over the key tiles that it sees,
/// in order: dQ += dS K, divided by the divisor at the end.
template <class Scalar>
void query_tile_gradients(const BackwardCall<Scalar>& c, BackwardScratch<Scalar>& w, Index h, Index i0,
                          AttentionGradients<Scalar>& out) {
  const Index rows = std::min(c.tq, c.n_q() - i0), g = h / c.group, ldq = out.dq.cols();
  auto dq_block = out.dq.block(i0, h * c.d, rows, c.d);
  dq_block.setZero();
  load_query_tile(c, w, h, i0, rows);
  for (Index j0 = 0; j0 < c.n_k(); j0 += c.tk) {
    const TilePair t{h, i0, rows, j0, std::min(c.tk, c.n_k() - j0)};
    if (!tile_spans(c, w, t)) continue;
    load_key_tile(c, w, g, j0, t.cols);
    score_and_dp_products(c, w, t), probabilities_and_ds(c, w, t);
    add_product_in_place<Scalar, ALayout::rows>(rows, c.d, t.cols, w.ds.data(), c.tk,
                                                c.k.data() + j0 * c.k.outerStride() + g * c.d, c.k.outerStride(),
                                                out.dq.data() + i0 * ldq + h * c.d, ldq, w.product);
  }
  dq_block *= c.inv_divisor;
}

/// Both passes on `threads` threads, each thread with its own scratch. Pass A: one job per
/// (key/value head, key tile); pass B: one per (query head, query tile), later tiles (more keys
/// under a causal mask) first.
template <class Scalar>
void run_backward_jobs(const BackwardCall<Scalar>& c, int threads, AttentionGradients<Scalar>& out) {
  const Index n_kv_heads = c.n_heads / c.group;
  const Index key_tiles = (c.n_k() + c.tk - 1) / c.tk, query_tiles = (c.n_q() + c.tq - 1) / c.tq;
  threads = static_cast<int>(std::clamp<Index>(std::max(n_kv_heads * key_tiles, c.n_heads * query_tiles), 1, threads));
  std::vector<BackwardScratch<Scalar>> scratch(static_cast<std::size_t>(threads));
  for (auto& w : scratch) w.allocate(c);
  // One list of jobs, pass A's then pass B's, each thread taking the next: the passes write
  // different gradients, so a thread done with pass A goes on to pass B without waiting.
  const Index a_jobs = n_kv_heads * key_tiles;
  parallel_for<Schedule::next_free>(threads, a_jobs + c.n_heads * query_tiles, [&](Index job) {
    BackwardScratch<Scalar>& own = scratch[static_cast<std::size_t>(this_thread())];
    if (job < a_jobs) return key_tile_gradients(c, own, job % n_kv_heads, job / n_kv_heads * c.tk, out);  // pass A: dK, dV
    job -= a_jobs;  // pass B: dQ
    query_tile_gradients(c, own, job % c.n_heads, (query_tiles - 1 - job / c.n_heads) * c.tq, out);
  });
}

}  // namespace detail

}  // namespace headwise
