// Packed variable-length sequences (FlashAttention's `cu_seqlens`): several sequences laid end to
// end in one call's rows, sequence s at positions [cu_seqlens[s], cu_seqlens[s + 1]). A query sees
// only keys of its own sequence (causal inside it, if the call is causal): a batch of prompts in
// one call, with no padding and no attention across prompts.
#pragma once

#include <algorithm>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/variants/key_range.hpp"

namespace headwise {

class PackedSequences {
 public:
  /// cu_seqlens: 0 = c_0 < c_1 < ... < c_S = n_k, the boundaries of S sequences over the keys'
  /// positions (with exactly = false, c_S >= n_k: the call's keys are a shard of the sequences).
  /// Throws std::invalid_argument naming the first entry that breaks this.
  PackedSequences(std::vector<Index> cu_seqlens, Index n_k, bool exactly, const char* where)
      : bounds_(std::move(cu_seqlens)) {
    if (bounds_.size() < 2) detail::invalid(where, "cu_seqlens needs at least 2 entries (0 and n), got ", bounds_.size());
    if (bounds_.front() != 0) detail::invalid(where, "cu_seqlens must start at 0, got ", bounds_.front());
    for (std::size_t s = 1; s < bounds_.size(); ++s)
      if (bounds_[s] <= bounds_[s - 1])
        detail::invalid(where, "cu_seqlens must be increasing, but entry ", s, " (", bounds_[s],
                        ") is not greater than entry ", s - 1, " (", bounds_[s - 1], ")");
    if (exactly ? bounds_.back() != n_k : bounds_.back() < n_k)
      detail::invalid(where, "cu_seqlens must end at the number of keys, ", n_k, ", got ", bounds_.back());
  }

  /// `keys` narrowed to the sequence that holds `position` (empty if none does).
  KeyRange narrow(KeyRange keys, Index position) const {
    if (position < 0 || position >= bounds_.back()) return {0, 0};
    const auto next = std::upper_bound(bounds_.begin(), bounds_.end(), position);
    return keys.within(*(next - 1), *next);
  }

 private:
  std::vector<Index> bounds_;
};

}  // namespace headwise
