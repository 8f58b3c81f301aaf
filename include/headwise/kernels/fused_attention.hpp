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
// Each (head, query tile) is computed by one thread in a fixed order, so results are bitwise the
// same whatever the number of threads. Memory: per thread tq x (d_head + tk + d_v) scalars.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "headwise/attention_core.hpp"
#include "headwise/causal_mask.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/options.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Tile sizes of the fused kernel (rows of queries and of keys per tile).
struct FusedTiles {
  Index queries = 64;
  Index keys = 64;
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

inline int thread_count(const AttentionOptions& options) {
#ifdef _OPENMP
  return options.threads > 0 ? options.threads : omp_get_max_threads();
#else
  (void)options;
  return 1;
#endif
}

inline int this_thread() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/// Per-thread scratch of the kernel, allocated once per call.
template <class Scalar>
struct FusedScratch {
  Matrix<Scalar> q;         // (tq, d_head): the scaled query tile
  Matrix<Scalar> s;         // (tq, tk): one tile of scores, then of exp(scores - max)
  Matrix<Scalar> acc;       // (tq, d_v): running Σ P V
  Vector<Scalar> max, sum;  // (tq): running row maximum and row sum
};

}  // namespace detail

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
  if (q.cols() % n_heads != 0)
    detail::invalid(where, "q has ", q.cols(), " columns, not divisible by n_heads = ", n_heads);
  const Index d_head = q.cols() / n_heads;
  if (k.cols() != n_kv_heads * d_head)
    detail::invalid(where, "k has ", k.cols(), " columns, expected n_kv_heads d_head = ", n_kv_heads * d_head);
  if (v.rows() != k.rows())
    detail::invalid(where, "v has ", v.rows(), " rows but k has ", k.rows(), " (one per key)");
  if (v.cols() % n_kv_heads != 0)
    detail::invalid(where, "v has ", v.cols(), " columns, not divisible by n_kv_heads = ", n_kv_heads);
  const Index d_v = v.cols() / n_kv_heads;
  if (z.rows() != q.rows() || z.cols() != n_heads * d_v)
    detail::invalid(where, "z is ", z.rows(), "x", z.cols(), ", expected ", q.rows(), "x", n_heads * d_v);
  if (tiles.queries <= 0 || tiles.keys <= 0)
    detail::invalid(where, "tile sizes must be > 0, got ", tiles.queries, " and ", tiles.keys);
  const double divisor = resolve_divisor(options, d_head, where);

  const Index n_q = q.rows(), n_k = k.rows(), group = n_heads / n_kv_heads;
  const Index tq = tiles.queries, tk = tiles.keys;
  const bool causal = options.causal;
  if (logsumexp) logsumexp->resize(n_heads, n_q);

  const std::vector<Index> tile_starts = detail::query_tiles_by_cost(n_q, tq, causal);
  const Index n_tiles = static_cast<Index>(tile_starts.size());
  const Index n_jobs = n_tiles * n_heads;
  const int threads = static_cast<int>(std::min<Index>(detail::thread_count(options), std::max<Index>(n_jobs, 1)));
  std::vector<detail::FusedScratch<Scalar>> scratch(static_cast<std::size_t>(threads));
  const Scalar inv_divisor = static_cast<Scalar>(1.0 / divisor);
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();

  // Job j: tile j / n_heads (most expensive first), head j % n_heads.
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
  for (Index job = 0; job < n_jobs; ++job) {
    const Index i0 = tile_starts[static_cast<std::size_t>(job / n_heads)];
    const Index h = job % n_heads, kv = h / group;
    const Index rows = std::min(tq, n_q - i0);
    detail::FusedScratch<Scalar>& w = scratch[static_cast<std::size_t>(detail::this_thread())];
    w.q.resize(rows, d_head);
    w.acc.setZero(rows, d_v);
    w.max.setConstant(rows, minus_inf);
    w.sum.setZero(rows);

    // pass 1: the scaled query tile, contiguous.
    w.q.noalias() = q.block(i0, h * d_head, rows, d_head) * inv_divisor;

    // pass 2: key tiles up to the last key the tile's last query sees.
    const Index keys_seen = visible_keys(i0 + rows - 1, n_q, n_k, causal);
    for (Index j0 = 0; j0 < keys_seen; j0 += tk) {
      const Index cols = std::min(tk, keys_seen - j0);
      w.s.resize(rows, cols);
      w.s.noalias() = w.q * k.block(j0, kv * d_head, cols, d_head).transpose();
      for (Index r = 0; r < rows; ++r) {
        // Keys of this tile that query i0 + r sees: a prefix of the tile (all of it below the diagonal).
        const Index visible = std::clamp<Index>(visible_keys(i0 + r, n_q, n_k, causal) - j0, 0, cols);
        auto row = w.s.row(r);
        if (visible == 0) {
          row.setZero();
          continue;
        }
        auto seen = row.head(visible);
        const Scalar new_max = std::max(w.max(r), seen.maxCoeff());
        const Scalar correction = std::exp(w.max(r) - new_max);  // exp(-inf) = 0 on the first tile
        seen = (seen.array() - new_max).exp();
        row.tail(cols - visible).setZero();
        w.sum(r) = w.sum(r) * correction + seen.sum();
        if (correction != Scalar(1)) w.acc.row(r) *= correction;
        w.max(r) = new_max;
      }
      w.acc.noalias() += w.s * v.block(j0, kv * d_v, cols, d_v);
    }

    // pass 3: normalise.
    for (Index r = 0; r < rows; ++r) {
      const bool saw_something = w.sum(r) > Scalar(0);
      auto out = z.block(i0 + r, h * d_v, 1, d_v);
      if (saw_something) out = w.acc.row(r) / w.sum(r);
      else out.setZero();
      if (logsumexp) (*logsumexp)(h, i0 + r) = saw_something ? w.max(r) + std::log(w.sum(r)) : minus_inf;
    }
  }
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
