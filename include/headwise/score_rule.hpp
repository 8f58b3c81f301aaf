// ScoreRule: one call's masks and score modifiers (AttentionOptions, checked against the call's
// sizes), applied the same way by the step-by-step path and by the fused kernel.
//
// For query row i (at position n_k - n_q + i; with query_rows_per_position r > 1, rows come in
// groups of r at one position, n_k - n_q / r + i / r) the rule gives
//   keys(i)                the contiguous keys it may see: causal, sliding window, chunk, its packed
//                          sequence, narrowed to the first and last key a mask, padding or -inf
//                          bias leaves (a key range outside every row's is never computed);
//   apply(h, i, ...)       what happens to its scaled scores: soft-cap, + ALiBi, + bias, and -inf
//                          on the keys inside keys(i) that a mask, padding or bias hides;
//   sink(h)                the sink logit that joins head h's denominators, if any.
// Each rule lives in its own header under variants/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/options.hpp"
#include "headwise/types.hpp"
#include "headwise/variants/alibi.hpp"
#include "headwise/variants/attention_sinks.hpp"
#include "headwise/variants/chunked_attention.hpp"
#include "headwise/variants/key_range.hpp"
#include "headwise/variants/packed_sequences.hpp"
#include "headwise/variants/sliding_window.hpp"
#include "headwise/variants/softcap.hpp"

namespace headwise {

namespace detail {

/// Throws unless a per-head option (ALiBi slopes, sinks) is empty or has n_heads finite entries.
inline void check_per_head(const char* where, const char* name, const Vector<double>& values, Index n_heads) {
  if (values.size() == 0) return;
  if (values.size() != n_heads) detail::invalid(where, name, " has ", values.size(), " entries, expected one per head, ", n_heads);
  for (Index h = 0; h < n_heads; ++h)
    if (!std::isfinite(values(h))) detail::invalid(where, name, " has a non-finite value (", values(h), ") for head ", h);
}

/// The largest position a call may give: positions plus sizes stay far from overflowing (2^62
/// where Index has 64 bits, 2^30 on a 32-bit target such as WebAssembly).
inline constexpr Index max_position = Index(1) << (std::numeric_limits<Index>::digits - 1);

}  // namespace detail

template <class Scalar>
class HEADWISE_ISA_TAG ScoreRule {
 public:
  /// Keys are counted in blocks of this many for skipping tiles that a mask hides entirely.
  static constexpr Index block = 8;

  /// The rule of a call with n_q queries, n_k keys and n_heads heads; throws std::invalid_argument
  /// naming the option that does not fit. The rule reads `options` (masks, bias, slopes) where they
  /// are: they must outlive it, as a call's options outlive the call. `folded`: each position's
  /// rows as the caller folded them (attend's grouped-query heads; then the options fold none).
  ScoreRule(const AttentionOptions& options, Index n_q, Index n_k, Index n_heads, const char* where, Index folded = 1)
      : options_(options), n_q_(n_q), n_k_(n_k), first_key_(options.first_key_position),
        rows_per_position_(std::max<Index>(options.query_rows_per_position, 1) * folded),
        first_query_(options.first_query_position ? *options.first_query_position : first_key_ + n_k - n_q / rows_per_position_) {
    check(where, n_heads);
    per_row_ = options.mask.size() || options.bias.size();
    hides_ = per_row_ || options.key_valid.size();
    modifies_ = hides_ || options.softcap || options.alibi_slopes.size();
    if (options.key_valid.size() && !per_row_) index_valid_keys();
    std::optional<PackedSequences> sequences;
    const bool shard = options.first_query_position || first_key_ != 0;  // the keys may be a shard of more
    if (!options.cu_seqlens.empty()) sequences.emplace(options.cu_seqlens, first_key_ + n_k, /*exactly=*/!shard, where);
    ranges_.resize(static_cast<std::size_t>(n_q));
    if (per_row_) visible_blocks_.assign(static_cast<std::size_t>(n_q * blocks()), 0);
    for (Index i = 0; i < n_q; ++i) {
      const Index p = position(i);  // absolute, as are the ranges until the last line
      KeyRange keys = causal_range(p, first_key_ + n_k, options.causal);
      if (options.window) keys = sliding_window_range(keys, p, *options.window);
      if (options.chunk) keys = chunked_range(keys, p, *options.chunk);
      if (sequences) keys = sequences->narrow(keys, p);
      keys = keys.within(first_key_, first_key_ + n_k);
      keys = keys.empty() ? KeyRange{0, 0} : KeyRange{keys.begin - first_key_, keys.end - first_key_};
      ranges_[static_cast<std::size_t>(i)] = hides_ ? narrow_to_visible(i, keys) : keys;
      if (i > 0) {
        const KeyRange& before = ranges_[static_cast<std::size_t>(i) - 1];
        const KeyRange& now = ranges_[static_cast<std::size_t>(i)];
        monotone_ = monotone_ && before.begin <= now.begin && before.end <= now.end;
      }
    }
    if (options.alibi_slopes.size()) check_alibi_distances(where);
  }

  Index n_q() const { return n_q_; }
  Index n_k() const { return n_k_; }
  /// The absolute position of query row i (by default aligned to the end of the keys).
  Index position(Index i) const { return first_query_ + i / rows_per_position_; }
  /// The absolute position of key 0.
  Index first_key() const { return first_key_; }
  /// The keys query row i may see, as indices 0 .. n_k - 1 of the call's keys (some inside may
  /// still be hidden: see hidden()).
  const KeyRange& keys(Index i) const { return ranges_[static_cast<std::size_t>(i)]; }
  /// True if every row i0 .. i0 + rows - 1 may see all of the keys [begin, end) (an interior tile:
  /// its rows need no range of their own). O(1) when the rows' ranges only move forward (causal,
  /// windows, packed sequences), else a loop over the rows.
  bool sees_whole(Index i0, Index rows, Index begin, Index end) const {
    if (monotone_) return keys(i0 + rows - 1).begin <= begin && keys(i0).end >= end;
    for (Index r = 0; r < rows; ++r)
      if (keys(i0 + r).begin > begin || keys(i0 + r).end < end) return false;
    return true;
  }
  /// True if apply() changes scores (a cap, ALiBi, a bias or a mask); false: scores are used as computed.
  bool modifies_scores() const { return modifies_; }
  /// True if keys inside keys(i) can be hidden (a mask, padding or a -inf bias).
  bool hides_keys() const { return hides_; }
  bool has_sinks() const { return options_.sinks.size() != 0; }
  Scalar sink(Index h) const { return static_cast<Scalar>(options_.sinks(h)); }

  /// True if key j is hidden from query row i by the mask, the padding or a -inf bias.
  bool hidden(Index i, Index j) const {
    return (options_.mask.size() && !options_.mask(i, j)) || (options_.key_valid.size() && !options_.key_valid(j)) ||
           (options_.bias.size() && options_.bias(i, j) == -std::numeric_limits<double>::infinity());
  }

  /// False only if query row i sees no key in [begin, end) (counted by blocks: may say true for a
  /// block that is partly outside the range).
  bool sees_any(Index i, Index begin, Index end) const {
    const KeyRange keys = this->keys(i).within(begin, end);
    if (keys.empty()) return false;
    if (!hides_) return true;
    if (!per_row_) return next_valid_[static_cast<std::size_t>(keys.begin)] < keys.end;
    const std::uint8_t* counts = visible_blocks_.data() + i * blocks();
    for (Index b = keys.begin / block; b * block < keys.end; ++b)
      if (counts[b]) return true;
    return false;
  }

  /// Modifies the scaled scores row[j] of query row i, head h, against keys first_key + j for j in
  /// [begin, end): soft-cap, ALiBi, bias, then -inf where a key is hidden.
  void apply(Index h, Index i, Index first_key, Scalar* row, Index begin, Index end) const {
    if (options_.softcap) apply_softcap(row, begin, end, *options_.softcap);
    if (options_.alibi_slopes.size())
      add_alibi(row, begin, end, options_.alibi_slopes(h), first_key_ + first_key, position(i));
    if (options_.bias.size())
      for (Index j = begin; j < end; ++j) row[j] += static_cast<Scalar>(options_.bias(i, first_key + j));
    if (!hides_) return;
    for (Index j = begin; j < end; ++j)
      if (hidden(i, first_key + j)) row[j] = -std::numeric_limits<Scalar>::infinity();
  }

 private:
  Index blocks() const { return (n_k_ + block - 1) / block; }

  /// Key padding alone (the same keys hidden from every row): for each j, the first valid key
  /// >= j and one past the last valid key < j. O(n_k), where counts per row and block would be
  /// O(n_q n_k / 8) for an O(n_k) input.
  void index_valid_keys() {
    const auto size = static_cast<std::size_t>(n_k_) + 1;
    next_valid_.assign(size, n_k_), end_of_valid_.assign(size, 0);
    for (Index j = n_k_ - 1; j >= 0; --j)
      next_valid_[static_cast<std::size_t>(j)] = options_.key_valid(j) ? j : next_valid_[static_cast<std::size_t>(j) + 1];
    for (Index j = 1; j <= n_k_; ++j)
      end_of_valid_[static_cast<std::size_t>(j)] = options_.key_valid(j - 1) ? j : end_of_valid_[static_cast<std::size_t>(j) - 1];
  }

  /// keys cut to the first and last key row i does not hide; with a mask or bias, counts its
  /// visible keys per block.
  KeyRange narrow_to_visible(Index i, KeyRange keys) {
    if (keys.empty()) return {0, 0};
    if (!per_row_) {
      const KeyRange seen{next_valid_[static_cast<std::size_t>(keys.begin)], end_of_valid_[static_cast<std::size_t>(keys.end)]};
      return seen.empty() ? KeyRange{0, 0} : seen;
    }
    std::uint8_t* counts = visible_blocks_.data() + i * blocks();
    KeyRange seen{keys.end, keys.begin};
    for (Index j = keys.begin; j < keys.end; ++j) {
      if (hidden(i, j)) continue;
      ++counts[j / block];
      seen.begin = std::min(seen.begin, j), seen.end = j + 1;
    }
    return seen.empty() ? KeyRange{0, 0} : seen;
  }

  /// ALiBi adds slope (j - i): the distance must be exact in Scalar (else the keys of a far shard
  /// all get one bias, and their differences are lost) and slope times it finite.
  void check_alibi_distances(const char* where) const {
    Index farthest = 0;
    for (Index i = 0; i < n_q_; ++i) {
      const KeyRange keys = this->keys(i);
      if (keys.empty()) continue;
      const Index p = position(i), first = first_key_ + keys.begin, last = first_key_ + keys.end - 1;
      farthest = std::max({farthest, p > first ? p - first : first - p, p > last ? p - last : last - p});
    }
    // (Every Index is exact where Scalar's significand is as wide: double on a 32-bit target.)
    if constexpr (std::numeric_limits<Scalar>::digits < std::numeric_limits<Index>::digits)
      if (farthest >= Index(1) << std::numeric_limits<Scalar>::digits)
        detail::invalid(where, "ALiBi at a key-query distance of ", farthest, ": ", detail::scalar_name<Scalar>(),
                        " holds distances exactly only below 2^", std::numeric_limits<Scalar>::digits,
                        " (the keys' differences would be lost); place the queries nearer their keys");
    for (Index h = 0; h < options_.alibi_slopes.size(); ++h)
      if (!std::isfinite(static_cast<Scalar>(std::abs(options_.alibi_slopes(h)) * static_cast<double>(farthest))))
        detail::invalid(where, "alibi_slopes(", h, ") = ", options_.alibi_slopes(h), " times the key-query distance ", farthest,
                        " is not finite in ", detail::scalar_name<Scalar>());
  }

  void check(const char* where, Index n_heads) const {
    const AttentionOptions& o = options_;
    if (o.query_rows_per_position < 1)
      detail::invalid(where, "query_rows_per_position must be >= 1, got ", o.query_rows_per_position);
    if (o.query_rows_per_position > 1 && n_q_ % o.query_rows_per_position != 0)
      detail::invalid(where, "n_q = ", n_q_, " query rows are not whole groups of query_rows_per_position = ",
                      o.query_rows_per_position);
    if (o.query_rows_per_position > 1 && (o.alibi_slopes.size() || o.sinks.size()))
      detail::invalid(where, "query_rows_per_position = ", o.query_rows_per_position,
                      " folds heads into rows: ALiBi slopes and sinks are per head and need them unfolded");
    if (o.window && *o.window <= 0) detail::invalid(where, "window must be > 0, got ", *o.window);
    if (o.first_key_position < 0 || o.first_key_position > detail::max_position)
      detail::invalid(where, "first_key_position must be >= 0 and <= ", detail::max_position, ", got ", o.first_key_position);
    if (o.first_query_position && (*o.first_query_position < 0 || *o.first_query_position > detail::max_position))
      detail::invalid(where, "first_query_position must be >= 0 and <= ", detail::max_position, ", got ",
                      *o.first_query_position);
    if (o.window && !o.causal) detail::invalid(where, "a sliding window needs the causal mask (causal = true)");
    if (o.chunk && *o.chunk <= 0) detail::invalid(where, "chunk must be > 0, got ", *o.chunk);
    if (o.chunk && !o.causal) detail::invalid(where, "chunked attention needs the causal mask (causal = true)");
    if (o.key_valid.size() && o.key_valid.size() != n_k_)
      detail::invalid(where, "key_valid has ", o.key_valid.size(), " entries, expected one per key, ", n_k_);
    check_matrix_shape(where, "mask", o.mask.rows(), o.mask.cols());
    check_matrix_shape(where, "bias", o.bias.rows(), o.bias.cols());
    for (Index i = 0; i < o.bias.rows(); ++i)
      for (Index j = 0; j < o.bias.cols(); ++j)
        if (o.bias(i, j) != -std::numeric_limits<double>::infinity() && !std::isfinite(static_cast<Scalar>(o.bias(i, j))))
          detail::invalid(where, "bias has ", o.bias(i, j), " at row ", i, ", column ", j, ", not finite in ",
                          detail::scalar_name<Scalar>(), " (finite values, or -inf to hide a key)");
    if (o.softcap && !(*o.softcap > 0.0 && std::isfinite(*o.softcap)))
      detail::invalid(where, "softcap must be finite and > 0, got ", *o.softcap);
    if (o.softcap && !detail::finite_with_inverse<Scalar>(*o.softcap))
      detail::invalid(where, "softcap ", *o.softcap, " or its inverse is not finite and nonzero in ", detail::scalar_name<Scalar>());
    detail::check_per_head(where, "alibi_slopes", o.alibi_slopes, n_heads);
    detail::check_per_head(where, "sinks", o.sinks, n_heads);
    for (Index h = 0; h < o.sinks.size(); ++h)
      if (!std::isfinite(static_cast<Scalar>(o.sinks(h))))
        detail::invalid(where, "sinks has ", o.sinks(h), " for head ", h, ", not finite in ", detail::scalar_name<Scalar>());
  }
  /// A mask or bias is (n_q, n_k), or 0 x 0 for none: a 0 x n or n x 0 one is a mistake, not none.
  void check_matrix_shape(const char* where, const char* name, Index rows, Index cols) const {
    if ((rows != 0 || cols != 0) && (rows != n_q_ || cols != n_k_))
      detail::invalid(where, name, " is ", rows, "x", cols, ", expected (n_q, n_k) = ", n_q_, "x", n_k_);
  }


  const AttentionOptions& options_;
  Index n_q_, n_k_, first_key_, rows_per_position_, first_query_;
  bool per_row_ = false, hides_ = false, modifies_ = false;
  std::vector<KeyRange> ranges_;
  bool monotone_ = true;  // ranges_[i].begin and .end never decrease with i
  std::vector<std::uint8_t> visible_blocks_;  // mask or bias: (n_q, blocks()), visible keys per block of 8
  std::vector<Index> next_valid_, end_of_valid_;  // key padding alone: see index_valid_keys
};

namespace detail {
/// The shared options of a one-head step (CausalMask, RowSoftmax) reading head head.index of them;
/// throws if there are none or the head is not one of theirs.
inline std::shared_ptr<const AttentionOptions> shared_options(std::shared_ptr<const AttentionOptions> options, OneHead head,
                                                              const char* where) {
  if (!options) invalid(where, "no options given (a null pointer)");
  if (head.n_heads <= 0 || head.index < 0 || head.index >= head.n_heads)
    invalid(where, "head ", head.index, " of ", head.n_heads, " is not a head (0 <= index < n_heads)");
  check_per_head(where, "alibi_slopes", options->alibi_slopes, head.n_heads);
  check_per_head(where, "sinks", options->sinks, head.n_heads);
  return options;
}
}  // namespace detail

/// The options of a call on n_heads heads as seen by head h alone: its ALiBi slope and sink only.
/// Throws if a per-head option does not have n_heads entries.
inline AttentionOptions options_of_head(const AttentionOptions& options, Index h, Index n_heads, const char* where) {
  detail::check_per_head(where, "alibi_slopes", options.alibi_slopes, n_heads);
  detail::check_per_head(where, "sinks", options.sinks, n_heads);
  if (h < 0 || h >= n_heads) detail::invalid(where, "head ", h, " out of range [0, ", n_heads, ")");
  AttentionOptions one = options;
  if (options.alibi_slopes.size()) one.alibi_slopes = options.alibi_slopes.segment(h, 1);
  if (options.sinks.size()) one.sinks = options.sinks.segment(h, 1);
  return one;
}

/// The scaled scores as the softmax sees them: modified by the rule (cap, ALiBi, bias) and -inf
/// wherever query row i may not see key j. scaled: (n_q, n_k) -> (n_q, n_k). Head h's slope and
/// sink. For showing (a trace's masked_scores) and as the input of softmax_rows.
template <class Scalar>
Matrix<Scalar> masked_scores(const Matrix<Scalar>& scaled, const ScoreRule<Scalar>& rule, Index h = 0) {
  constexpr Scalar minus_inf = -std::numeric_limits<Scalar>::infinity();
  Matrix<Scalar> shown = scaled;
  for (Index i = 0; i < shown.rows(); ++i) {
    const KeyRange keys = rule.keys(i);
    rule.apply(h, i, /*first_key=*/0, shown.row(i).data(), keys.begin, keys.end);
    shown.row(i).head(keys.begin).setConstant(minus_inf);
    shown.row(i).tail(shown.cols() - keys.begin - keys.size()).setConstant(minus_inf);
  }
  return shown;
}

/// The compiled mode's instantiations of the score rule (detail/compiled.hpp).
#define HEADWISE_SCORE_RULE_INSTANTIATIONS(PREFIX, S) \
  PREFIX template class ScoreRule<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_SCORE_RULE_INSTANTIATIONS)

}  // namespace headwise
