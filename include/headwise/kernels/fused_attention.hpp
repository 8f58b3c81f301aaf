// The fused attention kernel: the same function as attention_core.hpp, computed tile by tile with
// an online softmax, so that no (n, n) matrix is ever held and key tiles that no query of a tile
// sees (above the diagonal, outside a window or a packed sequence, wholly masked) are never
// touched. Multi-threaded (detail/parallel.hpp) over (head, query tile) pairs, or, for a call of
// one query tile (decoding), over (key shard, key/value head) pairs. Which keys each query sees and
// what happens to a score come from the call's ScoreRule (score_rule.hpp). The kernel's one
// compile-time choice is its stored type (Stored: chosen once per call by run_fused), whose
// arithmetic (TileArithmetic<Stored>, kernels/tile_arithmetics.hpp) rounds the query tile and
// computes the score and value tiles: this loop is every arithmetic's. Whether the rule modifies
// scores is a branch per row and key tile (the plain causal loop calls no modifier and tests no
// score for -inf). The call and the scratch are kernels/fused_call.hpp's; the jobs that run the
// loop on threads, and run_fused, kernels/fused_jobs.hpp's; the public way in is attend()
// (attend.hpp).
//
// For each head h and tile of queries [i0, i0 + tq):
//   pass 1  scale the query tile once: Qs = Q[i0:, h] / divisor (then rounded as the arithmetic says)
//   pass 2  for each shard of keys [k0, k0 + shard) (FusedTiles::key_shard; a fresh state each),
//           for each key tile [j0, j0 + tk) in it that a query of the tile can see (tiles outside the
//           rows' key ranges are skipped), sliver by sliver of R query rows (R the micro-tile
//           height of detail/tile_product.hpp), only over the keys the sliver's rows see:
//             S   = Qs K[j0:, h]ᵀ                              (the arithmetic's score tile)
//             S   = rule(S): cap, ALiBi, bias, -inf where hidden (if the rule modifies scores)
//             m'  = max(m, max_j S_ij) over the visible j     (running row maximum, by packets)
//             P   = exp(S - m') on the visible j, exactly 0 elsewhere (the mask lives in the loop;
//                   Eigen's pexp, or exp_nonpositive where the arithmetic asks for the short
//                   one), written over S, where the arithmetic's value tile reads it (rounding it
//                   first into its own scratch where it multiplies in a narrower type)
//             l   = l e^(m - m') + Σ_j P_ij                    (running row sum)
//             acc = acc e^(m - m') + P V[j0:, h]               (rescaled by packets, only if m grew)
//           then the shard's (m, l, acc) merged into the shards' before it (online_softmax_state.hpp)
//   pass 3  Z = acc / l, logsumexp = m + log l (with a sink s: Z = acc e^(m-m*) / (l e^(m-m*) +
//           e^(s-m*)), m* = max(m, s)); a row that saw nothing gives Z = 0, lse = -inf (or s).
// Asked for, each row's RowStatistics (kernels/row_statistics.hpp) are kept on the way
// (record_scores, record_dot, record_statistics).
// Every number a query row gets is computed by the same instructions in the same order whatever
// the other rows of its tile, the tile sizes of queries, the number of keys past the row's last
// visible one and the thread count: the products are each arithmetic's fixed chains (its file in
// kernels/tile_arithmetics.hpp says which), exp and the row sums run over whole SIMD packets of a
// zero-padded row (trailing zeros add +0, which changes no bit), and key tiles start at multiples
// of the key tile size, and shards at multiples of the shard size, merged in key order whether
// they ran in one job or in parallel. So results are bitwise the same for any thread count, and decoding token by token
// (a KV cache) reproduces the full forward bitwise.
// Memory: the packed keys and values (the size of K and V) and, per thread, a few tq x tk tiles.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "headwise/detail/exp_nonpositive.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/fused_call.hpp"
#include "headwise/kernels/online_softmax_state.hpp"
#include "headwise/kernels/tile_arithmetics.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {
namespace detail {

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

/// Statistics, before exp: the scores of the first key, of the key before the query and the
/// largest (first if tied), and a copy of the visible scores for record_dot.
template <class Scalar, class Scratch>
void record_scores(const FusedCall<Scalar>& call, Scratch& w, const RowState<Scalar>& st, Index i0,
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
template <class Scalar, class Scratch>
void record_dot(const FusedCall<Scalar>& call, const Scratch& w, const RowState<Scalar>& st, Index r,
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
void online_softmax_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar, Stored>& w, const RowState<Scalar>& st, Index i0,
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
    if constexpr (TileArithmetic<Stored>::scores_may_overflow)  // (before a rule could hide it)
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
    constexpr bool short_exp = TileArithmetic<Stored>::short_exp;
    const Scalar tile_sum = modifies ? exp_and_sum<true, short_exp>(row + keys.begin, visible, end, capacity, new_max)
                                     : exp_and_sum<false, short_exp>(row + keys.begin, visible, end, capacity, new_max);
    if (statistics) record_dot(call, w, st, r, keys, correction, new_max);
    st.sum[r] = st.sum[r] * correction + tile_sum;
    if (correction != Scalar(1)) scale_row(st.acc + r * dv_padded, dv_padded, correction);
    st.max[r] = new_max;
  }
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

/// Pass 1: the query tile of head h (rows i0 .. i0 + rows - 1), scaled once, then made what the
/// arithmetic's score products read.
template <class Stored, class Scalar, class Clock>
void load_query_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar, Stored>& w, Index i0, Index rows, Index h, Clock& clock) {
  const Index d_head = call.kv.d_head();
  clock.enter(FusedPhase::query);
  w.scaled.topRows(rows).noalias() = call.q.block(i0, h * d_head, rows, d_head) * call.inv_divisor;
  TileArithmetic<Stored>::load_query(call, w, rows);
}

/// Pass 2 over the keys `keys` of one shard (what the tile sees of it), from a fresh state st:
/// the key tiles from the first key a query of the tile sees to the last; tiles before and after
/// are never touched, nor tiles inside that no row sees (a mask's holes). Interior tiles, which
/// every row sees whole (the body of the causal triangle), skip the rows' range work: the spans
/// and ranges they would compute are the whole tile, so the bits are the same. The query tile is
/// loaded.
template <class Stored, class Scalar, class Clock>
void attend_key_shard(const FusedCall<Scalar>& call, FusedScratch<Scalar, Stored>& w, const RowState<Scalar>& st, Index i0,
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
    TileArithmetic<Stored>::score_tile(call, w, rows, j0, cols, g);
    clock.enter(FusedPhase::softmax);
    online_softmax_tile<Stored>(call, w, st, i0, rows, j0, cols, h, whole);
    clock.enter(FusedPhase::values);
    TileArithmetic<Stored>::value_tile(call, w, st, rows, j0, cols, g);
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
void attend_shards(const FusedCall<Scalar>& call, FusedScratch<Scalar, Stored>& w, const RowState<Scalar>& merged, bool continues,
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
void attend_query_tile(const FusedCall<Scalar>& call, FusedScratch<Scalar, Stored>& w, Index i0, Index h, Clock& clock,
                       const RowState<Scalar>* start = nullptr) {
  const Index rows = std::min(call.tq, call.n_q() - i0);
  load_query_tile<Stored>(call, w, i0, rows, h, clock);
  const RowState<Scalar> merged = start ? *start : w.states[0];
  attend_shards<Stored>(call, w, merged, start != nullptr, i0, rows, h, clock);
  clock.enter(FusedPhase::normalise);  // pass 3
  normalise_rows(call, merged, i0, rows, h);
}

}  // namespace detail

}  // namespace headwise
