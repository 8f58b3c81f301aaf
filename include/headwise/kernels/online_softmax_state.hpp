// The online softmax's running state for a tile of query rows over some of the keys: per row the
// running maximum m, the running sum l = Σ_j e^(s_j - m), the accumulator acc = Σ_j e^(s_j - m) v_j
// (and, when statistics are asked for, what row_statistics.hpp needs). The fused kernel attends to
// a row's keys shard by shard, each from a fresh state, and merges the shards' states in key order:
//   m = max(m_a, m_b),  l = e^(m_a - m) l_a + e^(m_b - m) l_b,  acc likewise.
// Whether the shards run one after the other in one job or side by side on several threads
// (split-key decoding), the same states meet in the same merges: the bits do not change.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "headwise/detail/merge_weights.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// One state: pointers into a RowStateStore. acc is (rows, dv_padded), the rest (rows). The
/// statistics' pointers are null when none are kept.
template <class Scalar>
struct RowState {
  Scalar* acc;
  Scalar* max;
  Scalar* sum;
  // Statistics only: dot = Σ_j e^(s_j - m) (s_j - m), shifted like the sum; the score of the
  // first key, of the key before the query and the largest one (with its key).
  Scalar* dot;
  Scalar* first;
  Scalar* previous;
  Scalar* best;
  Index* best_at;
};

/// `count` states of `rows` rows each, in one allocation per field.
template <class Scalar>
class RowStateStore {
 public:
  /// Throws std::invalid_argument naming the sizes if they do not fit or cannot be allocated.
  void allocate(Index count, Index rows, Index dv_padded, bool statistics, const char* where) {
    rows_ = rows, width_ = dv_padded, statistics_ = statistics;
    const Index n = checked_size<Scalar>(where, "row states", count, rows);
    detail::allocate(acc_, checked_size<Scalar>(where, "row states' accumulators", n, dv_padded), Scalar(0), where,
                     "row states' accumulators");
    for (std::vector<Scalar>* v : {&max_, &sum_}) detail::allocate(*v, n, Scalar(0), where, "row states");
    if (!statistics) return;
    for (std::vector<Scalar>* v : {&dot_, &first_, &previous_, &best_})
      detail::allocate(*v, n, Scalar(0), where, "row statistics");
    detail::allocate(best_at_, n, Index(-1), where, "row statistics");
  }

  RowState<Scalar> operator[](Index k) {
    const std::size_t at = static_cast<std::size_t>(k * rows_);
    if (!statistics_) return {acc_.data() + at * static_cast<std::size_t>(width_), max_.data() + at, sum_.data() + at,
                              nullptr, nullptr, nullptr, nullptr, nullptr};
    return {acc_.data() + at * static_cast<std::size_t>(width_), max_.data() + at, sum_.data() + at, dot_.data() + at,
            first_.data() + at, previous_.data() + at, best_.data() + at, best_at_.data() + at};
  }

 private:
  Index rows_ = 0, width_ = 0;
  bool statistics_ = false;
  std::vector<Scalar> acc_, max_, sum_, dot_, first_, previous_, best_;
  std::vector<Index> best_at_;
};

/// The state of rows that have seen no key: acc = 0, m = -inf, l = 0.
template <class Scalar>
void reset(const RowState<Scalar>& st, Index rows, Index dv_padded) {
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  std::fill(st.acc, st.acc + rows * dv_padded, Scalar(0));
  std::fill(st.max, st.max + rows, minus_inf);
  std::fill(st.sum, st.sum + rows, Scalar(0));
  if (!st.dot) return;
  std::fill(st.dot, st.dot + rows, Scalar(0));
  for (Scalar* v : {st.first, st.previous, st.best}) std::fill(v, v + rows, minus_inf);
  std::fill(st.best_at, st.best_at + rows, Index(-1));
}

/// into <- the state over into's keys and then from's (from's keys come after into's). A row that
/// saw nothing in `from` keeps its state; one that saw nothing in `into` takes from's. The
/// statistics' maxima keep the earlier key when tied.
template <class Scalar>
void merge_states(const RowState<Scalar>& into, const RowState<Scalar>& from, Index rows, Index dv_padded) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet;
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  for (Index r = 0; r < rows; ++r) {
    Scalar* acc = into.acc + r * dv_padded;
    const Scalar* acc_from = from.acc + r * dv_padded;
    if (from.dot) {
      into.first[r] = std::max(into.first[r], from.first[r]);  // one shard holds the key: -inf elsewhere
      into.previous[r] = std::max(into.previous[r], from.previous[r]);
      if (from.best[r] > into.best[r]) into.best[r] = from.best[r], into.best_at[r] = from.best_at[r];
    }
    if (from.max[r] == minus_inf) continue;  // from saw nothing (or every key it saw was hidden)
    const MergeWeights<Scalar> weights = merge_weights(into.max[r], from.max[r]);
    const Scalar top = weights.top, a = weights.a, b = weights.b;
    if (from.dot) {
      const Scalar dot_a = into.sum[r] > Scalar(0) ? a * (into.dot[r] + (into.max[r] - top) * into.sum[r]) : Scalar(0);
      into.dot[r] = dot_a + b * (from.dot[r] + (from.max[r] - top) * from.sum[r]);
    }
    into.sum[r] = into.sum[r] * a + from.sum[r] * b;
    into.max[r] = top;
    const Packet pa = pset1<Packet>(a), pb = pset1<Packet>(b);
    for (Index c = 0; c < dv_padded; c += P)
      pstoreu(acc + c, padd(pmul(ploadu<Packet>(acc + c), pa), pmul(ploadu<Packet>(acc_from + c), pb)));
  }
}

}  // namespace headwise::detail
