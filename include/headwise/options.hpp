// AttentionOptions: how attention is computed (masks, score modifiers, divisor), in one struct that
// grows by name. Each variant's rule lives in its own header under variants/; score_rule.hpp
// checks a call's options and applies them, the same way on the step-by-step and the fused path.
#pragma once

#include <cmath>
#include <optional>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/scores.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Options shared by every attention entry point. Set fields by name:
///   AttentionOptions opts; opts.causal = false; opts.divisor = 8.0;
struct AttentionOptions {
  /// Causal mask: query i sees keys 0..i only. Off: every query sees every key (bidirectional).
  bool causal = true;
  /// The scores are divided by this; unset means sqrt(d_head). Must be finite and > 0.
  std::optional<double> divisor;
  /// Threads for the call: 0 means the default (OMP_NUM_THREADS where OpenMP is linked, else the
  /// machine's cores); results do not depend on it.
  int threads = 0;

  // Where the call's queries and keys sit (partial attention over a shard of keys: see
  // partial_attention.hpp). Unset: keys at positions 0 .. n_k - 1, queries aligned to their end.
  /// The absolute position of the first query (query i at first_query_position + i).
  std::optional<Index> first_query_position;
  /// The absolute position of the first key (key j at first_key_position + j). >= 0.
  Index first_key_position = 0;
  /// Consecutive query rows that share one position: the query heads of one shared key/value
  /// head folded into rows (row r is the query at position first + r / query_rows_per_position),
  /// so that one pass over the keys serves them all (multi-head latent attention's absorbed form).
  /// >= 1, dividing n_q; per-head options (ALiBi slopes, sinks) need the heads unfolded (1).
  Index query_rows_per_position = 1;

  // Which keys a query sees, besides the causal mask (positions are absolute; see key_range.hpp).
  /// Sliding window: the query at position i sees key j iff 0 <= i - j < window. Needs causal; > 0.
  std::optional<Index> window;
  /// Chunked attention (Llama 4): the query at position i sees key j iff floor(j / chunk) =
  /// floor(i / chunk), besides the causal mask. Needs causal; > 0.
  std::optional<Index> chunk;
  /// Packed sequences: boundaries 0 = c_0 < ... < c_S = n_k; a query sees its own sequence only.
  std::vector<Index> cu_seqlens;
  /// Key padding: key j is hidden from every query where key_valid(j) is false. Size n_k, or empty.
  Eigen::Array<bool, Eigen::Dynamic, 1> key_valid;
  /// A boolean mask (n_q, n_k), true = visible, applied on top of the causal mask (turn causal off
  /// for the mask alone). Empty: none.
  Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> mask;

  // What happens to a score, in this order: scaled, capped, ALiBi added, bias added.
  /// Soft-capping: s = softcap tanh(s / softcap) on the scaled scores (Gemma 2). Finite, > 0.
  std::optional<double> softcap;
  /// ALiBi: head h adds alibi_slopes(h) (j - i) (alibi.hpp builds BLOOM's slopes). Size n_heads.
  Vector<double> alibi_slopes;
  /// An additive bias (n_q, n_k) on the scaled scores; -inf hides a key, NaN and +inf are refused.
  Matrix<double> bias;

  // How a row is normalised.
  /// Attention sinks: head h's logit joins every row's denominator (gpt-oss). Size n_heads.
  Vector<double> sinks;
};

/// Which head of a multi-head call's options a one-head step reads (its ALiBi slope and its sink):
/// head `index` of `n_heads`, so that the steps of every head share one AttentionOptions instead
/// of each holding a copy. The default is a one-head call's.
struct OneHead {
  Index index = 0;
  Index n_heads = 1;
};

/// The divisor that `options` asks for at width d_head, for a call computing in Scalar; throws
/// unless it is finite and > 0 with a finite inverse in Scalar (checked_divisor, scores.hpp).
template <class Scalar = double>
double resolve_divisor(const AttentionOptions& options, Index d_head, const char* where) {
  if (!options.divisor) return default_divisor(d_head);
  return checked_divisor<Scalar>(*options.divisor, where);
}

}  // namespace headwise
