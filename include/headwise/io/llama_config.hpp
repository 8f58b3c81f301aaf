// What config.json says of a decoder's attention, for every family the loaders read, from one
// table (detail::families, io/model_families.hpp): each family's model_type, the keys it reads beyond the shared ones
// (hidden_size, the head counts, head_dim, RoPE: io/rope_config.hpp), what the whole-model loader
// builds around its attention, and every top-level key its config.json may have (GPT-2's row
// too). docs/models.md lists the keys; a key that changes attention and that headwise does not
// read is refused by name, and so is a key the family's config does not have, never ignored.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/checkpoint.hpp"
#include "headwise/io/config_reader.hpp"
#include "headwise/io/rope_config.hpp"
#include "headwise/layer_config.hpp"
#include "headwise/rotary_embedding.hpp"

namespace headwise::io {

/// What a layer is, as `layer_types` names it.
enum class LayerType { full, sliding, chunked, linear };

/// What config.json says of a decoder's attention, for every family the loaders read (named after
/// the first of them).
struct LlamaConfig {
  std::string model_type;           ///< one of detail::families
  Index hidden_size = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_layers = 0;
  RopeConfig rope;                  ///< theta, scaling, partial rotary; d_head = head_dim (the full layers')
  std::optional<RopeConfig> sliding_rope;  ///< Gemma 3 / 4: the sliding layers' own rotary embedding
  /// Per layer, true where the layer has no rotary embedding (Llama 4 and SmolLM3: no_rope_layers
  /// 0). Empty: derived by nope_every.
  std::vector<bool> nope_layers;
  Index nope_every = 0;             ///< derived: layer i is NoPE iff (i + 1) % nope_every == 0 (0: none)
  std::optional<Index> sliding_window;  ///< the window of the sliding layers
  Index first_window_layer = 0;     ///< Qwen2's max_window_layers: layers before it have none
  /// Per layer, from `layer_types`. Empty: derived as the family's config class derives it, by
  /// the rules below (no per-layer list is built: a config may claim 2^32 layers).
  std::vector<LayerType> layer_types;
  Index full_every = 0;             ///< derived: layer i is full iff (i + 1) % full_every == 0, else other_type
  LayerType other_type = LayerType::sliding;
  bool chunked_rope_layers = false; ///< derived (Llama 4): the layers with RoPE are chunked, the others full
  // (else: sliding from first_window_layer on where there is a window, full otherwise)
  std::optional<Index> chunk;       ///< Llama 4's attention_chunk_size, on its chunked layers
  std::optional<double> divisor;    ///< Gemma: sqrt(query_pre_attn_scalar); Gemma 4: 1
  std::optional<double> softcap;    ///< Gemma 2's attn_logit_softcapping
  /// The form of the QK-norm (weights empty here: the loader reads q_norm / k_norm), on every
  /// layer, or (Llama 4) on the layers with RoPE only.
  std::optional<QkNorm> qk_norm;
  bool qk_norm_weighted = true;     ///< false: weightless (Llama 4's L2 norm), no q_norm / k_norm tensors
  bool qk_norm_on_rope_layers_only = false;
  std::optional<RmsNorm> value_norm;       ///< Gemma 4
  std::optional<QueryScale> query_scale;   ///< Ministral 3 (every layer); Llama 4 (NoPE layers only)
  bool query_scale_on_nope_layers_only = false;
  bool sinks = false;               ///< gpt-oss: self_attn.sinks
  bool fused_qkv = false;           ///< Phi-3: self_attn.qkv_proj
  /// attention_bias: true, the projections' biases are required; false, refused (Hugging Face's
  /// layers then have none); unset, read where the checkpoint has them (Qwen2 stores q, k and v's
  /// without saying).
  std::optional<bool> attention_bias;
  bool output_gate = false;         ///< Qwen3-Next: q_proj holds [q_h | gate_h]
  /// Gemma 4's full layers: their head_dim and key/value heads (0: as the others), and K = V
  /// (attention_k_eq_v: no v_proj, the values are the raw keys, normed).
  Index full_head_dim = 0, full_kv_heads = 0;
  bool full_keys_are_values = false;
  /// Gemma 4's num_kv_shared_layers: the last this many layers read the keys and values of the last
  /// earlier layer of their type.
  Index kv_shared_layers = 0;
  /// Multi-head latent attention (DeepSeek-V3, Kimi K2): the latent's shape. Set for those
  /// families only; their layers load as MultiHeadLatentAttention (io/latent_attention.hpp).
  struct Latent {
    Index q_lora_rank = 0;  ///< 0 (q_lora_rank null): a plain q_proj
    Index kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
    bool rope_interleave = true;
  };
  std::optional<Latent> latent;
  /// FP8 weights in blocks (quantization_config: fp8, weight_block_size): weight (i, j) is
  /// fp8(i, j) times weight_scale_inv(i / rows, j / cols).
  struct Fp8Blocks {
    Index rows = 128, cols = 128;
    bool e5m2 = false;  ///< fmt "e5m2"; else "e4m3"
  };
  std::optional<Fp8Blocks> fp8;
  /// gpt-oss's experts in MXFP4 (quantization_config: mxfp4), as its checkpoints store them
  /// (`*_blocks`, `*_scales`); every other tensor unquantized.
  bool mxfp4_experts = false;

  /// Layer L's type (range-checked).
  LayerType type_of(Index layer) const {
    if (layer < 0 || layer >= n_layers)
      throw std::invalid_argument("headwise: LlamaConfig::layer: layer " + std::to_string(layer) + " out of range [0, " +
                                  std::to_string(n_layers) + ")");
    if (!layer_types.empty()) return layer_types[static_cast<std::size_t>(layer)];
    if (chunked_rope_layers) return nope(layer) ? LayerType::full : LayerType::chunked;
    if (full_every) return (layer + 1) % full_every == 0 ? LayerType::full : other_type;
    return sliding_window && layer >= first_window_layer ? LayerType::sliding : LayerType::full;
  }
  bool nope(Index layer) const {
    if (!nope_layers.empty()) return nope_layers[static_cast<std::size_t>(layer)];
    return nope_every && (layer + 1) % nope_every == 0;
  }
  /// Layer L's head_dim and key/value heads (Gemma 4's full layers have their own).
  Index head_dim_of(Index layer) const { return type_of(layer) == LayerType::full && full_head_dim ? full_head_dim : head_dim; }
  Index kv_heads_of(Index layer) const { return type_of(layer) == LayerType::full && full_kv_heads ? full_kv_heads : n_kv_heads; }
  /// The first layer from `from` on that has softmax attention (not linear), or n_layers: O(1) for
  /// derived types, so a config claiming 2^32 layers is not walked layer by layer.
  Index next_attention_layer(Index from) const {
    if (layer_types.empty() && full_every && other_type == LayerType::linear)
      from = std::max(from, (from + full_every) / full_every * full_every - 1);
    for (; from < n_layers; ++from)
      if (type_of(from) != LayerType::linear) return from;
    return n_layers;
  }
  /// The earlier layer whose keys and values layer L reads (Gemma 4's shared KV), or none.
  std::optional<Index> kv_source_of(Index layer) const {
    if (layer < n_layers - kv_shared_layers) return std::nullopt;
    for (Index l = n_layers - kv_shared_layers - 1; l >= 0; --l)
      if (type_of(l) == type_of(layer)) return l;
    return std::nullopt;
  }

  /// The layer config of layer L (QK-norm weights and sinks are read from the checkpoint by the
  /// loader). A linear-attention layer is refused: it is not softmax attention.
  LayerConfig layer(Index layer) const {
    const LayerType type = type_of(layer);
    if (type == LayerType::linear)
      throw std::invalid_argument("headwise: LlamaConfig::layer: layer " + std::to_string(layer) + " of this " + model_type +
                                  " model is a linear_attention layer (Gated DeltaNet), not softmax attention: "
                                  "headwise loads its full_attention layers");
    LayerConfig c;
    if (!nope(layer)) {
      c.rope = type == LayerType::sliding && sliding_rope ? *sliding_rope : rope;
      c.rope->d_head = head_dim_of(layer);
    }
    if (type == LayerType::sliding) c.window = sliding_window;
    if (type == LayerType::chunked) c.chunk = chunk;
    if (qk_norm && !(qk_norm_on_rope_layers_only && nope(layer))) c.qk_norm = qk_norm;
    c.value_norm = value_norm;
    if (query_scale && (!query_scale_on_nope_layers_only || nope(layer))) c.query_scale = query_scale;
    c.divisor = divisor, c.softcap = softcap;
    c.shares_keys_values_of = kv_source_of(layer);
    return c;
  }
};

namespace detail {

/// What the whole-model loader (io/decoder_model.hpp) builds around a family's attention layers.
struct WholeModel {
  /// Where the block's RMSNorms sit: before attention and MLP (Llama), before and after both
  /// (Gemma 2 and 3), after only (OLMo 2); none: no whole-model code for the family.
  enum class Norms { none, before, before_and_after, after };
  Norms norms = Norms::none;
  bool gemma = false;             ///< embeddings times sqrt(d_model), `hidden_activation`, `final_logit_softcapping`
  bool tied = false;              ///< tie_word_embeddings where the config leaves it out (its config class's default)
  bool fused_gate_up = false;     ///< Phi-3: one mlp.gate_up_proj [2 inner, d], the gate's rows first
  const char* missing = nullptr;  ///< what the model code lacks, where norms is none
  bool zero_centred = false;      ///< (1 + w) norms (Gemma 2 and 3, Qwen3-Next); else w
};

/// One family: its model_type, what it reads, its whole model, and the top-level keys its
/// config.json may have.
struct Family {
  const char* model_type;
  /// Reads what the family's config says beyond the shared keys; null for GPT-2, whose config
  /// io/gpt2.hpp reads (its row is here for its keys).
  void (*read)(const ConfigReader&, LlamaConfig&);
  const char* rope_key;  ///< a key of its RoPE object besides the rope_type's own, or null
  bool rope_by_layer_type = false;  ///< its RoPE is read by `read`, not before it (it differs by layer type, or covers part of a head)
  WholeModel model = {};
  /// Every top-level key its config.json may have: what its Hugging Face config class knows (and
  /// what older releases wrote), PretrainedConfig's own, and, for a Llama-style family, the ones
  /// every such family shares. Any other key is refused by name (refuse_unknown_keys).
  std::vector<const char*> keys;
};

/// The one table: every family the loaders read, GPT-2 included (io/model_families.hpp).
const std::vector<Family>& families();

/// The family of `model_type` (GPT-2's row included), or null.
const Family* family_of(const std::string& model_type);

/// Refuses, by name, a top-level key of the config that `family`'s config.json does not have
/// (Family::keys): a misspelt or foreign key ("rope_thetta", "num_key_value_head", Gemma's
/// "attn_logit_softcapping" on a Llama) would otherwise load a model other than the file describes.
/// The values of the nested objects (rope_scaling, quantization_config) are checked where read.
void refuse_unknown_keys(const ConfigReader& r, const Family& family);

/// What a config.json of any family the loaders read says, from its JSON parsed once (`r`; the
/// whole-model loader reads its other keys from the same reader).
LlamaConfig llama_config_of(const ConfigReader& r);

}  // namespace detail

/// Parses the text of a config.json of any family the loaders read; `name` is used in messages.
LlamaConfig parse_llama_config(const std::string& text, const std::string& name);

/// Reads and parses the config.json at `path`.
LlamaConfig read_llama_config(const std::string& path);

}  // namespace headwise::io

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_IO_DEFINITIONS_OF("headwise/io/definitions/llama_config.hpp")
