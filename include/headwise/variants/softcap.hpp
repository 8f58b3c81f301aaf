// Soft-capping (Gemma 2's attn_logit_softcapping, Grok): each scaled score s becomes
// cap tanh(s / cap), so no score exceeds cap in size; applied before the mask.
#pragma once

#include <cmath>

#include "headwise/types.hpp"

namespace headwise {

/// row[j] = cap tanh(row[j] / cap) for j in [begin, end).
template <class Scalar>
void apply_softcap(Scalar* row, Index begin, Index end, double cap) {
  const Scalar c = static_cast<Scalar>(cap), inv = Scalar(1) / c;
  for (Index j = begin; j < end; ++j) row[j] = c * std::tanh(row[j] * inv);
}

}  // namespace headwise
