// What a whole model's run takes (RunOptions: hooks to record, hook functions, the first
// position, threads, a reader of each layer's attention record, logits to keep) and gives
// (ModelRun: logits, hooks and their head counts, routing, statistics, logsumexp; head() for one
// head of a per-head hook), and the next-token loss of its logits.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/forward_record.hpp"
#include "headwise/kernels/row_statistics.hpp"
#include "headwise/model/hooks.hpp"
#include "headwise/model/mixture_of_experts.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

/// What a run records and changes, and where it starts.
template <class Scalar>
struct RunOptions {
  /// Hook names to record (DecoderModel::hook_names lists them), each after any hook function on it.
  std::set<std::string> hooks;
  /// Hook functions by hook name: each reads or changes the value there in place. The q, k, v,
  /// pattern, statistics and routing hooks are read-only (the attention or the router has used them).
  std::map<std::string, HookFunction<Scalar>> hook_functions;
  /// The ids sit at positions first_position .. (learned positions, rotary angles, windows), with
  /// no earlier keys: the tokens from there of a longer text whose earlier tokens are not attended.
  Index first_position = 0;
  int threads = 0;  ///< threads for every product and attention call; 0: the default (detail::thread_count)
  /// Called with each layer's attention record, its queries, keys, values, logsumexp and row
  /// statistics kept (O(n d) a layer, freed after the call): a reader of every head's pattern rows
  /// (ForwardRecord::pattern) that never holds an (n, n) pattern (interpret/model_head_scores.hpp).
  std::function<void(Index layer, const ForwardRecord<Scalar>& record)> read_attention;
  /// Logits for the last this many tokens only (0: every token), as Hugging Face's logits_to_keep:
  /// generation needs the last one, and the LM head is a fifth of a small model's prefill.
  Index logits_to_keep = 0;
};

template <class Scalar>
struct ModelRun {
  Matrix<Scalar> logits;                         ///< (n, vocab), or the last RunOptions::logits_to_keep rows
  std::map<std::string, Matrix<Scalar>> hooks;   ///< what RunOptions::hooks asked for
  std::map<std::string, Index> heads;            ///< per recorded per-head hook, its heads side by side
  std::map<Index, Routing<Scalar>> routing;      ///< sparse blocks, when "blocks.L.mlp.routing" is asked for
  std::map<Index, RowStatistics<Scalar>> statistics;  ///< per layer, the fused kernel's, when "blocks.L.attn.statistics" is asked for
  /// Per layer, (n_heads, n): each row's log-sum-exp of its scaled scores (a pattern row is
  /// exp(score - logsumexp)), when "blocks.L.attn.logsumexp" is asked for.
  std::map<Index, Matrix<Scalar>> logsumexp;

  /// Head h's part of a recorded per-head hook: (n, d) of q, k, v (key/value head h), z; (n, n) of
  /// the pattern.
  Matrix<Scalar> head(const std::string& name, Index h) const {
    const auto value = hooks.find(name);
    const auto count = heads.find(name);
    if (value == hooks.end() || count == heads.end())
      headwise::detail::invalid("ModelRun::head", name, " was not recorded, or holds no heads (a per-head hook: attn.hook_q, hook_k, ",
                                "hook_v, hook_z, hook_pattern)");
    return HookPoint{name, count->second}.head(value->second, h);
  }
};

/// The mean cross-entropy of next tokens (nats): row t of logits (n, vocab) predicts ids[t + 1],
/// -log softmax(logits_t)[ids[t + 1]] averaged over t < n - 1 (the loss a language model trains on).
template <class Scalar>
double next_token_loss(const Matrix<Scalar>& logits, const std::vector<Index>& ids) {
  if (logits.rows() != static_cast<Index>(ids.size()) || ids.size() < 2)
    detail::invalid("next_token_loss", "logits for ", logits.rows(), " tokens and ", ids.size(), " ids (at least 2, one row each)");
  double total = 0;
  for (Index t = 0; t + 1 < logits.rows(); ++t) {
    const Index next = ids[static_cast<std::size_t>(t) + 1];
    if (next < 0 || next >= logits.cols()) detail::invalid("next_token_loss", "id ", next, " is not in [0, ", logits.cols(), ")");
    const double top = double(logits.row(t).maxCoeff());
    const double lse = top + std::log((logits.row(t).template cast<double>().array() - top).exp().sum());
    total += lse - double(logits(t, next));
  }
  return total / double(logits.rows() - 1);
}

}  // namespace headwise::model
