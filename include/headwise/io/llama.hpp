// Loading the attention of Llama-family checkpoints in Hugging Face's layout: LlamaForCausalLM,
// Qwen2ForCausalLM, MistralForCausalLM (config.json + model.safetensors, or shards with
// model.safetensors.index.json; any stored float dtype, BF16 included).
//
// Layer L's attention is model.layers.L.self_attn.{q,k,v,o}_proj, nn.Linear weights [out, in]
// (y = x Wᵀ + b), so W_Q = q_proj.weightᵀ etc.; query head h owns rows [h head_dim, (h+1) head_dim)
// of q_proj.weight, key/value head g the same rows of k_proj / v_proj, and W_O[h] the same columns
// of o_proj.weight. Biases where present (Qwen2: q, k, v). The rest of the checkpoint (embeddings,
// norms, MLP) is not read. From config.json: hidden_size, num_attention_heads,
// num_key_value_heads (default: the heads), head_dim (default hidden / heads; need not be that),
// rope_theta, rope_scaling (linear, llama3, yarn) and partial_rotary_factor, or transformers v5's
// rope_parameters holding them all (read first; an unknown key in it is refused), sliding_window (Mistral;
// Qwen2 only with use_sliding_window, on layers from max_window_layers on).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "headwise/io/checkpoint.hpp"
#include "headwise/io/config_reader.hpp"
#include "headwise/io/gpt2.hpp"
#include "headwise/io/safetensors.hpp"
#include "headwise/layer_config.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/rotary_embedding.hpp"

namespace headwise::io {

/// What config.json says of a Llama-family model's attention.
struct LlamaConfig {
  std::string model_type;           ///< "llama", "qwen2" or "mistral"
  Index hidden_size = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_layers = 0;
  RopeConfig rope;                  ///< theta, scaling, partial rotary; d_head = head_dim
  std::optional<Index> sliding_window;  ///< the window of the layers that have one
  Index first_window_layer = 0;     ///< Qwen2's max_window_layers: layers before it have none
  /// From `layer_types` where the config lists them: true for a "sliding_attention" layer. Empty:
  /// the layers are derived as the family's config class derives them (first_window_layer).
  std::vector<bool> sliding_layers;

  /// The layer config of layer L.
  LayerConfig layer(Index layer) const {
    LayerConfig c;
    c.rope = rope;
    if (!sliding_layers.empty() && (layer < 0 || layer >= static_cast<Index>(sliding_layers.size())))
      throw std::invalid_argument("headwise: LlamaConfig::layer: layer " + std::to_string(layer) + " out of range [0, " +
                                  std::to_string(sliding_layers.size()) + ")");
    const bool slides = sliding_layers.empty() ? layer >= first_window_layer
                                               : sliding_layers[static_cast<std::size_t>(layer)];
    if (sliding_window && slides) c.window = sliding_window;
    return c;
  }
};

namespace detail {

/// The keys of a RoPE settings object (v5 `rope_parameters`, v4 `rope_scaling`) that each
/// rope_type reads; any other key is refused by name, since it would change the rotation.
inline bool rope_key_known(const std::string& type, const std::string& key, bool v5) {
  const auto in = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (key == k) return true;
    return false;
  };
  if (in({"rope_type", "type"}) || (v5 && in({"rope_theta", "partial_rotary_factor"}))) return true;
  if (type == "linear") return in({"factor"});
  if (type == "llama3") return in({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  if (type == "yarn")  // (truncate true, the default, is what headwise computes: checked by the caller)
    return in({"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate"});
  return false;  // "default"
}

/// The scaling of a RoPE settings object `j` (named `name` in messages): its rope_type ("type" in
/// older v4 configs), and the fields that type reads. An unknown type or key is an error.
inline RopeScaling parse_rope_scaling(const ConfigReader& r, const nlohmann::json& j, const std::string& name) {
  RopeScaling s;
  if (!j.is_object()) r.fail("\"" + name + "\" is not an object");
  const auto given = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
  const auto type_of = given("rope_type") ? j.at("rope_type") : given("type") ? j.at("type") : nlohmann::json("default");
  const std::string type = type_of.is_string() ? type_of.get<std::string>() : "";
  if (type == "linear") s.type = RopeScaling::Type::linear;
  else if (type == "llama3") s.type = RopeScaling::Type::llama3;
  else if (type == "yarn") s.type = RopeScaling::Type::yarn;
  else if (type != "default")
    r.fail(name + " type " + type_of.dump() + " is not one headwise knows (default, linear, llama3, yarn)");
  for (const auto& item : j.items())
    if (!item.value().is_null() && !rope_key_known(type, item.key(), name == "rope_parameters"))
      r.fail(name + " has \"" + item.key() + "\" = " + item.value().dump() + ", which headwise does not read for rope_type \"" +
             type + "\" (it would change the rotation)");
  if (given("truncate") && j.at("truncate") != true)
    r.fail(name + " has \"truncate\" = " + j.at("truncate").dump() + ": headwise computes YaRN's truncated ramp only");
  if (type == "default") return s;
  s.factor = r.number(j, "factor", 1.0);
  s.low_freq_factor = r.number(j, "low_freq_factor", 1.0);
  s.high_freq_factor = r.number(j, "high_freq_factor", 4.0);
  const double original = r.number(j, "original_max_position_embeddings", r.number(r.json(), "max_position_embeddings", 8192.0));
  if (!(original >= 1.0 && original <= double(max_config_value)))  // before the cast: no UB on 1e300 or NaN
    r.fail("original_max_position_embeddings = " + std::to_string(original) + " must be in [1, " + std::to_string(max_config_value) + "]");
  s.original_max_position = static_cast<Index>(original);
  s.beta_fast = r.number(j, "beta_fast", 32.0);
  s.beta_slow = r.number(j, "beta_slow", 1.0);
  if (j.contains("attention_factor") && !j.at("attention_factor").is_null()) s.attention_factor = r.number(j, "attention_factor", 1.0);
  return s;
}

/// A config's `layer_types` (transformers 4.5x and v5 write them): one entry per layer,
/// "full_attention" or "sliding_attention" (true); any other entry is refused by name.
inline std::vector<bool> parse_layer_types(const ConfigReader& r, Index n_layers) {
  const nlohmann::json& t = r.json().at("layer_types");
  if (!t.is_array() || t.size() != static_cast<std::size_t>(n_layers))
    r.fail("\"layer_types\" must be a list of num_hidden_layers = " + std::to_string(n_layers) + " entries, got " +
           (t.is_array() ? std::to_string(t.size()) + " entries" : t.dump()));
  std::vector<bool> sliding;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string type = t[i].is_string() ? t[i].get<std::string>() : "";
    if (type != "full_attention" && type != "sliding_attention")
      r.fail("layer_types[" + std::to_string(i) + "] = " + t[i].dump() +
             " is not a layer this model_type has (full_attention, sliding_attention)");
    sliding.push_back(type == "sliding_attention");
  }
  return sliding;
}

/// The rotary embedding of a config, as transformers v5 writes it (`rope_parameters`, theta and
/// scaling in one object) or as v4 did (top-level `rope_theta`, `rope_scaling`, and
/// `partial_rotary_factor`); the v5 form first. Both forms in one config must agree on theta.
inline RopeConfig parse_rope(const ConfigReader& r, Index head_dim) {
  const nlohmann::json& json = r.json();
  RopeConfig rope;
  rope.d_head = head_dim;
  rope.rotary_fraction = r.number(json, "partial_rotary_factor", 1.0);
  if (!r.has("rope_parameters")) {  // v4
    rope.theta = r.number(json, "rope_theta", 10000.0);  // the config classes' default
    if (r.has("rope_scaling")) rope.scaling = parse_rope_scaling(r, json.at("rope_scaling"), "rope_scaling");
    return rope;
  }
  const nlohmann::json& p = json.at("rope_parameters");
  if (!p.is_object()) r.fail("\"rope_parameters\" is not an object");
  for (const auto& item : p.items())
    if (item.value().is_object())
      r.fail("\"rope_parameters\" is keyed by layer type (\"" + item.key() + "\"), which this model_type does not have");
  if (!p.contains("rope_theta") || p.at("rope_theta").is_null()) r.fail("\"rope_parameters\" has no \"rope_theta\"");
  rope.theta = r.number(p, "rope_theta", 0.0);
  if (r.has("rope_theta") && r.number(json, "rope_theta", 0.0) != rope.theta)
    r.fail("\"rope_theta\" = " + json.at("rope_theta").dump() + " disagrees with rope_parameters' " + p.at("rope_theta").dump());
  if (r.has("rope_scaling")) r.fail("both \"rope_scaling\" (v4) and \"rope_parameters\" (v5): which one holds is not clear");
  const double fraction = r.number(p, "partial_rotary_factor", rope.rotary_fraction);
  if (r.has("partial_rotary_factor") && fraction != rope.rotary_fraction)
    r.fail("\"partial_rotary_factor\" = " + json.at("partial_rotary_factor").dump() + " disagrees with rope_parameters' " +
           p.at("partial_rotary_factor").dump());
  rope.rotary_fraction = fraction;
  rope.scaling = parse_rope_scaling(r, p, "rope_parameters");
  return rope;
}

}  // namespace detail

/// Parses the text of a Llama, Qwen2 or Mistral config.json; `name` is used in error messages.
inline LlamaConfig parse_llama_config(const std::string& text, const std::string& name) {
  const detail::ConfigReader r(text, "llama config", name);
  const nlohmann::json& json = r.json();
  LlamaConfig c;
  c.model_type = r.string("model_type");
  if (c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "mistral")
    r.fail("model_type \"" + c.model_type + "\" is not one this loader reads (llama, qwen2, mistral)");
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
  c.rope = detail::parse_rope(r, c.head_dim);
  const bool windowed = c.model_type == "mistral" || (json.contains("use_sliding_window") && json.at("use_sliding_window") == true);
  if (r.has("layer_types")) {  // as Hugging Face's attention reads them, family by family
    c.sliding_layers = detail::parse_layer_types(r, c.n_layers);
    const bool any = std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) != c.sliding_layers.end();
    const bool all = std::find(c.sliding_layers.begin(), c.sliding_layers.end(), false) == c.sliding_layers.end();
    if (any && c.model_type == "llama") r.fail("\"layer_types\" has sliding_attention layers, which llama does not have");
    if (c.model_type == "mistral" && r.has("sliding_window") && !all)
      r.fail("\"layer_types\" has full_attention layers, but mistral slides every layer when sliding_window is set");
    if (any && !r.has("sliding_window")) r.fail("\"layer_types\" has sliding_attention layers but there is no \"sliding_window\"");
    if (any && windowed) c.sliding_window = r.integer("sliding_window");  // qwen2: none without use_sliding_window
  } else {
    if (windowed && r.has("sliding_window")) c.sliding_window = r.integer("sliding_window");
    if (c.model_type == "qwen2") c.first_window_layer = r.integer("max_window_layers", c.n_layers);
  }
  try {
    RotaryEmbedding::check(c.rope);  // a theta or scaling out of range is refused here, by name
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  return c;
}

inline LlamaConfig read_llama_config(const std::string& path) { return parse_llama_config(read_text_file(path, "llama config"), path); }

/// Layer `layer`'s attention from a checkpoint already open, with its config.
template <class Scalar>
MultiHeadAttention<Scalar> load_llama_attention(const Checkpoint& model, const LlamaConfig& config, Index layer) {
  const std::string where = "headwise: llama: " + model.folder() + ": ";
  if (layer < 0 || layer >= config.n_layers)
    throw SafetensorsError(where + "layer " + std::to_string(layer) + " is out of range [0, " + std::to_string(config.n_layers) + ")");
  const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
  const auto hidden = static_cast<std::uint64_t>(config.hidden_size), d = static_cast<std::uint64_t>(config.head_dim);
  auto weight = [&](const std::string& name, std::uint64_t out, std::uint64_t in) -> Matrix<Scalar> {
    const std::string key = prefix + name + ".weight";
    if (!model.contains(key)) throw SafetensorsError(where + "missing tensor \"" + key + "\"");
    const auto& shape = model.file_of(key).info(key).shape;
    if (shape != std::vector<std::uint64_t>{out, in})
      throw SafetensorsError(where + "tensor \"" + key + "\" has shape " + detail::shape_string(shape) + ", expected " +
                             detail::shape_string({out, in}) + " (inconsistent with the config's head counts)");
    return model.file_of(key).matrix<Scalar>(key).transpose();  // nn.Linear [out, in] -> [in, out]
  };
  auto bias = [&](const std::string& name, std::uint64_t size) -> RowVector<Scalar> {
    const std::string key = prefix + name + ".bias";
    if (!model.contains(key)) return {};
    const auto& shape = model.file_of(key).info(key).shape;
    if (shape != std::vector<std::uint64_t>{size})
      throw SafetensorsError(where + "tensor \"" + key + "\" has shape " + detail::shape_string(shape) + ", expected " +
                             detail::shape_string({size}));
    return model.file_of(key).row_vector<Scalar>(key);
  };
  const std::uint64_t q_width = std::uint64_t(config.n_heads) * d, kv_width = std::uint64_t(config.n_kv_heads) * d;
  MultiHeadWeights<Scalar> w;
  w.w_q = weight("q_proj", q_width, hidden), w.b_q = bias("q_proj", q_width);
  w.w_k = weight("k_proj", kv_width, hidden), w.b_k = bias("k_proj", kv_width);
  w.w_v = weight("v_proj", kv_width, hidden), w.b_v = bias("v_proj", kv_width);
  w.w_o = weight("o_proj", hidden, q_width), w.b_o = bias("o_proj", hidden);
  try {
    return MultiHeadAttention<Scalar>(config.n_heads, std::move(w), config.layer(layer));
  } catch (const std::invalid_argument& e) {  // non-finite weights, a config the layer refuses
    throw SafetensorsError(where + "layer " + std::to_string(layer) + ": " + e.what());
  }
}

/// Every layer's attention from a checkpoint folder (config.json and one or more safetensors
/// files): each file is opened once for all layers.
///   auto layers = io::load_llama_attention_layers<float>("Llama-3.2-1B/");   // layers[3].forward(x)
template <class Scalar>
std::vector<MultiHeadAttention<Scalar>> load_llama_attention_layers(const std::string& folder) {
  const LlamaConfig config = read_llama_config(folder + "/config.json");
  const Checkpoint model = Checkpoint::open(folder);
  std::vector<MultiHeadAttention<Scalar>> layers;  // not reserved: a config may claim 2^32 layers the file lacks
  for (Index layer = 0; layer < config.n_layers; ++layer) layers.push_back(load_llama_attention<Scalar>(model, config, layer));
  return layers;
}

/// Layer `layer`'s attention from a checkpoint folder.
template <class Scalar>
MultiHeadAttention<Scalar> load_llama_attention(const std::string& folder, Index layer) {
  return load_llama_attention<Scalar>(Checkpoint::open(folder), read_llama_config(folder + "/config.json"), layer);
}

}  // namespace headwise::io
