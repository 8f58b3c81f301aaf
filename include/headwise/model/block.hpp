// Block: one decoder block of a whole model, its parts each present or not: the norms, the
// attention layer (or DeepSeek's latent attention, or Qwen3-Next's Gated DeltaNet), the dense MLP or
// the experts, and Gemma 4's per-layer input, layer scalar and experts beside the MLP. Also the one
// table of a block's hooks (LayerHook, layer_hooks: each hook's name, part and whether a function
// may change it) and has_part, which DecoderModel's hook_names and read-only check read.
#pragma once

#include <cmath>
#include <optional>
#include <vector>

#include "headwise/gated_delta_net.hpp"
#include "headwise/model/feed_forward.hpp"
#include "headwise/model/mixture_of_experts.hpp"
#include "headwise/model/norm.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"
#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// Gemma 4's per-layer input of a block: after the MLP half, x += norm((gelu_tanh(x W_gateᵀ) ∘
/// input) W_projectionᵀ), where input (n, p) is the block's slice of the model's per-layer inputs
/// (PerLayerEmbedding).
template <class Scalar>
struct PerLayerInput {
  StoredMatrix gate;        ///< [p, d_model]: per_layer_input_gate
  StoredMatrix projection;  ///< [d_model, p]: per_layer_projection
  Norm<Scalar> norm;        ///< post_per_layer_input_norm

  /// What is added to x (n, d_model); gate_act, if given, gets gelu_tanh(x W_gateᵀ) (n, p).
  Matrix<Scalar> forward(const Matrix<Scalar>& x, const Matrix<Scalar>& input, int threads, Matrix<Scalar>* gate_act = nullptr) const {
    Matrix<Scalar> g = times_transposed<Scalar>(x, gate, threads).unaryExpr([](Scalar u) { return activate(Activation::gelu_tanh, u); });
    const Matrix<Scalar> out = norm.apply(times_transposed<Scalar>(Matrix<Scalar>(g.cwiseProduct(input)), projection, threads));
    if (gate_act) *gate_act = std::move(g);
    return out;
  }
};

/// Gemma 4's per-layer inputs, one slice of p for each layer from the token ids and the scaled
/// embedding e: (norm(e W_projectionᵀ / sqrt(d_model), per p-slice) + table[ids] sqrt(p)) / sqrt(2),
/// (n, n_layers p); layer L reads columns [L p, (L + 1) p).
template <class Scalar>
struct PerLayerEmbedding {
  StoredMatrix table;       ///< [vocab, n_layers p]: embed_tokens_per_layer
  StoredMatrix projection;  ///< [n_layers p, d_model]: per_layer_model_projection
  Norm<Scalar> norm;        ///< (p): per_layer_projection_norm, on each layer's slice
  Index width = 0;          ///< p: hidden_size_per_layer_input

  Matrix<Scalar> of(const std::vector<Index>& ids, const Matrix<Scalar>& e, int threads) const {
    const Matrix<Scalar> projected = times_transposed<Scalar>(e, projection, threads) * static_cast<Scalar>(1.0 / std::sqrt(double(e.cols())));
    Matrix<Scalar> out(e.rows(), projection.rows());
    for (Index l = 0; l < out.cols() / width; ++l) out.middleCols(l * width, width) = norm.apply(projected.middleCols(l * width, width));
    const auto token_scale = static_cast<Scalar>(std::sqrt(double(width))), sum_scale = static_cast<Scalar>(std::sqrt(0.5));
    for (Index t = 0; t < out.rows(); ++t)
      out.row(t) = (out.row(t) + table.row<Scalar>(ids[static_cast<std::size_t>(t)]) * token_scale) * sum_scale;
    return out;
  }
};

/// Gemma 4's experts beside the dense MLP (enable_moe_block): the MLP half's output is
/// dense_norm(mlp(mlp_norm(x))) + output_norm(experts(input_norm(x))), the router reading x itself.
template <class Scalar>
struct SideExperts {
  MixtureOfExperts<Scalar> experts;
  Norm<Scalar> input_norm, dense_norm, output_norm;  ///< pre_feedforward_layernorm_2, post_feedforward_layernorm_1, _2
};

/// One block: x += post_attention(attention(attention_norm(x))); x += post_mlp(mlp(mlp_norm(x))),
/// where an absent norm passes its input through; then Gemma 4's per-layer input and layer scalar.
template <class Scalar>
struct Block {
  std::optional<Norm<Scalar>> attention_norm;       ///< absent in OLMo 2
  MultiHeadAttention<Scalar> attention;
  std::optional<Norm<Scalar>> post_attention_norm;  ///< Gemma 2 and 3, OLMo 2
  std::optional<Norm<Scalar>> mlp_norm;             ///< absent in OLMo 2
  FeedForward<Scalar> mlp;                          ///< the dense MLP, unless `experts` is set
  std::optional<MixtureOfExperts<Scalar>> experts;  ///< Qwen3-MoE's sparse blocks
  std::optional<Norm<Scalar>> post_mlp_norm;        ///< Gemma 2 and 3, OLMo 2
  /// DeepSeek-V3's and Kimi K2's attention, multi-head latent attention, where set; `attention` is
  /// then a one-wide placeholder, and the tools that read a layer's heads refuse the model by name
  /// (DecoderModel::check_attention_layers).
  std::optional<MultiHeadLatentAttention<Scalar>> latent;
  /// Qwen3-Next's linear-attention layers (Gated DeltaNet) where set; `attention` is then a
  /// one-wide placeholder, as for `latent`.
  std::optional<GatedDeltaNet<Scalar>> delta_net = std::nullopt;
  std::optional<PerLayerInput<Scalar>> per_layer_input = std::nullopt;  ///< Gemma 4
  std::optional<SideExperts<Scalar>> side_experts = std::nullopt;      ///< Gemma 4 (26B-A4B)
  Scalar layer_scalar = Scalar(1);  ///< Gemma 4: the whole stream times this after the block

  /// False for an attention-only block (no experts, an MLP without weights): its MLP adds 0.
  bool has_mlp() const { return experts || mlp.w_up.rows() != 0; }
  /// The MLP half's output on m (the MLP's input), routing recorded where a sparse block chooses,
  /// the dense MLP's intermediates where `record` is given.
  Matrix<Scalar> mlp_of(const Matrix<Scalar>& m, Routing<Scalar>* routing, int threads,
                        typename FeedForward<Scalar>::Record* record = nullptr) const {
    if (experts) return experts->forward(m, routing, threads);
    return has_mlp() ? mlp.forward(m, threads, record) : Matrix<Scalar>::Zero(m.rows(), m.cols());
  }
};

/// A hook of every block that has the part it sits in: its name after "blocks.L.", and whether a
/// hook function may change it (the others the layer has used before a function could run).
struct LayerHook {
  enum class Part { every, attention, delta_net, dense_mlp, gated_mlp, sparse, shared_expert, per_layer_input, side_experts };
  const char* name;
  Part part;
  bool writable;
};

/// The one table of a block's hooks: DecoderModel::hook_names lists them, a run refuses a function
/// on a read-only one.
inline const std::vector<LayerHook>& layer_hooks() {
  using P = LayerHook::Part;
  static const std::vector<LayerHook> table = {
      {"hook_resid_pre", P::every, true}, {"attn_in", P::every, true}, {"attn.output", P::every, true}, {"hook_attn_out", P::every, true},
      {"hook_resid_mid", P::every, true}, {"mlp_in", P::every, true}, {"mlp.output", P::every, true}, {"hook_mlp_out", P::every, true},
      {"hook_resid_post", P::every, true},
      {"attn.hook_q", P::attention, false}, {"attn.hook_k", P::attention, false}, {"attn.hook_v", P::attention, false},
      {"attn.hook_pattern", P::attention, false}, {"attn.hook_z", P::attention, true}, {"attn.statistics", P::attention, false},
      {"attn.logsumexp", P::attention, false},
      {"linear_attn.hook_mixed_qkv", P::delta_net, false}, {"linear_attn.hook_conv_out", P::delta_net, false},
      {"linear_attn.hook_q", P::delta_net, false}, {"linear_attn.hook_k", P::delta_net, false}, {"linear_attn.hook_v", P::delta_net, false},
      {"linear_attn.hook_z", P::delta_net, false}, {"linear_attn.hook_beta", P::delta_net, false}, {"linear_attn.hook_g", P::delta_net, false},
      {"linear_attn.hook_core_out", P::delta_net, false}, {"linear_attn.hook_pattern", P::delta_net, false},
      {"linear_attn.hook_gated_out", P::delta_net, true},
      {"mlp.hook_pre", P::dense_mlp, false}, {"mlp.hook_post", P::dense_mlp, false}, {"mlp.hook_pre_linear", P::gated_mlp, false},
      {"mlp.routing", P::sparse, false}, {"mlp.shared_output", P::shared_expert, false},
      {"per_layer.hook_gate", P::per_layer_input, false}, {"per_layer.hook_out", P::per_layer_input, true},
      {"moe_in", P::side_experts, true}, {"moe.output", P::side_experts, true}, {"mlp.routing", P::side_experts, false}};
  return table;
}

/// Whether block b has the part a hook sits in.
template <class Scalar>
bool has_part(const Block<Scalar>& b, LayerHook::Part part) {
  using P = LayerHook::Part;
  switch (part) {
    case P::every: return true;
    case P::attention: return !b.delta_net;
    case P::delta_net: return b.delta_net.has_value();
    case P::dense_mlp: return !b.experts && b.has_mlp();
    case P::gated_mlp: return !b.experts && b.mlp.w_gate.rows() != 0;
    case P::sparse: return b.experts.has_value();
    case P::shared_expert: return b.experts && b.experts->shared_expert;
    case P::per_layer_input: return b.per_layer_input.has_value();
    case P::side_experts: return b.side_experts.has_value();
  }
  return false;
}

}  // namespace headwise::model
