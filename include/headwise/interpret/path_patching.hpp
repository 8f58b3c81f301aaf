// Path patching (Wang et al. 2022, the IOI circuit), the direct path from a sender head to a
// receiver head's query, key or value input: the sender's Z taken from the source run (every
// position), its change carried to the receiver through the residual stream alone, every other
// component frozen at its value in the run patched. Step by step, for sender (l_s, h_s) and
// receiver at layer l_r > l_s:
//   1. delta = the change of hook_attn_out[l_s] with the sender's Z patched: its term of the W_O
//      sum, (z_source - z)_{h_s} W_O[h_s] (with a norm after the attention, that norm recomputed
//      on the patched attn.output);
//   2. the receiver's input is layer l_r's input norm of hook_resid_pre[l_r] + delta; its query
//      (key, value) is projected from it with the layer's QK-norm and RoPE, every other q, k, v of
//      layer l_r as in the run patched;
//   3. the run goes on from there: with `freeze` every head after layer l_r keeps its Z (the MLPs,
//      norms and routing recomputed; Wang et al.'s path), without it everything after the receiver
//      is recomputed.
// Under grouped-query attention a query head has no key or value of its own: the receiver of a
// key or value path is a key/value head (its keys feed every query head of its group, as
// TransformerLens's hook_k_input is per key/value head); `per_query_head` reads it the other way,
// the model expanded to one key/value head per query head and only the receiving query head's copy
// patched. One resumed run per (sender, receiver) (DecoderModel::resume from layer l_r).
//
//   auto table = interpret::path_patching(model, clean, corrupted, metric, {interpret::Receiver::value});
//   table.values(l_s * heads + h_s, l_r * kv_heads + g);   // NaN where l_r <= l_s
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "headwise/attend.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/interpret/activation_patching.hpp"
#include "headwise/model/decoder_model.hpp"
#include "headwise/model/metric.hpp"

namespace headwise::interpret {

/// Which input of the receiving head a path ends at.
enum class Receiver { query, key, value };

struct PathPatchingOptions {
  Receiver receiver = Receiver::query;
  bool freeze = true;           ///< heads after the receiver's layer keep their Z (false: recomputed)
  bool per_query_head = false;  ///< key and value paths into one query head's copy of its key/value head
  int threads = 0;
};

}  // namespace headwise::interpret

namespace headwise::detail {

/// Receiver head r's query, key or value (a key/value head, or with per_query_head a query head's
/// copy) replaced by the patched input's; then the layer's attention on them, Z (n, heads d).
template <class Scalar>
Matrix<Scalar> receiver_z(const MultiHeadAttention<Scalar>& layer, const model::ModelRun<Scalar>& base, const std::string& p,
                          const ForwardRecord<Scalar>& patched, Index r, const interpret::PathPatchingOptions& o) {
  using interpret::Receiver;
  const Index d = layer.d_head(), H = layer.n_heads();
  Matrix<Scalar> q = base.hooks.at(p + "attn.hook_q"), k = base.hooks.at(p + "attn.hook_k"), v = base.hooks.at(p + "attn.hook_v");
  const bool expand = o.per_query_head && o.receiver != Receiver::query;
  if (expand) {  // one key/value head per query head
    Matrix<Scalar> k_all(k.rows(), H * d), v_all(v.rows(), H * d);
    for (Index h = 0; h < H; ++h)
      k_all.middleCols(h * d, d) = k.middleCols(layer.kv_head_of(h) * d, d), v_all.middleCols(h * d, d) = v.middleCols(layer.kv_head_of(h) * d, d);
    k = std::move(k_all), v = std::move(v_all);
  }
  const Index from = o.receiver == Receiver::query || !expand ? r : layer.kv_head_of(r);
  Matrix<Scalar>& target = o.receiver == Receiver::query ? q : o.receiver == Receiver::key ? k : v;
  const Matrix<Scalar>& source = o.receiver == Receiver::query ? patched.q : o.receiver == Receiver::key ? patched.k : patched.v;
  target.middleCols(r * d, d) = source.middleCols(from * d, d);
  AttentionOptions options;
  options.threads = o.threads;
  const AttentionOptions all = layer.options_for(options);
  AttentionCall call;
  call.heads = {H, expand ? H : layer.n_kv_heads()};
  call.options = &all;
  return attend<Scalar>(q, k, v, call).z;
}

/// Throws unless the model's layers are all attention layers whose heads' outputs are not gated
/// (the receiver is recomputed from its Z), and the two runs have the same length (> 0).
template <class Scalar>
void check_path_patching(const model::DecoderModel<Scalar>& model, const std::vector<Index>& ids, const std::vector<Index>& source,
                         const char* where) {
  model.check_attention_layers(where);
  if (ids.size() != source.size() || ids.empty())
    invalid(where, "the runs have ", ids.size(), " and ", source.size(), " tokens: two runs of the same length (> 0)");
  for (std::size_t l = 0; l < model.blocks.size(); ++l)
    if (model.blocks[l].attention.gated())
      invalid(where, "layer ", l, " gates its heads' outputs, which the path's receiver does not recompute");
}

}  // namespace headwise::detail

namespace headwise::interpret {

/// The metric of each path-patched run: rows sender "l.h" (layer l_s heads + h_s), columns
/// receiver "l.h" or "l.g" (layer l_r receivers + r: query heads, or key/value heads), NaN where
/// l_r <= l_s. ids: the run patched; source: where the sender's Z comes from (same length).
template <class Scalar>
PatchingTable path_patching(const model::DecoderModel<Scalar>& model, const std::vector<Index>& ids, const std::vector<Index>& source,
                            const model::Metric<Scalar>& metric, const PathPatchingOptions& options = {}) {
  constexpr const char* where = "path_patching";
  detail::check_path_patching(model, ids, source, where);
  const Index L = model.n_layers(), H = L ? model.blocks.front().attention.n_heads() : 0;
  const Index R = options.receiver == Receiver::query || options.per_query_head ? H : L ? model.blocks.front().attention.n_kv_heads() : 0;
  const auto at = [](Index l, const char* hook) { return "blocks." + std::to_string(l) + "." + hook; };
  model::RunOptions<Scalar> o;
  o.threads = options.threads;
  for (Index l = 0; l < L; ++l)
    for (const char* h : {"hook_resid_pre", "attn.output", "hook_attn_out", "attn.hook_z", "attn.hook_q", "attn.hook_k", "attn.hook_v"}) o.hooks.insert(at(l, h));
  const model::ModelRun<Scalar> base = model.run(ids, o), from = model.run(source, o);
  const char* kind = options.receiver == Receiver::query ? "query" : options.receiver == Receiver::key ? "key" : "value";
  std::vector<std::string> senders, receivers;
  for (Index l = 0; l < L; ++l) {
    for (Index h = 0; h < H; ++h) senders.push_back(std::to_string(l) + "." + std::to_string(h));
    for (Index r = 0; r < R; ++r) receivers.push_back(std::to_string(l) + "." + std::to_string(r));
  }
  PatchingTable t{std::string("the metric with the sender's path to the receiver's ") + kind + " patched",
                  Matrix<double>::Constant(L * H, L * R, std::numeric_limits<double>::quiet_NaN()), senders, receivers,
                  metric.value(base.logits), metric.value(from.logits)};
  for (Index ls = 0; ls < L; ++ls) {
    const model::Block<Scalar>& sender = model.blocks[std::size_t(ls)];
    const Index d = sender.attention.d_head();
    for (Index hs = 0; hs < H; ++hs) {
      // 1. The sender's change of hook_attn_out.
      const Matrix<Scalar> change = from.hooks.at(at(ls, "attn.hook_z")).middleCols(hs * d, d) - base.hooks.at(at(ls, "attn.hook_z")).middleCols(hs * d, d);
      Matrix<Scalar> delta = change * sender.attention.w_o_block(hs);
      if (sender.post_attention_norm)
        delta = sender.post_attention_norm->apply(base.hooks.at(at(ls, "attn.output")) + delta) - base.hooks.at(at(ls, "hook_attn_out"));
      for (Index lr = ls + 1; lr < L; ++lr) {
        // 2. The receiver layer's q, k, v from its input with the delta.
        const model::Block<Scalar>& receiver = model.blocks[std::size_t(lr)];
        const Matrix<Scalar> input = model::normed(receiver.attention_norm, Matrix<Scalar>(base.hooks.at(at(lr, "hook_resid_pre")) + delta));
        ForwardRecord<Scalar> patched;
        patched.keep_queries = patched.keep_keys_values = true;
        AttentionOptions threads;
        threads.threads = options.threads;
        receiver.attention.attend_heads(input, threads, patched);
        for (Index r = 0; r < R; ++r) {
          // 3. The run from layer l_r with the receiver's Z, later heads frozen or not.
          model::RunOptions<Scalar> run;
          run.threads = options.threads;
          run.hook_functions[at(lr, "attn.hook_z")] = model::replace_with(detail::receiver_z(receiver.attention, base, at(lr, ""), patched, r, options));
          if (options.freeze)
            for (Index l = lr + 1; l < L; ++l) run.hook_functions[at(l, "attn.hook_z")] = model::replace_with(base.hooks.at(at(l, "attn.hook_z")));
          std::vector<model::LayerCache<Scalar>> caches;
          for (Index l = 0; l < L; ++l)
            caches.emplace_back(model.blocks[std::size_t(l)].attention.make_cache(l >= lr ? Index(ids.size()) : 0));
          t.values(ls * H + hs, lr * R + r) = metric.value(model.resume(lr, base.hooks.at(at(lr, "hook_resid_pre")), caches, run).logits);
        }
      }
    }
  }
  return t;
}

}  // namespace headwise::interpret
