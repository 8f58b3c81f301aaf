// Loading the attention of decoder checkpoints in Hugging Face's layout, every family from one
// table (detail::family_of in io/llama_config.hpp, which reads config.json): Llama, Qwen2, Qwen3,
// Mistral, Ministral / Ministral 3, Gemma 2, Gemma 3, Gemma 4, gpt-oss, Phi-3 / Phi-4-mini, Llama 4
// (its text layers), SmolLM3, OLMo 2 and Qwen3-Next (its full-attention layers); config.json + model.safetensors, or shards with
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
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/checkpoint.hpp"
#include "headwise/io/llama_config.hpp"
#include "headwise/io/safetensors.hpp"
#include "headwise/io/tensor_reader.hpp"
#include "headwise/multi_head_attention.hpp"

namespace headwise::io {

namespace detail {

/// The reader of layer `layer`'s self_attn tensors.
inline TensorReader layer_tensors(const Checkpoint& model, Index layer, std::optional<LlamaConfig::Fp8Blocks> fp8) {
  return TensorReader(model, "headwise: llama: " + model.folder() + ": ",
                      {"model.layers." + std::to_string(layer) + ".self_attn.", fp8, " (inconsistent with the config's head counts)"});
}

/// A projection's bias as the config's attention_bias says (LlamaConfig::attention_bias): where it
/// says true or false, Hugging Face's layer has a bias or none whatever the checkpoint holds, so a
/// bias missing, or one there, is refused by name; unsaid, read where the checkpoint has it.
template <class Scalar>
RowVector<Scalar> projection_bias(const TensorReader& t, const LlamaConfig& config, const char* name, std::uint64_t size) {
  if (config.attention_bias == true && !t.has(name))
    throw SafetensorsError(t.where() + "missing tensor \"" + t.prefix() + name + "\": the config says attention_bias = true");
  if (config.attention_bias == false && t.has(name))
    throw SafetensorsError(t.where() + "tensor \"" + t.prefix() + name + "\" is there, but the config says attention_bias = false "
                           "(the model has no such bias)");
  return t.optional_vector<Scalar>(name, size);
}

/// W_Q, W_K, W_V and their biases as the family stores them: q_proj, k_proj, v_proj; Phi-3's one
/// qkv_proj split by rows; Qwen3-Next's q_proj holding [q_h | gate_h] per head (the gate into
/// w_gate); Gemma 4's full layers without v_proj (K = V: the values are the raw keys).
template <class Scalar>
void read_projections(const TensorReader& t, const LlamaConfig& config, Index layer, MultiHeadWeights<Scalar>& w) {
  const auto hidden = static_cast<std::uint64_t>(config.hidden_size), d = static_cast<std::uint64_t>(config.head_dim_of(layer));
  const std::uint64_t q_width = std::uint64_t(config.n_heads) * d, kv_width = std::uint64_t(config.kv_heads_of(layer)) * d;
  const auto qw = static_cast<Index>(q_width), kvw = static_cast<Index>(kv_width), di = static_cast<Index>(d);
  const auto bias = [&](const char* name, std::uint64_t size) { return projection_bias<Scalar>(t, config, name, size); };
  if (config.fused_qkv) {
    const Matrix<Scalar> qkv = t.linear<Scalar>("qkv_proj.weight", q_width + 2 * kv_width, hidden);
    w.w_q = qkv.leftCols(qw), w.w_k = qkv.middleCols(qw, kvw), w.w_v = qkv.rightCols(kvw);
    const RowVector<Scalar> b = bias("qkv_proj.bias", q_width + 2 * kv_width);
    if (b.size()) w.b_q = b.head(qw), w.b_k = b.segment(qw, kvw), w.b_v = b.tail(kvw);
    return;
  }
  if (config.output_gate) {
    const Matrix<Scalar> both = t.linear<Scalar>("q_proj.weight", 2 * q_width, hidden);
    const RowVector<Scalar> b = bias("q_proj.bias", 2 * q_width);
    w.w_q.resize(both.rows(), qw), w.w_gate.resize(both.rows(), qw);
    if (b.size()) w.b_q.resize(qw), w.b_gate.resize(qw);
    for (Index h = 0; h < config.n_heads; ++h) {
      w.w_q.middleCols(h * di, di) = both.middleCols(2 * h * di, di);
      w.w_gate.middleCols(h * di, di) = both.middleCols(2 * h * di + di, di);
      if (b.size()) w.b_q.segment(h * di, di) = b.segment(2 * h * di, di), w.b_gate.segment(h * di, di) = b.segment(2 * h * di + di, di);
    }
  } else {
    w.w_q = t.linear<Scalar>("q_proj.weight", q_width, hidden), w.b_q = bias("q_proj.bias", q_width);
  }
  w.w_k = t.linear<Scalar>("k_proj.weight", kv_width, hidden), w.b_k = bias("k_proj.bias", kv_width);
  if (config.full_keys_are_values && config.type_of(layer) == LayerType::full) {
    if (t.has("v_proj.weight")) throw SafetensorsError(t.where() + "layer " + std::to_string(layer) + " has a v_proj, but attention_k_eq_v says its values are its keys");
    w.w_v = w.w_k, w.b_v = w.b_k;
  } else {
    w.w_v = t.linear<Scalar>("v_proj.weight", kv_width, hidden), w.b_v = bias("v_proj.bias", kv_width);
  }
}

/// The block scales of W_Q, W_K, W_V, W_O (and the gate) of an FP8 layer (MultiHeadWeights::
/// fp8_scales), a row per row, split and ordered as read_projections splits the weights.
inline MultiHeadWeights<float>::Fp8Scales read_fp8_scales(const TensorReader& t, const LlamaConfig& config, Index layer) {
  const auto hidden = static_cast<std::uint64_t>(config.hidden_size), d = static_cast<std::uint64_t>(config.head_dim_of(layer));
  const std::uint64_t q_width = std::uint64_t(config.n_heads) * d, kv_width = std::uint64_t(config.kv_heads_of(layer)) * d;
  const auto qw = static_cast<Index>(q_width), kvw = static_cast<Index>(kv_width), di = static_cast<Index>(d);
  MultiHeadWeights<float>::Fp8Scales s;
  s.o = t.fp8_scales("o_proj.weight", hidden, q_width);
  if (config.fused_qkv) {
    const BlockScales qkv = t.fp8_scales("qkv_proj.weight", q_width + 2 * kv_width, hidden);
    s.q = qkv.rows(0, qw), s.k = qkv.rows(qw, kvw), s.v = qkv.rows(qw + kvw, kvw);
    return s;
  }
  if (config.output_gate) {  // q_proj holds [q_h | gate_h] per head
    const BlockScales both = t.fp8_scales("q_proj.weight", 2 * q_width, hidden);
    std::vector<BlockScales> q, gate;
    for (Index h = 0; h < config.n_heads; ++h) q.push_back(both.rows(2 * h * di, di)), gate.push_back(both.rows(2 * h * di + di, di));
    s.q = stacked(q), s.gate = stacked(gate);
  } else {
    s.q = t.fp8_scales("q_proj.weight", q_width, hidden);
  }
  s.k = t.fp8_scales("k_proj.weight", kv_width, hidden);
  s.v = t.has("v_proj.weight") ? t.fp8_scales("v_proj.weight", kv_width, hidden) : s.k;  // (Gemma 4's full layers: K = V)
  return s;
}

/// The QK-norm weights (q_norm, k_norm: per head [d], or OLMo 2's over the projection) and the
/// sinks, where the family has them.
inline void read_layer_tensors(const TensorReader& t, const LlamaConfig& config, Index layer, LayerConfig& c) {
  const auto d = static_cast<std::uint64_t>(config.head_dim_of(layer));
  if (c.qk_norm && config.qk_norm_weighted) {
    const bool whole = c.qk_norm->query.over == RmsNorm::Over::projection;
    c.qk_norm->query.weight = t.vector<double>("q_norm.weight", whole ? std::uint64_t(config.n_heads) * d : d).transpose();
    c.qk_norm->key.weight = t.vector<double>("k_norm.weight", whole ? std::uint64_t(config.kv_heads_of(layer)) * d : d).transpose();
  }
  if (config.sinks) c.sinks = t.vector<double>("sinks", static_cast<std::uint64_t>(config.n_heads)).transpose();
}

}  // namespace detail

/// Layer `layer`'s attention from a checkpoint already open, with its config.
template <class Scalar>
MultiHeadAttention<Scalar> load_llama_attention(const Checkpoint& model, const LlamaConfig& config, Index layer) {
  const detail::TensorReader t = detail::layer_tensors(model, layer, config.fp8);
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
  w.w_o = t.linear<Scalar>("o_proj.weight", hidden, q_width), w.b_o = detail::projection_bias<Scalar>(t, config, "o_proj.bias", hidden);
  w.kept_as = t.kept_type<Scalar>({"qkv_proj.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"});
  if constexpr (std::is_same_v<Scalar, float>)
    if (is_fp8(w.kept_as)) w.fp8_scales = detail::read_fp8_scales(t, config, layer);
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
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_LLAMA_LOADER_INSTANTIATIONS)

}  // namespace headwise::io
