// Attribution patching (Nanda, 2023; Syed et al., 2023): the first-order estimate of what patching
// each head's output at each position from a corrupted run into the clean run does to a metric,
// from one clean forward, one corrupted forward and one backward, where activation patching
// (patch_head, head_interventions.hpp) needs one forward per head:
//   effect(h, i) ≈ (z_corrupt - z_clean)_{h,i} · ∂metric/∂z_{h,i}   (at the clean run)
// The metric is linear in the output, metric = Σ_{i,c} out_{i,c} direction_{i,c} (a logit
// difference, say, given as a direction on the positions that matter). Within one layer the W_O
// sum is linear in Z, so the estimate equals activation patching up to rounding; stacked under
// later layers it is an estimate, as in the papers. Over a whole model the gradient comes from its
// backward (model/backward.hpp): one forward of each run and one backward give the estimates of
// activation_patching.hpp's sweeps, as tables of the same shapes.
#pragma once

#include <string>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/head_sum.hpp"
#include "headwise/interpret/activation_patching.hpp"
#include "headwise/model/backward.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/multi_head_latent_attention.hpp"
#include "headwise/types.hpp"

namespace headwise::interpret {

/// What attribution_patching returns.
template <class Scalar>
struct Attribution {
  Matrix<Scalar> per_position;  ///< (n_heads, n): the estimated effect of patching head h at position i
  Vector<Scalar> per_head;      ///< (n_heads): of patching head h at every position (the row sums)
  Matrix<Scalar> grad_z;        ///< (n, n_heads d_head): ∂metric/∂Z at the clean run
};

/// clean, corrupted: (n, d_model) inputs of the same length; direction: (n, d_model), the metric's
/// gradient with respect to the layer's output. Any layer with head_outputs, w_o and b_o
/// (MultiHeadAttention, MultiHeadLatentAttention).
template <class Layer, class Scalar>
Attribution<Scalar> attribution_patching(const Layer& layer, const Matrix<Scalar>& clean,
                                         const Matrix<Scalar>& corrupted, const Matrix<Scalar>& direction,
                                         const AttentionOptions& options = {}) {
  constexpr const char* where = "attribution_patching";
  if (corrupted.rows() != clean.rows() || direction.rows() != clean.rows() || direction.cols() != layer.d_model())
    detail::invalid(where, "clean is ", clean.rows(), "x", clean.cols(), ", corrupted ", corrupted.rows(), "x",
                    corrupted.cols(), " and direction ", direction.rows(), "x", direction.cols(), ": expected (n, ",
                    layer.d_model(), ") each");
  const Matrix<Scalar> w_o = layer.w_o();  // (widened once, for a layer that keeps it stored)
  const Index H = layer.n_heads(), d = w_o.rows() / H;  // the width of a head's Z
  const Matrix<Scalar> z_clean = layer.head_outputs(clean, options), z_corrupt = layer.head_outputs(corrupted, options);
  HeadSum<Scalar> sum(w_o, layer.b_o(), H);  // the backward from the metric to Z
  sum.forward(z_clean);
  Attribution<Scalar> a;
  a.grad_z = sum.backward(direction).dz;
  a.per_position.resize(H, clean.rows());
  const Matrix<Scalar> change = z_corrupt - z_clean;
  for (Index h = 0; h < H; ++h)
    a.per_position.row(h) = change.middleCols(h * d, d).cwiseProduct(a.grad_z.middleCols(h * d, d)).rowwise().sum().transpose();
  a.per_head = a.per_position.rowwise().sum();
  return a;
}

/// The whole-model estimates, each a table of activation_patching.hpp's shape whose entries are the
/// unpatched metric plus the estimated change: Σ (activation on source - on ids) ∘ ∂metric/∂activation
/// over the head's d_head (heads), or over d_model (the stream).
struct ModelAttribution {
  PatchingTable heads, heads_per_position, resid_pre, attn_out, mlp_out;
};

/// Attribution patching of `model`: the run on ids patched from the run on source (same length).
template <class Scalar>
ModelAttribution attribution_patching(const model::DecoderModel<Scalar>& model, const std::vector<Index>& ids, const std::vector<Index>& source,
                                      const model::Metric<Scalar>& metric, int threads = 0) {
  model.check_attention_layers("attribution_patching");
  if (ids.size() != source.size() || ids.empty())
    detail::invalid("attribution_patching", "the runs have ", ids.size(), " and ", source.size(), " tokens: two runs of the same length (> 0)");
  const Index L = model.n_layers(), H = L ? model.blocks.front().attention.n_heads() : 0, n = Index(ids.size());
  const auto at = [](Index l, const char* hook) { return "blocks." + std::to_string(l) + "." + hook; };
  model::GradientOptions g;
  g.parameters = false, g.threads = threads;
  model::RunOptions<Scalar> o;
  o.threads = threads;
  for (Index l = 0; l < L; ++l)
    for (const char* h : {"attn.hook_z", "hook_resid_pre", "hook_attn_out", "hook_mlp_out"}) g.activations.insert(at(l, h)), o.hooks.insert(at(l, h));
  g.record = o.hooks;
  const model::ModelGradients<Scalar> clean = model::gradients(model, ids, metric, g);
  const model::ModelRun<Scalar>& clean_run = clean.run;
  const model::ModelRun<Scalar> patched = model.run(source, o);
  const double base = clean.metric, from = metric.value(patched.logits);
  // Σ over each group of `width` columns of (patched - clean) ∘ gradient: (n, columns / width).
  const auto estimate = [&](const std::string& name, Index width) {
    const Matrix<double> product = (patched.hooks.at(name) - clean_run.hooks.at(name)).template cast<double>().cwiseProduct(
        clean.activations.at(name).template cast<double>());
    Matrix<double> out(n, product.cols() / width);
    for (Index c = 0; c < out.cols(); ++c) out.col(c) = product.middleCols(c * width, width).rowwise().sum();
    return out;
  };
  std::vector<std::string> head_rows;
  for (Index l = 0; l < L; ++l)
    for (Index h = 0; h < H; ++h) head_rows.push_back(std::to_string(l) + "." + std::to_string(h));
  const auto table = [&](std::string name, std::vector<std::string> rows, std::vector<std::string> columns) {
    return PatchingTable{std::move(name), Matrix<double>(Index(rows.size()), Index(columns.size())), std::move(rows), std::move(columns), base, from};
  };
  ModelAttribution a{table("the metric, estimated, with the head's Z patched at every position", numbered("layer", L), numbered("head", H)),
                     table("the metric, estimated, with the head's Z patched at one position", head_rows, numbered("position", n)),
                     table("the metric, estimated, with hook_resid_pre patched at one position", numbered("layer", L), numbered("position", n)),
                     table("the metric, estimated, with hook_attn_out patched at one position", numbered("layer", L), numbered("position", n)),
                     table("the metric, estimated, with hook_mlp_out patched at one position", numbered("layer", L), numbered("position", n))};
  for (Index l = 0; l < L; ++l) {
    const Matrix<double> z = estimate(at(l, "attn.hook_z"), model.blocks[std::size_t(l)].attention.d_head());  // (n, H)
    a.heads_per_position.values.middleRows(l * H, H) = z.transpose().array() + base;
    a.heads.values.row(l) = z.colwise().sum().array() + base;
    a.resid_pre.values.row(l) = estimate(at(l, "hook_resid_pre"), model.d_model()).transpose().array() + base;
    a.attn_out.values.row(l) = estimate(at(l, "hook_attn_out"), model.d_model()).transpose().array() + base;
    a.mlp_out.values.row(l) = estimate(at(l, "hook_mlp_out"), model.d_model()).transpose().array() + base;
  }
  return a;
}

}  // namespace headwise::interpret
