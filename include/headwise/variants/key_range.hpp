// KeyRange: the contiguous keys [begin, end) a query may see, and the causal rule that bounds it.
//
// Every mask of headwise first narrows each query's keys to one contiguous range (causal, sliding
// window, packed sequences, and the first and last key a boolean mask or padding leaves); the
// fused kernel never touches a key tile outside the ranges of its rows. Positions are absolute:
// with n_q queries and n_k keys, query i sits at position n_k - n_q + i (see causal_mask.hpp).
#pragma once

#include <algorithm>

#include "headwise/types.hpp"

namespace headwise {

/// Keys begin .. end - 1. Empty when end <= begin.
struct KeyRange {
  Index begin = 0, end = 0;
  bool empty() const { return end <= begin; }
  Index size() const { return std::max<Index>(end - begin, 0); }
  /// The part of this range inside [lo, hi).
  KeyRange within(Index lo, Index hi) const { return {std::max(begin, lo), std::min(end, hi)}; }
};

/// The keys a query at `position` sees among n_k keys: 0 .. position when causal, all n_k when not.
inline KeyRange causal_range(Index position, Index n_k, bool causal) {
  return {0, causal ? std::clamp<Index>(position + 1, 0, n_k) : n_k};
}

}  // namespace headwise
