// The fused causal attention kernel: the same function as attention_core.hpp, computed tile by
// tile with an online softmax, so that no (n, n) matrix is ever held and key tiles entirely above
// the diagonal are never touched. Multi-threaded with OpenMP over (head, query tile) pairs.
//
// For each head h and tile of queries [i0, i0 + tq):
//   pass 1  scale the query tile once: Qs = Q[i0:, h] / divisor
//   pass 2  for each key tile [j0, j0 + tk) that a query of the tile can see (j0 <= the tile's last
//           visible key; tiles past it are skipped):
//             S   = Qs K[j0:, h]ᵀ                              (a tile product)
//             m'  = max(m, max_j S_ij) over the visible j     (running row maximum)
//             P   = exp(S - m') on the visible j, exactly 0 elsewhere (the mask lives in the loop)
//             l   = l e^(m - m') + Σ_j P_ij                    (running row sum)
//             acc = acc e^(m - m') + P V[j0:, h]
//   pass 3  Z = acc / l, logsumexp = m + log l; a row that saw nothing gives Z = 0, lse = -inf.
// Every number a query row gets is computed by the same instructions in the same order whatever
// the other rows of its tile, the tile sizes of queries, the number of keys past the row's last
// visible one and the thread count: the products are the deterministic ones of
// detail/tile_product.hpp, exp and the row sums run over whole SIMD packets of a zero-padded row,
// and key tiles start at multiples of the key tile size. So results are bitwise the same for any
// thread count, and decoding token by token (a KV cache) reproduces the full forward bitwise.
// Memory: the packed keys and values (the size of K and V) and, per thread, a few tq x tk tiles.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "headwise/attention_core.hpp"
#include "headwise/causal_mask.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/packed_keys_values.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/options.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Tile sizes of the fused kernel (rows of queries and of keys per tile; the key tile is rounded
/// up to a multiple of the micro-tile width). 128 x 128 measured best at d_head 64 on AMD EPYC
/// (Zen 3), float32, n = 2048: 37 GFLOP/s against 33 for 64 x 64 and 26 for 32 x 32 (measured with
/// Eigen tile products, bench/RESULTS.md); larger tiles amortise the per-tile work (packing the
/// query and probability tiles, the online-softmax bookkeeping).
struct FusedTiles {
  Index queries = 128;
  Index keys = 128;
};

namespace detail {

/// Query tiles of n_q rows, ordered so that the tiles that see the most keys come first
/// (longest job first balances the causal triangle across threads).
inline std::vector<Index> query_tiles_by_cost(Index n_q, Index tile, bool causal) {
  std::vector<Index> starts;
  for (Index i0 = 0; i0 < n_q; i0 += tile) starts.push_back(i0);
  if (causal) std::reverse(starts.begin(), starts.end());
  return starts;
}

/// One call of the kernel: what every (head, query tile) job reads and writes.
template <class Scalar>
struct FusedCall {
  const Eigen::Ref<const Matrix<Scalar>>& q;  // (n_q, n_heads d_head)
  const PackedKeysValues<Scalar>& kv;         // n_k keys and values of n_kv_heads heads
  Eigen::Ref<Matrix<Scalar>>& z;              // (n_q, n_heads d_v)
  Matrix<Scalar>* logsumexp;                  // (n_heads, n_q), or null
  RowStatistics<Scalar>* statistics;          // (n_heads, n_q) each, or null
  Index n_heads, group;                       // query heads; query heads per key/value head
  Index tq, tk;                               // query and key tile sizes (tk a multiple of W)
  bool causal;
  Scalar inv_divisor;

  Index n_q() const { return q.rows(); }
  Index n_k() const { return kv.size(); }
  Index dv_padded() const { return (kv.d_v() + TileShape<Scalar>::lanes - 1) / TileShape<Scalar>::lanes * TileShape<Scalar>::lanes; }
  /// Keys 0 .. visible(i) - 1 are what query row i sees.
  Index visible(Index i) const { return visible_keys(i, n_q(), n_k(), causal); }
};

/// Per-thread scratch of the kernel, allocated once per call (before the parallel loop, sized by
/// the tiles there are, not by the tile sizes asked for) and reused across the thread's jobs.
template <class Scalar>
struct FusedScratch {
  Matrix<Scalar> scaled;          // (tq, d_head): the query tile divided by the divisor
  std::vector<Scalar> q;          // the scaled query tile, packed (detail::pack_a)
  std::vector<Scalar> s;          // (tq, tk): scores, then exp(scores - max), rows padded to W
  std::vector<Scalar> p;          // the probabilities, packed for the product with V
  std::vector<Scalar> acc;        // (tq, d_v padded): running Σ P V
  std::vector<Scalar> max, sum;   // (tq): running row maximum and row sum
  // Only when statistics are asked for:
  std::vector<Scalar> raw;        // one row of scaled scores, kept before exp overwrites it
  std::vector<Scalar> dot;        // (tq): running Σ_j exp(s_ij - max) (s_ij - max), rescaled like sum
  std::vector<Scalar> first, previous, best;  // (tq): s_i0, s_i,pos-1, the largest s_ij so far
  std::vector<Index> best_at;     // (tq): where the largest s_ij lies

  /// Allocates for tiles of up to `rows` query rows (a multiple of R) and tk keys; throws
  /// std::invalid_argument naming the sizes if they do not fit or cannot be allocated.
  void allocate(const FusedCall<Scalar>& call, Index rows) {
    constexpr const char* where = "fused_multi_head_attention";
    const Index d_head = call.kv.d_head();
    const Index tile = checked_size<Scalar>(where, "a score tile", rows, call.tk);
    detail::allocate(q, checked_size<Scalar>(where, "a query tile", rows, d_head), Scalar(0), where, "a query tile");
    detail::allocate(s, tile, Scalar(0), where, "a score tile");
    detail::allocate(p, tile, Scalar(0), where, "a probability tile");
    detail::allocate(acc, checked_size<Scalar>(where, "an output tile", rows, call.dv_padded()), Scalar(0), where,
                     "an output tile");
    detail::allocate(max, rows, Scalar(0), where, "row maxima");
    detail::allocate(sum, rows, Scalar(0), where, "row sums");
    scaled.resize(rows, d_head);
    if (!call.statistics) return;
    for (std::vector<Scalar>* v : {&raw, &dot, &first, &previous, &best})
      detail::allocate(*v, std::max(rows, call.tk), Scalar(0), where, "row statistics");
    detail::allocate(best_at, rows, Index(-1), where, "row statistics");
  }
};

/// row[0, padded) <- exp(row - max) over whole packets, so that every entry goes through the same
/// vectorised exp whatever its position (Eigen's .exp() sends a ragged tail to std::exp).
template <class Scalar>
inline void exp_shifted(Scalar* row, Index padded, Scalar max) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet;
  const Packet m = pset1<Packet>(max);
  for (Index j = 0; j < padded; j += P) pstoreu(row + j, pexp(psub(ploadu<Packet>(row + j), m)));
}

/// Σ row[0, padded), packet lanes first then one fixed reduction tree: the same order for any
/// padded length (entries past the visible ones are exact zeros and change nothing).
template <class Scalar>
inline Scalar packet_sum(const Scalar* row, Index padded) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet;
  Packet total = pset1<Packet>(Scalar(0));
  for (Index j = 0; j < padded; j += P) total = padd(total, ploadu<Packet>(row + j));
  return predux(total);
}

/// The online softmax of one key tile [j0, j0 + cols) for the query rows i0 .. i0 + rows - 1 of
/// head h: each row of w.s (scores, `padded` wide) becomes exp(s - m') on its visible keys and
/// exact zeros elsewhere; the running maximum, sum, accumulator (and statistics) are rescaled.
template <class Scalar>
void online_softmax_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, Index i0, Index rows, Index j0,
                         Index cols, Index padded) {
  const Index dv = call.kv.d_v(), dv_padded = call.dv_padded();
  for (Index r = 0; r < rows; ++r) {
    // Keys of this tile that query i0 + r sees: a prefix of the tile (all of it below the diagonal).
    const Index visible = std::clamp<Index>(call.visible(i0 + r) - j0, 0, cols);
    Scalar* row = w.s.data() + r * padded;
    if (visible == 0) {
      std::fill(row, row + padded, Scalar(0));
      continue;
    }
    const Scalar* tile_max = std::max_element(row, row + visible);
    const Scalar new_max = std::max(w.max[r], *tile_max);
    const Scalar correction = std::exp(w.max[r] - new_max);  // exp(-inf) = 0 on the first tile
    if (call.statistics) {  // read the scores before exp overwrites them
      const Index previous = call.n_k() - call.n_q() + i0 + r - 1 - j0;  // the key before the query, in this tile
      if (j0 == 0) w.first[r] = row[0];
      if (previous >= 0 && previous < visible) w.previous[r] = row[previous];
      if (*tile_max > w.best[r]) w.best[r] = *tile_max, w.best_at[r] = j0 + (tile_max - row);
      std::copy(row, row + visible, w.raw.begin());
    }
    exp_shifted(row, padded, new_max);
    std::fill(row + visible, row + padded, Scalar(0));  // the mask: exact zeros, never exp(-inf)
    if (call.statistics) {
      // dot = Σ_j exp(s_j - max) (s_j - max), shifted by the running max like the sum, so
      // that the entropy log(sum) - dot / sum does not cancel when it is near 0.
      Scalar dot = 0;
      for (Index j = 0; j < visible; ++j) dot += row[j] * (w.raw[static_cast<std::size_t>(j)] - new_max);
      const Scalar carried = w.sum[r] > Scalar(0) ? correction * (w.dot[r] + (w.max[r] - new_max) * w.sum[r]) : Scalar(0);
      w.dot[r] = carried + dot;
    }
    w.sum[r] = w.sum[r] * correction + packet_sum(row, padded);
    if (correction != Scalar(1))
      for (Index c = 0; c < dv; ++c) w.acc[r * dv_padded + c] *= correction;
    w.max[r] = new_max;
  }
}

/// Z = acc / sum, logsumexp = max + log(sum) and the statistics of the rows i0 .. i0 + rows - 1 of
/// head h. A row that sees no key gets Z = 0 and logsumexp -inf. Which rows see nothing is decided
/// by the mask, not by the sum: a row whose scores overflowed (inf or NaN) gets NaN, as on the
/// step-by-step path, never a silent 0.
template <class Scalar>
void normalise_rows(const FusedCall<Scalar>& call, const FusedScratch<Scalar>& w, Index i0, Index rows, Index h) {
  const Index dv = call.kv.d_v(), dv_padded = call.dv_padded();
  for (Index r = 0; r < rows; ++r) {
    const bool saw_something = call.visible(i0 + r) > 0;
    for (Index c = 0; c < dv; ++c)
      call.z(i0 + r, h * dv + c) = saw_something ? w.acc[r * dv_padded + c] / w.sum[r] : Scalar(0);
    const Scalar lse = saw_something ? w.max[r] + std::log(w.sum[r]) : -std::numeric_limits<Scalar>::infinity();
    if (call.logsumexp) (*call.logsumexp)(h, i0 + r) = lse;
    if (!call.statistics) continue;
    // p = exp(s - lse); exp(-inf - lse) = 0 covers a key the row never saw.
    auto& st = *call.statistics;
    // H = lse - Σ p s = log(sum) - Σ p (s - max), the same identity with the max taken out.
    st.entropy(h, i0 + r) = saw_something ? std::log(w.sum[r]) - w.dot[r] / w.sum[r] : Scalar(0);
    st.first_token_mass(h, i0 + r) = saw_something ? std::exp(w.first[r] - lse) : Scalar(0);
    st.previous_token_mass(h, i0 + r) = saw_something ? std::exp(w.previous[r] - lse) : Scalar(0);
    st.max_weight(h, i0 + r) = saw_something ? std::exp(w.best[r] - lse) : Scalar(0);
    st.argmax(h, i0 + r) = w.best_at[r];
  }
}

/// One job: head h on the query tile starting at i0 (passes 1 to 3 at the top of this file).
template <class Scalar>
void attend_query_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, Index i0, Index h) {
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  const Index d_head = call.kv.d_head(), g = h / call.group;
  const Index rows = std::min(call.tq, call.n_q() - i0);
  std::fill(w.acc.begin(), w.acc.begin() + (rows + R - 1) / R * R * call.dv_padded(), Scalar(0));
  std::fill(w.max.begin(), w.max.begin() + rows, minus_inf);
  std::fill(w.sum.begin(), w.sum.begin() + rows, Scalar(0));
  if (call.statistics) {
    std::fill(w.dot.begin(), w.dot.begin() + rows, Scalar(0));
    for (std::vector<Scalar>* v : {&w.first, &w.previous, &w.best}) std::fill(v->begin(), v->begin() + rows, minus_inf);
    std::fill(w.best_at.begin(), w.best_at.begin() + rows, Index(-1));
  }

  // pass 1: the query tile, scaled once and packed for the score product.
  auto scaled = w.scaled.topRows(rows);
  scaled.noalias() = call.q.block(i0, h * d_head, rows, d_head) * call.inv_divisor;
  pack_a<Scalar>(rows, d_head, {w.scaled.data(), d_head}, w.q.data());

  // pass 2: key tiles up to the last key the tile's last query sees; later tiles are never touched.
  const Index keys_seen = call.visible(i0 + rows - 1);
  for (Index j0 = 0; j0 < keys_seen; j0 += call.tk) {
    const Index cols = std::min(call.tk, keys_seen - j0);
    const Index padded = (cols + W - 1) / W * W;
    // S = Qs K[j0 : j0 + cols]ᵀ, from the packed key panels.
    std::fill(w.s.begin(), w.s.begin() + rows * padded, Scalar(0));
    multiply_packed<Scalar>(rows, padded, d_head, w.q.data(), call.kv.keys(g) + (j0 / W) * call.kv.key_panel_stride(),
                            call.kv.key_panel_stride(), w.s.data(), padded);
    online_softmax_tile(call, w, i0, rows, j0, cols, padded);
    // acc += P V[j0 : j0 + cols]: P packed over its cols keys, V's panels from row j0.
    pack_a<Scalar>(rows, cols, {w.s.data(), padded}, w.p.data());
    multiply_packed<Scalar>(rows, call.dv_padded(), cols, w.p.data(), call.kv.values(g) + j0 * W,
                            call.kv.value_panel_stride(), w.acc.data(), call.dv_padded());
  }

  // pass 3: normalise.
  normalise_rows(call, w, i0, rows, h);
}

/// Throws unless the arguments of fused_attention_packed fit together.
template <class Scalar>
void check_packed_call(const Eigen::Ref<const Matrix<Scalar>>& q, Index n_heads, const PackedKeysValues<Scalar>& kv,
                       const Eigen::Ref<Matrix<Scalar>>& z, const FusedTiles& tiles) {
  constexpr const char* where = "fused_multi_head_attention";
  if (n_heads <= 0) invalid(where, "n_heads and n_kv_heads must be > 0, got ", n_heads, " and ", kv.n_kv_heads());
  if (n_heads % kv.n_kv_heads() != 0)
    invalid(where, "n_heads = ", n_heads, " is not divisible by n_kv_heads = ", kv.n_kv_heads());
  if (q.cols() != n_heads * kv.d_head())
    invalid(where, "q has ", q.cols(), " columns, expected n_heads d_head = ", n_heads * kv.d_head());
  if (z.rows() != q.rows() || z.cols() != n_heads * kv.d_v())
    invalid(where, "z is ", z.rows(), "x", z.cols(), ", expected ", q.rows(), "x", n_heads * kv.d_v());
  if (tiles.queries <= 0 || tiles.keys <= 0)
    invalid(where, "tile sizes must be > 0, got ", tiles.queries, " and ", tiles.keys);
  require_finite(where, "q", q);
}

}  // namespace detail

/// Fused causal multi-head attention against keys and values already packed (a KV cache, or
/// the packing done by fused_multi_head_attention). q: (n_q, n_heads d_head); kv holds n_k =
/// kv.size() keys of n_kv_heads heads; head h reads key/value head h / (n_heads / n_kv_heads).
/// Writes z: (n_q, n_heads d_v) and, if given, logsumexp: (n_heads, n_q) (resized) and the
/// per-row statistics of every head's pattern (row_statistics.hpp), computed on the fly.
/// Queries are aligned to the end of the keys: query i sits at position n_k - n_q + i.
/// q must be finite (kv holds finite keys and values only); scores that overflow make their own
/// row NaN, and no other.
template <class Scalar>
void fused_attention_packed(const Eigen::Ref<const Matrix<Scalar>>& q, Index n_heads,
                            const PackedKeysValues<Scalar>& kv, Eigen::Ref<Matrix<Scalar>> z,
                            Matrix<Scalar>* logsumexp = nullptr, const AttentionOptions& options = {},
                            const FusedTiles& tiles = {}, RowStatistics<Scalar>* statistics = nullptr) {
  constexpr const char* where = "fused_multi_head_attention";
  constexpr Index R = detail::TileShape<Scalar>::rows, W = detail::TileShape<Scalar>::lanes;
  detail::check_packed_call<Scalar>(q, n_heads, kv, z, tiles);
  const double divisor = resolve_divisor(options, kv.d_head(), where);
  const Index n_q = q.rows(), n_k = kv.size();
  // Tiles larger than the input behave as tiles of the input's size (one tile covers everything
  // either way, so no sum changes order): scratch is sized by what is there. Key tiles start at
  // multiples of tk, itself a multiple of W: a key's place in its panel, and so the order of every
  // sum, is the same whatever n_k is.
  const Index tq = std::min(tiles.queries, std::max<Index>(n_q, 1));
  const Index tk = (std::min(tiles.keys, std::max<Index>(n_k, 1)) + W - 1) / W * W;
  const detail::FusedCall<Scalar> call{q,    kv, z,  logsumexp, statistics, n_heads, n_heads / kv.n_kv_heads(),
                                       tq,   tk, options.causal, static_cast<Scalar>(1.0 / divisor)};
  if (logsumexp) logsumexp->resize(n_heads, n_q);
  if (statistics) statistics->resize(n_heads, n_q);

  const std::vector<Index> tile_starts = detail::query_tiles_by_cost(n_q, tq, options.causal);
  const Index n_jobs = static_cast<Index>(tile_starts.size()) * n_heads;
  const int threads = static_cast<int>(std::min<Index>(detail::thread_count(options), std::max<Index>(n_jobs, 1)));
  std::vector<detail::FusedScratch<Scalar>> scratch(static_cast<std::size_t>(threads));
  for (auto& w : scratch) w.allocate(call, (tq + R - 1) / R * R);

  // Job j: tile j / n_heads (most expensive first), head j % n_heads.
  detail::ExceptionCarrier carrier;
HEADWISE_OMP(omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1))
  for (Index job = 0; job < n_jobs; ++job)
    carrier.run([&] {
      detail::attend_query_tile(call, scratch[static_cast<std::size_t>(detail::this_thread())],
                                tile_starts[static_cast<std::size_t>(job / n_heads)], job % n_heads);
    });
  carrier.rethrow();
}

/// Fused causal multi-head attention on heads laid side by side.
/// q: (n_q, n_heads d_head); k: (n_k, n_kv_heads d_head); v: (n_k, n_kv_heads d_v);
/// head h reads columns [h d_head, (h+1) d_head) of q and key/value head h / (n_heads / n_kv_heads).
/// Writes z: (n_q, n_heads d_v) and, if given, logsumexp: (n_heads, n_q) (resized).
/// Queries are aligned to the end of the keys (see causal_mask.hpp).
template <class Scalar>
void fused_multi_head_attention(const Eigen::Ref<const Matrix<Scalar>>& q,
                                const Eigen::Ref<const Matrix<Scalar>>& k,
                                const Eigen::Ref<const Matrix<Scalar>>& v, Index n_heads, Index n_kv_heads,
                                Eigen::Ref<Matrix<Scalar>> z, Matrix<Scalar>* logsumexp = nullptr,
                                const AttentionOptions& options = {}, const FusedTiles& tiles = {}) {
  constexpr const char* where = "fused_multi_head_attention";
  if (n_heads <= 0 || n_kv_heads <= 0)
    detail::invalid(where, "n_heads and n_kv_heads must be > 0, got ", n_heads, " and ", n_kv_heads);
  if (n_heads % n_kv_heads != 0)
    detail::invalid(where, "n_heads = ", n_heads, " is not divisible by n_kv_heads = ", n_kv_heads);
  if (q.cols() % n_heads != 0 || q.cols() == 0)
    detail::invalid(where, "q has ", q.cols(), " columns, not divisible by n_heads = ", n_heads);
  const Index d_head = q.cols() / n_heads;
  if (k.cols() != n_kv_heads * d_head)
    detail::invalid(where, "k has ", k.cols(), " columns, expected n_kv_heads d_head = ", n_kv_heads * d_head);
  if (v.rows() != k.rows())
    detail::invalid(where, "v has ", v.rows(), " rows but k has ", k.rows(), " (one per key)");
  if (v.cols() % n_kv_heads != 0 || v.cols() == 0)
    detail::invalid(where, "v has ", v.cols(), " columns, not divisible by n_kv_heads = ", n_kv_heads);
  PackedKeysValues<Scalar> kv(k.rows(), n_kv_heads, d_head, v.cols() / n_kv_heads);
  kv.append(k, v);
  fused_attention_packed<Scalar>(q, n_heads, kv, z, logsumexp, options, tiles);
}

/// The fused kernel on one head, with the interface of attention() in attention_core.hpp.
/// q: (n_q, d_head), k: (n_k, d_head), v: (n_k, d_v) -> z (n_q, d_v), logsumexp (n_q).
template <class DerivedQ, class DerivedK, class DerivedV>
CoreOutput<typename DerivedQ::Scalar> fused_attention(const Eigen::MatrixBase<DerivedQ>& q,
                                                      const Eigen::MatrixBase<DerivedK>& k,
                                                      const Eigen::MatrixBase<DerivedV>& v,
                                                      const AttentionOptions& options = {},
                                                      const FusedTiles& tiles = {}) {
  using Scalar = typename DerivedQ::Scalar;
  detail::check_core_shapes("fused_attention", q, k, v);
  CoreOutput<Scalar> out;
  out.z.resize(q.rows(), v.cols());
  Matrix<Scalar> logsumexp;
  fused_multi_head_attention<Scalar>(q, k, v, /*n_heads=*/1, /*n_kv_heads=*/1, out.z, &logsumexp, options, tiles);
  out.logsumexp = logsumexp.row(0).transpose();
  return out;
}

}  // namespace headwise
