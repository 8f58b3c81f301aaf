// Loading the attention of decoder checkpoints in Hugging Face's layout, every family from one
// table (detail::families): Llama, Qwen2, Qwen3, Mistral, Ministral / Ministral 3, Gemma 2, Gemma 3,
// Gemma 4, gpt-oss, Phi-3 / Phi-4-mini, Llama 4 (its text layers), SmolLM3, OLMo 2 and Qwen3-Next
// (its full-attention layers); config.json + model.safetensors, or shards with
// model.safetensors.index.json; any stored float dtype, BF16 included.
//
// Layer L's attention is model.layers.L.self_attn.{q,k,v,o}_proj, nn.Linear weights [out, in]
// (y = x Wᵀ + b), so W_Q = q_proj.weightᵀ etc.; query head h owns rows [h head_dim, (h+1) head_dim)
// of q_proj.weight, key/value head g the same rows of k_proj / v_proj, and W_O[h] the same columns
// of o_proj.weight. Biases where present (Qwen2, gpt-oss). Phi-3's fused qkv_proj is split by rows;
// Qwen3-Next's q_proj holds [q_h | gate_h] per head; q_norm / k_norm weights and gpt-oss's sinks
// are read where the family has them. The rest of the checkpoint (embeddings, norms, MLP, linear
// attention) is not read. The config keys each family reads are in docs/models.md; a key
// that changes attention and that headwise does not read is refused by name, never ignored.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/checkpoint.hpp"
#include "headwise/io/config_reader.hpp"
#include "headwise/io/gpt2.hpp"
#include "headwise/io/safetensors.hpp"
#include "headwise/layer_config.hpp"
#include "headwise/multi_head_attention.hpp"
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

/// The keys of a RoPE settings object (v5 `rope_parameters`, v4 `rope_scaling`) that each
/// rope_type reads, and `extra` (a family's own, such as Ministral 3's llama_4_scaling_beta; may be
/// null); any other key is refused by name, since it would change the rotation.
inline bool rope_key_known(const std::string& type, const std::string& key, bool v5, const char* extra = nullptr) {
  const auto in = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (key == k) return true;
    return false;
  };
  if (in({"rope_type", "type"}) || (extra && key == extra) || (v5 && in({"rope_theta", "partial_rotary_factor"}))) return true;
  if (type == "linear") return in({"factor"});
  if (type == "llama3") return in({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  if (type == "yarn")
    return in({"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate",
               "mscale", "mscale_all_dim"});
  if (type == "longrope") return in({"short_factor", "long_factor", "factor", "original_max_position_embeddings", "attention_factor"});
  return false;  // "default", "proportional"
}

/// The rotated dimensions of a head of head_dim at `fraction` (partial_rotary_factor), which must
/// be in (0, 1]: checked before the product is cast (1e300 is not an Index).
inline Index rotary_dims_of(const ConfigReader& r, Index head_dim, double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) r.fail("\"partial_rotary_factor\" = " + std::to_string(fraction) + " must be in (0, 1]");
  return static_cast<Index>(double(head_dim) * fraction) / 2 * 2;
}

/// A list of `count` positive finite numbers in j[key].
inline std::vector<double> parse_factors(const ConfigReader& r, const nlohmann::json& j, const char* key, Index count,
                                         const std::string& name) {
  if (!j.contains(key) || !j.at(key).is_array() || j.at(key).size() != static_cast<std::size_t>(count))
    r.fail(name + " \"" + key + "\" must be a list of " + std::to_string(count) + " numbers (rotary dimensions / 2)");
  std::vector<double> f;
  for (const auto& v : j.at(key)) {
    if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(v.get<double>()))
      r.fail(name + " \"" + key + "\" has " + v.dump() + ", not a finite number > 0");
    f.push_back(v.get<double>());
  }
  return f;
}

/// The scaling of a RoPE settings object `j` (named `name` in messages) for a rotation of
/// `rotary_dims` dimensions: its rope_type ("type" in older v4 configs), and the fields that type
/// reads. An unknown type or key is an error. As Hugging Face does, YaRN and LongRoPE take their
/// factor from max_position_embeddings / original_max_position_embeddings where both are given
/// (a factor that disagrees is refused: versions differ on which wins).
inline RopeScaling parse_rope_scaling(const ConfigReader& r, const nlohmann::json& j, const std::string& name,
                                      Index rotary_dims, const char* extra = nullptr) {
  RopeScaling s;
  if (!j.is_object()) r.fail("\"" + name + "\" is not an object");
  const auto given = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
  const auto type_of = given("rope_type") ? j.at("rope_type") : given("type") ? j.at("type") : nlohmann::json("default");
  const std::string type = type_of.is_string() ? type_of.get<std::string>() : "";
  using T = RopeScaling::Type;
  if (type == "linear") s.type = T::linear;
  else if (type == "llama3") s.type = T::llama3;
  else if (type == "yarn") s.type = T::yarn;
  else if (type == "longrope") s.type = T::longrope;
  else if (type == "proportional") s.type = T::proportional;
  else if (type != "default")
    r.fail(name + " type " + type_of.dump() + " is not one headwise knows (default, linear, llama3, yarn, longrope, proportional)");
  for (const auto& item : j.items())
    if (!item.value().is_null() && !rope_key_known(type, item.key(), name.rfind("rope_parameters", 0) == 0, extra))
      r.fail(name + " has \"" + item.key() + "\" = " + item.value().dump() + ", which headwise does not read for rope_type \"" +
             type + "\" (it would change the rotation)");
  if (given("truncate") && !j.at("truncate").is_boolean()) r.fail(name + " \"truncate\" = " + j.at("truncate").dump() + " is not true or false");
  if (type == "default" || type == "proportional") return s;
  s.factor = r.number(j, "factor", 1.0);
  s.low_freq_factor = r.number(j, "low_freq_factor", 1.0);
  s.high_freq_factor = r.number(j, "high_freq_factor", 4.0);
  const nlohmann::json& top = r.json();
  const double max_positions = r.number(top, "max_position_embeddings", 8192.0);
  const double original = r.number(j, "original_max_position_embeddings", r.number(top, "original_max_position_embeddings", max_positions));
  if (!(original >= 1.0 && original <= double(max_config_value)))  // before the cast: no UB on 1e300 or NaN
    r.fail("original_max_position_embeddings = " + std::to_string(original) + " must be in [1, " + std::to_string(max_config_value) + "]");
  s.original_max_position = static_cast<Index>(original);
  if (given("original_max_position_embeddings") && r.has("original_max_position_embeddings") &&
      r.number(top, "original_max_position_embeddings", 0.0) != original)
    r.fail(name + " \"original_max_position_embeddings\" = " + j.at("original_max_position_embeddings").dump() +
           " disagrees with the top-level " + top.at("original_max_position_embeddings").dump());
  const bool has_original = given("original_max_position_embeddings") || (s.type == T::longrope && r.has("original_max_position_embeddings"));
  if ((s.type == T::yarn || s.type == T::longrope) && has_original && r.has("max_position_embeddings")) {
    const double ratio = max_positions / original;
    if (given("factor") && std::abs(s.factor - ratio) > 1e-9 * ratio)
      r.fail(name + " \"factor\" = " + j.at("factor").dump() + " disagrees with max_position_embeddings / original_max_position_embeddings = " +
             std::to_string(ratio) + " (Hugging Face versions differ on which one holds)");
    s.factor = ratio;
  }
  s.beta_fast = r.number(j, "beta_fast", 32.0);
  s.beta_slow = r.number(j, "beta_slow", 1.0);
  s.truncate = !given("truncate") || j.at("truncate").get<bool>();
  if (given("mscale")) s.mscale = r.number(j, "mscale", 1.0);
  if (given("mscale_all_dim")) s.mscale_all_dim = r.number(j, "mscale_all_dim", 1.0);
  if (given("attention_factor")) s.attention_factor = r.number(j, "attention_factor", 1.0);
  if (s.type == T::longrope) {
    s.short_factor = parse_factors(r, j, "short_factor", rotary_dims / 2, name);
    s.long_factor = parse_factors(r, j, "long_factor", rotary_dims / 2, name);
  }
  return s;
}

/// A config's `layer_types` (transformers 4.5x and v5 write them): one entry per layer, each one
/// of `allowed` (the types the family has); any other entry is refused by name.
inline std::vector<LayerType> parse_layer_types(const ConfigReader& r, Index n_layers, std::initializer_list<LayerType> allowed) {
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

/// The rotary embedding of one RoPE object as transformers v5 writes it (`rope_parameters`, or one
/// of its entries keyed by layer type): rope_theta required, partial_rotary_factor inside or
/// (agreeing) at the top level.
inline RopeConfig parse_rope_object(const ConfigReader& r, const nlohmann::json& p, const std::string& name, Index head_dim,
                                    const char* extra) {
  const nlohmann::json& json = r.json();
  RopeConfig rope;
  rope.d_head = head_dim;
  if (!p.is_object()) r.fail("\"" + name + "\" is not an object");
  if (!p.contains("rope_theta") || p.at("rope_theta").is_null()) r.fail("\"" + name + "\" has no \"rope_theta\"");
  rope.theta = r.number(p, "rope_theta", 0.0);
  const double top = r.number(json, "partial_rotary_factor", 1.0);
  rope.rotary_fraction = r.number(p, "partial_rotary_factor", top);
  if (r.has("partial_rotary_factor") && rope.rotary_fraction != top)
    r.fail("\"partial_rotary_factor\" = " + json.at("partial_rotary_factor").dump() + " disagrees with " + name + (name.back() == 's' ? "' " : "'s ") +
           p.at("partial_rotary_factor").dump());
  rope.scaling = parse_rope_scaling(r, p, name, rotary_dims_of(r, head_dim, rope.rotary_fraction), extra);
  return rope;
}

/// The rotary embedding of a config, as transformers v5 writes it (`rope_parameters`, theta and
/// scaling in one object; keyed by layer type where the family has two, `layer_type`) or as v4 did
/// (top-level `rope_theta`, `rope_scaling`, and `partial_rotary_factor`); the v5 form first. Both
/// forms in one config must agree.
inline RopeConfig parse_rope(const ConfigReader& r, Index head_dim, const char* layer_type = nullptr,
                             const char* extra = nullptr) {
  const nlohmann::json& json = r.json();
  if (!r.has("rope_parameters")) {  // v4
    RopeConfig rope;
    rope.d_head = head_dim;
    rope.rotary_fraction = r.number(json, "partial_rotary_factor", 1.0);
    rope.theta = r.number(json, "rope_theta", 10000.0);  // the config classes' default
    if (r.has("rope_scaling"))
      rope.scaling = parse_rope_scaling(r, json.at("rope_scaling"), "rope_scaling", rotary_dims_of(r, head_dim, rope.rotary_fraction), extra);
    return rope;
  }
  const nlohmann::json& p = json.at("rope_parameters");
  if (!p.is_object()) r.fail("\"rope_parameters\" is not an object");
  if (r.has("rope_scaling")) r.fail("both \"rope_scaling\" (v4) and \"rope_parameters\" (v5): which one holds is not clear");
  bool keyed = false;
  for (const auto& item : p.items()) {
    keyed = keyed || item.value().is_object();
    if (item.value().is_object() && (!layer_type || (item.key() != "full_attention" && item.key() != "sliding_attention")))
      r.fail("\"rope_parameters\" is keyed by layer type (\"" + item.key() + "\"), which this model_type does not have");
  }
  if (keyed && !p.contains(layer_type)) r.fail("\"rope_parameters\" has no entry for \"" + std::string(layer_type) + "\"");
  const std::string name = keyed ? "rope_parameters." + std::string(layer_type) : "rope_parameters";
  RopeConfig rope = parse_rope_object(r, keyed ? p.at(layer_type) : p, name, head_dim, extra);
  if (r.has("rope_theta") && !keyed && r.number(json, "rope_theta", 0.0) != rope.theta)
    r.fail("\"rope_theta\" = " + json.at("rope_theta").dump() + " disagrees with rope_parameters' " + p.at("rope_theta").dump());
  return rope;
}

/// The layer types from `layer_types` (each one of `allowed`) if the config lists them (true); the
/// family derives them otherwise. Sliding layers need a `sliding_window`.
inline bool read_layer_types(const ConfigReader& r, LlamaConfig& c, std::initializer_list<LayerType> allowed) {
  if (!r.has("layer_types")) return false;
  c.layer_types = parse_layer_types(r, c.n_layers, allowed);
  const bool any = std::find(c.layer_types.begin(), c.layer_types.end(), LayerType::sliding) != c.layer_types.end();
  if (any && !r.has("sliding_window")) r.fail("\"layer_types\" has sliding_attention layers but there is no \"sliding_window\"");
  if (any) c.sliding_window = r.integer("sliding_window");
  return true;
}
/// Derived: layer i is full iff (i + 1) % every == 0, else `other` (a sliding one needs the window).
inline void derive_periodic(const ConfigReader& r, LlamaConfig& c, Index every, LayerType other) {
  c.full_every = every, c.other_type = other;
  if (other == LayerType::sliding && every != 1) c.sliding_window = r.integer("sliding_window");
}
inline bool has_type(const LlamaConfig& c, LayerType t) { return std::find(c.layer_types.begin(), c.layer_types.end(), t) != c.layer_types.end(); }

/// From `no_rope_layers` (Llama 4, SmolLM3: 1 = the layer has RoPE, 0 = NoPE), else every
/// `interval`-th layer is NoPE (the config classes' default).
inline void read_nope_layers(const ConfigReader& r, LlamaConfig& c, Index interval) {
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
inline void set_qk_norm(const ConfigReader& r, LlamaConfig& c, RmsNorm::Over over, bool zero_centred, bool weighted,
                        double eps_default) {
  QkNorm n;
  n.query.over = n.key.over = over;
  n.query.zero_centred = n.key.zero_centred = zero_centred;
  n.query.eps = n.key.eps = r.number(r.json(), "rms_norm_eps", eps_default);
  c.qk_norm = n, c.qk_norm_weighted = weighted;
}

/// A flag Hugging Face tests for truth (a boolean, or a number: nonzero is true); absent or null:
/// `fallback`.
inline bool truthy(const ConfigReader& r, const char* key, bool fallback) {
  if (!r.has(key)) return fallback;
  const nlohmann::json& v = r.json().at(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  r.fail(std::string("\"") + key + "\" = " + v.dump() + " is not true, false or a number");
}

/// Where only some families read a key that changes attention, the others refuse it by name.
inline void refuse_unread(const ConfigReader& r, const char* key, const std::string& model_type) {
  if (r.has(key) && r.json().at(key) != false)
    r.fail("\"" + std::string(key) + "\" = " + r.json().at(key).dump() + " changes attention, and headwise does not read it for " + model_type);
}

// ---- The families: what each reads beyond hidden_size, the head counts, head_dim and RoPE ----

inline void read_llama(const ConfigReader& r, LlamaConfig& c) {
  read_layer_types(r, c, {LayerType::full, LayerType::sliding});
  if (c.sliding_window) r.fail("\"layer_types\" has sliding_attention layers, which llama does not have");
}

/// Qwen2, Qwen3, SmolLM3: a window only with use_sliding_window, from max_window_layers on.
inline void read_qwen2(const ConfigReader& r, LlamaConfig& c) {
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

inline void read_qwen3(const ConfigReader& r, LlamaConfig& c) {
  read_qwen2(r, c);
  set_qk_norm(r, c, RmsNorm::Over::head, false, true, 1e-6);
}

inline void read_smollm3(const ConfigReader& r, LlamaConfig& c) {
  read_qwen2(r, c);
  read_nope_layers(r, c, r.integer("no_rope_layer_interval", 4));
}

/// Mistral, Ministral: every layer slides when sliding_window is set.
inline void read_mistral(const ConfigReader& r, LlamaConfig& c) {
  const bool windowed = r.has("sliding_window");
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding}) && windowed) c.sliding_window = r.integer("sliding_window");
  if (windowed && has_type(c, LayerType::full))
    r.fail("\"layer_types\" has full_attention layers, but " + c.model_type + " slides every layer when sliding_window is set");
}

/// Ministral 3: Mistral's attention, and after RoPE q *= 1 + llama_4_scaling_beta ln(1 + floor(p /
/// original_max_position_embeddings)), both read from rope_parameters.
inline void read_ministral3(const ConfigReader& r, LlamaConfig& c) {
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

inline void read_phi3(const ConfigReader& r, LlamaConfig& c) {
  c.fused_qkv = true;
  // Phi-3 applies sliding_window to every layer.
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding}) && r.has("sliding_window"))
    c.sliding_window = r.integer("sliding_window");
}

inline void read_olmo2(const ConfigReader& r, LlamaConfig& c) {
  read_layer_types(r, c, {LayerType::full});
  set_qk_norm(r, c, RmsNorm::Over::projection, false, true, 1e-6);
}

/// Gemma 2 and 3: scores times query_pre_attn_scalar^-1/2 (absent: the config classes' 256),
/// soft-capping where set (absent: Gemma 2's class default 50, Gemma 3's none; null: none).
inline void read_gemma_scores(const ConfigReader& r, LlamaConfig& c, std::optional<double> default_softcap) {
  c.divisor = std::sqrt(r.number(r.json(), "query_pre_attn_scalar", 256.0));
  if (!(*c.divisor > 0.0) || !std::isfinite(*c.divisor)) r.fail("\"query_pre_attn_scalar\" must be finite and > 0");
  if (r.has("attn_logit_softcapping")) c.softcap = r.number(r.json(), "attn_logit_softcapping", 0.0);
  else if (!r.json().contains("attn_logit_softcapping")) c.softcap = default_softcap;
  refuse_unread(r, "use_bidirectional_attention", c.model_type);
}

inline void read_gemma2(const ConfigReader& r, LlamaConfig& c) {
  read_gemma_scores(r, c, 50.0);
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding})) derive_periodic(r, c, 2, LayerType::sliding);
}

/// Gemma 3: (1 + w) QK-norm, local layers at rope_local_base_freq unscaled (v4) or their own
/// rope_parameters entry (v5), global layers at rope_theta with its scaling.
inline void read_gemma3(const ConfigReader& r, LlamaConfig& c) {
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
inline void read_gemma4(const ConfigReader& r, LlamaConfig& c) {
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
  if (r.has("num_kv_shared_layers")) c.kv_shared_layers = r.integer("num_kv_shared_layers");
  if (c.kv_shared_layers >= c.n_layers) r.fail("\"num_kv_shared_layers\" must be below num_hidden_layers");
  for (Index l = c.n_layers - c.kv_shared_layers; l < c.n_layers; ++l)  // (layer_types bounds n_layers here)
    if (!c.kv_source_of(l))
      r.fail("layer " + std::to_string(l) + " shares keys and values (num_kv_shared_layers), but no earlier layer is of its type");
  refuse_unread(r, "enable_moe_block", c.model_type);  // (the MoE block is not attention, but a true here is a model headwise has not seen)
}

/// gpt-oss: sinks, alternating windows (layer i slides iff i is even, unless layer_types say).
inline void read_gpt_oss(const ConfigReader& r, LlamaConfig& c) {
  c.sinks = true;
  if (!read_layer_types(r, c, {LayerType::full, LayerType::sliding})) derive_periodic(r, c, 2, LayerType::sliding);
}

/// Llama 4 (text): interleaved RoPE on the RoPE layers, which are chunked and L2-normed after RoPE;
/// NoPE layers full causal with the attention temperature.
inline void read_llama4(const ConfigReader& r, LlamaConfig& c) {
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
inline void read_qwen3_next(const ConfigReader& r, LlamaConfig& c) {
  if (!read_layer_types(r, c, {LayerType::full, LayerType::linear}))
    derive_periodic(r, c, r.integer("full_attention_interval", 4), LayerType::linear);
  set_qk_norm(r, c, RmsNorm::Over::head, true, true, 1e-6);
  c.output_gate = true;
  const bool fraction_given = r.has("partial_rotary_factor") ||
                              (r.has("rope_parameters") && r.json().at("rope_parameters").contains("partial_rotary_factor"));
  if (!fraction_given) c.rope.rotary_fraction = 0.25;  // the config class's default
  refuse_unread(r, "use_sliding_window", c.model_type);
}

/// What the whole-model loader (io/decoder_model.hpp) builds around a family's attention layers.
struct WholeModel {
  /// Where the block's RMSNorms sit: before attention and MLP (Llama), before and after both
  /// (Gemma 2 and 3), after only (OLMo 2); none: no whole-model code for the family.
  enum class Norms { none, before, before_and_after, after };
  Norms norms = Norms::none;
  bool gemma = false;             ///< (1 + w) norms, embeddings times sqrt(d_model), `hidden_activation`
  bool tied = false;              ///< tie_word_embeddings where the config leaves it out (its config class's default)
  bool fused_gate_up = false;     ///< Phi-3: one mlp.gate_up_proj [2 inner, d], the gate's rows first
  const char* missing = nullptr;  ///< what the model code lacks, where norms is none
};

/// quantization_config as DeepSeek-V3 and Hugging Face's FineGrainedFP8Config write it: quant_method
/// "fp8", fmt "e4m3" (or "e5m2"), activation_scheme "dynamic", weight_block_size [rows, cols],
/// modules_to_not_convert (those tensors are stored unquantized and read as they are). Anything
/// else (another method, per-tensor scales, a key it does not know) is refused by name.
inline LlamaConfig::Fp8Blocks parse_fp8_blocks(const ConfigReader& r) {
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

/// DeepSeek-V3 (and Kimi K2, the same layer): multi-head latent attention. RoPE over the
/// qk_rope_head_dim rotated components; the divisor sqrt(qk_nope + qk_rope) over YaRN's
/// mscale(factor, mscale_all_dim)² where the config gives mscale_all_dim, as Hugging Face scales.
inline void read_deepseek_v3(const ConfigReader& r, LlamaConfig& c) {
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

/// One family: its model_type, what it reads, and its whole model.
struct Family {
  const char* model_type;
  void (*read)(const ConfigReader&, LlamaConfig&);
  const char* rope_key;  ///< a key of its RoPE object besides the rope_type's own, or null
  bool rope_by_layer_type = false;  ///< its RoPE is read by `read`, not before it (it differs by layer type, or covers part of a head)
  WholeModel model = {};
};

inline const Family* family_of(const std::string& model_type) {
  using N = WholeModel::Norms;
  static const Family families[] = {
      {"llama", read_llama, nullptr, false, {N::before}},
      {"qwen2", read_qwen2, nullptr, false, {N::before}},
      {"qwen3", read_qwen3, nullptr, false, {N::before}},
      {"qwen3_moe", read_qwen3, nullptr, false, {N::before}},
      {"mistral", read_mistral, nullptr, false, {N::before}},
      {"ministral", read_mistral, nullptr, false, {N::before}},
      {"ministral3", read_ministral3, "llama_4_scaling_beta", false, {N::before}},
      {"gemma2", read_gemma2, nullptr, false, {N::before_and_after, true, true}},
      {"gemma3_text", read_gemma3, nullptr, true, {N::before_and_after, true, true}},
      {"gemma4_text", read_gemma4, nullptr, true, {N::none, false, false, false, "per-layer inputs (PLE) and layer scalars"}},
      {"gpt_oss", read_gpt_oss, nullptr, false, {N::none, false, false, false, "gpt-oss's experts (a biased router, clamped SwiGLU)"}},
      {"phi3", read_phi3, nullptr, false, {N::before, false, false, true}},
      {"llama4_text", read_llama4, nullptr, false,
       {N::none, false, false, false, "Llama 4's experts (a sigmoid router and a shared expert)"}},
      {"smollm3", read_smollm3, nullptr, false, {N::before, false, true}},
      {"olmo2", read_olmo2, nullptr, false, {N::after}},
      {"qwen3_next", read_qwen3_next, nullptr, false,
       {N::none, false, false, false, "its linear-attention (Gated DeltaNet) layers and gated experts"}},
      {"deepseek_v3", read_deepseek_v3, nullptr, true, {N::none, false, false, false, "DeepSeek's experts (a grouped sigmoid router)"}},
      {"kimi_k2", read_deepseek_v3, nullptr, true, {N::none, false, false, false, "DeepSeek's experts (a grouped sigmoid router)"}},
  };
  for (const Family& f : families)
    if (model_type == f.model_type) return &f;
  return nullptr;
}

}  // namespace detail

/// Parses the text of a config.json of any family the loaders read; `name` is used in messages.
inline LlamaConfig parse_llama_config(const std::string& text, const std::string& name) {
  const detail::ConfigReader r(text, "llama config", name);
  LlamaConfig c;
  c.model_type = r.string("model_type");
  const detail::Family* family = detail::family_of(c.model_type);
  if (!family)
    r.fail("model_type \"" + c.model_type + "\" is not one this loader reads (llama, qwen2, qwen3, qwen3_moe, mistral, ministral, ministral3, "
           "gemma2, gemma3_text, gemma4_text, gpt_oss, phi3, llama4_text, smollm3, olmo2, qwen3_next, deepseek_v3, kimi_k2)");
  if (r.has("quantization_config")) c.fp8 = detail::parse_fp8_blocks(r);
  c.hidden_size = r.integer("hidden_size");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer("num_key_value_heads", c.n_heads);
  c.n_layers = r.integer("num_hidden_layers");
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

inline LlamaConfig read_llama_config(const std::string& path) { return parse_llama_config(read_text_file(path, "llama config"), path); }

namespace detail {

/// Reads one layer's self_attn tensors, checking each one's shape.
class LayerTensors {
 public:
  LayerTensors(const Checkpoint& model, Index layer, std::optional<LlamaConfig::Fp8Blocks> fp8 = std::nullopt)
      : model_(model), where_("headwise: llama: " + model.folder() + ": "),
        prefix_("model.layers." + std::to_string(layer) + ".self_attn."), fp8_(fp8) {}
  const std::string& where() const { return where_; }
  bool has(const std::string& name) const { return model_.contains(prefix_ + name); }
  /// nn.Linear weight `name`.weight [out, in], as (in, out); an FP8 one times its block scales
  /// (`name`.weight_scale_inv, [ceil(out / rows), ceil(in / cols)]).
  template <class Scalar>
  Matrix<Scalar> weight(const std::string& name, std::uint64_t out, std::uint64_t in) const {
    const std::string key = prefix_ + name + ".weight";
    check(key, {out, in}, " (inconsistent with the config's head counts)");
    Matrix<Scalar> w = model_.file_of(key).matrix<Scalar>(key, Fp8::as_stored);
    const Dtype dtype = model_.file_of(key).info(key).dtype;
    if (dtype == Dtype::F8_E4M3 || dtype == Dtype::F8_E5M2) apply_block_scales(key, dtype, w);
    else if (model_.contains(key + "_scale_inv"))
      throw SafetensorsError(where_ + "tensor \"" + key + "_scale_inv\" scales \"" + key + "\", which is " + dtype_name(dtype) + ", not FP8");
    return w.transpose();
  }
  /// `name`.bias [size], or empty where the checkpoint has none.
  template <class Scalar>
  RowVector<Scalar> bias(const std::string& name, std::uint64_t size) const {
    const std::string key = prefix_ + name + ".bias";
    if (!model_.contains(key)) return {};
    check(key, {size}, "");
    return model_.file_of(key).row_vector<Scalar>(key);
  }
  /// A 1-D tensor `name` [size] (a norm's weight, the sinks), required.
  Vector<double> vector(const std::string& name, std::uint64_t size) const {
    const std::string key = prefix_ + name;
    check(key, {size}, "");
    return model_.file_of(key).row_vector<double>(key).transpose();
  }

 private:
  void check(const std::string& key, const std::vector<std::uint64_t>& shape, const char* hint) const {
    if (!model_.contains(key)) throw SafetensorsError(where_ + "missing tensor \"" + key + "\"");
    const auto& stored = model_.file_of(key).info(key).shape;
    if (stored != shape)
      throw SafetensorsError(where_ + "tensor \"" + key + "\" has shape " + shape_string(stored) + ", expected " +
                             shape_string(shape) + hint);
  }
  /// w (out, in) as stored in FP8, times each block's scale, as DeepSeek-V3's checkpoints and
  /// Hugging Face dequantize: w(i, j) * weight_scale_inv(i / rows, j / cols), edge blocks partial.
  template <class Scalar>
  void apply_block_scales(const std::string& key, Dtype dtype, Matrix<Scalar>& w) const {
    if (!fp8_)
      throw SafetensorsError(where_ + "tensor \"" + key + "\" is " + dtype_name(dtype) +
                             ", but the config has no quantization_config (fp8, weight_block_size) saying how it is scaled");
    if ((dtype == Dtype::F8_E5M2) != fp8_->e5m2)
      throw SafetensorsError(where_ + "tensor \"" + key + "\" is " + dtype_name(dtype) + ", but quantization_config's fmt says " +
                             (fp8_->e5m2 ? "e5m2" : "e4m3"));
    const std::string scale_key = key + "_scale_inv";
    const auto blocks = [](Index size, Index block) { return static_cast<std::uint64_t>((size + block - 1) / block); };
    check(scale_key, {blocks(w.rows(), fp8_->rows), blocks(w.cols(), fp8_->cols)}, " (one scale per weight_block_size block)");
    const Matrix<double> scale = model_.file_of(scale_key).matrix<double>(scale_key);
    if (!scale.allFinite()) throw SafetensorsError(where_ + "tensor \"" + scale_key + "\" has a scale that is not finite");
    for (Index i = 0; i < w.rows(); ++i)
      for (Index j = 0; j < w.cols(); ++j) w(i, j) *= static_cast<Scalar>(scale(i / fp8_->rows, j / fp8_->cols));
  }
  const Checkpoint& model_;
  std::string where_, prefix_;
  std::optional<LlamaConfig::Fp8Blocks> fp8_;
};

/// W_Q, W_K, W_V and their biases as the family stores them: q_proj, k_proj, v_proj; Phi-3's one
/// qkv_proj split by rows; Qwen3-Next's q_proj holding [q_h | gate_h] per head (the gate into
/// w_gate); Gemma 4's full layers without v_proj (K = V: the values are the raw keys).
template <class Scalar>
void read_projections(const LayerTensors& t, const LlamaConfig& config, Index layer, MultiHeadWeights<Scalar>& w) {
  const auto hidden = static_cast<std::uint64_t>(config.hidden_size), d = static_cast<std::uint64_t>(config.head_dim_of(layer));
  const std::uint64_t q_width = std::uint64_t(config.n_heads) * d, kv_width = std::uint64_t(config.kv_heads_of(layer)) * d;
  const auto qw = static_cast<Index>(q_width), kvw = static_cast<Index>(kv_width), di = static_cast<Index>(d);
  if (config.fused_qkv) {
    const Matrix<Scalar> qkv = t.weight<Scalar>("qkv_proj", q_width + 2 * kv_width, hidden);
    w.w_q = qkv.leftCols(qw), w.w_k = qkv.middleCols(qw, kvw), w.w_v = qkv.rightCols(kvw);
    const RowVector<Scalar> b = t.bias<Scalar>("qkv_proj", q_width + 2 * kv_width);
    if (b.size()) w.b_q = b.head(qw), w.b_k = b.segment(qw, kvw), w.b_v = b.tail(kvw);
    return;
  }
  if (config.output_gate) {
    const Matrix<Scalar> both = t.weight<Scalar>("q_proj", 2 * q_width, hidden);
    const RowVector<Scalar> b = t.bias<Scalar>("q_proj", 2 * q_width);
    w.w_q.resize(both.rows(), qw), w.w_gate.resize(both.rows(), qw);
    if (b.size()) w.b_q.resize(qw), w.b_gate.resize(qw);
    for (Index h = 0; h < config.n_heads; ++h) {
      w.w_q.middleCols(h * di, di) = both.middleCols(2 * h * di, di);
      w.w_gate.middleCols(h * di, di) = both.middleCols(2 * h * di + di, di);
      if (b.size()) w.b_q.segment(h * di, di) = b.segment(2 * h * di, di), w.b_gate.segment(h * di, di) = b.segment(2 * h * di + di, di);
    }
  } else {
    w.w_q = t.weight<Scalar>("q_proj", q_width, hidden), w.b_q = t.bias<Scalar>("q_proj", q_width);
  }
  w.w_k = t.weight<Scalar>("k_proj", kv_width, hidden), w.b_k = t.bias<Scalar>("k_proj", kv_width);
  if (config.full_keys_are_values && config.type_of(layer) == LayerType::full) {
    if (t.has("v_proj.weight")) throw SafetensorsError(t.where() + "layer " + std::to_string(layer) + " has a v_proj, but attention_k_eq_v says its values are its keys");
    w.w_v = w.w_k, w.b_v = w.b_k;
  } else {
    w.w_v = t.weight<Scalar>("v_proj", kv_width, hidden), w.b_v = t.bias<Scalar>("v_proj", kv_width);
  }
}

/// The QK-norm weights (q_norm, k_norm: per head [d], or OLMo 2's over the projection) and the
/// sinks, where the family has them.
inline void read_layer_tensors(const LayerTensors& t, const LlamaConfig& config, Index layer, LayerConfig& c) {
  const auto d = static_cast<std::uint64_t>(config.head_dim_of(layer));
  if (c.qk_norm && config.qk_norm_weighted) {
    const bool whole = c.qk_norm->query.over == RmsNorm::Over::projection;
    c.qk_norm->query.weight = t.vector("q_norm.weight", whole ? std::uint64_t(config.n_heads) * d : d);
    c.qk_norm->key.weight = t.vector("k_norm.weight", whole ? std::uint64_t(config.kv_heads_of(layer)) * d : d);
  }
  if (config.sinks) c.sinks = t.vector("sinks", static_cast<std::uint64_t>(config.n_heads));
}

}  // namespace detail

/// Layer `layer`'s attention from a checkpoint already open, with its config.
template <class Scalar>
MultiHeadAttention<Scalar> load_llama_attention(const Checkpoint& model, const LlamaConfig& config, Index layer) {
  const detail::LayerTensors t(model, layer, config.fp8);
  if (config.latent)
    throw SafetensorsError(t.where() + "model_type \"" + config.model_type +
                           "\" is multi-head latent attention: load it with io::load_latent_attention (io/latent_attention.hpp)");
  if (layer < 0 || layer >= config.n_layers)
    throw SafetensorsError(t.where() + "layer " + std::to_string(layer) + " is out of range [0, " + std::to_string(config.n_layers) + ")");
  const std::string at = "layer " + std::to_string(layer) + ": ";
  LayerConfig c;
  try {
    c = config.layer(layer);
  } catch (const std::invalid_argument& e) {  // a linear-attention layer
    throw SafetensorsError(t.where() + e.what());
  }
  MultiHeadWeights<Scalar> w;
  detail::read_projections(t, config, layer, w);
  const auto hidden = static_cast<std::uint64_t>(config.hidden_size);
  const std::uint64_t q_width = std::uint64_t(config.n_heads) * static_cast<std::uint64_t>(config.head_dim_of(layer));
  w.w_o = t.weight<Scalar>("o_proj", hidden, q_width), w.b_o = t.bias<Scalar>("o_proj", hidden);
  detail::read_layer_tensors(t, config, layer, c);
  try {
    return MultiHeadAttention<Scalar>(config.n_heads, std::move(w), std::move(c));
  } catch (const std::invalid_argument& e) {  // non-finite weights, a config the layer refuses
    throw SafetensorsError(t.where() + at + e.what());
  }
}

/// Every attention layer from a checkpoint folder (config.json and one or more safetensors files;
/// each file is opened once for all layers), by layer number; a family's linear-attention layers
/// (Qwen3-Next) are left out: see attention_layer_numbers. A KV-sharing layer (Gemma 4) runs by
/// forward_reading_cache on the cache of the layer config().shares_keys_values_of names.
///   auto layers = io::load_llama_attention_layers<float>("Llama-3.2-1B/");   // layers[3].forward(x)
template <class Scalar>
std::vector<MultiHeadAttention<Scalar>> load_llama_attention_layers(const std::string& folder) {
  const LlamaConfig config = read_llama_config(folder + "/config.json");
  const Checkpoint model = Checkpoint::open(folder);
  std::vector<MultiHeadAttention<Scalar>> layers;  // not reserved: a config may claim 2^32 layers the file lacks
  for (Index layer = config.next_attention_layer(0); layer < config.n_layers; layer = config.next_attention_layer(layer + 1))
    layers.push_back(load_llama_attention<Scalar>(model, config, layer));
  return layers;
}

/// The numbers of the layers load_llama_attention_layers loads, in its order.
inline std::vector<Index> attention_layer_numbers(const LlamaConfig& config) {
  std::vector<Index> numbers;
  for (Index layer = config.next_attention_layer(0); layer < config.n_layers; layer = config.next_attention_layer(layer + 1))
    numbers.push_back(layer);
  return numbers;
}

/// Layer `layer`'s attention from a checkpoint folder.
template <class Scalar>
MultiHeadAttention<Scalar> load_llama_attention(const std::string& folder, Index layer) {
  return load_llama_attention<Scalar>(Checkpoint::open(folder), read_llama_config(folder + "/config.json"), layer);
}

/// The compiled mode's instantiations of the attention loaders (detail/compiled.hpp).
#define HEADWISE_LLAMA_LOADER_INSTANTIATIONS(PREFIX, S) \
  PREFIX template MultiHeadAttention<S> load_llama_attention<S>(const Checkpoint&, const LlamaConfig&, Index); \
  PREFIX template std::vector<MultiHeadAttention<S>> load_llama_attention_layers<S>(const std::string&); \
  PREFIX template MultiHeadAttention<S> load_llama_attention<S>(const std::string&, Index);
#if HEADWISE_EXTERN_TEMPLATES
HEADWISE_LLAMA_LOADER_INSTANTIATIONS(extern, float)
HEADWISE_LLAMA_LOADER_INSTANTIATIONS(extern, double)
#endif

}  // namespace headwise::io
