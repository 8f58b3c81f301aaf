// LayerConfig: what belongs to an attention layer besides its weights, as a model's config.json
// fixes it: the rotary embedding, the norms of the projected queries, keys and values, a query
// scale by position, a sliding window or chunks, soft-capping, ALiBi slopes, attention sinks and
// the score divisor. A call's AttentionOptions add what belongs to the call (masks, padding,
// packed sequences, threads); a field set in both is taken from the call.
//
// Between the projection and the scores a layer computes, in this order: the QK-norm (unless
// after_rope), the rotary embedding, the QK-norm (after_rope), the value norm, the query scale.
#pragma once

#include <optional>

#include "headwise/kv_storage.hpp"
#include "headwise/options.hpp"
#include "headwise/norms.hpp"
#include "headwise/query_scale.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/score_rule.hpp"  // (detail::max_position)
#include "headwise/types.hpp"

namespace headwise {

struct LayerConfig {
  /// Rotary embedding of Q and K (Llama, Qwen, Mistral, Gemma, gpt-oss, ...); d_head 0 means the
  /// layer's. None: a NoPE layer (Llama 4, SmolLM3).
  std::optional<RopeConfig> rope;
  std::optional<QkNorm> qk_norm;          ///< Qwen3, Gemma 3, OLMo 2, Llama 4, Qwen3-Next, Gemma 4
  std::optional<RmsNorm> value_norm;      ///< Gemma 4: the values normed per head
  std::optional<QueryScale> query_scale;  ///< Llama 4's NoPE layers, Ministral 3
  std::optional<Index> window;    ///< sliding window (Mistral; Gemma's local layers; gpt-oss)
  std::optional<Index> chunk;     ///< chunked attention (Llama 4's RoPE layers)
  std::optional<double> softcap;  ///< Gemma 2's attn_logit_softcapping
  Vector<double> alibi_slopes;    ///< BLOOM, MPT: one per head (alibi_slopes(n_heads))
  Vector<double> sinks;           ///< gpt-oss: one learned logit per head
  std::optional<double> divisor;  ///< scores divided by this instead of sqrt(d_head)
  /// KV sharing (Gemma 4's num_kv_shared_layers): the layer computes no keys or values of its own
  /// and attends to those of this earlier layer, read from its cache (forward_reading_cache).
  std::optional<Index> shares_keys_values_of;
  /// How the layer's keys and values are stored, in its caches and in its forward's own store:
  /// as computed, or BF16, F16, int8 (kv_storage.hpp; float32 layers). The fused path attends to
  /// what is stored, and the step-by-step path to the same numbers (rounded through the storage).
  KvStorage kv_storage = KvStorage::as_computed;
  /// How the fused kernel multiplies by the stored keys and values (kv_storage.hpp): widened (the
  /// default and the reference) or stored (int8 as integers, BF16 by pairs, F16 by F16 chains: the
  /// query rounded to the stored type). The step-by-step path computes the widened arithmetic on
  /// the same stored numbers.
  KvArithmetic kv_arithmetic = KvArithmetic::widened;

  /// True if the layer changes its projections before the scores other than by RoPE (a norm or a
  /// query scale): what the layer's backward does not differentiate.
  bool transforms_projections() const { return qk_norm || value_norm || query_scale; }
};

/// The options of one call of a layer with `layer`: the call's, completed by the layer's.
inline AttentionOptions options_with_layer(const AttentionOptions& call, const LayerConfig& layer) {
  if (call.query_rows_per_position != 1)
    detail::invalid("MultiHeadAttention", "query_rows_per_position = ", call.query_rows_per_position,
                    ": a layer's rows are its tokens (the layer lays out its own attention call)");
  AttentionOptions options = call;
  if (!options.window) options.window = layer.window;
  if (!options.chunk) options.chunk = layer.chunk;
  if (!options.softcap) options.softcap = layer.softcap;
  if (!options.divisor) options.divisor = layer.divisor;
  if (options.alibi_slopes.size() == 0) options.alibi_slopes = layer.alibi_slopes;
  if (options.sinks.size() == 0) options.sinks = layer.sinks;
  return options;
}

/// Where a layer call's tokens start: options.first_key_position (0 by default). The queries are
/// the same tokens: a first_query_position set otherwise is refused.
inline Index layer_first_position(const AttentionOptions& options, const char* where) {
  if (options.first_query_position && *options.first_query_position != options.first_key_position)
    detail::invalid(where, "first_query_position = ", *options.first_query_position, " differs from first_key_position = ",
                    options.first_key_position, ": a layer's queries and keys are the same tokens (set first_key_position only)");
  if (options.first_key_position < 0 || options.first_key_position > detail::max_position)
    detail::invalid(where, "first_key_position must be >= 0 and <= ", detail::max_position, ", got ", options.first_key_position);
  return options.first_key_position;
}

}  // namespace headwise
