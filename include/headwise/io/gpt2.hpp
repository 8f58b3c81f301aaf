// Loading the attention of a Hugging Face GPT-2 checkpoint (model.safetensors + config.json).
//
// Layer L's c_attn.weight [d, 3d] is W_Q | W_K | W_V as column blocks, heads in order inside each;
// c_attn.bias likewise; c_proj.weight [d, d] and c_proj.bias are W_O and b_O. Keys may carry the
// "transformer." prefix of GPT2LMHeadModel checkpoints; the mask buffers older checkpoints hold
// (attn.bias, attn.masked_bias) are ignored. Any stored float dtype (F32, F64, BF16, F16) loads.
// Needs nlohmann_json, like io/safetensors.hpp.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "headwise/io/safetensors.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/types.hpp"

namespace headwise::io {

/// What config.json says of the attention: width, heads and layers.
struct Gpt2Config {
  Index n_embd = 0;   ///< d_model
  Index n_head = 0;   ///< n_heads
  Index n_layer = 0;  ///< layers in the checkpoint (0 if the config does not say)
};

/// Reads n_embd, n_head (required) and n_layer (optional) from a config.json.
inline Gpt2Config read_gpt2_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SafetensorsError("headwise: gpt2 config: cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    throw SafetensorsError("headwise: gpt2 config: " + path + " is not a JSON object");
  auto field = [&](const char* name, bool required) -> Index {
    const auto it = json.find(name);
    if (it == json.end() || !it->is_number_integer()) {
      if (!required) return 0;
      throw SafetensorsError("headwise: gpt2 config: " + path + " has no integer field \"" + name + "\"");
    }
    const auto value = it->get<std::int64_t>();
    if (value <= 0)
      throw SafetensorsError("headwise: gpt2 config: " + path + ": \"" + name + "\" must be > 0, got " +
                             std::to_string(value));
    return static_cast<Index>(value);
  };
  Gpt2Config config;
  config.n_embd = field("n_embd", true);
  config.n_head = field("n_head", true);
  config.n_layer = field("n_layer", false);
  if (config.n_embd % config.n_head != 0)
    throw SafetensorsError("headwise: gpt2 config: " + path + ": n_embd = " + std::to_string(config.n_embd) +
                           " is not divisible by n_head = " + std::to_string(config.n_head));
  return config;
}

/// Layer `layer`'s attention from a GPT-2 checkpoint already open, with its config.
template <class Scalar>
MultiHeadAttention<Scalar> load_gpt2_attention(const SafetensorsFile& model, const Gpt2Config& config, Index layer) {
  const std::string where = "headwise: gpt2: " + model.name() + ": ";
  if (layer < 0 || (config.n_layer > 0 && layer >= config.n_layer))
    throw SafetensorsError(where + "layer " + std::to_string(layer) + " is out of range [0, " +
                           std::to_string(config.n_layer) + ")");
  const std::string plain = "h." + std::to_string(layer) + ".attn.";
  const std::string prefix = model.contains(plain + "c_attn.weight") ? plain : "transformer." + plain;
  auto tensor = [&](const std::string& name, std::vector<std::uint64_t> shape) {
    const std::string key = prefix + name;
    if (!model.contains(key)) {
      if (config.n_layer == 0 && !model.contains("h.0.attn.c_attn.weight") &&
          !model.contains("transformer.h.0.attn.c_attn.weight"))
        throw SafetensorsError(where + "no tensor \"" + key + "\": is this a GPT-2 checkpoint?");
      throw SafetensorsError(where + "missing tensor \"" + key + "\"");
    }
    const auto& found = model.info(key).shape;
    if (found != shape)
      throw SafetensorsError(where + "tensor \"" + key + "\" has shape " + detail::shape_string(found) +
                             ", expected " + detail::shape_string(shape));
    return key;
  };
  const auto d = static_cast<std::uint64_t>(config.n_embd);
  const Matrix<Scalar> c_attn = model.matrix<Scalar>(tensor("c_attn.weight", {d, 3 * d}));
  const RowVector<Scalar> c_attn_b = model.row_vector<Scalar>(tensor("c_attn.bias", {3 * d}));
  const Index n = config.n_embd;
  MultiHeadWeights<Scalar> w;
  w.w_q = c_attn.leftCols(n);
  w.w_k = c_attn.middleCols(n, n);
  w.w_v = c_attn.rightCols(n);
  w.b_q = c_attn_b.head(n);
  w.b_k = c_attn_b.segment(n, n);
  w.b_v = c_attn_b.tail(n);
  w.w_o = model.matrix<Scalar>(tensor("c_proj.weight", {d, d}));
  w.b_o = model.row_vector<Scalar>(tensor("c_proj.bias", {d}));
  return MultiHeadAttention<Scalar>(config.n_head, std::move(w));
}

/// Layer `layer`'s attention from a checkpoint folder holding model.safetensors and config.json.
template <class Scalar>
MultiHeadAttention<Scalar> load_gpt2_attention(const std::string& folder, Index layer) {
  const Gpt2Config config = read_gpt2_config(folder + "/config.json");
  return load_gpt2_attention<Scalar>(SafetensorsFile::open(folder + "/model.safetensors"), config, layer);
}

}  // namespace headwise::io
