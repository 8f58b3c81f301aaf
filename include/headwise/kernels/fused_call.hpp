// What one call of the fused kernel (kernels/fused_attention.hpp) is: its tiles (FusedTiles), the
// phases an observer sees, the call every job reads (FusedCall), which keys of a key tile a query
// row or a sliver of rows sees, and each thread's scratch (FusedScratch): what every arithmetic
// uses, and, as its base, what the arithmetic of the kernel's stored type keeps of its own
// (TileArithmetic, kernels/tile_arithmetics.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/kv_blocks.hpp"
#include "headwise/kernels/online_softmax_state.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/options.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The key tile a call takes unless told otherwise (FusedTiles::keys), for keys and values stored
/// as `format` says: 512 keys where the CPU has 32 vector registers (AVX-512, whose CPUs all have
/// 1 MiB or more of L2 per core: a decoding step reads its keys and values in longer runs), 128
/// elsewhere (AVX2 parts with 512 KiB). With AVX-512, keys and values of their own under the
/// stored arithmetic take as many times more keys as share a 32-bit lane of their panels
/// (StoreFormat::lane_entries): int8 2048, BF16 1024, the bytes of 512 keys in float32 (F16 chains,
/// one entry a lane, 1024 likewise). A latent's values, inside its keys, keep 512: its 128 heads'
/// scores over a tile are the tile's scratch. (bench/RESULTS.md, "Tuning constants")
constexpr Index default_key_tile(const StoreFormat& format) {
  if (detail::TileShape<float>::registers < 32) return 128;
  if (format.values != ValueStorage::own) return 512;
  return 512 * (format.f16_products() ? 2 : format.lane_entries());
}

/// How the fused kernel cuts its work. Tiles: rows of queries and of keys per tile (the key tile
/// is rounded up to a multiple of the micro-tile width). 128 query rows: larger tiles amortise the
/// per-tile work (packing the query tile, the online-softmax bookkeeping) (bench/RESULTS.md, "Tuning constants"). With AVX-512 the key tile is 512 (default_key_tile;
/// 2048 for int8 multiplied as integers, 1024 for BF16 by pairs). A call's tiles are the same for its forward and its
/// decoding steps (the same bits), so the default depends on how the keys are stored, not on the call.
///
/// A query row's keys are attended in shards of `key_shard` keys (rounded up to whole key tiles;
/// boundaries at fixed multiples of it), each from a fresh online-softmax state, and the shards'
/// states merged in key order (online_softmax_state.hpp). A call with a single query tile (a
/// decoding step, a short chunk) runs its shards as parallel jobs, each key/value head's shard read
/// once for all the query heads that share it, and merges them afterwards (split-key decoding);
/// longer calls run each (head, query tile) job through its shards in turn. The merges are the
/// same either way, so the bits depend on neither the thread count nor `split_keys`. 1024 keys
/// keep a shard's keys and values (512 KiB at d_head 64, float) in a core's L2 cache while the
/// query heads of a group read them; a shard is rounded up to whole key tiles (2048 keys for int8
/// under the stored arithmetic with AVX-512: half as many split-key jobs, and a shared prefix
/// attended once only in whole shards of 2048).
struct FusedTiles {
  Index queries = 128;
  std::optional<Index> keys;  ///< unset: default_key_tile of the keys' store format
  Index key_shard = 1024;
  bool split_keys = true;  ///< false: a one-tile call runs its shards in turn (bench_decode's baseline)
};

namespace detail {
/// Throws unless the tiles asked for are positive (the key tile, where it is set).
inline void check_tiles(const char* where, const FusedTiles& tiles) {
  if (tiles.queries <= 0 || (tiles.keys && *tiles.keys <= 0) || tiles.key_shard <= 0)
    invalid(where, "tile sizes must be > 0, got ", tiles.queries, " queries, ",
            tiles.keys ? std::to_string(*tiles.keys) : std::string("the default"), " keys and shards of ", tiles.key_shard, " keys");
}

/// The tile sizes used for n_q queries and n_k keys. Tiles larger than the input behave as tiles
/// of the input's size (one tile covers everything either way, so no sum changes order), so
/// scratch is sized by what is there. Key tiles are a multiple of W and start at multiples of
/// themselves: a key's place in its panel, and so the order of every sum, is the same whatever
/// n_k is. Shards are whole key tiles; a shard at least as large as the keys is one shard of them
/// (whatever its size, the row's keys are then never split). Unset keys: default_key_tile(format).
template <class Scalar>
FusedTiles tiles_for(const FusedTiles& asked, Index n_q, Index n_k, const StoreFormat& format) {
  constexpr Index W = TileShape<Scalar>::lanes;
  const Index keys = asked.keys.value_or(default_key_tile(format));
  const Index tk = (std::min(keys, std::max<Index>(n_k, 1)) + W - 1) / W * W;
  const Index shard = asked.key_shard >= n_k ? std::max(n_k, tk) : (asked.key_shard + tk - 1) / tk * tk;
  return {std::min(asked.queries, std::max<Index>(n_q, 1)), tk, shard, asked.split_keys};
}
}  // namespace detail

/// The phases of a fused job, in the order of the passes at the top of kernels/fused_attention.hpp.
enum class FusedPhase { query, scores, softmax, values, normalise };
constexpr int fused_phase_count = 5;

/// An observer of the fused kernel: each thread's observer is told every phase its jobs enter,
/// to measure where the time goes (BM_CorePhases in bench/bench_attention.cpp; attend.hpp takes
/// one per thread). Any type with enter(FusedPhase) will do; the library's own calls use this
/// one, which does nothing and which the compiler removes, as Eigen's tensor contractions take
/// NoOpOutputKernel.
struct NoPhaseObserver {
  void enter(FusedPhase) {}
};

namespace detail {

/// Query tiles of n_q rows, later tiles first: under a causal mask they see the most keys, and
/// longest job first balances the triangle across threads (without one the order is free).
inline std::vector<Index> query_tiles_by_cost(Index n_q, Index tile) {
  std::vector<Index> starts;
  for (Index i0 = 0; i0 < n_q; i0 += tile) starts.push_back(i0);
  std::reverse(starts.begin(), starts.end());
  return starts;
}

/// One call of the kernel: what every (head, query tile) job reads and writes. Made in one place,
/// attend() (attend.hpp), from checked arguments (detail/attend_checks.hpp) and the tiles tiles_for gives.
template <class Scalar>
struct FusedCall {
  FusedCall(const Eigen::Ref<const Matrix<Scalar>>& queries, const KvBlocks<Scalar>& keys_values,
            Eigen::Ref<Matrix<Scalar>>& output, const ScoreRule<Scalar>& score_rule, const FusedTiles& tiles,
            Scalar inverse_divisor)
      : q(queries), kv(keys_values), z(output), n_heads(queries.cols() / keys_values.d_head()),
        group(n_heads / keys_values.n_kv_heads()), tq(tiles.queries), tk(*tiles.keys), shard(tiles.key_shard),
        rule(score_rule), inv_divisor(inverse_divisor) {}

  const Eigen::Ref<const Matrix<Scalar>>& q;  // (n_q, n_heads d_head)
  KvBlocks<Scalar> kv;                        // n_k keys and values of n_kv_heads heads, block by block
  Eigen::Ref<Matrix<Scalar>>& z;              // (n_q, n_heads d_v)
  Matrix<Scalar>* logsumexp = nullptr;        // (n_heads, n_q), or null
  RowStatistics<Scalar>* statistics = nullptr;  // (n_heads, n_q) each, or null (then the policy records none)
  Index n_heads, group;                       // query heads; query heads per key/value head
  Index tq, tk;                               // query and key tile sizes (tk a multiple of W)
  Index shard;                                // keys per shard (a multiple of tk)
  Index first_key = 0;                        // keys before it are another call's (a shared prefix: attend_batch)
  const ScoreRule<Scalar>& rule;              // which keys each query sees, what a score becomes
  Scalar inv_divisor;
  // Set where a call left a range the result needs (check_overflow): a row's value sum beyond the
  // type's largest number, its scores finite (normalise_rows), or, under F16 chains, a score a row
  // sees beyond F16's (online_softmax_tile, before any rule could hide it).
  std::atomic<bool>* overflow = nullptr;

  Index n_q() const { return q.rows(); }
  Index n_k() const { return kv.size(); }
  /// The call's multiply-adds at most (every query against every key): what decides its threads.
  double work() const { return double(n_q()) * double(n_k()) * double(n_heads) * double(kv.d_head() + kv.d_v()); }
  /// The keys rows i0 .. i0 + rows - 1 see, from first_key on: what their shards cover.
  KeyRange seen(Index i0, Index rows) const;
  Index dv_padded() const { return (kv.d_v() + TileShape<Scalar>::lanes - 1) / TileShape<Scalar>::lanes * TileShape<Scalar>::lanes; }
  /// The keys query row i may see.
  const KeyRange& keys(Index i) const { return rule.keys(i); }
};

/// The arithmetic of the kernel's stored type Stored (the tag with_kernel_type gives): its own
/// scratch, how it rounds the query tile, its score and value tiles. One file each
/// (kernels/tile_arithmetics.hpp lists them).
template <class Stored>
struct TileArithmetic;

/// Per-thread scratch of the kernel, allocated once per call (before the parallel loop, sized by
/// the tiles there are, not by the tile sizes asked for) and reused across the thread's jobs: what
/// every arithmetic uses, and (the base) what Stored's arithmetic keeps of its own.
template <class Scalar, class Stored>
struct FusedScratch : TileArithmetic<Stored>::template Scratch<Scalar> {
  Matrix<Scalar> scaled;          // (tq, d_head): the query tile divided by the divisor
  std::vector<Scalar> s;          // (tq, tk): scores, then P = exp(scores - max), row r at r tk
  std::vector<KeyRange> spans;    // (tq / R): the keys of the current key tile each sliver sees
  std::vector<Scalar> raw;        // statistics only: one row of scaled scores, kept before exp
  RowStateStore<Scalar> states;   // 0: the rows' state over the shards so far, 1: the current shard's

  /// Allocates for tiles of up to `rows` query rows (a multiple of R) and tk keys; throws
  /// std::invalid_argument naming the sizes if they do not fit or cannot be allocated.
  void allocate(const FusedCall<Scalar>& call, Index rows) {
    constexpr const char* where = "attend";
    detail::allocate(s, checked_size<Scalar>(where, "a score tile", rows, call.tk), Scalar(0), where, "a score tile");
    spans.resize(static_cast<std::size_t>(rows / TileShape<Scalar>::rows + 1));
    scaled.resize(rows, call.kv.d_head());
    states.allocate(2, rows, call.dv_padded(), call.statistics != nullptr, where);
    if (call.statistics) detail::allocate(raw, std::max(rows, call.tk), Scalar(0), where, "row statistics");
    TileArithmetic<Stored>::template Scratch<Scalar>::allocate(call, rows);
  }
};

/// The keys of the key tile [j0, j0 + cols) that query row i may see, counted from j0.
template <class Scalar>
inline KeyRange keys_in_tile(const ScoreRule<Scalar>& rule, Index i, Index j0, Index cols) {
  const KeyRange keys = rule.keys(i).within(j0, j0 + cols);
  return keys.empty() ? KeyRange{0, 0} : KeyRange{keys.begin - j0, keys.end - j0};
}

/// The keys of the tile that any of the rows i .. i + rows - 1 sees (the span of their ranges),
/// counted from j0: what a sliver's products cover.
template <class Scalar>
inline KeyRange sliver_keys(const ScoreRule<Scalar>& rule, Index i, Index rows, Index j0, Index cols) {
  KeyRange span{cols, 0};
  for (Index r = 0; r < rows; ++r) {
    const KeyRange keys = keys_in_tile(rule, i + r, j0, cols);
    if (!keys.empty()) span = {std::min(span.begin, keys.begin), std::max(span.end, keys.end)};
  }
  return span.empty() ? KeyRange{0, 0} : span;
}

template <class Scalar>
KeyRange FusedCall<Scalar>::seen(Index i0, Index rows) const {
  const KeyRange keys = sliver_keys(rule, i0, rows, 0, n_k());
  return keys.end > first_key ? KeyRange{std::max(keys.begin, first_key), keys.end} : KeyRange{0, 0};
}

}  // namespace detail
}  // namespace headwise
