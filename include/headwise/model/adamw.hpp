// AdamW (Loshchilov and Hutter, 2019) with PyTorch's torch.optim.AdamW semantics: weight decay
// decoupled from the gradient (p <- p (1 - lr wd) first), then Adam's moments with bias correction,
//   m <- β1 m + (1 - β1) g,  v <- β2 v + (1 - β2) g²,
//   p <- p - lr / (1 - β1^t) · m / (sqrt(v) / sqrt(1 - β2^t) + eps),
// over parameters by checkpoint name (model/parameters.hpp), state kept in Scalar as PyTorch keeps
// it in the parameter's type, a step count per parameter. A parameter without a gradient (one the
// loss did not reach: batch_loss_gradients leaves it out) is skipped, as PyTorch skips a .grad of
// None: no decay, no step.
//
//   model::AdamW<float> adamw({/*lr=*/1e-3});
//   adamw.step(weights, gradients);   // weights: parameters_of(model); then set_parameters(model, weights)
#pragma once

#include <cmath>
#include <map>
#include <string>

#include "headwise/detail/errors.hpp"
#include "headwise/model/parameters.hpp"

namespace headwise::model {

struct AdamWOptions {
  double learning_rate = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

template <class Scalar>
class AdamW {
 public:
  explicit AdamW(const AdamWOptions& options = {}) : o_(options) {
    const auto in_unit = [](double b) { return b >= 0.0 && b < 1.0; };
    if (!(o_.learning_rate >= 0.0 && std::isfinite(o_.learning_rate)) || !in_unit(o_.beta1) || !in_unit(o_.beta2) ||
        !(o_.eps > 0.0 && std::isfinite(o_.eps)) || !(o_.weight_decay >= 0.0 && std::isfinite(o_.weight_decay)))
      detail::invalid("AdamW", "learning_rate ", o_.learning_rate, ", betas (", o_.beta1, ", ", o_.beta2, "), eps ", o_.eps,
                      ", weight_decay ", o_.weight_decay, ": needs lr >= 0, betas in [0, 1), eps > 0, weight_decay >= 0, all finite");
  }

  /// One step on every parameter of `params` that `grads` has a gradient for (a name in grads
  /// that params lacks, or of another shape, is refused by name).
  void step(Parameters<Scalar>& params, const Parameters<Scalar>& grads) {
    for (const auto& [name, g] : grads) {
      const auto p = params.find(name);
      if (p == params.end()) detail::invalid("AdamW::step", "a gradient for \"", name, "\", which is not a parameter");
      if (p->second.rows() != g.rows() || p->second.cols() != g.cols())
        detail::invalid("AdamW::step", "the gradient of ", name, " is ", g.rows(), "x", g.cols(), ", the parameter ", p->second.rows(), "x",
                        p->second.cols());
      if (!g.allFinite()) detail::invalid("AdamW::step", "the gradient of ", name, " has an entry that is not finite");
    }
    ++t_;
    const Scalar decay = static_cast<Scalar>(1.0 - o_.learning_rate * o_.weight_decay);
    const Scalar b1 = static_cast<Scalar>(o_.beta1), b2 = static_cast<Scalar>(o_.beta2), eps = static_cast<Scalar>(o_.eps);
    for (const auto& [name, gradient] : grads) {
      Matrix<Scalar>& p = params.at(name);
      State& s = state_[name];
      if (s.steps == 0) s.m = Matrix<Scalar>::Zero(p.rows(), p.cols()), s.v = Matrix<Scalar>::Zero(p.rows(), p.cols());
      const double t = double(++s.steps);  // (each parameter's own count, as PyTorch's state["step"])
      const Scalar step_size = static_cast<Scalar>(o_.learning_rate / (1.0 - std::pow(o_.beta1, t)));
      const Scalar correction2 = static_cast<Scalar>(std::sqrt(1.0 - std::pow(o_.beta2, t)));
      p *= decay;
      s.m = b1 * s.m + (Scalar(1) - b1) * gradient;
      s.v = b2 * s.v + (Scalar(1) - b2) * gradient.cwiseProduct(gradient);
      p.array() -= step_size * s.m.array() / (s.v.array().sqrt() / correction2 + eps);
    }
  }
  /// A new learning rate for the steps to come (a schedule's), as PyTorch's param_groups' lr.
  void set_learning_rate(double lr) {
    if (!(lr >= 0.0 && std::isfinite(lr))) detail::invalid("AdamW::set_learning_rate", "learning rate ", lr, ": finite and >= 0");
    o_.learning_rate = lr;
  }
  /// Steps taken (calls of step).
  Index steps() const { return t_; }
  const AdamWOptions& options() const { return o_; }

 private:
  struct State {
    Matrix<Scalar> m, v;
    Index steps = 0;
  };
  AdamWOptions o_;
  Index t_ = 0;
  std::map<std::string, State> state_;
};

}  // namespace headwise::model
