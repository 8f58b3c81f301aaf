// Training a whole model in the library: the mean next-token loss over a batch of token
// sequences and its gradient by parameter name (one forward and one backward a sequence,
// model/backward.hpp), and a step of an optimiser (model/adamw.hpp) that rebuilds the model from
// the updated weights (set_parameters). Deterministic: every product is the deterministic one and
// the sequences' gradients are summed in order, so a run gives the same bits on 1 and 2 threads.
//
//   auto weights = model::parameters_of(model);
//   model::AdamW<float> adamw({3e-3, 0.9, 0.98, 1e-8, 0.0});
//   for (...) double loss = model::train_step(model, weights, adamw, batch);
#pragma once

#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/model/adamw.hpp"
#include "headwise/model/backward.hpp"
#include "headwise/model/parameters.hpp"

namespace headwise::model {

/// The batch's loss: Σ over sequences and rows t < n - 1 of -log p(ids[t + 1]) over the number of
/// terms; and its gradient by parameter name, without the parameters no sequence reached (experts
/// no token chose: autograd leaves their gradient None, and PyTorch's optimisers skip them).
template <class Scalar>
std::pair<double, Parameters<Scalar>> batch_loss_gradients(const DecoderModel<Scalar>& model, const std::vector<std::vector<Index>>& batch,
                                                           int threads = 0) {
  double terms = 0;
  for (const std::vector<Index>& ids : batch) {
    if (ids.size() < 2) detail::invalid("batch_loss_gradients", "a sequence of ", ids.size(), " tokens (at least 2: one to predict)");
    terms += double(ids.size() - 1);
  }
  if (batch.empty()) detail::invalid("batch_loss_gradients", "the batch is empty");
  GradientOptions options;
  options.threads = threads;
  double loss = 0;
  Parameters<Scalar> total;
  std::set<std::string> unreached;  // by every sequence
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Metric<Scalar> metric = Metric<Scalar>::next_token_loss(batch[i]);
    metric.weight = 1.0 / terms;
    ModelGradients<Scalar> g = gradients(model, batch[i], metric, options);
    loss += g.metric;
    for (auto& [name, value] : g.parameters) {
      auto it = total.find(name);
      if (it == total.end()) total.emplace(name, std::move(value));
      else it->second += value;
    }
    std::set<std::string> both;
    for (const std::string& prefix : g.unreached)
      if (i == 0 || unreached.count(prefix)) both.insert(prefix);
    unreached = std::move(both);
  }
  // What no sequence reached has no gradient (autograd's None): the optimiser skips it.
  for (auto it = total.begin(); it != total.end();) {
    bool skipped = false;
    for (const std::string& prefix : unreached) skipped = skipped || it->first.rfind(prefix, 0) == 0;
    it = skipped ? total.erase(it) : std::next(it);
  }
  return {loss, std::move(total)};
}

/// One step: the batch's loss and gradient at the current weights, the optimiser's update of
/// `weights` (parameters_of(model) at the start, then kept by the caller), the model rebuilt from
/// them. Returns the loss before the step.
template <class Scalar, class Optimiser>
double train_step(DecoderModel<Scalar>& model, Parameters<Scalar>& weights, Optimiser& optimiser, const std::vector<std::vector<Index>>& batch,
                  int threads = 0) {
  auto [loss, grads] = batch_loss_gradients(model, batch, threads);
  optimiser.step(weights, grads);
  set_parameters(model, weights);
  return loss;
}

}  // namespace headwise::model
