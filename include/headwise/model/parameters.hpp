// A whole model's parameters by their checkpoint names, in the checkpoint's layout (a vector as one
// row): GPT-2's Conv1D weights [in, out] and fused c_attn, the Llama-style families' [out, in]
// (Phi-3's fused qkv_proj and gate_up_proj), as DecoderModel::names says. One naming
// (ParameterNames), read three ways: parameters_of (the weights, widened), set_parameters (the
// model rebuilt from them: training) and the whole-model backward (model/backward.hpp: gradients
// under the same names).
//
//   auto weights = headwise::model::parameters_of(model);   // "model.layers.0.self_attn.q_proj.weight" -> (out, in)
#pragma once

#include <map>
#include <type_traits>
#include <string>
#include <utility>

#include "headwise/detail/errors.hpp"
#include "headwise/model/decoder_model.hpp"

namespace headwise::model {

/// Parameters (or their gradients) by checkpoint name.
template <class Scalar>
using Parameters = std::map<std::string, Matrix<Scalar>>;

/// The checkpoint names of a model's parts (CheckpointNames: GPT-2's or the Llama-style families').
class ParameterNames {
 public:
  explicit ParameterNames(const CheckpointNames& names) : c_(names) {}
  bool gpt2() const { return c_.style == CheckpointNames::Style::gpt2; }
  const CheckpointNames& names() const { return c_; }
  std::string embedding() const { return gpt2() ? c_.prefix + "wte.weight" : "model.embed_tokens.weight"; }
  std::string positions() const { return c_.prefix + "wpe.weight"; }
  std::string unembedding() const { return "lm_head.weight"; }
  std::string final_norm() const { return gpt2() ? c_.prefix + "ln_f" : "model.norm"; }
  std::string layer(Index l) const { return (gpt2() ? c_.prefix + "h." : std::string("model.layers.")) + std::to_string(l) + "."; }
  /// The block's norms, by where they sit (the Llama-style names follow the loader: a block with a
  /// norm after its attention calls its MLP's norm pre_feedforward_layernorm).
  template <class Scalar>
  std::string norm(Index l, const Block<Scalar>& b, const std::optional<Norm<Scalar>>& which) const {
    const std::string p = layer(l);
    if (&which == &b.attention_norm) return p + (gpt2() ? "ln_1" : "input_layernorm");
    if (&which == &b.mlp_norm) return p + (gpt2() ? "ln_2" : b.post_attention_norm ? "pre_feedforward_layernorm" : "post_attention_layernorm");
    if (&which == &b.post_attention_norm) return p + "post_attention_layernorm";
    return p + "post_feedforward_layernorm";
  }
  /// The dense MLP's prefix, or expert e's (e >= 0), or the router's weight.
  std::string mlp(Index l, Index expert = -1) const {
    return layer(l) + c_.mlp + "." + (expert >= 0 ? "experts." + std::to_string(expert) + "." : "");
  }
  std::string router(Index l) const { return layer(l) + "mlp.gate.weight"; }

 private:
  CheckpointNames c_;
};

namespace internal {

template <class Scalar>
Matrix<Scalar> as_row(const RowVector<Scalar>& v) {
  return Matrix<Scalar>(v);
}
template <class Scalar>
Matrix<Scalar> as_row(const Vector<double>& v) {
  return v.transpose().template cast<Scalar>();
}

/// The entries one attention layer adds under `names`: W_QKV (d_model, width) and W_O (heads d, d_model)
/// in headwise's layout, their biases (empty: none), the QK-norm's weights (empty: none).
template <class Scalar>
struct AttentionEntries {
  const Matrix<Scalar>& w_qkv;
  const RowVector<Scalar>& b_qkv;
  const Matrix<Scalar>& w_o;
  const RowVector<Scalar>& b_o;
  Matrix<Scalar> q_norm, k_norm;
};

template <class Scalar>
void add_attention(const ParameterNames& names, Index l, const QkvLayout& layout, const AttentionEntries<Scalar>& e, Parameters<Scalar>& out) {
  const bool biases = names.names().attention_biases;
  const std::string p = names.layer(l) + (names.gpt2() ? "attn." : "self_attn.");
  if (names.gpt2()) {
    out[p + "c_attn.weight"] = e.w_qkv, out[p + "c_proj.weight"] = e.w_o;
    out[p + "c_attn.bias"] = e.b_qkv, out[p + "c_proj.bias"] = e.b_o;
    return;
  }
  if (names.names().fused_qkv) {
    out[p + "qkv_proj.weight"] = e.w_qkv.transpose();
    if (biases) out[p + "qkv_proj.bias"] = e.b_qkv;
  } else {
    const QkvPart parts[3] = {QkvPart::query, QkvPart::key, QkvPart::value};
    const char* keys[3] = {"q_proj", "k_proj", "v_proj"};
    for (int i = 0; i < 3; ++i) {
      const Index first = layout.first_column(parts[i]), width = layout.part_width(parts[i]);
      out[p + keys[i] + ".weight"] = e.w_qkv.middleCols(first, width).transpose();
      if (biases) out[p + keys[i] + ".bias"] = e.b_qkv.segment(first, width);
    }
  }
  out[p + "o_proj.weight"] = e.w_o.transpose();
  if (names.names().output_bias) out[p + "o_proj.bias"] = e.b_o;
  if (e.q_norm.size()) out[p + "q_norm.weight"] = e.q_norm;
  if (e.k_norm.size()) out[p + "k_norm.weight"] = e.k_norm;
}

/// Throws unless every parameter of `model` has a checkpoint name: biases where the names have
/// them (CheckpointNames), no output gate or sinks (their parameters are not named here, and the
/// backward does not compute the sinks' gradient).
template <class Scalar>
void check_named(const DecoderModel<Scalar>& model, const char* where) {
  model.check_attention_layers(where);
  const CheckpointNames& c = model.names;
  for (Index l = 0; l < model.n_layers(); ++l) {
    const MultiHeadAttention<Scalar>& a = model.blocks[static_cast<std::size_t>(l)].attention;
    const bool gpt2 = c.style == CheckpointNames::Style::gpt2;
    const char* what = a.gated() ? "an output gate" : a.config().sinks.size() ? "attention sinks"
                       : !gpt2 && !c.attention_biases && !a.b_qkv().isZero(0) ? "q/k/v biases the checkpoint names do not have (CheckpointNames::attention_biases)"
                       : !gpt2 && !c.output_bias && !a.b_o().isZero(0) ? "an output bias the checkpoint names do not have (CheckpointNames::output_bias)"
                                                                   : nullptr;
    const auto& experts = model.blocks[static_cast<std::size_t>(l)].experts;
    if (!what && experts && !experts->softmax_only()) what = "a sparse block other than Qwen3-MoE's (routers with biases, sigmoid scores, shared experts)";
    const Block<Scalar>& b = model.blocks[static_cast<std::size_t>(l)];
    if (!what && (b.per_layer_input || b.layer_scalar != Scalar(1) || b.side_experts)) what = "Gemma 4's per-layer input, layer scalar or experts";
    if (!what && a.config().shares_keys_values_of) what = "no keys and values of its own (Gemma 4's KV sharing)";
    if (what) headwise::detail::invalid(where, "layer ", l, " has ", what, ": its parameters are not all named");
  }
}

/// A dense MLP's entries: W_gate, W_up, W_down [out, in] as stored, GPT-2's biases; taken by
/// value and moved in where no transpose or concatenation is needed (a backward's gradients).
template <class Scalar>
void add_mlp(const ParameterNames& names, const std::string& p, Matrix<Scalar> gate, Matrix<Scalar> up, Matrix<Scalar> down,
             const RowVector<Scalar>& b_up, const RowVector<Scalar>& b_down, Parameters<Scalar>& out) {
  if (names.gpt2()) {
    out[p + "c_fc.weight"] = up.transpose(), out[p + "c_proj.weight"] = down.transpose();
    out[p + "c_fc.bias"] = b_up, out[p + "c_proj.bias"] = b_down;
    return;
  }
  if (names.names().fused_gate_up) {
    Matrix<Scalar> both(gate.rows() + up.rows(), up.cols());
    both << gate, up;
    out[p + "gate_up_proj.weight"] = std::move(both);
  } else {
    out[p + "gate_proj.weight"] = std::move(gate), out[p + "up_proj.weight"] = std::move(up);
  }
  out[p + "down_proj.weight"] = std::move(down);
}

template <class Scalar>
void add_norm(const std::string& name, const Norm<Scalar>& n, Parameters<Scalar>& out) {
  out[name + ".weight"] = as_row<Scalar>(n.weight);
  if (n.kind == Norm<Scalar>::Kind::layer_norm) out[name + ".bias"] = as_row<Scalar>(n.bias);
}

/// The entry `name` of `values`, checked to be rows x cols.
template <class Scalar>
const Matrix<Scalar>& entry(const Parameters<Scalar>& values, const std::string& name, Index rows, Index cols) {
  const auto it = values.find(name);
  if (it == values.end()) headwise::detail::invalid("set_parameters", "no parameter \"", name, "\" (parameters_of lists them)");
  if (it->second.rows() != rows || it->second.cols() != cols)
    headwise::detail::invalid("set_parameters", name, " is ", it->second.rows(), "x", it->second.cols(), ", expected ", rows, "x", cols);
  if (!it->second.allFinite()) headwise::detail::invalid("set_parameters", name, " has an entry that is not finite");
  return it->second;
}

}  // namespace internal

/// Every parameter of `model` by checkpoint name, widened to Scalar, in the checkpoint's layout.
template <class Scalar>
Parameters<Scalar> parameters_of(const DecoderModel<Scalar>& model) {
  internal::check_named(model, "parameters_of");
  const ParameterNames names(model.names);
  Parameters<Scalar> out;
  out[names.embedding()] = model.embedding.template to_matrix<Scalar>();
  if (model.positions.size()) out[names.positions()] = model.positions;
  for (Index l = 0; l < model.n_layers(); ++l) {
    const Block<Scalar>& b = model.blocks[static_cast<std::size_t>(l)];
    for (const auto* n : {&b.attention_norm, &b.mlp_norm, &b.post_attention_norm, &b.post_mlp_norm})
      if (*n) internal::add_norm(names.norm(l, b, *n), **n, out);
    const MultiHeadAttention<Scalar>& a = b.attention;
    const auto& qk = a.config().qk_norm;
    const Matrix<Scalar> w_qkv = a.w_qkv(), w_o = a.w_o();
    internal::add_attention(names, l, a.layout(), {w_qkv, a.b_qkv(), w_o, a.b_o(), qk ? internal::as_row<Scalar>(qk->query.weight) : Matrix<Scalar>(),
                                                  qk ? internal::as_row<Scalar>(qk->key.weight) : Matrix<Scalar>()},
                          out);
    const auto dense = [&](const FeedForward<Scalar>& f, const std::string& p) {
      internal::add_mlp(names, p, f.w_gate.template to_matrix<Scalar>(), f.w_up.template to_matrix<Scalar>(),
                      f.w_down.template to_matrix<Scalar>(), f.b_up, f.b_down, out);
    };
    if (b.experts) {
      out[names.router(l)] = b.experts->router.template to_matrix<Scalar>();
      for (std::size_t e = 0; e < b.experts->experts.size(); ++e) dense(b.experts->experts[e], names.mlp(l, Index(e)));
    } else if (b.has_mlp()) {
      dense(b.mlp, names.mlp(l));
    }
  }
  internal::add_norm(names.final_norm(), model.final_norm, out);
  if (!model.tied()) out[names.unembedding()] = model.unembedding.template to_matrix<Scalar>();
  return out;
}

namespace internal {

template <class Scalar>
StoredMatrix stored(const Matrix<Scalar>& m) {
  return StoredMatrix::from(m, std::is_same_v<Scalar, double> ? WeightType::f64 : WeightType::f32);
}

template <class Scalar>
void read_norm(const Parameters<Scalar>& v, const std::string& name, Norm<Scalar>& n) {
  n.weight = entry(v, name + ".weight", 1, n.weight.size());
  if (n.kind == Norm<Scalar>::Kind::layer_norm) n.bias = entry(v, name + ".bias", 1, n.bias.size());
}
template <class Scalar>
void read_norm_weight(const Parameters<Scalar>& v, const std::string& name, RmsNorm& n) {
  if (n.weight.size()) n.weight = entry(v, name, 1, n.weight.size()).transpose().template cast<double>();
}

/// Layer l's attention rebuilt from `v` with its config (the QK-norm's weights from `v` too).
template <class Scalar>
MultiHeadAttention<Scalar> read_attention(const ParameterNames& names, Index l, const MultiHeadAttention<Scalar>& old, const Parameters<Scalar>& v) {
  const bool biases = names.names().attention_biases;
  const QkvLayout lay = old.layout();
  const Index d = old.d_model();
  const std::string p = names.layer(l) + (names.gpt2() ? "attn." : "self_attn.");
  MultiHeadWeights<Scalar> w;
  Matrix<Scalar> w_qkv;
  RowVector<Scalar> b_qkv = RowVector<Scalar>::Zero(lay.width());
  if (names.gpt2()) {
    w_qkv = entry(v, p + "c_attn.weight", d, lay.width()), b_qkv = entry(v, p + "c_attn.bias", 1, lay.width());
    w.w_o = entry(v, p + "c_proj.weight", lay.query_width(), d), w.b_o = entry(v, p + "c_proj.bias", 1, d);
  } else if (names.names().fused_qkv) {
    w_qkv = entry(v, p + "qkv_proj.weight", lay.width(), d).transpose();
    if (biases) b_qkv = entry(v, p + "qkv_proj.bias", 1, lay.width());
    w.w_o = entry(v, p + "o_proj.weight", d, lay.query_width()).transpose();
  } else {
    w_qkv.resize(d, lay.width());
    const QkvPart parts[3] = {QkvPart::query, QkvPart::key, QkvPart::value};
    const char* keys[3] = {"q_proj", "k_proj", "v_proj"};
    for (int i = 0; i < 3; ++i) {
      const Index first = lay.first_column(parts[i]), width = lay.part_width(parts[i]);
      w_qkv.middleCols(first, width) = entry(v, p + keys[i] + ".weight", width, d).transpose();
      if (biases) b_qkv.segment(first, width) = entry(v, p + keys[i] + ".bias", 1, width);
    }
    w.w_o = entry(v, p + "o_proj.weight", d, lay.query_width()).transpose();
  }
  if (!names.gpt2() && names.names().output_bias) w.b_o = entry(v, p + "o_proj.bias", 1, d);
  w.w_q = w_qkv.middleCols(lay.first_column(QkvPart::query), lay.query_width());
  w.w_k = w_qkv.middleCols(lay.first_column(QkvPart::key), lay.key_value_width());
  w.w_v = w_qkv.middleCols(lay.first_column(QkvPart::value), lay.key_value_width());
  w.b_q = b_qkv.segment(lay.first_column(QkvPart::query), lay.query_width());
  w.b_k = b_qkv.segment(lay.first_column(QkvPart::key), lay.key_value_width());
  w.b_v = b_qkv.segment(lay.first_column(QkvPart::value), lay.key_value_width());
  LayerConfig config = old.config();
  if (config.qk_norm) read_norm_weight(v, p + "q_norm.weight", config.qk_norm->query), read_norm_weight(v, p + "k_norm.weight", config.qk_norm->key);
  return MultiHeadAttention<Scalar>(old.n_heads(), std::move(w), std::move(config));
}

/// A dense MLP's weights from `v` under prefix p (shapes from f).
template <class Scalar>
void read_mlp(const ParameterNames& names, const std::string& p, const Parameters<Scalar>& v, FeedForward<Scalar>& f) {
  const Index inner = f.w_up.rows(), d = f.w_up.cols();
  if (names.gpt2()) {
    f.w_up = stored<Scalar>(entry(v, p + "c_fc.weight", d, inner).transpose()), f.b_up = entry(v, p + "c_fc.bias", 1, inner);
    f.w_down = stored<Scalar>(entry(v, p + "c_proj.weight", inner, d).transpose()), f.b_down = entry(v, p + "c_proj.bias", 1, d);
    return;
  }
  if (names.names().fused_gate_up) {
    const Matrix<Scalar>& both = entry(v, p + "gate_up_proj.weight", 2 * inner, d);
    f.w_gate = stored<Scalar>(both.topRows(inner)), f.w_up = stored<Scalar>(both.bottomRows(inner));
  } else {
    f.w_gate = stored<Scalar>(entry(v, p + "gate_proj.weight", inner, d)), f.w_up = stored<Scalar>(entry(v, p + "up_proj.weight", inner, d));
  }
  f.w_down = stored<Scalar>(entry(v, p + "down_proj.weight", d, inner));
}

}  // namespace internal

/// Every parameter of `model` replaced by the one of the same checkpoint name in `values` (each
/// name parameters_of gives, with its shape and finite entries; refused by name otherwise, the
/// model then unchanged), kept in Scalar (F32 or F64): training's step. The structure, settings
/// and names stay.
template <class Scalar>
void set_parameters(DecoderModel<Scalar>& target, const Parameters<Scalar>& values) {
  using namespace internal;
  check_named(target, "set_parameters");
  DecoderModel<Scalar> model = target;  // (swapped in whole: a refused entry changes nothing)
  const ParameterNames names(model.names);
  const bool tied = model.tied();
  model.embedding = stored<Scalar>(entry(values, names.embedding(), model.vocab_size(), model.d_model()));
  if (model.positions.size()) model.positions = entry(values, names.positions(), model.positions.rows(), model.positions.cols());
  for (Index l = 0; l < model.n_layers(); ++l) {
    Block<Scalar>& b = model.blocks[static_cast<std::size_t>(l)];
    for (auto* n : {&b.attention_norm, &b.mlp_norm, &b.post_attention_norm, &b.post_mlp_norm})
      if (*n) read_norm(values, names.norm(l, b, *n), **n);
    b.attention = read_attention(names, l, b.attention, values);
    if (b.experts) {
      b.experts->router = stored<Scalar>(entry(values, names.router(l), b.experts->router.rows(), b.experts->router.cols()));
      for (std::size_t e = 0; e < b.experts->experts.size(); ++e) read_mlp(names, names.mlp(l, Index(e)), values, b.experts->experts[e]);
    } else if (b.has_mlp()) {
      read_mlp(names, names.mlp(l), values, b.mlp);
    }
  }
  read_norm(values, names.final_norm(), model.final_norm);
  model.unembedding = tied ? model.embedding : stored<Scalar>(entry(values, names.unembedding(), model.vocab_size(), model.d_model()));
  target = std::move(model);
}

}  // namespace headwise::model
