// Query scale by position: the queries of the token at absolute position p multiplied by
//   1 + beta ln(1 + floor((p + shift) / period))
// Llama 4's attention temperature on its NoPE layers (beta = attn_scale, period = floor_scale,
// shift 1) and Ministral 3's llama_4_scaling_beta (period = original_max_position_embeddings,
// shift 0), after the rotary embedding. Keys are not scaled; the scale depends on the absolute
// position only, so decoding token by token equals the forward.
#pragma once

#include <cmath>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

struct QueryScale {
  double beta = 0.0;
  Index period = 1;
  Index shift = 0;

  /// The factor of the query at absolute position p.
  double at(Index position) const {
    return 1.0 + beta * std::log1p(std::floor(double(position + shift) / double(period)));
  }
  /// Throws unless the settings are finite, period > 0 and shift >= 0.
  void check(const char* where) const {
    if (!std::isfinite(beta)) detail::invalid(where, "query scale beta must be finite, got ", beta);
    if (period <= 0) detail::invalid(where, "query scale period must be > 0, got ", period);
    if (shift < 0) detail::invalid(where, "query scale shift must be >= 0, got ", shift);
  }
};

}  // namespace headwise
