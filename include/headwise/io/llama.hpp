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
#include "headwise/io/gpt2.hpp"
#include "headwise/io/llama_config.hpp"
#include "headwise/io/safetensors.hpp"
#include "headwise/multi_head_attention.hpp"

namespace headwise::io {

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
