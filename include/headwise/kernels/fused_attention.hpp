// The fused attention kernel: the same function as attention_core.hpp, computed tile by tile with
// an online softmax, so that no (n, n) matrix is ever held and key tiles that no query of a tile
// sees (above the diagonal, outside a window or a packed sequence, wholly masked) are never
// touched. Multi-threaded (detail/parallel.hpp) over (head, query tile) pairs, or, for a call of one query
// tile (decoding), over (key shard, key/value head) pairs. Which keys each query sees and
// what happens to a score come from the call's ScoreRule (score_rule.hpp). The type keys and
// values are stored in is the kernel's one compile-time choice (Stored: chosen once per call by
// run_fused, widened as the products load it); whether the rule modifies scores is a branch per
// row and key tile (the plain causal loop calls no modifier and tests no score for -inf). The jobs
// that run the loop on threads, and run_fused,
// are in kernels/fused_jobs.hpp; the public way in is attend() (attend.hpp).
//
// For each head h and tile of queries [i0, i0 + tq):
//   pass 1  scale the query tile once: Qs = Q[i0:, h] / divisor
//   pass 2  for each shard of keys [k0, k0 + shard) (FusedTiles::key_shard; a fresh state each),
//           for each key tile [j0, j0 + tk) in it that a query of the tile can see (tiles outside the
//           rows' key ranges are skipped), sliver by sliver of R query rows (R the micro-tile
//           height of detail/tile_product.hpp), only over the keys the sliver's rows see:
//             S   = Qs K[j0:, h]ᵀ                              (a tile product)
//             S   = rule(S): cap, ALiBi, bias, -inf where hidden (if the rule modifies scores)
//             m'  = max(m, max_j S_ij) over the visible j     (running row maximum, by packets)
//             P   = exp(S - m') on the visible j, exactly 0 elsewhere (the mask lives in the loop),
//                   written over S, where the product with V reads it (nothing is packed)
//             l   = l e^(m - m') + Σ_j P_ij                    (running row sum)
//             acc = acc e^(m - m') + P V[j0:, h]               (rescaled by packets, only if m grew)
//           then the shard's (m, l, acc) merged into the shards' before it (online_softmax_state.hpp)
//   pass 3  Z = acc / l, logsumexp = m + log l (with a sink s: Z = acc e^(m-m*) / (l e^(m-m*) +
//           e^(s-m*)), m* = max(m, s)); a row that saw nothing gives Z = 0, lse = -inf (or s).
// Every number a query row gets is computed by the same instructions in the same order whatever
// the other rows of its tile, the tile sizes of queries, the number of keys past the row's last
// visible one and the thread count: the products are the deterministic ones of
// detail/tile_product.hpp, exp and the row sums run over whole SIMD packets of a zero-padded row
// (trailing zeros add +0, which changes no bit), and key tiles start at multiples of the key tile
// size, and shards at multiples of the shard size, merged in key order whether they ran in one job
// or in parallel. So results are bitwise the same for any thread count, and decoding token by token
// (a KV cache) reproduces the full forward bitwise.
// Memory: the packed keys and values (the size of K and V) and, per thread, a few tq x tk tiles.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/exp_nonpositive.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/bf16_tiles.hpp"
#include "headwise/kernels/decoding_prefetch.hpp"
#include "headwise/kernels/f16_tiles.hpp"
#include "headwise/kernels/int8_tiles.hpp"
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
}  // namespace detail

/// The phases of a fused job, in the order of the passes at the top of this file.
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
/// attend() (attend.hpp), from checked arguments and the tiles tiles_for gives.
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

/// Per-thread scratch of the kernel, allocated once per call (before the parallel loop, sized by
/// the tiles there are, not by the tile sizes asked for) and reused across the thread's jobs.
template <class Scalar>
struct FusedScratch {
  Matrix<Scalar> scaled;          // (tq, d_head): the query tile divided by the divisor
  std::vector<Scalar> q;          // the scaled query tile, packed (detail::pack_a)
  std::vector<Scalar> s;          // (tq, tk): scores, then P = exp(scores - max), row r at r tk
  std::vector<KeyRange> spans;    // (tq / R): the keys of the current key tile each sliver sees
  std::vector<Scalar> raw;        // statistics only: one row of scaled scores, kept before exp
  std::vector<Scalar> v;          // values that are the keys' (PackedKeysValues::values_are_keys): a key tile's, as value panels
  RowStateStore<Scalar> states;   // 0: the rows' state over the shards so far, 1: the current shard's
  // int8 under the stored arithmetic (kernels/int8_tiles.hpp): the query tile in int8, its rows'
  // scales and sums; a sliver's integer sums over a panel (a block's, and the tile's); its weights
  // in uint8, their scales, and one row of them as floats on the way.
  std::vector<std::int8_t> q8;
  std::vector<float> q_scale, p_scale, weights;
  std::vector<std::int32_t> q_sum, sums;
  std::vector<std::uint8_t> p8;
  std::vector<std::int8_t> v8;  // int8 values that are the keys': a key tile's, as value panels
  // BF16 and F16 under the stored arithmetic (kernels/bf16_tiles.hpp, kernels/f16_tiles.hpp): the
  // query tile and a sliver's weights in BF16 or F16; F16's value chains carried between runs.
  std::vector<std::uint16_t> q16, p16, h16;

  /// Allocates for tiles of up to `rows` query rows (a multiple of R) and tk keys; throws
  /// std::invalid_argument naming the sizes if they do not fit or cannot be allocated.
  void allocate(const FusedCall<Scalar>& call, Index rows) {
    constexpr const char* where = "attend";
    const Index d_head = call.kv.d_head();
    const Index tile = checked_size<Scalar>(where, "a score tile", rows, call.tk);
    detail::allocate(q, checked_size<Scalar>(where, "a query tile", rows, d_head), Scalar(0), where, "a query tile");
    detail::allocate(s, tile, Scalar(0), where, "a score tile");
    spans.resize(static_cast<std::size_t>(rows / TileShape<Scalar>::rows + 1));
    scaled.resize(rows, d_head);
    states.allocate(2, rows, call.dv_padded(), call.statistics != nullptr, where);
    if (call.statistics) detail::allocate(raw, std::max(rows, call.tk), Scalar(0), where, "row statistics");
    if (call.kv.values_are_keys() && call.kv.storage() == KvStorage::as_computed)
      detail::allocate(v, checked_size<Scalar>(where, "a value tile", call.tk, call.dv_padded()), Scalar(0), where, "a value tile");
    constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
    if (call.kv.format().lane_entries() == bf16_pair || call.kv.format().f16_products()) {
      detail::allocate(q16, checked_size<Scalar>(where, "a query tile", rows, d_head), std::uint16_t(0), where, "a query tile");
      detail::allocate(p16, checked_size<Scalar>(where, "a score tile", R, call.tk), std::uint16_t(0), where, "a score tile");
    }
    if (call.kv.format().f16_products())
      detail::allocate(h16, checked_size<Scalar>(where, "a value tile", R, call.dv_padded()), std::uint16_t(0), where, "a value tile");
    if (call.kv.format().lane_entries() != int8_quad) return;
    detail::allocate(q8, checked_size<Scalar>(where, "a query tile", rows, d_head), std::int8_t(0), where, "a query tile");
    detail::allocate(q_scale, rows, 0.0f, where, "a query tile"), detail::allocate(q_sum, rows, std::int32_t(0), where, "a query tile");
    detail::allocate(sums, 2 * R * W, std::int32_t(0), where, "a score tile"), detail::allocate(p_scale, R, 0.0f, where, "a score tile");
    detail::allocate(weights, call.tk, 0.0f, where, "a score tile");
    detail::allocate(p8, checked_size<Scalar>(where, "a score tile", R, call.tk + int8_quad), std::uint8_t(0), where, "a score tile");
    if (call.kv.values_are_keys())
      detail::allocate(v8, checked_size<Scalar>(where, "a value tile", call.tk, call.dv_padded()), std::int8_t(0), where, "a value tile");
  }
};

/// max(start, row[0, visible)): whole packets first, then the ragged end one entry at a time.
template <class Scalar>
inline Scalar row_max(const Scalar* row, Index visible, Scalar start) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet;
  Packet best = pset1<Packet>(start);
  Index j = 0;
  for (; j + P <= visible; j += P) best = pmax(best, ploadu<Packet>(row + j));
  Scalar max = predux_max(best);
  for (; j < visible; ++j) max = std::max(max, row[j]);
  return max;
}

/// exp(s - m) by packets: Eigen's pexp, or (ShortExp: the stored arithmetic, in float, where the
/// packet has an integer packet beside it) exp_nonpositive; with MayHide, a -inf score (a hidden key) becomes an exact 0, not Eigen's
/// clamped exp(-inf). A NaN score stays NaN.
template <bool MayHide, bool ShortExp, class Packet>
inline Packet exp_of_score(const Packet& s, const Packet& m) {
  using namespace Eigen::internal;
  using Scalar = typename unpacket_traits<Packet>::type;
  Packet e;
  if constexpr (ShortExp && std::is_same_v<Scalar, float> && has_integer_packet<Packet>::value) e = exp_nonpositive(psub(s, m));
  else e = pexp(psub(s, m));
  if constexpr (!MayHide) return e;
  else return pselect(pcmp_eq(s, pset1<Packet>(-std::numeric_limits<Scalar>::infinity())), pset1<Packet>(Scalar(0)), e);
}

/// row[0, visible) <- exp(row - max), row[visible, end) <- 0, and returns the sum of row[0, end)
/// with end >= visible; row[0, capacity) is the caller's to write. Whole packets: every entry goes
/// through the same vectorised exp whatever its position (Eigen's .exp() sends a ragged tail to
/// std::exp); the packet the visible entries end in is computed in place when the row has room
/// for it, else in a packet-sized buffer, so nothing past `capacity` is read or written. The zeros
/// past the visible entries are the mask, never exp(-inf) (which Eigen's exp does not send to 0).
/// The sum adds the packets in order, the last one zero-padded, then one fixed reduction tree:
/// trailing zero packets change no bit.
template <bool MayHide, bool ShortExp, class Scalar>
inline Scalar exp_and_sum(Scalar* row, Index visible, Index end, Index capacity, Scalar max) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet;
  const Packet m = pset1<Packet>(max);
  const Index whole = visible / P * P;
  Packet total = pset1<Packet>(Scalar(0));
  for (Index j = 0; j < whole; j += P) {
    const Packet e = exp_of_score<MayHide, ShortExp>(ploadu<Packet>(row + j), m);
    pstoreu(row + j, e);
    total = padd(total, e);
  }
  Index written = visible;  // row[visible, written) is already 0
  if (whole < visible) {    // the packet the visible entries end in: exp, then the mask
    alignas(64) Scalar buffer[static_cast<std::size_t>(P)] = {};
    const bool in_place = whole + P <= capacity;
    Scalar* last = in_place ? row + whole : buffer;
    if (!in_place) std::copy(row + whole, row + visible, buffer);
    pstoreu(last, exp_of_score<MayHide, ShortExp>(ploadu<Packet>(last), m));
    std::fill(last + (visible - whole), last + P, Scalar(0));
    if (in_place) written = whole + P;
    else std::copy(buffer, buffer + (visible - whole), row + whole);
    total = padd(total, ploadu<Packet>(last));
  }
  if (end > written) std::fill(row + written, row + end, Scalar(0));
  return predux(total);
}

/// acc[0, width) *= factor, by packets (width a multiple of the packet size).
template <class Scalar>
inline void scale_row(Scalar* acc, Index width, Scalar factor) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet;
  const Packet f = pset1<Packet>(factor);
  for (Index c = 0; c < width; c += P) pstoreu(acc + c, pmul(ploadu<Packet>(acc + c), f));
}

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

/// Keys stored in int8 (its scale per token): s[r][c] *= scale[c] for the nr rows of a sliver
/// over one key panel, W entries from `scales`.
template <class Scalar>
inline void scale_columns(Scalar* s, Index nr, Index ld, const float* scales) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet, W = TileShape<Scalar>::lanes;
  for (Index p = 0; p < W; p += P) {
    Packet f;
    if constexpr (std::is_same_v<Scalar, float>) f = ploadu<Packet>(scales + p);
    else f = pset1<Packet>(Scalar(0));  // (a float64 store is never int8)
    for (Index r = 0; r < nr; ++r) pstoreu(s + r * ld + p, pmul(ploadu<Packet>(s + r * ld + p), f));
  }
}

/// S = Qs K[j0 : j0 + cols]ᵀ for the tile's rows, sliver by sliver of R rows, each only over the
/// key panels its rows see (w.spans): the part of a diagonal tile above the diagonal (or
/// before a window) is never computed. Row r of S at w.s + r tk. Each panel's product is its own
/// (a panel never crosses a block).
template <class Stored, class Scalar>
void widened_score_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, Index rows, Index j0, Index cols, Index g) {
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const Index d_head = call.kv.d_head();
  if (rows <= pair_rows<Scalar>) {  // one short sliver (a decoding step): two panels at a time where both are seen, in one block
    const KeyRange span = w.spans[0];
    const Index first = span.begin / W * W, products = (span.end - first + 2 * W - 1) / (2 * W);
    for (Index c0 = first, step; c0 < span.end; c0 += step) {
      const bool pair = c0 + W < span.end && j0 + c0 + W < call.kv.block_end(j0 + c0);
      const Stored* panel = call.kv.template key_panel<Stored>(g, j0 + c0);
      Scalar* s = w.s.data() + c0;
      const char* next_phase =  // (the values: this tile's, read next)
          score_phase_prefetch<Stored>(call, g, {j0 + first, j0 + span.end}, (c0 - first) / (2 * W), products).next_phase;
      if (pair) micro_kernel_pair<Scalar, ALayout::packed, /*Accumulate=*/false>(rows, d_head, w.q.data(), 0, panel, W, call.kv.key_panel_stride(), s, call.tk, next_phase);
      else micro_kernel_rows<Scalar, ALayout::packed, /*Accumulate=*/false>(rows, d_head, w.q.data(), 0, panel, W, s, call.tk);
      step = pair ? 2 * W : W;
      if constexpr (std::is_same_v<Stored, std::int8_t>)
        for (Index p = 0; p < step; p += W) scale_columns(s + p, rows, call.tk, call.kv.key_scales(g, j0 + c0 + p));
    }
    return;
  }
  // Panel by panel (a panel of keys stays in L1 while every sliver that sees it is multiplied).
  for (Index c0 = 0; c0 < cols; c0 += W)
    for (Index r0 = 0; r0 < rows; r0 += R) {
      const Index nr = std::min(R, rows - r0);
      const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
      if (c0 >= span.end || c0 + W <= span.begin) continue;  // no row of the sliver sees this panel
      micro_kernel_rows<Scalar, ALayout::packed, /*Accumulate=*/false>(nr, d_head, w.q.data() + r0 * d_head, 0,
                                                                        call.kv.template key_panel<Stored>(g, j0 + c0), W,
                                                                        w.s.data() + r0 * call.tk + c0, call.tk);
      if constexpr (std::is_same_v<Stored, std::int8_t>)
        scale_columns(w.s.data() + r0 * call.tk + c0, nr, call.tk, call.kv.key_scales(g, j0 + c0));
    }
}

/// Statistics, before exp: the scores of the first key, of the key before the query and the
/// largest (first if tied), and a copy of the visible scores for record_dot.
template <class Scalar>
void record_scores(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, const RowState<Scalar>& st, Index i0,
                   Index r, Index j0, KeyRange keys) {
  const Scalar* row = w.s.data() + r * call.tk;
  const Index previous = call.rule.position(i0 + r) - call.rule.first_key() - 1 - j0;  // the key before the query
  if (j0 == 0 && keys.begin == 0 && call.rule.first_key() == 0) st.first[r] = row[0];
  if (previous >= keys.begin && previous < keys.end) st.previous[r] = row[previous];
  const Scalar* best = std::max_element(row + keys.begin, row + keys.end);
  if (*best > st.best[r]) st.best[r] = *best, st.best_at[r] = j0 + (best - row);
  std::copy(row + keys.begin, row + keys.end, w.raw.begin());
}

/// Statistics, after exp: dot = Σ_j exp(s_j - max) (s_j - max), shifted by the running max like the
/// sum, so that the entropy log(sum) - dot / sum does not cancel when it is near 0. Call before
/// the row's sum and maximum are updated.
template <class Scalar>
void record_dot(const FusedCall<Scalar>& call, const FusedScratch<Scalar>& w, const RowState<Scalar>& st, Index r,
                KeyRange keys, Scalar correction, Scalar new_max) {
  const Scalar* row = w.s.data() + r * call.tk + keys.begin;
  Scalar dot = 0;
  for (Index j = 0; j < keys.size(); ++j)
    if (row[j] != Scalar(0)) dot += row[j] * (w.raw[static_cast<std::size_t>(j)] - new_max);
  const Scalar carried = st.sum[r] > Scalar(0) ? correction * (st.dot[r] + (st.max[r] - new_max) * st.sum[r]) : Scalar(0);
  st.dot[r] = carried + dot;
}

/// The online softmax of one key tile [j0, j0 + cols) for the query rows i0 .. i0 + rows - 1 of
/// head h: the rule modifies each row's scores (if it modifies any), then each row of w.s becomes
/// P = exp(s - m') on the keys it sees and exact zeros elsewhere, as far as its sliver's product
/// with V reads; the running maximum, sum, accumulator (and statistics) are rescaled. `whole`: every
/// row sees the whole tile (ScoreRule::sees_whole), so no row's range is looked up. A rule that
/// modifies scores may hide a key (-inf): exp sends it to an exact 0, and a row may see nothing yet.
template <class Stored, class Scalar>
void online_softmax_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, const RowState<Scalar>& st, Index i0,
                         Index rows, Index j0, Index cols, Index h, bool whole) {
  constexpr Index R = TileShape<Scalar>::rows;
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  const Index dv_padded = call.dv_padded();
  const bool statistics = call.statistics != nullptr, modifies = call.rule.modifies_scores();
  KeyRange span;
  for (Index r = 0; r < rows; ++r) {
    if (r % R == 0) span = w.spans[static_cast<std::size_t>(r / R)];  // what P V reads
    const KeyRange keys = whole ? KeyRange{0, cols} : keys_in_tile(call.rule, i0 + r, j0, cols);
    Scalar* row = w.s.data() + r * call.tk;
    if constexpr (std::is_same_v<Stored, F16Products>)  // (before a rule could hide it: an F16 chain beyond 65504)
      if (call.overflow && !all_finite(Eigen::Map<const RowVector<Scalar>>(row + keys.begin, keys.size())))
        call.overflow->store(true, std::memory_order_relaxed);
    if (modifies) call.rule.apply(h, i0 + r, j0, row, keys.begin, keys.end);
    const Scalar new_max = keys.empty() ? minus_inf : row_max(row + keys.begin, keys.size(), st.max[r]);
    if (keys.empty() || (modifies && new_max == minus_inf)) {  // sees nothing here (yet)
      std::fill(row + span.begin, row + span.end, Scalar(0));
      continue;
    }
    const Scalar correction = std::exp(st.max[r] - new_max);  // exp(-inf) = 0 on the first tile
    if (statistics) record_scores(call, w, st, i0, r, j0, keys);  // before exp overwrites them
    std::fill(row + span.begin, row + keys.begin, Scalar(0));
    const Index visible = keys.size(), end = span.end - keys.begin, capacity = call.tk - keys.begin;
    constexpr bool short_exp =
        std::is_same_v<Stored, Int8Products> || std::is_same_v<Stored, Bf16Products> || std::is_same_v<Stored, F16Products>;
    const Scalar tile_sum = modifies ? exp_and_sum<true, short_exp>(row + keys.begin, visible, end, capacity, new_max)
                                     : exp_and_sum<false, short_exp>(row + keys.begin, visible, end, capacity, new_max);
    if (statistics) record_dot(call, w, st, r, keys, correction, new_max);
    st.sum[r] = st.sum[r] * correction + tile_sum;
    if (correction != Scalar(1)) scale_row(st.acc + r * dv_padded, dv_padded, correction);
    st.max[r] = new_max;
  }
}

/// Where the values are the keys' first d_v components: the values of keys [j0, j0 + cols) of
/// head g, out of the key panels score_tile has just read (from cache, not memory), into w.v in
/// the value panels' layout (panel c / W, row j - j0, lane c % W; zero past d_v). A W x W block
/// transposed per key panel and value panel (by register blocks): 1 / rows of the P V product's work.
template <class Scalar>
void values_from_keys(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, Index j0, Index cols, Index g) {
  constexpr Index W = TileShape<Scalar>::lanes;
  using Block = Eigen::Map<Eigen::Matrix<Scalar, W, W, Eigen::RowMajor>>;
  using ConstBlock = Eigen::Map<const Eigen::Matrix<Scalar, Eigen::Dynamic, W, Eigen::RowMajor>>;
  const Index dv = call.kv.d_v(), stride = call.tk * W;
  for (Index p = std::max<Index>(0, call.kv.first_kept() - j0) / W; p * W < cols; ++p) {  // (no panel before the kept keys is read)
    const Scalar* panel = call.kv.template key_panel<Scalar>(g, j0 + p * W);  // row c: component c of W keys
    for (Index c0 = 0; c0 < dv; c0 += W) {
      Block out(w.v.data() + c0 / W * stride + p * W * W);  // row: a key, column: a component
      const Index valid = std::min(W, dv - c0);
      if (valid == W) {  // by P x P blocks in registers (an entry at a time cost the latent step 12-16%)
        transpose_panel(W, panel + c0 * W, W, out.data());
        continue;
      }
      out.leftCols(valid) = ConstBlock(panel + c0 * W, valid, W).transpose();
      out.rightCols(W - valid).setZero();
    }
  }
}

/// acc += P V[j0 : j0 + cols] for the tile's rows, sliver by sliver, each over the keys its rows
/// see (w.spans), P read in place from w.s (rows of tk), V from its packed panels (or, where the
/// values are the keys', from w.v). A sliver's keys that lie in two blocks are two runs of one
/// product, the second continuing the first's chains: the bits of one run.
template <class Stored, class Scalar>
void widened_value_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, const RowState<Scalar>& st, Index rows, Index j0,
                Index cols, Index g) {
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  const bool own = !call.kv.values_are_keys();
  if constexpr (std::is_same_v<Stored, Scalar>)  // (values inside the keys are stored as computed)
    if (!own) values_from_keys(call, w, j0, cols, g);
  const Index dv_padded = call.dv_padded(), stride = own ? call.kv.value_panel_stride() : call.tk * W;
  for (Index r0 = 0; r0 < rows; r0 += R) {
    const Index nr = std::min(R, rows - r0);
    const KeyRange span = w.spans[static_cast<std::size_t>(r0 / R)];
    for (Index a = span.begin, b; a < span.end; a = b) {  // run by run of keys in one block
      b = own ? std::min(span.end, call.kv.block_end(j0 + a) - j0) : span.end;
      const Stored* values = own ? call.kv.template value_row<Stored>(g, j0 + a) : reinterpret_cast<const Stored*>(w.v.data() + a * W);
      Scalar* p = w.s.data() + r0 * call.tk + a;
      if constexpr (std::is_same_v<Stored, std::int8_t>) {  // int8 values: each key's scale folded into its column of P
        const float* scale = call.kv.value_scales(g, j0 + a);
        for (Index r = 0; r < nr; ++r)
          for (Index j = 0; j < b - a; ++j) p[r * call.tk + j] *= static_cast<Scalar>(scale[j]);
      }
      const bool decoding = own && rows <= pair_rows<Scalar> && a == span.begin;  // (the next tile's keys, read next)
      Index c0 = 0;
      if (nr <= pair_rows<Scalar>)  // a decoding step: two value panels at a time
        for (; c0 + W < dv_padded; c0 += 2 * W)
          micro_kernel_pair<Scalar, ALayout::rows, /*Accumulate=*/true>(
              nr, b - a, p, call.tk, values + c0 / W * stride, W, stride, st.acc + r0 * dv_padded + c0, dv_padded,
              decoding ? value_phase_prefetch<Stored>(call, g, j0, c0 / (2 * W), (dv_padded / W + 1) / 2).next_phase : nullptr);
      for (; c0 < dv_padded; c0 += W)
        micro_kernel_rows<Scalar, ALayout::rows>(nr, b - a, p, call.tk, values + c0 / W * stride, W, st.acc + r0 * dv_padded + c0,
                                                 dv_padded);
    }
  }
}

/// The score and value tiles of the kernel's stored type: widened, int8 as integers, BF16 by pairs
/// or F16 by chains.
template <class Stored, class Scalar>
void score_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, Index rows, Index j0, Index cols, Index g) {
  if constexpr (std::is_same_v<Stored, Int8Products>) int8_score_tile(call, w, rows, j0, g);
  else if constexpr (std::is_same_v<Stored, Bf16Products>) bf16_score_tile(call, w, rows, j0, cols, g);
  else if constexpr (std::is_same_v<Stored, F16Products>) f16_score_tile(call, w, rows, j0, cols, g);
  else widened_score_tile<Stored>(call, w, rows, j0, cols, g);
}
template <class Stored, class Scalar>
void value_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, const RowState<Scalar>& st, Index rows, Index j0,
                Index cols, Index g) {
  if constexpr (std::is_same_v<Stored, Int8Products>) int8_value_tile(call, w, st, rows, j0, cols, g);
  else if constexpr (std::is_same_v<Stored, Bf16Products>) bf16_value_tile(call, w, st, rows, j0, g);
  else if constexpr (std::is_same_v<Stored, F16Products>) f16_value_tile(call, w, st, rows, j0, g);
  else widened_value_tile<Stored>(call, w, st, rows, j0, cols, g);
}

/// The statistics of row i (state row r) from its running values: p = exp(s - lse); exp(-inf -
/// lse) = 0 covers a key the row never saw. H = -Σ p log p = mass (lse - max) - e^(max - lse) dot,
/// which is log(sum) - dot / sum without a sink (mass 1): the max taken out, so H near 0 does not
/// cancel.
template <class Scalar>
void record_statistics(const FusedCall<Scalar>& call, const RowState<Scalar>& state, Index r, Index i, Index h, Scalar lse,
                       Scalar mass) {
  auto& st = *call.statistics;
  const bool saw_something = lse != -std::numeric_limits<Scalar>::infinity();
  if (!saw_something) st.entropy(h, i) = Scalar(0);
  else if (call.rule.has_sinks()) st.entropy(h, i) = mass * (lse - state.max[r]) - std::exp(state.max[r] - lse) * state.dot[r];
  else st.entropy(h, i) = std::log(state.sum[r]) - state.dot[r] / state.sum[r];
  st.first_token_mass(h, i) = saw_something ? std::exp(state.first[r] - lse) : Scalar(0);
  st.previous_token_mass(h, i) = saw_something ? std::exp(state.previous[r] - lse) : Scalar(0);
  st.max_weight(h, i) = saw_something ? std::exp(state.best[r] - lse) : Scalar(0);
  st.argmax(h, i) = state.best_at[r];
  st.sink_mass(h, i) = !call.rule.has_sinks() ? Scalar(0) : saw_something ? std::exp(call.rule.sink(h) - lse) : Scalar(1);
}

/// Z = acc / sum, logsumexp = max + log(sum) and the statistics of the rows i0 .. i0 + rows - 1 of
/// head h (with a sink: see attention_sinks.hpp). A row that sees no key gets Z = 0 and logsumexp
/// -inf (the sink's logit with one). Which rows see nothing is decided by the mask, not by the
/// sum: a row whose scores overflowed (+inf or NaN, or every score -inf where the mask shows keys)
/// gets NaN, as on the step-by-step path, never a silent 0.
template <class Scalar>
void normalise_rows(const FusedCall<Scalar>& call, const RowState<Scalar>& state, Index i0, Index rows, Index h) {
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  const Index dv = call.kv.d_v(), dv_padded = call.dv_padded();
  for (Index r = 0; r < rows; ++r) {
    const KeyRange keys = call.keys(i0 + r);
    const bool saw_something = !keys.empty() && state.max[r] != minus_inf;
    auto z_row = call.z.row(i0 + r).segment(h * dv, dv);
    if (!saw_something && call.rule.sees_any(i0 + r, keys.begin, keys.end)) {  // every visible score overflowed to -inf
      z_row.setConstant(std::numeric_limits<Scalar>::quiet_NaN());
      if (call.logsumexp) (*call.logsumexp)(h, i0 + r) = std::numeric_limits<Scalar>::quiet_NaN();
      if (call.statistics) record_statistics(call, state, r, i0 + r, h, std::numeric_limits<Scalar>::quiet_NaN(), Scalar(1));
      continue;
    }
    const Eigen::Map<const RowVector<Scalar>> acc(state.acc + r * dv_padded, dv);
    Scalar lse = saw_something ? state.max[r] + std::log(state.sum[r]) : minus_inf, mass = Scalar(1);
    if (call.rule.has_sinks()) {  // the sink joins the denominator: Z sums to `mass` < 1
      const SinkNormalisation<Scalar> n = normalise_with_sink(saw_something ? state.max[r] : minus_inf, state.sum[r], call.rule.sink(h));
      z_row = acc * (n.scale / n.denominator);
      lse = n.lse, mass = state.sum[r] * n.scale / n.denominator;
    } else if (saw_something) {
      z_row = acc / state.sum[r];  // a division, as the step-by-step path divides
    } else {
      z_row.setZero();
    }
    // (acc sums e^(s - m) v before the division: it can pass the type's largest number where Z,
    // a weighted mean of v, would not. Noted, and refused by attend, rather than returned as inf.)
    if (call.overflow && std::isfinite(lse) && !row_is_finite(z_row, 0)) call.overflow->store(true, std::memory_order_relaxed);
    if (call.logsumexp) (*call.logsumexp)(h, i0 + r) = lse;
    if (call.statistics) record_statistics(call, state, r, i0 + r, h, saw_something ? lse : minus_inf, mass);
  }
}


/// True if some row i0 .. i0 + rows - 1 sees a key of [j0, j0 + cols) that no mask hides.
template <class Scalar>
bool tile_seen(const ScoreRule<Scalar>& rule, Index i0, Index rows, Index j0, Index cols) {
  for (Index r = 0; r < rows; ++r)
    if (rule.sees_any(i0 + r, j0, j0 + cols)) return true;
  return false;
}

/// Pass 1: the query tile of head h (rows i0 .. i0 + rows - 1), scaled once and packed for the
/// score product.
template <class Scalar, class Clock>
void load_query_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, Index i0, Index rows, Index h, Clock& clock) {
  const Index d_head = call.kv.d_head();
  clock.enter(FusedPhase::query);
  auto scaled = w.scaled.topRows(rows);
  scaled.noalias() = call.q.block(i0, h * d_head, rows, d_head) * call.inv_divisor;
  const Index entries = call.kv.format().lane_entries();  // (the stored arithmetic: int8, BF16 or F16 rows)
  if (entries == int8_quad) return quantize_query_tile(w, rows, d_head);
  if (entries == bf16_pair || call.kv.format().f16_products()) {  // (BF16 pairs, F16 chains: the rows rounded to 16 bits)
    for (Index r = 0; r < rows; ++r) {
      std::uint16_t* rounded = w.q16.data() + r * d_head;
      if (entries == bf16_pair) round_to_bf16(w.scaled.row(r).data(), d_head, rounded);
      else round_to_f16(w.scaled.row(r).data(), d_head, rounded);
    }
    return;
  }
  pack_a<Scalar>(rows, d_head, {w.scaled.data(), d_head}, w.q.data());
}

/// Pass 2 over the keys `keys` of one shard (what the tile sees of it), from a fresh state st:
/// the key tiles from the first key a query of the tile sees to the last; tiles before and after
/// are never touched, nor tiles inside that no row sees (a mask's holes). Interior tiles, which
/// every row sees whole (the body of the causal triangle), skip the rows' range work: the spans
/// and ranges they would compute are the whole tile, so the bits are the same. The query tile is
/// loaded.
template <class Stored, class Scalar, class Clock>
void attend_key_shard(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, const RowState<Scalar>& st, Index i0,
                      Index rows, Index h, KeyRange keys, Clock& clock) {
  constexpr Index R = TileShape<Scalar>::rows;
  const Index g = h / call.group;
  reset(st, rows, call.dv_padded());
  for (Index j0 = keys.begin / call.tk * call.tk; j0 < keys.end; j0 += call.tk) {
    const Index cols = std::min(call.tk, keys.end - j0);
    if (call.rule.hides_keys() && !tile_seen(call.rule, i0, rows, j0, cols)) continue;
    clock.enter(FusedPhase::scores);
    const bool whole = call.rule.sees_whole(i0, rows, j0, j0 + cols);
    for (Index r0 = 0; r0 < rows; r0 += R)  // what each sliver's products cover in this key tile
      w.spans[static_cast<std::size_t>(r0 / R)] =
          whole ? KeyRange{0, cols} : sliver_keys(call.rule, i0 + r0, std::min(R, rows - r0), j0, cols);
    score_tile<Stored>(call, w, rows, j0, cols, g);
    clock.enter(FusedPhase::softmax);
    online_softmax_tile<Stored>(call, w, st, i0, rows, j0, cols, h, whole);
    clock.enter(FusedPhase::values);
    value_tile<Stored>(call, w, st, rows, j0, cols, g);
  }
}

/// The shards of the keys `seen`: shard s holds the keys [s shard, (s + 1) shard).
struct ShardSpan {
  Index first = 0, count = 0;
};
template <class Scalar>
ShardSpan shards_of(const FusedCall<Scalar>& call, KeyRange seen) {
  if (seen.empty()) return {};
  return {seen.begin / call.shard, (seen.end - 1) / call.shard - seen.begin / call.shard + 1};
}
template <class Scalar>
KeyRange shard_keys(const FusedCall<Scalar>& call, KeyRange seen, Index s) {
  return {std::max(seen.begin, s * call.shard), std::min(seen.end, (s + 1) * call.shard)};
}

/// Rows r .. of a state (the rows of one query tile, or of one sequence in a shared prefix's).
template <class Scalar>
RowState<Scalar> rows_from(const RowState<Scalar>& st, Index r, Index dv_padded) {
  const auto at = [r](auto* p) { return p ? p + r : p; };
  return {st.acc + r * dv_padded, st.max + r, st.sum + r, at(st.dot), at(st.first), at(st.previous), at(st.best), at(st.best_at)};
}

/// Pass 2 of head h's query tile (rows i0 .., loaded) over every shard its rows see, merged in key
/// order into `merged`: the first shard's state is `merged` itself, unless `continues` (then
/// merged holds the rows' state over earlier keys, a shared prefix's, and every shard is merged
/// into it: the same fold of states as when the prefix's shards come first in one call).
template <class Stored, class Scalar, class Clock>
void attend_shards(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, const RowState<Scalar>& merged, bool continues,
                   Index i0, Index rows, Index h, Clock& clock) {
  const KeyRange seen = call.seen(i0, rows);
  const ShardSpan shards = shards_of(call, seen);
  const RowState<Scalar> shard = w.states[1];
  if (shards.count == 0 && !continues) reset(merged, rows, call.dv_padded());
  for (Index s = shards.first; s < shards.first + shards.count; ++s) {
    const bool into_merged = s == shards.first && !continues;
    attend_key_shard<Stored>(call, w, into_merged ? merged : shard, i0, rows, h, shard_keys(call, seen, s), clock);
    clock.enter(FusedPhase::normalise);
    if (!into_merged) merge_states(merged, shard, rows, call.dv_padded());
  }
}

/// One job: head h on the query tile starting at i0 (passes 1 to 3 at the top of this file), its
/// keys shard by shard, each shard's state merged into the first's (or, given `start`, into the
/// rows' state over a shared prefix).
template <class Stored, class Scalar, class Clock>
void attend_query_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar>& w, Index i0, Index h, Clock& clock,
                       const RowState<Scalar>* start = nullptr) {
  const Index rows = std::min(call.tq, call.n_q() - i0);
  load_query_tile(call, w, i0, rows, h, clock);
  const RowState<Scalar> merged = start ? *start : w.states[0];
  attend_shards<Stored>(call, w, merged, start != nullptr, i0, rows, h, clock);
  clock.enter(FusedPhase::normalise);  // pass 3
  normalise_rows(call, merged, i0, rows, h);
}

}  // namespace detail

}  // namespace headwise
