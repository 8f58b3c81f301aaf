// Activation patching over a whole model (Meng et al. 2022; Wang et al. 2022; TransformerLens's
// patching module): the metric of a run with one activation replaced by its value in another run
// of the same length (the source), one call per sweep: every head's Z at all positions, every
// head's Z at each position, and hook_resid_pre, hook_attn_out or hook_mlp_out at each layer and
// position. Each sweep is a table (PatchingTable: values with row and column labels; text and an
// HTML heatmap page below). A patched run resumes from the unpatched run's KV caches
// (DecoderModel::resume): the layers below the patch and the positions before it are not
// recomputed, and its logits are bit for bit those of a full rerun with the same hook function.
//
//   interpret::ActivationPatching<float> patching(model, clean_ids, corrupted_ids,
//                                                 model::Metric<float>::logit_difference(mary, john));
//   interpret::PatchingTable heads = patching.heads();   // (layers, heads): the metric, each head patched
#pragma once

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/interpret/svg_heatmap.hpp"
#include "headwise/model/decoder_model.hpp"
#include "headwise/model/metric.hpp"

namespace headwise::interpret {

/// A sweep's result: one value per patched run (or per estimate), rows and columns labelled.
struct PatchingTable {
  std::string name;                        ///< what each entry is
  Matrix<double> values;                   ///< (rows, columns)
  std::vector<std::string> rows, columns;  ///< labels
  double unpatched = 0;                    ///< the metric of the run patched
  double source = 0;                       ///< the metric of the run the patches come from
};

/// The residual-stream activations a per-position sweep patches.
enum class Stream { resid_pre, attn_out, mlp_out };

/// "layer 0", "layer 1", ...: a table's labels.
inline std::vector<std::string> numbered(const char* what, Index count) {
  std::vector<std::string> out;
  for (Index i = 0; i < count; ++i) out.push_back(std::string(what) + " " + std::to_string(i));
  return out;
}

/// The sweeps of one pair of runs: `ids` (the run patched) and `source` (where each patch comes
/// from), the metric read on the patched run's logits.
template <class Scalar>
class ActivationPatching {
 public:
  ActivationPatching(const model::DecoderModel<Scalar>& model, std::vector<Index> ids, std::vector<Index> source,
                     model::Metric<Scalar> metric, int threads = 0)
      : model_(model), ids_(std::move(ids)), source_ids_(std::move(source)), metric_(std::move(metric)), threads_(threads) {
    model_.check_attention_layers("ActivationPatching");
    if (ids_.size() != source_ids_.size() || ids_.empty())
      headwise::detail::invalid("ActivationPatching", "the runs have ", ids_.size(), " and ", source_ids_.size(),
                                " tokens: patching needs two runs of the same length (> 0)");
    model::RunOptions<Scalar> o;
    o.threads = threads_;
    for (Index l = 0; l < model_.n_layers(); ++l)
      for (const char* h : {"hook_resid_pre", "attn.hook_z", "hook_attn_out", "hook_mlp_out"}) o.hooks.insert(at(l, h));
    source_ = model_.run(source_ids_, o);
    caches_ = model_.make_caches(Index(ids_.size()));
    base_ = model_.resume(0, model_.embed(ids_), caches_, o);
    unpatched_ = metric_.value(base_.logits), source_metric_ = metric_.value(source_.logits);
  }

  /// (layers, heads): the metric with head h of layer l's Z taken from the source at every position.
  PatchingTable heads() const {
    PatchingTable t = table("the metric with the head's Z patched at every position", numbered("layer", layers()),
                            numbered("head", heads_()));
    for (Index l = 0; l < layers(); ++l)
      for (Index h = 0; h < heads_(); ++h) t.values(l, h) = patched(l, 0, at(l, "attn.hook_z"), head_patch(l, h, -1));
    return t;
  }
  /// (layers heads, n): row l heads + h, column t: head h of layer l's Z taken from the source at position t.
  PatchingTable heads_per_position() const {
    std::vector<std::string> rows;
    for (Index l = 0; l < layers(); ++l)
      for (Index h = 0; h < heads_(); ++h) rows.push_back(std::to_string(l) + "." + std::to_string(h));
    PatchingTable t = table("the metric with the head's Z patched at one position", rows, numbered("position", n()));
    for (Index l = 0; l < layers(); ++l)
      for (Index h = 0; h < heads_(); ++h)
        for (Index p = 0; p < n(); ++p) t.values(l * heads_() + h, p) = patched(l, p, at(l, "attn.hook_z"), head_patch(l, h, p));
    return t;
  }
  /// (layers, n): the stream's row at layer l, position t taken from the source.
  PatchingTable positions(Stream s) const {
    const char* hook = s == Stream::resid_pre ? "hook_resid_pre" : s == Stream::attn_out ? "hook_attn_out" : "hook_mlp_out";
    PatchingTable t = table(std::string("the metric with ") + hook + " patched at one position", numbered("layer", layers()),
                            numbered("position", n()));
    for (Index l = 0; l < layers(); ++l)
      for (Index p = 0; p < n(); ++p) {
        const Matrix<Scalar>& from = source_.hooks.at(at(l, hook));
        t.values(l, p) = patched(l, p, at(l, hook), [&from, p](Matrix<Scalar>& v, const model::HookPoint& where) {
          v.row(p - where.first) = from.row(p);
        });
      }
    return t;
  }

  /// The metric of the run patched by `function` on `hook` of layer `layer`, which changes no
  /// position before `first`: resumed at that layer and position from the unpatched run's caches.
  double patched(Index layer, Index first, const std::string& hook, model::HookFunction<Scalar> function) const {
    if (layer < 0 || layer >= layers() || first < 0 || first >= n())
      headwise::detail::invalid("ActivationPatching::patched", "layer ", layer, ", position ", first, ": the model has ", layers(),
                                " layers, the runs ", n(), " tokens");
    std::vector<model::LayerCache<Scalar>> caches;
    for (Index l = 0; l < layers(); ++l) {
      caches.push_back(l >= layer ? caches_[std::size_t(l)] : model::LayerCache<Scalar>(model_.blocks[std::size_t(l)].attention.make_cache(0)));
      if (l >= layer) caches.back().truncate(first);
    }
    model::RunOptions<Scalar> o;
    o.threads = threads_;
    o.hook_functions[hook] = std::move(function);
    Matrix<Scalar> logits = base_.logits;
    logits.bottomRows(n() - first) = model_.resume(layer, base_.hooks.at(at(layer, "hook_resid_pre")).bottomRows(n() - first), caches, o).logits;
    return metric_.value(logits);
  }

  const model::ModelRun<Scalar>& unpatched_run() const { return base_; }  ///< its resid_pre, hook_z, attn_out and mlp_out
  const model::ModelRun<Scalar>& source_run() const { return source_; }

 private:
  static std::string at(Index l, const char* hook) { return "blocks." + std::to_string(l) + "." + hook; }
  Index layers() const { return model_.n_layers(); }
  Index heads_() const { return layers() ? model_.blocks.front().attention.n_heads() : 0; }
  Index n() const { return Index(ids_.size()); }
  PatchingTable table(std::string name, std::vector<std::string> rows, std::vector<std::string> columns) const {
    PatchingTable t{std::move(name), Matrix<double>(Index(rows.size()), Index(columns.size())), std::move(rows), std::move(columns),
                    unpatched_, source_metric_};
    return t;
  }
  /// Head h's Z from the source, at position p (-1: every position).
  model::HookFunction<Scalar> head_patch(Index l, Index h, Index p) const {
    const Matrix<Scalar>& from = source_.hooks.at(at(l, "attn.hook_z"));
    const Index d = from.cols() / heads_();
    return [&from, h, d, p](Matrix<Scalar>& z, const model::HookPoint& where) {
      if (p < 0) z.middleCols(h * d, d) = from.middleCols(h * d, d).bottomRows(z.rows());
      else z.row(p - where.first).segment(h * d, d) = from.row(p).segment(h * d, d);
    };
  }

  const model::DecoderModel<Scalar>& model_;
  std::vector<Index> ids_, source_ids_;
  model::Metric<Scalar> metric_;
  int threads_;
  model::ModelRun<Scalar> source_, base_;
  std::vector<model::LayerCache<Scalar>> caches_;
  double unpatched_ = 0, source_metric_ = 0;
};

/// A table as text: the row labels, then one column per label, values to 4 decimals.
inline std::string patching_table_text(const PatchingTable& t) {
  std::ostringstream out;
  out << t.name << " (unpatched " << std::fixed << std::setprecision(4) << t.unpatched << ", source " << t.source << ")\n";
  out << std::left << std::setw(12) << "";
  for (const std::string& c : t.columns) out << std::right << std::setw(std::max<int>(11, int(c.size()) + 1)) << c;
  out << "\n";
  for (Index r = 0; r < t.values.rows(); ++r) {
    out << std::left << std::setw(12) << t.rows[std::size_t(r)];
    for (Index c = 0; c < t.values.cols(); ++c)
      out << std::right << std::setw(std::max<int>(11, int(t.columns[std::size_t(c)].size()) + 1)) << std::showpos << t.values(r, c)
          << std::noshowpos;
    out << "\n";
  }
  return out.str();
}

/// An HTML page with each table as a heatmap of its change from the unpatched metric (red below
/// zero, blue above, symmetric about zero; a table's NaN entries, path patching's receivers not
/// after their sender, shown as 0).
inline std::string patching_page(const std::vector<PatchingTable>& tables, const std::string& title) {
  std::vector<std::pair<std::string, std::string>> figures;
  Shading diverging;
  diverging.scale = Shading::Scale::diverging;
  for (const PatchingTable& t : tables) {
    const bool gaps = t.values.hasNaN();
    const Matrix<double> change = (t.values.array() - t.unpatched).unaryExpr([](double v) { return std::isnan(v) ? 0.0 : v; });
    figures.emplace_back(t.name + ", minus the unpatched " + std::to_string(t.unpatched) + (gaps ? " (no entry: 0)" : ""),
                         svg_heatmap(change, t.rows, t.columns, t.name, 34, diverging));
  }
  return html_page(title, figures);
}

}  // namespace headwise::interpret
