// LayerConfig: what belongs to an attention layer besides its weights, as a model's config.json
// fixes it: the rotary embedding, a sliding window, soft-capping, ALiBi slopes, attention sinks
// and the score divisor. A call's AttentionOptions add what belongs to the call (masks, padding,
// packed sequences, threads); a field set in both is taken from the call.
#pragma once

#include <optional>

#include "headwise/options.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/types.hpp"

namespace headwise {

struct LayerConfig {
  /// Rotary embedding of Q and K (Llama, Qwen2, Mistral, Gemma, gpt-oss); d_head 0 means the layer's.
  std::optional<RopeConfig> rope;
  std::optional<Index> window;    ///< sliding window (Mistral; Gemma 2's local layers)
  std::optional<double> softcap;  ///< Gemma 2's attn_logit_softcapping
  Vector<double> alibi_slopes;    ///< BLOOM, MPT: one per head (alibi_slopes(n_heads))
  Vector<double> sinks;           ///< gpt-oss: one learned logit per head
  std::optional<double> divisor;  ///< scores divided by this instead of sqrt(d_head)
};

/// The options of one call of a layer with `layer`: the call's, completed by the layer's.
inline AttentionOptions options_with_layer(const AttentionOptions& call, const LayerConfig& layer) {
  AttentionOptions options = call;
  if (!options.window) options.window = layer.window;
  if (!options.softcap) options.softcap = layer.softcap;
  if (!options.divisor) options.divisor = layer.divisor;
  if (options.alibi_slopes.size() == 0) options.alibi_slopes = layer.alibi_slopes;
  if (options.sinks.size() == 0) options.sinks = layer.sinks;
  return options;
}

}  // namespace headwise
