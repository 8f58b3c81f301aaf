// AttentionOptions: how attention is computed (mask, divisor), in one struct that can grow.
#pragma once

#include <cmath>
#include <optional>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Options shared by every attention entry point. Set fields by name:
///   AttentionOptions opts; opts.causal = false; opts.divisor = 8.0;
struct AttentionOptions {
  /// Causal mask: query i sees keys 0..i only. Off: every query sees every key (bidirectional).
  bool causal = true;
  /// The scores are divided by this; unset means sqrt(d_head). Must be finite and > 0.
  std::optional<double> divisor;
  /// Threads for the fused kernel: 0 means OpenMP's default; results do not depend on it.
  int threads = 0;
};

/// The divisor that `options` asks for at width d_head; throws if it is not finite and > 0.
inline double resolve_divisor(const AttentionOptions& options, Index d_head, const char* where) {
  if (!options.divisor) return std::sqrt(static_cast<double>(d_head));
  const double divisor = *options.divisor;
  if (!(divisor > 0.0) || !std::isfinite(divisor))
    detail::invalid(where, "divisor must be finite and > 0, got ", divisor);
  return divisor;
}

}  // namespace headwise
