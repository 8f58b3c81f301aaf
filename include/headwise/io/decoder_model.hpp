// Loading whole decoder models (model/decoder_model.hpp) from Hugging Face checkpoint folders:
// GPT-2 (GPT2LMHeadModel), and from the attention loader's table the families whose MLP headwise
// has: llama, qwen2, qwen3, qwen3_moe, mistral (SwiGLU; Qwen3-MoE's sparse blocks) and
// gemma3_text (GeGLU, its four norms, the embedding scale). The attention layers come from
// io/gpt2.hpp and io/llama.hpp; here the embeddings, norms, MLPs and the LM head. A family, an
// activation or a setting the model code does not cover (a final soft-cap, say) is refused by name.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "headwise/io/checkpoint.hpp"
#include "headwise/io/config_reader.hpp"
#include "headwise/io/gpt2.hpp"
#include "headwise/io/llama.hpp"
#include "headwise/model/decoder_model.hpp"

namespace headwise::io {

namespace detail {

/// Reads tensors of a checkpoint by full name, checking shapes.
class ModelTensors {
 public:
  ModelTensors(const Checkpoint& model, std::string where) : model_(model), where_(std::move(where)) {}
  bool has(const std::string& key) const { return model_.contains(key); }
  template <class Scalar>
  Matrix<Scalar> matrix(const std::string& key, std::uint64_t rows, std::uint64_t cols) const {
    check(key, {rows, cols});
    return model_.file_of(key).matrix<Scalar>(key);
  }
  template <class Scalar>
  Matrix<Scalar> linear(const std::string& key, std::uint64_t out, std::uint64_t in) const {  // nn.Linear [out, in] -> [in, out]
    return matrix<Scalar>(key, out, in).transpose();
  }
  template <class Scalar>
  RowVector<Scalar> vector(const std::string& key, std::uint64_t size) const {
    check(key, {size});
    return model_.file_of(key).row_vector<Scalar>(key);
  }
  [[noreturn]] void fail(const std::string& what) const { throw SafetensorsError(where_ + what); }

 private:
  void check(const std::string& key, const std::vector<std::uint64_t>& shape) const {
    if (!model_.contains(key)) fail("missing tensor \"" + key + "\"");
    const auto& stored = model_.file_of(key).info(key).shape;
    if (stored != shape) fail("tensor \"" + key + "\" has shape " + shape_string(stored) + ", expected " + shape_string(shape));
  }
  const Checkpoint& model_;
  std::string where_;
};

template <class Scalar>
model::Norm<Scalar> norm_of(const ModelTensors& t, const std::string& prefix, std::uint64_t d, typename model::Norm<Scalar>::Kind kind,
                            double eps) {
  model::Norm<Scalar> n;
  n.kind = kind, n.eps = eps;
  n.weight = t.vector<Scalar>(prefix + ".weight", d);
  if (kind == model::Norm<Scalar>::Kind::layer_norm) n.bias = t.vector<Scalar>(prefix + ".bias", d);
  return n;
}

/// GPT-2: wte + wpe, LayerNorms, gelu_new MLPs (Conv1D weights [in, out]), tied LM head.
template <class Scalar>
model::DecoderModel<Scalar> load_gpt2_model(const std::string& folder, const std::string& config_text) {
  const ConfigReader r(config_text, "gpt2 model config", folder + "/config.json");
  const Gpt2Config c = parse_gpt2_config(config_text, folder + "/config.json");
  if (r.has("activation_function") && r.string("activation_function") != "gelu_new")
    r.fail("activation_function \"" + r.string("activation_function") + "\" is not one the model code has (gelu_new)");
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"})
    if (r.boolean(key, false)) r.fail(std::string("\"") + key + "\" = true changes attention, and headwise does not read it");
  if (r.has("scale_attn_weights") && !r.boolean("scale_attn_weights", true)) r.fail("\"scale_attn_weights\" = false is not read");
  const Checkpoint checkpoint = Checkpoint::open(folder);
  const SafetensorsFile& file = checkpoint.file_of(checkpoint.contains("transformer.wte.weight") ? "transformer.wte.weight" : "wte.weight");
  const ModelTensors t(checkpoint, "headwise: gpt2 model: " + folder + ": ");
  const std::string p = checkpoint.contains("transformer.wte.weight") ? "transformer." : "";
  const auto d = static_cast<std::uint64_t>(c.n_embd), inner = static_cast<std::uint64_t>(r.integer("n_inner", 4 * c.n_embd));
  const double eps = r.number(r.json(), "layer_norm_epsilon", 1e-5);
  model::DecoderModel<Scalar> m;
  m.embedding = t.matrix<Scalar>(p + "wte.weight", static_cast<std::uint64_t>(r.integer("vocab_size", 50257)), d);
  m.positions = t.matrix<Scalar>(p + "wpe.weight", static_cast<std::uint64_t>(r.integer("n_positions", 1024)), d);
  using Kind = typename model::Norm<Scalar>::Kind;
  for (Index l = 0; l < c.n_layer; ++l) {
    const std::string h = p + "h." + std::to_string(l) + ".";
    model::FeedForward<Scalar> mlp;
    mlp.activation = model::Activation::gelu_tanh;
    mlp.w_up = t.matrix<Scalar>(h + "mlp.c_fc.weight", d, inner), mlp.b_up = t.vector<Scalar>(h + "mlp.c_fc.bias", inner);
    mlp.w_down = t.matrix<Scalar>(h + "mlp.c_proj.weight", inner, d), mlp.b_down = t.vector<Scalar>(h + "mlp.c_proj.bias", d);
    m.blocks.push_back({norm_of<Scalar>(t, h + "ln_1", d, Kind::layer_norm, eps), load_gpt2_attention<Scalar>(file, c, l), std::nullopt,
                        norm_of<Scalar>(t, h + "ln_2", d, Kind::layer_norm, eps), std::move(mlp), std::nullopt, std::nullopt});
  }
  m.final_norm = norm_of<Scalar>(t, p + "ln_f", d, Kind::layer_norm, eps);
  m.unembedding = m.embedding.transpose();  // tied
  return m;
}

/// A dense gated MLP model.layers.L.mlp.{gate,up,down}_proj, or expert E's under mlp.experts.E.
template <class Scalar>
model::FeedForward<Scalar> gated_mlp(const ModelTensors& t, const std::string& prefix, std::uint64_t d, std::uint64_t inner,
                                     model::Activation a) {
  model::FeedForward<Scalar> f;
  f.activation = a;
  f.w_gate = t.linear<Scalar>(prefix + "gate_proj.weight", inner, d);
  f.w_up = t.linear<Scalar>(prefix + "up_proj.weight", inner, d);
  f.w_down = t.linear<Scalar>(prefix + "down_proj.weight", d, inner);
  return f;
}

/// Layer L's MLP: Qwen3-MoE's sparse block where L is sparse, else the dense gated MLP.
template <class Scalar>
void read_mlp(const ConfigReader& r, const ModelTensors& t, Index l, std::uint64_t d, model::Activation a, model::Block<Scalar>& b) {
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
  const Index experts = r.has("num_experts") ? r.integer("num_experts") : 0;
  bool sparse = experts > 0 && (l + 1) % r.integer("decoder_sparse_step", 1) == 0;
  if (r.has("mlp_only_layers"))
    for (const auto& v : r.json().at("mlp_only_layers"))
      if (v.is_number_integer() && v.get<Index>() == l) sparse = false;
  if (!sparse) {
    b.mlp = gated_mlp<Scalar>(t, p, d, static_cast<std::uint64_t>(r.integer("intermediate_size")), a);
    return;
  }
  model::MixtureOfExperts<Scalar> moe;
  moe.router = t.linear<Scalar>(p + "gate.weight", static_cast<std::uint64_t>(experts), d);
  moe.top_k = r.integer("num_experts_per_tok");
  if (moe.top_k > experts) r.fail("num_experts_per_tok exceeds num_experts");
  moe.normalise_top_k = r.boolean("norm_topk_prob", false);
  const auto inner = static_cast<std::uint64_t>(r.integer("moe_intermediate_size"));
  for (Index e = 0; e < experts; ++e) moe.experts.push_back(gated_mlp<Scalar>(t, p + "experts." + std::to_string(e) + ".", d, inner, a));
  b.experts = std::move(moe);
}

/// The Llama-style families: RMSNorms (Gemma's (1 + w) and its extra norms), gated MLPs, an LM
/// head or the tied embedding.
template <class Scalar>
model::DecoderModel<Scalar> load_llama_style_model(const std::string& folder, const std::string& config_text) {
  const LlamaConfig config = parse_llama_config(config_text, folder + "/config.json");
  const ConfigReader r(config_text, "model config", folder + "/config.json");
  const std::string& type = config.model_type;
  const bool gemma = type == "gemma3_text";
  if (!gemma && type != "llama" && type != "qwen2" && type != "qwen3" && type != "qwen3_moe" && type != "mistral")
    r.fail("model_type \"" + type + "\" has attention headwise loads, but no whole-model code yet (llama, qwen2, qwen3, qwen3_moe, "
           "mistral, gemma3_text)");
  const std::string act = r.string(gemma ? "hidden_activation" : "hidden_act");
  if (act != (gemma ? "gelu_pytorch_tanh" : "silu"))
    r.fail(std::string(gemma ? "hidden_activation" : "hidden_act") + " \"" + act + "\" is not one the model code has for " + type);
  if (r.has("final_logit_softcapping")) r.fail("\"final_logit_softcapping\" is set, which the model code does not apply");
  const Checkpoint checkpoint = Checkpoint::open(folder);
  const ModelTensors t(checkpoint, "headwise: model: " + folder + ": ");
  const auto d = static_cast<std::uint64_t>(config.hidden_size), vocab = static_cast<std::uint64_t>(r.integer("vocab_size"));
  const double eps = r.number(r.json(), "rms_norm_eps", 1e-6);
  using Kind = typename model::Norm<Scalar>::Kind;
  const Kind kind = gemma ? Kind::rms_offset : Kind::rms;
  const model::Activation a = gemma ? model::Activation::gelu_tanh : model::Activation::silu;
  model::DecoderModel<Scalar> m;
  m.embedding = t.matrix<Scalar>("model.embed_tokens.weight", vocab, d);
  if (gemma) m.embedding_scale = static_cast<double>(static_cast<Scalar>(std::sqrt(double(config.hidden_size))));
  for (Index l = 0; l < config.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    model::Block<Scalar> b{norm_of<Scalar>(t, p + "input_layernorm", d, kind, eps), load_llama_attention<Scalar>(checkpoint, config, l),
                           std::nullopt, {}, {}, std::nullopt, std::nullopt};
    if (gemma) {
      b.post_attention_norm = norm_of<Scalar>(t, p + "post_attention_layernorm", d, kind, eps);
      b.mlp_norm = norm_of<Scalar>(t, p + "pre_feedforward_layernorm", d, kind, eps);
      b.post_mlp_norm = norm_of<Scalar>(t, p + "post_feedforward_layernorm", d, kind, eps);
    } else {
      b.mlp_norm = norm_of<Scalar>(t, p + "post_attention_layernorm", d, kind, eps);
    }
    read_mlp<Scalar>(r, t, l, d, a, b);
    m.blocks.push_back(std::move(b));
  }
  m.final_norm = norm_of<Scalar>(t, "model.norm", d, kind, eps);
  const bool tied = r.boolean("tie_word_embeddings", gemma);  // the config classes' defaults
  m.unembedding = tied ? Matrix<Scalar>(m.embedding.transpose()) : Matrix<Scalar>(t.matrix<Scalar>("lm_head.weight", vocab, d).transpose());
  return m;
}

}  // namespace detail

/// A whole model from a checkpoint folder (config.json, model.safetensors or shards).
///   auto model = io::load_decoder_model<float>("gpt2/");   // model.run(ids).logits
template <class Scalar>
model::DecoderModel<Scalar> load_decoder_model(const std::string& folder) {
  const std::string text = read_text_file(folder + "/config.json", "model config");
  const detail::ConfigReader r(text, "model config", folder + "/config.json");
  if (r.string("model_type") == "gpt2") return detail::load_gpt2_model<Scalar>(folder, text);
  return detail::load_llama_style_model<Scalar>(folder, text);
}

}  // namespace headwise::io
