// Chunked attention (Llama 4's RoPE layers, `attention_chunk_size`): the positions are cut into
// chunks of C, and the query at position i sees key j iff j <= i and floor(j / C) = floor(i / C).
// As with a sliding window, a query sees at most C keys, so attention costs O(n C).
#pragma once

#include "headwise/variants/key_range.hpp"

namespace headwise {

/// The causal range `keys` of the query at `position`, narrowed to the keys of its own chunk.
inline KeyRange chunked_range(KeyRange keys, Index position, Index chunk) {
  return keys.within(position / chunk * chunk, keys.end);
}

}  // namespace headwise
