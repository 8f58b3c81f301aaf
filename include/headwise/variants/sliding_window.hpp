// Sliding-window attention (Mistral, Gemma 2's local layers, Qwen2 with use_sliding_window): the
// query at position i sees key j iff 0 <= i - j < window, the query's own key included. This is
// Hugging Face's current rule (`sliding_window` keys in all); a query sees at most `window` keys,
// so attention costs O(n window) instead of O(n^2).
#pragma once

#include "headwise/variants/key_range.hpp"

namespace headwise {

/// The causal range `keys` of the query at `position`, narrowed to its last `window` keys.
inline KeyRange sliding_window_range(KeyRange keys, Index position, Index window) {
  // A window that reaches past the first key leaves the range as it is (and position - window + 1
  // is never computed where it would overflow: a window near INT64_MAX).
  if (window > position - keys.begin) return keys;
  return keys.within(position - window + 1, keys.end);
}

}  // namespace headwise
