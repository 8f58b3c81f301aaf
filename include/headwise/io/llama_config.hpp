// What config.json says of a decoder's attention, for every family the loaders read, from one
// table (detail::families): each family's model_type, the keys it reads beyond the shared ones
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

/// The one table: every family the loaders read, GPT-2 included.
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

// ---- Definitions (detail/compiled.hpp: header-only, or src/io.cpp) ----
#if HEADWISE_IO_DEFINITIONS
#include <nlohmann/json.hpp>

namespace headwise::io {
namespace detail {

/// A config's `layer_types` (transformers 4.5x and v5 write them): one entry per layer, each one
/// of `allowed` (the types the family has); any other entry is refused by name.
HEADWISE_IO_INLINE std::vector<LayerType> parse_layer_types(const ConfigReader& r, Index n_layers, std::initializer_list<LayerType> allowed) {
  const nlohmann::json& t = r.json().at("layer_types");
  if (!t.is_array() || t.size() != static_cast<std::size_t>(n_layers))
    r.fail("\"layer_types\" must be a list of num_hidden_layers = " + std::to_string(n_layers) + " entries, got " +
           (t.is_array() ? std::to_string(t.size()) + " entries" : t.dump()));
  const char* names[] = {"full_attention", "sliding_attention", "chunked_attention", "linear_attention"};
  std::string known;
  for (const LayerType a : allowed) known += std::string(known.empty() ? "" : ", ") + names[static_cast<int>(a)];
  std::vector<LayerType> types;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string type = t[i].is_string() ? t[i].get<std::string>() : "";
    const auto found = std::find_if(allowed.begin(), allowed.end(), [&](LayerType a) { return type == names[static_cast<int>(a)]; });
    if (found == allowed.end())
      r.fail("layer_types[" + std::to_string(i) + "] = " + t[i].dump() + " is not a layer this model_type has (" + known + ")");
    types.push_back(*found);
  }
  return types;
}

/// The layer types from `layer_types` (each one of `allowed`) if the config lists them (true); the
/// family derives them otherwise. Sliding layers need a `sliding_window`.
HEADWISE_IO_INLINE bool read_layer_types(const ConfigReader& r, LlamaConfig& c, std::initializer_list<LayerType> allowed) {
  if (!r.has("layer_types")) return false;
  c.layer_types = parse_layer_types(r, c.n_layers, allowed);
  const bool any = std::find(c.layer_types.begin(), c.layer_types.end(), LayerType::sliding) != c.layer_types.end();
  if (any && !r.has("sliding_window")) r.fail("\"layer_types\" has sliding_attention layers but there is no \"sliding_window\"");
  if (any) c.sliding_window = r.integer("sliding_window");
  return true;
}
/// Derived: layer i is full iff (i + 1) % every == 0, else `other` (a sliding one needs the window).
HEADWISE_IO_INLINE void derive_periodic(const ConfigReader& r, LlamaConfig& c, Index every, LayerType other) {
  c.full_every = every, c.other_type = other;
  if (other == LayerType::sliding && every != 1) c.sliding_window = r.integer("sliding_window");
}
HEADWISE_IO_INLINE bool has_type(const LlamaConfig& c, LayerType t) { return std::find(c.layer_types.begin(), c.layer_types.end(), t) != c.layer_types.end(); }

/// From `no_rope_layers` (Llama 4, SmolLM3: 1 = the layer has RoPE, 0 = NoPE), else every
/// `interval`-th layer is NoPE (the config classes' default).
HEADWISE_IO_INLINE void read_nope_layers(const ConfigReader& r, LlamaConfig& c, Index interval) {
  if (!r.has("no_rope_layers") || r.json().at("no_rope_layers") == nlohmann::json::array()) {  // [] is the default too
    c.nope_every = interval;
    return;
  }
  const nlohmann::json& j = r.json().at("no_rope_layers");
  if (!j.is_array() || j.size() != static_cast<std::size_t>(c.n_layers))
    r.fail("\"no_rope_layers\" must be a list of num_hidden_layers = " + std::to_string(c.n_layers) + " entries of 0 or 1");
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (j[i] != 0 && j[i] != 1) r.fail("no_rope_layers[" + std::to_string(i) + "] = " + j[i].dump() + " is not 0 or 1");
    c.nope_layers.push_back(j[i] == 0);
  }
}

/// The family's QK-norm form, its eps from rms_norm_eps; `weighted`: its weights are the
/// checkpoint's q_norm / k_norm (read by the loader).
HEADWISE_IO_INLINE void set_qk_norm(const ConfigReader& r, LlamaConfig& c, RmsNorm::Over over, bool zero_centred, bool weighted,
                        double eps_default) {
  QkNorm n;
  n.query.over = n.key.over = over;
  n.query.zero_centred = n.key.zero_centred = zero_centred;
  n.query.eps = n.key.eps = r.number(r.json(), "rms_norm_eps", eps_default);
  c.qk_norm = n, c.qk_norm_weighted = weighted;
}

/// A flag Hugging Face tests for truth (a boolean, or a number: nonzero is true); absent or null:
/// `fallback`.
HEADWISE_IO_INLINE bool truthy(const ConfigReader& r, const char* key, bool fallback) {
  if (!r.has(key)) return fallback;
  const nlohmann::json& v = r.json().at(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  r.fail(std::string("\"") + key + "\" = " + v.dump() + " is not true, false or a number");
}

/// Where only some families read a key that changes attention, the others refuse it by name.
HEADWISE_IO_INLINE void refuse_unread(const ConfigReader& r, const char* key, const std::string& model_type) {
  if (r.has(key) && r.json().at(key) != false)
    r.fail("\"" + std::string(key) + "\" = " + r.json().at(key).dump() + " changes attention, and headwise does not read it for " + model_type);
}

// ---- The families: what each reads beyond hidden_size, the head counts, head_dim and RoPE ----

HEADWISE_IO_INLINE void read_llama(const ConfigReader& r, LlamaConfig& c) { read_layer_types(r, c, {LayerType::full}); }

/// Qwen2, Qwen3, SmolLM3: a window only with use_sliding_window, from max_window_layers on.
HEADWISE_IO_INLINE void read_qwen2(const ConfigReader& r, LlamaConfig& c) {
  const bool windowed = r.boolean("use_sliding_window", false);
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding})) {
    if (windowed && r.has("sliding_window")) c.sliding_window = r.integer("sliding_window");
    c.first_window_layer = r.integer("max_window_layers", c.n_layers);
  }
  if (!windowed) {  // Hugging Face sets sliding_window to None without use_sliding_window
    c.sliding_window.reset();
    std::replace(c.layer_types.begin(), c.layer_types.end(), LayerType::sliding, LayerType::full);
  }
}

HEADWISE_IO_INLINE void read_qwen3(const ConfigReader& r, LlamaConfig& c) {
  read_qwen2(r, c);
  set_qk_norm(r, c, RmsNorm::Over::head, false, true, 1e-6);
}

HEADWISE_IO_INLINE void read_smollm3(const ConfigReader& r, LlamaConfig& c) {
  read_qwen2(r, c);
  read_nope_layers(r, c, r.integer("no_rope_layer_interval", 4));
}

/// Mistral, Ministral: every layer slides when sliding_window is set.
HEADWISE_IO_INLINE void read_mistral(const ConfigReader& r, LlamaConfig& c) {
  const bool windowed = r.has("sliding_window");
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding}) && windowed) c.sliding_window = r.integer("sliding_window");
  if (windowed && has_type(c, LayerType::full))
    r.fail("\"layer_types\" has full_attention layers, but " + c.model_type + " slides every layer when sliding_window is set");
}

/// Ministral 3: Mistral's attention, and after RoPE q *= 1 + llama_4_scaling_beta ln(1 + floor(p /
/// original_max_position_embeddings)), both read from rope_parameters.
HEADWISE_IO_INLINE void read_ministral3(const ConfigReader& r, LlamaConfig& c) {
  read_mistral(r, c);
  const nlohmann::json& p = r.has("rope_parameters") ? r.json().at("rope_parameters")
                            : r.has("rope_scaling")   ? r.json().at("rope_scaling")
                                                      : r.json();  // where parse_rope read it
  if (p.contains("llama_4_scaling_beta") && !p.at("llama_4_scaling_beta").is_null()) {
    QueryScale s;
    s.beta = r.number(p, "llama_4_scaling_beta", 0.0);
    s.period = c.rope.scaling.type == RopeScaling::Type::none ? r.integer("original_max_position_embeddings")
                                                                : c.rope.scaling.original_max_position;
    c.query_scale = s;
  }
}

HEADWISE_IO_INLINE void read_phi3(const ConfigReader& r, LlamaConfig& c) {
  c.fused_qkv = true;
  if (r.has("full_attn_mod") && r.integer("full_attn_mod") != 1) r.fail("\"full_attn_mod\" is not 1: only every layer alike is read");
  if (r.number(r.json(), "interpolate_factor", 1.0) != 1.0) r.fail("\"interpolate_factor\" is not 1, which headwise does not apply");
  if (r.boolean("lm_head_bias", false)) r.fail("\"lm_head_bias\" = true: the model code reads an LM head without a bias");
  // Phi-3 applies sliding_window to every layer.
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding}) && r.has("sliding_window"))
    c.sliding_window = r.integer("sliding_window");
}

HEADWISE_IO_INLINE void read_olmo2(const ConfigReader& r, LlamaConfig& c) {
  read_layer_types(r, c, {LayerType::full});
  set_qk_norm(r, c, RmsNorm::Over::projection, false, true, 1e-6);
}

/// Gemma 2 and 3: scores times query_pre_attn_scalar^-1/2 (absent: the config classes' 256),
/// soft-capping where set (absent: Gemma 2's class default 50, Gemma 3's none; null: none).
HEADWISE_IO_INLINE void read_gemma_scores(const ConfigReader& r, LlamaConfig& c, std::optional<double> default_softcap) {
  c.divisor = std::sqrt(r.number(r.json(), "query_pre_attn_scalar", 256.0));
  if (!(*c.divisor > 0.0) || !std::isfinite(*c.divisor)) r.fail("\"query_pre_attn_scalar\" must be finite and > 0");
  if (r.has("attn_logit_softcapping")) c.softcap = r.number(r.json(), "attn_logit_softcapping", 0.0);
  else if (!r.json().contains("attn_logit_softcapping")) c.softcap = default_softcap;
  refuse_unread(r, "use_bidirectional_attention", c.model_type);
}

HEADWISE_IO_INLINE void read_gemma2(const ConfigReader& r, LlamaConfig& c) {
  read_gemma_scores(r, c, 50.0);
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding})) derive_periodic(r, c, 2, LayerType::sliding);
}

/// Gemma 3: (1 + w) QK-norm, local layers at rope_local_base_freq unscaled (v4) or their own
/// rope_parameters entry (v5), global layers at rope_theta with its scaling.
HEADWISE_IO_INLINE void read_gemma3(const ConfigReader& r, LlamaConfig& c) {
  read_gemma_scores(r, c, std::nullopt);
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding}))
    derive_periodic(r, c, r.integer("sliding_window_pattern", 6), LayerType::sliding);
  set_qk_norm(r, c, RmsNorm::Over::head, true, true, 1e-6);
  if (r.has("rope_parameters")) {
    c.rope = parse_rope(r, c.head_dim, "full_attention");
    c.sliding_rope = parse_rope(r, c.head_dim, "sliding_attention");
  } else {
    c.rope = parse_rope(r, c.head_dim);
    RopeConfig local;
    local.d_head = c.head_dim;
    local.theta = r.number(r.json(), "rope_local_base_freq", 10000.0);
    c.sliding_rope = local;
  }
}

/// Gemma 4: scale 1, QK-norm w (no + 1), weightless value norm, full layers with their own
/// head_dim, key/value heads and K = V, proportional RoPE, KV shared by the last layers.
HEADWISE_IO_INLINE void read_gemma4(const ConfigReader& r, LlamaConfig& c) {
  c.divisor = 1.0;
  if (r.has("attn_logit_softcapping")) c.softcap = r.number(r.json(), "attn_logit_softcapping", 0.0);
  refuse_unread(r, "use_bidirectional_attention", c.model_type);
  if (!r.has("layer_types")) r.fail("no \"layer_types\": gemma4_text configs list them");
  read_layer_types(r, c, {LayerType::full, LayerType::sliding});
  set_qk_norm(r, c, RmsNorm::Over::head, false, true, 1e-6);
  RmsNorm v;
  v.eps = r.number(r.json(), "rms_norm_eps", 1e-6);
  c.value_norm = v;
  c.full_head_dim = r.integer("global_head_dim", c.head_dim);
  c.full_keys_are_values = r.boolean("attention_k_eq_v", false);
  c.full_kv_heads = c.full_keys_are_values ? r.integer("num_global_key_value_heads", c.n_kv_heads) : c.n_kv_heads;
  if (c.n_heads % c.full_kv_heads != 0) r.fail("num_attention_heads is not divisible by num_global_key_value_heads");
  c.rope = parse_rope(r, c.full_head_dim, "full_attention");
  c.sliding_rope = parse_rope(r, c.head_dim, "sliding_attention");
  if (r.number(r.json(), "num_kv_shared_layers", 0.0) != 0) c.kv_shared_layers = r.integer("num_kv_shared_layers");  // (0: none)
  if (c.kv_shared_layers >= c.n_layers) r.fail("\"num_kv_shared_layers\" must be below num_hidden_layers");
  for (Index l = c.n_layers - c.kv_shared_layers; l < c.n_layers; ++l)  // (layer_types bounds n_layers here)
    if (!c.kv_source_of(l))
      r.fail("layer " + std::to_string(l) + " shares keys and values (num_kv_shared_layers), but no earlier layer is of its type");
}

/// gpt-oss: sinks, alternating windows (layer i slides iff i is even, unless layer_types say).
HEADWISE_IO_INLINE void read_gpt_oss(const ConfigReader& r, LlamaConfig& c) {
  c.sinks = true;
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding})) derive_periodic(r, c, 2, LayerType::sliding);
}

/// Llama 4 (text): interleaved RoPE on the RoPE layers, which are chunked and L2-normed after RoPE;
/// NoPE layers full causal with the attention temperature.
HEADWISE_IO_INLINE void read_llama4(const ConfigReader& r, LlamaConfig& c) {
  c.rope.layout = RopeLayout::interleaved;
  read_nope_layers(r, c, r.integer("no_rope_layer_interval", 4));
  // attention_chunk_size: absent means the config class's 8192; null means no chunks.
  const bool chunked = !r.json().contains("attention_chunk_size") || r.has("attention_chunk_size");
  if (!read_layer_types(r, c, {LayerType::full, LayerType::chunked})) c.chunked_rope_layers = chunked;
  if (has_type(c, LayerType::chunked) && !chunked) r.fail("\"layer_types\" has chunked_attention layers but attention_chunk_size is null");
  if (has_type(c, LayerType::chunked) || c.chunked_rope_layers) c.chunk = r.integer("attention_chunk_size", 8192);
  if (r.boolean("use_qk_norm", true)) {  // (the config class's default)
    set_qk_norm(r, c, RmsNorm::Over::head, false, false, 1e-5);
    c.qk_norm->after_rope = true, c.qk_norm_on_rope_layers_only = true;
  }
  if (truthy(r, "attn_temperature_tuning", true)) {
    QueryScale s;
    s.beta = r.number(r.json(), "attn_scale", 0.1), s.period = r.integer("floor_scale", 8192), s.shift = 1;
    c.query_scale = s, c.query_scale_on_nope_layers_only = true;
  }
}

/// Qwen3-Next: its full-attention layers (every full_attention_interval-th unless layer_types say)
/// with a (1 + w) QK-norm and an output gate.
HEADWISE_IO_INLINE void read_qwen3_next(const ConfigReader& r, LlamaConfig& c) {
  if (!read_layer_types(r, c, {LayerType::full, LayerType::linear}))
    derive_periodic(r, c, r.integer("full_attention_interval", 4), LayerType::linear);
  set_qk_norm(r, c, RmsNorm::Over::head, true, true, 1e-6);
  c.output_gate = true;
  const bool fraction_given = r.has("partial_rotary_factor") ||
                              (r.has("rope_parameters") && r.json().at("rope_parameters").contains("partial_rotary_factor"));
  if (!fraction_given) c.rope.rotary_fraction = 0.25;  // the config class's default
  refuse_unread(r, "use_sliding_window", c.model_type);
}


/// quantization_config as DeepSeek-V3 and Hugging Face's FineGrainedFP8Config write it: quant_method
/// "fp8", fmt "e4m3" (or "e5m2"), activation_scheme "dynamic", weight_block_size [rows, cols],
/// modules_to_not_convert (those tensors are stored unquantized and read as they are). Anything
/// else (another method, per-tensor scales, a key it does not know) is refused by name.
HEADWISE_IO_INLINE LlamaConfig::Fp8Blocks parse_fp8_blocks(const ConfigReader& r) {
  const nlohmann::json& q = r.json().at("quantization_config");
  const auto refuse = [&](const std::string& what) { r.fail("quantization_config: " + what + " (" + q.dump() + ")"); };
  if (!q.is_object()) refuse("not an object");
  for (const auto& item : q.items())
    if (item.key() != "quant_method" && item.key() != "fmt" && item.key() != "activation_scheme" && item.key() != "weight_block_size" &&
        item.key() != "modules_to_not_convert")
      refuse("\"" + item.key() + "\" is not a key headwise reads");
  if (!q.contains("quant_method") || q.at("quant_method") != "fp8")
    refuse("quant_method is not \"fp8\": only FP8 block-scaled weights are read");
  LlamaConfig::Fp8Blocks b;
  if (q.contains("fmt") && q.at("fmt") != "e4m3" && q.at("fmt") != "e5m2") refuse("fmt is neither \"e4m3\" nor \"e5m2\"");
  b.e5m2 = q.contains("fmt") && q.at("fmt") == "e5m2";
  if (q.contains("activation_scheme") && q.at("activation_scheme") != "dynamic")
    refuse("activation_scheme is not \"dynamic\": static activation scales are not read");
  const auto it = q.find("weight_block_size");
  const auto positive = [](const nlohmann::json& v) { return v.is_number_integer() && v.get<Index>() > 0 && v.get<Index>() <= (Index(1) << 30); };
  if (it == q.end() || !it->is_array() || it->size() != 2 || !positive((*it)[0]) || !positive((*it)[1]))
    refuse("weight_block_size is not two integers [rows, cols] in [1, 2^30] (per-tensor FP8 scales are not read)");
  b.rows = (*it)[0].get<Index>(), b.cols = (*it)[1].get<Index>();
  return b;
}

/// quantization_config: FP8 blocks (parse_fp8_blocks), or gpt-oss's MXFP4 experts (quant_method
/// "mxfp4", modules_to_not_convert: the tensors left unquantized, which are read as they are).
HEADWISE_IO_INLINE void parse_quantization(const ConfigReader& r, LlamaConfig& c) {
  const nlohmann::json& q = r.json().at("quantization_config");
  if (!q.is_object() || !q.contains("quant_method") || q.at("quant_method") != "mxfp4") {
    c.fp8 = parse_fp8_blocks(r);
    return;
  }
  for (const auto& item : q.items())
    if (item.key() != "quant_method" && item.key() != "modules_to_not_convert")
      r.fail("quantization_config: \"" + item.key() + "\" is not a key headwise reads with quant_method \"mxfp4\" (" + q.dump() + ")");
  if (c.model_type != "gpt_oss") r.fail("quantization_config: quant_method \"mxfp4\" is read for gpt-oss's experts, not " + c.model_type);
  c.mxfp4_experts = true;
}

/// DeepSeek-V3 (and Kimi K2, the same layer): multi-head latent attention. RoPE over the
/// qk_rope_head_dim rotated components; the divisor sqrt(qk_nope + qk_rope) over YaRN's
/// mscale(factor, mscale_all_dim)² where the config gives mscale_all_dim, as Hugging Face scales.
HEADWISE_IO_INLINE void read_deepseek_v3(const ConfigReader& r, LlamaConfig& c) {
  LlamaConfig::Latent l;
  l.q_lora_rank = r.has("q_lora_rank") ? r.integer("q_lora_rank") : 0;
  l.kv_lora_rank = r.integer("kv_lora_rank"), l.qk_nope_head_dim = r.integer("qk_nope_head_dim");
  l.qk_rope_head_dim = r.integer("qk_rope_head_dim"), l.v_head_dim = r.integer("v_head_dim");
  l.rope_interleave = r.boolean("rope_interleave", true);
  for (const Index size : {l.kv_lora_rank, l.qk_rope_head_dim, l.v_head_dim})
    if (size <= 0 || size > (Index(1) << 30)) r.fail("kv_lora_rank, qk_rope_head_dim and v_head_dim must be in [1, 2^30]");
  if (l.q_lora_rank < 0 || l.q_lora_rank > (Index(1) << 30) || l.qk_nope_head_dim < 0 || l.qk_nope_head_dim > (Index(1) << 30))
    r.fail("q_lora_rank and qk_nope_head_dim must be in [0, 2^30]");
  if (r.boolean("attention_bias", false)) r.fail("\"attention_bias\" = true: the latent projections' biases are not read");
  if (double(c.n_heads) * double(l.qk_nope_head_dim + std::max(l.qk_rope_head_dim, l.v_head_dim)) > double(Index(1) << 62))
    r.fail("the latent projections (heads x (qk_nope + qk_rope or v_head_dim)) are wider than 2^62 columns");
  c.rope = parse_rope(r, l.qk_rope_head_dim);
  c.head_dim = l.qk_nope_head_dim + l.qk_rope_head_dim;
  double divisor = std::sqrt(double(c.head_dim));
  const RopeScaling& s = c.rope.scaling;
  if (s.type != RopeScaling::Type::none && s.mscale_all_dim && *s.mscale_all_dim != 0 && s.factor > 1) {
    const double mscale = 0.1 * *s.mscale_all_dim * std::log(s.factor) + 1;
    divisor /= mscale * mscale;
  }
  c.divisor = divisor;
  c.latent = l;
}

// The key lists are Hugging Face's: each family's config class's parameters (transformers' main
// branch, commit 008e574, src/transformers/models/<family>/configuration_<family>.py), the keys
// older releases wrote (v4.4x-4.5x) and its Hub files hold that its class no longer names (noted
// where so), and PretrainedConfig's (configuration_utils.py, v4 and v5).
HEADWISE_IO_INLINE const std::vector<Family>& families() {
  static const std::vector<Family> table = [] {
    // Keys any config.json may have: what PretrainedConfig writes or takes (its __init__ and
    // to_dict in v4; its fields in v5), the generation settings older files carry
    // (_get_global_generation_defaults, and cache_implementation), and older releases' own
    // (output_past, _num_labels, xla_device, gradient_checkpointing, _attn_implementation_autoset).
    const std::initializer_list<const char*> pretrained = {
        "architectures", "model_type", "transformers_version", "_name_or_path", "auto_map", "torch_dtype", "dtype",
        "use_bfloat16", "torchscript", "tf_legacy_loss", "return_dict", "output_hidden_states", "output_attentions",
        "use_cache", "output_past", "pruned_heads", "tie_word_embeddings", "chunk_size_feed_forward", "is_encoder_decoder",
        "is_decoder", "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "finetuning_task",
        "id2label", "label2id", "num_labels", "_num_labels", "problem_type", "tokenizer_class", "prefix", "bos_token_id",
        "pad_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id", "task_specific_params", "xla_device",
        "gradient_checkpointing", "_attn_implementation_autoset",
        // generation settings
        "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
        "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate",
        "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
        "suppress_tokens", "begin_suppress_tokens", "cache_implementation"};
    // Keys every Llama-style family has: the sizes llama_config_of reads, RoPE in its v4 and v5
    // forms (partial_rotary_factor and original_max_position_embeddings too: Hugging Face's RoPE
    // code and io/rope_config.hpp read them from any config), quantization_config (FP8 blocks or
    // refused), and what each of their config classes takes besides.
    const std::initializer_list<const char*> llama_style = {
        "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "head_dim", "attention_bias",
        "vocab_size", "intermediate_size", "max_position_embeddings", "rms_norm_eps", "initializer_range",
        "attention_dropout", "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
        "original_max_position_embeddings", "quantization_config"};
    // A row's keys: PretrainedConfig's, the Llama-style families' (unless GPT-2's), and its own lists.
    const auto keys = [&](std::initializer_list<std::initializer_list<const char*>> own, bool llama_like = true) {
      std::vector<const char*> k(pretrained);
      if (llama_like) k.insert(k.end(), llama_style);
      for (const auto& list : own) k.insert(k.end(), list);
      return k;
    };
    const auto qwen2 = {"hidden_act", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types"};
    const auto mistral = {"hidden_act", "sliding_window", "layer_types"};
    // DeepSeek-V3's class, and the keys of DeepSeek's own configuration_deepseek.py that the Hub's
    // DeepSeek-V3 and Kimi K2 files carry (ep_size ... num_nextn_predict_layers).
    const auto deepseek = {"hidden_act", "moe_intermediate_size", "n_shared_experts", "n_routed_experts", "routed_scaling_factor",
                           "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim", "n_group",
                           "topk_group", "num_experts_per_tok", "first_k_dense_replace", "norm_topk_prob", "pretraining_tp",
                           "rope_interleave", "ep_size", "topk_method", "moe_layer_freq", "scoring_func", "aux_loss_alpha",
                           "seq_aux", "num_nextn_predict_layers"};
    const auto gemma = {"hidden_activation", "query_pre_attn_scalar", "sliding_window", "layer_types", "final_logit_softcapping",
                        "attn_logit_softcapping", "use_bidirectional_attention"};
    using N = WholeModel::Norms;
    return std::vector<Family>{
        {"llama", read_llama, nullptr, false, {N::before}, keys({{"hidden_act", "pretraining_tp", "mlp_bias", "layer_types"}})},
        // (use_mrope: false in Qwen2.5's Hub files; Qwen2's model has no multimodal RoPE to turn on)
        {"qwen2", read_qwen2, nullptr, false, {N::before}, keys({qwen2, {"use_mrope"}})},
        {"qwen3", read_qwen3, nullptr, false, {N::before}, keys({qwen2})},
        {"qwen3_moe", read_qwen3, nullptr, false, {N::before},
         keys({qwen2, {"decoder_sparse_step", "moe_intermediate_size", "num_experts_per_tok", "num_experts", "norm_topk_prob",
                       "output_router_logits", "router_aux_loss_coef", "mlp_only_layers"}})},
        {"mistral", read_mistral, nullptr, false, {N::before}, keys({mistral})},
        {"ministral", read_mistral, nullptr, false, {N::before}, keys({mistral})},
        {"ministral3", read_ministral3, "llama_4_scaling_beta", false, {N::before}, keys({mistral})},
        // (hidden_act: Gemma 2's Hub files carry it beside hidden_activation, which is the one read)
        {"gemma2", read_gemma2, nullptr, false, {N::before_and_after, true, true, false, nullptr, true}, keys({gemma, {"hidden_act", "sliding_window_size"}})},
        // (_sliding_window_pattern: what transformers 4.53 and later write beside layer_types)
        {"gemma3_text", read_gemma3, nullptr, true, {N::before_and_after, true, true, false, nullptr, true},
         keys({gemma, {"rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern"}})},
        {"gemma4_text", read_gemma4, nullptr, true, {N::before_and_after, true, true},
         keys({gemma, {"vocab_size_per_layer_input", "hidden_size_per_layer_input", "attention_k_eq_v", "num_kv_shared_layers",
                       "enable_moe_block", "use_double_wide_mlp", "num_experts", "top_k_experts", "moe_intermediate_size",
                       "global_head_dim", "num_global_key_value_heads"}})},
        // (experts_per_token, initial_context_length: in gpt-oss's Hub files, not its class)
        {"gpt_oss", read_gpt_oss, nullptr, false, {N::before},
         keys({{"hidden_act", "sliding_window", "layer_types", "num_local_experts", "num_experts_per_tok", "experts_per_token",
                "swiglu_alpha", "swiglu_limit", "router_aux_loss_coef", "output_router_logits", "initial_context_length"}})},
        {"phi3", read_phi3, nullptr, false, {N::before, false, false, true},
         keys({{"hidden_act", "resid_pdrop", "embd_pdrop", "sliding_window", "layer_types", "mlp_bias",
                // (Phi-4-mini's files, for its own configuration_phi3.py: read where they change nothing)
                "full_attn_mod", "interpolate_factor", "lm_head_bias"}})},
        // (for_llm_compressor: in Llama 4's Hub files)
        {"llama4_text", read_llama4, nullptr, false,
         {N::before},
         keys({{"hidden_act", "intermediate_size_mlp", "num_experts_per_tok", "num_local_experts", "moe_layers",
                "interleave_moe_layer_step", "use_qk_norm", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
                "no_rope_layers", "no_rope_layer_interval", "attention_chunk_size", "layer_types", "attn_temperature_tuning",
                "floor_scale", "attn_scale", "for_llm_compressor"}})},
        // (max_window_layers, pretraining_tp: in SmolLM3's Hub files)
        {"smollm3", read_smollm3, nullptr, false, {N::before, false, true},
         keys({qwen2, {"no_rope_layers", "no_rope_layer_interval", "mlp_bias", "pretraining_tp"}})},
        {"olmo2", read_olmo2, nullptr, false, {N::after}, keys({{"hidden_act", "layer_types"}})},
        // (full_attention_interval, use_sliding_window: in Qwen3-Next's Hub files; the latter is refused if true)
        {"qwen3_next", read_qwen3_next, nullptr, false,
         {N::before, false, false, false, nullptr, /*zero_centred=*/true},
         keys({{"hidden_act", "layer_types", "full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim",
                "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "decoder_sparse_step",
                "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts_per_tok", "num_experts", "norm_topk_prob",
                "output_router_logits", "router_aux_loss_coef", "mlp_only_layers", "use_sliding_window"}})},
        {"deepseek_v3", read_deepseek_v3, nullptr, true, {N::before},
         keys({deepseek})},
        // (Kimi K2 ships DeepSeek's configuration_deepseek.py with model_type "kimi_k2")
        {"kimi_k2", read_deepseek_v3, nullptr, true, {N::before},
         keys({deepseek})},
        // GPT-2: GPT2Config's parameters, and n_ctx, n_special, predict_special_tokens that its Hub
        // files (gpt2-medium, distilgpt2) carry; its attribute_map's aliases (hidden_size for
        // n_embd, ...) are refused: io/gpt2.hpp reads n_embd, n_head and n_layer only.
        {"gpt2", nullptr, nullptr, false, {},
         keys({{"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function", "resid_pdrop",
                "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range", "summary_type", "summary_use_proj",
                "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights",
                "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_ctx", "n_special", "predict_special_tokens"}},
              /*llama_like=*/false)},
    };
  }();
  return table;
}

HEADWISE_IO_INLINE const Family* family_of(const std::string& model_type) {
  for (const Family& f : families())
    if (model_type == f.model_type) return &f;
  return nullptr;
}

/// The number of single-character edits between a and b, or more than `most` (then `most + 1`).
HEADWISE_IO_INLINE std::size_t edits_between(const std::string& a, const std::string& b, std::size_t most) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > most) return most + 1;
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return std::min(row[b.size()], most + 1);
}

HEADWISE_IO_INLINE void refuse_unknown_keys(const ConfigReader& r, const Family& family) {
  const auto has = [](const Family& f, const std::string& key) {
    return std::any_of(f.keys.begin(), f.keys.end(), [&](const char* k) { return key == k; });
  };
  for (const auto& item : r.json().items()) {
    const std::string& key = item.key();
    // (a tool's own bookkeeping: a transformers-private key, unsloth's version stamps)
    if (has(family, key) || key.rfind('_', 0) == 0 || key.rfind("unsloth_", 0) == 0) continue;
    std::string hint;  // the families that have it, or the key it may be a misspelling of
    std::vector<std::string> others;
    for (const Family& f : families())
      if (has(f, key)) others.push_back(f.model_type);
    const std::size_t named = others.size() > 4 ? 3 : others.size();
    for (std::size_t i = 0; i < named; ++i) hint += (i == 0 ? "; " : i + 1 == others.size() ? " and " : ", ") + others[i];
    if (named < others.size()) hint += " and " + std::to_string(others.size() - named) + " more";
    if (!others.empty()) hint += others.size() == 1 ? " has it" : " have it";
    std::size_t closest = 3;
    if (others.empty() && key.size() <= 64)  // (a longer key is no misspelling of these; and edits cost |key| x |k|)
      for (const char* k : family.keys)
        if (const std::size_t d = edits_between(key, k, 2); d < closest) closest = d, hint = std::string("; did you mean \"") + k + "\"?";
    r.fail("\"" + (key.size() > 80 ? key.substr(0, 80) + "..." : key) + "\" is not a key of a " + family.model_type +
           " config.json (headwise refuses keys it does not know, rather than ignore one that may matter)" + hint);
  }
}

HEADWISE_IO_INLINE LlamaConfig llama_config_of(const ConfigReader& r) {
  LlamaConfig c;
  c.model_type = r.string("model_type");
  const detail::Family* family = detail::family_of(c.model_type);
  if (!family || !family->read)  // (GPT-2's row has no reader here: io/gpt2.hpp reads its config)
    r.fail("model_type \"" + c.model_type + "\" is not one this loader reads (llama, qwen2, qwen3, qwen3_moe, mistral, ministral, ministral3, "
           "gemma2, gemma3_text, gemma4_text, gpt_oss, phi3, llama4_text, smollm3, olmo2, qwen3_next, deepseek_v3, kimi_k2)");
  detail::refuse_unknown_keys(r, *family);
  if (r.has("quantization_config")) detail::parse_quantization(r, c);
  c.hidden_size = r.integer("hidden_size");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer("num_key_value_heads", c.n_heads);
  c.n_layers = r.integer("num_hidden_layers");
  if (r.has("attention_bias")) c.attention_bias = r.boolean("attention_bias", false);
  if (!r.has("head_dim") && c.hidden_size % c.n_heads != 0)
    r.fail("hidden_size = " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads = " +
           std::to_string(c.n_heads) + " and no head_dim is given");
  c.head_dim = r.integer("head_dim", c.hidden_size / c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    r.fail("num_attention_heads = " + std::to_string(c.n_heads) + " is not divisible by num_key_value_heads = " +
           std::to_string(c.n_kv_heads));
  if (!family->rope_by_layer_type) c.rope = detail::parse_rope(r, c.head_dim, nullptr, family->rope_key);
  family->read(r, c);
  const double widest = double(std::max(c.head_dim, c.full_head_dim)) * (2.0 * double(c.n_heads) + 2.0 * double(std::max(c.n_kv_heads, c.full_kv_heads)));
  if (widest > double(Index(1) << 62)) r.fail("the projections (heads x head_dim) are wider than 2^62 columns");
  try {  // a theta or scaling out of range is refused here, by name (each rotary embedding once)
    RopeConfig full = c.rope;
    full.d_head = c.latent ? c.latent->qk_rope_head_dim : c.full_head_dim ? c.full_head_dim : c.head_dim;
    RotaryEmbedding::check(full);
    if (c.sliding_rope) RotaryEmbedding::check(*c.sliding_rope);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  return c;
}
}  // namespace detail

HEADWISE_IO_INLINE LlamaConfig parse_llama_config(const std::string& text, const std::string& name) {
  return detail::llama_config_of(detail::ConfigReader(text, "llama config", name));
}

HEADWISE_IO_INLINE LlamaConfig read_llama_config(const std::string& path) { return parse_llama_config(read_text_file(path, "llama config"), path); }

}  // namespace headwise::io
#endif  // HEADWISE_IO_DEFINITIONS
