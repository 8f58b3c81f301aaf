// The logit lens (nostalgebraist, 2020): the model's final norm and LM head applied to the residual
// stream entering each layer (and, last, to the stream after the last block, which gives the
// model's own logits), so that each layer's "current guess" can be read as tokens: per layer and
// position the top tokens, the log-sum-exp and, on request, the whole logits. One run of the model.
//
//   interpret::LogitLens<float> lens = interpret::logit_lens(model, ids);
//   lens.top[3](t, 0);   // the most likely token at position t entering layer 3
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/model/decoder_model.hpp"

namespace headwise::interpret {

using IndexMatrix = Eigen::Matrix<Index, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Slice l < layers: the stream entering layer l (hook_resid_pre); slice layers: after the last block.
template <class Scalar>
struct LogitLens {
  std::vector<IndexMatrix> top;      ///< per slice, (n, k): the k most likely ids, most likely first (ties: the lower id)
  std::vector<Matrix<Scalar>> top_logits;  ///< per slice, (n, k): their logits
  Matrix<double> logsumexp;          ///< (slices, n): log Σ exp over the whole vocabulary
  std::vector<Matrix<Scalar>> logits;  ///< per slice, (n, vocab), when kept (LogitLensOptions::keep_logits)
};

struct LogitLensOptions {
  Index top_k = 5;
  bool keep_logits = false;  ///< (slices n vocab numbers: for short texts)
  int threads = 0;
};

template <class Scalar>
LogitLens<Scalar> logit_lens(const model::DecoderModel<Scalar>& model, const std::vector<Index>& ids, const LogitLensOptions& options = {}) {
  constexpr const char* where = "logit_lens";
  if (options.top_k < 1 || options.top_k > model.vocab_size())
    detail::invalid(where, "top_k = ", options.top_k, " is not in [1, ", model.vocab_size(), "]");
  const Index L = model.n_layers();
  model::RunOptions<Scalar> o;
  o.threads = options.threads;
  for (Index l = 0; l < L; ++l) o.hooks.insert("blocks." + std::to_string(l) + ".hook_resid_pre");
  o.hooks.insert(L ? "blocks." + std::to_string(L - 1) + ".hook_resid_post" : std::string("ln_final.out"));
  const model::ModelRun<Scalar> run = model.run(ids, o);
  const Index n = Index(ids.size()), k = options.top_k;
  LogitLens<Scalar> lens;
  lens.logsumexp.resize(L + 1, n);
  std::vector<Index> order(static_cast<std::size_t>(model.vocab_size()));
  for (Index l = 0; l <= L; ++l) {
    const Matrix<Scalar> logits = l < L ? model.unembed(run.hooks.at("blocks." + std::to_string(l) + ".hook_resid_pre"), options.threads)
                                        : L ? model.unembed(run.hooks.at("blocks." + std::to_string(L - 1) + ".hook_resid_post"), options.threads)
                                            : run.logits;
    IndexMatrix top(n, k);
    Matrix<Scalar> top_logits(n, k);
    for (Index t = 0; t < n; ++t) {
      const auto row = logits.row(t);
      std::iota(order.begin(), order.end(), Index(0));
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](Index a, Index b) { return row(a) > row(b) || (row(a) == row(b) && a < b); });
      for (Index j = 0; j < k; ++j) top(t, j) = order[std::size_t(j)], top_logits(t, j) = row(order[std::size_t(j)]);
      const double most = double(row(order[0]));
      lens.logsumexp(l, t) = most + std::log((row.template cast<double>().array() - most).exp().sum());
    }
    lens.top.push_back(std::move(top)), lens.top_logits.push_back(std::move(top_logits));
    if (options.keep_logits) lens.logits.push_back(logits);
  }
  return lens;
}

}  // namespace headwise::interpret
