// Loading the attention of a Hugging Face GPT-2 checkpoint (model.safetensors + config.json).
//
// Layer L's c_attn.weight [d, 3d] is W_Q | W_K | W_V as column blocks, heads in order inside each;
// c_attn.bias likewise; c_proj.weight [d, d] and c_proj.bias are W_O and b_O. Keys may carry the
// "transformer." prefix of GPT2LMHeadModel checkpoints; the mask buffers older checkpoints hold
// (attn.bias, attn.masked_bias) are ignored. Any stored float dtype (F32, F64, BF16, F16) loads;
// each tensor is read, its shape checked first, by the loaders' one tensor reader (io/tensor_reader.hpp).
// Needs nlohmann_json, like io/safetensors.hpp.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/io/checkpoint.hpp"
#include "headwise/io/config_reader.hpp"
#include "headwise/io/llama_config.hpp"
#include "headwise/io/safetensors.hpp"
#include "headwise/io/tensor_reader.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/types.hpp"

namespace headwise::io {

/// What config.json says of the attention: width, heads and layers.
struct Gpt2Config {
  Index n_embd = 0;   ///< d_model
  Index n_head = 0;   ///< n_heads
  Index n_layer = 0;  ///< layers in the checkpoint
};

namespace detail {
/// What a GPT-2 config.json says of the attention, from its JSON parsed once (`r`; the whole-model
/// loader reads its other keys from the same reader).
inline Gpt2Config gpt2_config_of(const ConfigReader& r) {
  refuse_unknown_keys(r, *family_of("gpt2"));  // (GPT-2's keys are a row of the loaders' table)
  Gpt2Config config;
  config.n_embd = r.integer("n_embd");
  config.n_head = r.integer("n_head");
  config.n_layer = r.integer("n_layer");  // (required: Hugging Face's default of 12 is no size of this checkpoint)
  if (config.n_embd % config.n_head != 0)
    r.fail("n_embd = " + std::to_string(config.n_embd) + " is not divisible by n_head = " + std::to_string(config.n_head));
  return config;
}
}  // namespace detail

/// Parses the text of a config.json: n_embd, n_head and n_layer, each required. Each must be
/// a positive integer no larger than `max_config_value`, and n_embd divisible by n_head; a key
/// GPT-2's config does not have is refused by name; `name` is used in error messages
/// (SafetensorsError).
inline Gpt2Config parse_gpt2_config(const std::string& text, const std::string& name) {
  return detail::gpt2_config_of(detail::ConfigReader(text, "gpt2 config", name));
}

/// Reads n_embd, n_head and n_layer from a config.json (parse_gpt2_config).
inline Gpt2Config read_gpt2_config(const std::string& path) {
  return parse_gpt2_config(detail::read_text(path, "gpt2 config"), path);
}

/// Layer `layer`'s attention from a GPT-2 checkpoint already open, with its config.
template <class Scalar>
MultiHeadAttention<Scalar> load_gpt2_attention(const SafetensorsFile& model, const Gpt2Config& config, Index layer) {
  const std::string where = "headwise: gpt2: " + model.name() + ": ";
  if (layer < 0 || layer >= config.n_layer)
    throw SafetensorsError(where + "layer " + std::to_string(layer) + " is out of range [0, " +
                           std::to_string(config.n_layer) + ")");
  if (config.n_embd <= 0 || config.n_head <= 0 || config.n_embd > max_config_value || config.n_head > max_config_value)
    throw SafetensorsError(where + "config has n_embd = " + std::to_string(config.n_embd) + " and n_head = " +
                           std::to_string(config.n_head) + ", expected each in [1, " +
                           std::to_string(max_config_value) + "]");
  const std::string plain = "h." + std::to_string(layer) + ".attn.";
  const std::string prefix = model.contains(plain + "c_attn.weight") ? plain : "transformer." + plain;
  const Checkpoint checkpoint = Checkpoint::of_file(model.name(), model);  // (shares the file's mapping)
  detail::TensorReaderOptions at;
  at.prefix = prefix;
  const detail::TensorReader t(checkpoint, where, at);
  const auto d = static_cast<std::uint64_t>(config.n_embd);
  const Matrix<Scalar> c_attn = t.matrix<Scalar>("c_attn.weight", d, 3 * d);  // Conv1D: [in, out], as x W reads it
  const RowVector<Scalar> c_attn_b = t.vector<Scalar>("c_attn.bias", 3 * d);
  const Index n = config.n_embd;
  MultiHeadWeights<Scalar> w;
  w.w_q = c_attn.leftCols(n);
  w.w_k = c_attn.middleCols(n, n);
  w.w_v = c_attn.rightCols(n);
  w.b_q = c_attn_b.head(n);
  w.b_k = c_attn_b.segment(n, n);
  w.b_v = c_attn_b.tail(n);
  w.w_o = t.matrix<Scalar>("c_proj.weight", d, d);
  w.b_o = t.vector<Scalar>("c_proj.bias", d);
  w.kept_as = t.kept_type<Scalar>({"c_attn.weight", "c_proj.weight"});
  try {
    return MultiHeadAttention<Scalar>(config.n_head, std::move(w));
  } catch (const std::invalid_argument& e) {  // non-finite weights, a head count that does not fit
    throw SafetensorsError(where + "layer " + std::to_string(layer) + ": " + e.what());
  }
}

/// Every layer's attention, 0 .. n_layer - 1, from a checkpoint already open: the file is validated
/// once and each tensor converted once.
template <class Scalar>
std::vector<MultiHeadAttention<Scalar>> load_gpt2_attention_layers(const SafetensorsFile& model,
                                                                   const Gpt2Config& config) {
  if (config.n_layer <= 0 || config.n_layer > max_config_value)
    throw SafetensorsError("headwise: gpt2: " + model.name() + ": the config has n_layer = " + std::to_string(config.n_layer) +
                           ", expected an integer in [1, " + std::to_string(max_config_value) + "]");
  std::vector<MultiHeadAttention<Scalar>> layers;
  for (Index layer = 0; layer < config.n_layer; ++layer) layers.push_back(load_gpt2_attention<Scalar>(model, config, layer));
  return layers;
}

/// Every layer's attention from a checkpoint folder holding model.safetensors and config.json:
/// the file is mapped once, where calling the folder overload per layer would map and validate it
/// once per layer.
///   auto layers = io::load_gpt2_attention_layers<float>("gpt2/");   // layers[5].forward(x)
template <class Scalar>
std::vector<MultiHeadAttention<Scalar>> load_gpt2_attention_layers(const std::string& folder) {
  const Gpt2Config config = read_gpt2_config(folder + "/config.json");
  return load_gpt2_attention_layers<Scalar>(SafetensorsFile::open(folder + "/model.safetensors"), config);
}

/// Layer `layer`'s attention from a checkpoint folder holding model.safetensors and config.json.
template <class Scalar>
MultiHeadAttention<Scalar> load_gpt2_attention(const std::string& folder, Index layer) {
  const Gpt2Config config = read_gpt2_config(folder + "/config.json");
  return load_gpt2_attention<Scalar>(SafetensorsFile::open(folder + "/model.safetensors"), config, layer);
}

/// The compiled mode's instantiations of GPT-2's attention loaders (detail/compiled.hpp).
#define HEADWISE_GPT2_LOADER_INSTANTIATIONS(PREFIX, S) \
  PREFIX template std::vector<MultiHeadAttention<S>> load_gpt2_attention_layers<S>(const SafetensorsFile&, const Gpt2Config&); \
  PREFIX template std::vector<MultiHeadAttention<S>> load_gpt2_attention_layers<S>(const std::string&); \
  PREFIX template MultiHeadAttention<S> load_gpt2_attention<S>(const std::string&, Index);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_GPT2_LOADER_INSTANTIATIONS)

}  // namespace headwise::io
