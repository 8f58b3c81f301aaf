// Internal: hints that a line of memory is read soon, the kernels' one way to ask for it ahead
// (the stored-weights product, detail/row_dot_product.hpp; the attention tiles,
// detail/tile_product.hpp). The address is computed as an integer: ahead of a stream it may lie
// past the array's end, where pointer arithmetic would be undefined (a prefetch of it never
// faults). Nothing where the compiler has no prefetch builtin.
#pragma once

#include <cstdint>

#include "headwise/detail/platform.hpp"  // HEADWISE_PREFETCH
#include "headwise/types.hpp"

namespace headwise::detail {

/// Where a prefetched line is asked into: L1 (and every level below), or L2 (for what is read a
/// phase later, which would evict what L1 holds now).
enum class CacheLevel { l1, l2 };

/// A hint that the line `bytes` after p is read soon, into `Level`.
template <CacheLevel Level = CacheLevel::l1>
EIGEN_ALWAYS_INLINE void prefetch_line(const void* p, Index bytes) {
  HEADWISE_PREFETCH(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + std::uintptr_t(bytes)), Level == CacheLevel::l1 ? 3 : 2);
}

}  // namespace headwise::detail
