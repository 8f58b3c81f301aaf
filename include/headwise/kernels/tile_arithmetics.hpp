// The fused kernel's arithmetics, one file each, and the one dispatch to them: with_kernel_type
// turns a store's run-time storage and arithmetic into the kernel's compile-time stored type (a
// tag), whose TileArithmetic<Stored> is looked up at compile time, as ggml keeps a row of type
// traits per number type. TileArithmetic<Stored> says how the query tile is rounded, what the
// score and value tiles multiply and what scratch they need; the loop around them
// (kernels/fused_attention.hpp) names none. A new arithmetic is a file (its tag and its
// TileArithmetic) included here, and a line in with_kernel_type.
#pragma once

#include <type_traits>
#include <utility>

#include "headwise/kernels/widened_tiles.hpp"  // the primary template: keys and values widened as loaded
#include "headwise/kernels/bf16_tiles.hpp"     // Bf16Products: BF16 pairs
#include "headwise/kernels/f16_tiles.hpp"      // F16Products: F16 chains
#include "headwise/kernels/int8_tiles.hpp"     // Int8Products: integer sums
#include "headwise/kv_storage.hpp"

namespace headwise::detail {

/// with_stored_type for the kernel: as it, except that int8, BF16 and F16 under the stored
/// arithmetic are Int8Products, Bf16Products and F16Products (the stored type is the same either
/// way; the arithmetic is the kernel's choice): a line each.
template <class Scalar, class Reach = AnyStorage, class F>
decltype(auto) with_kernel_type(KvStorage storage, KvArithmetic arithmetic, F&& f) {
  if constexpr (std::is_same_v<Reach, AnyStorage> && std::is_same_v<Scalar, float>) {
    if (storage == KvStorage::int8 && arithmetic == KvArithmetic::stored) return f(static_cast<const Int8Products*>(nullptr));
    if (storage == KvStorage::bf16 && arithmetic == KvArithmetic::stored) return f(static_cast<const Bf16Products*>(nullptr));
    if (storage == KvStorage::f16 && arithmetic == KvArithmetic::stored) return f(static_cast<const F16Products*>(nullptr));
  }
  return with_stored_type<Scalar, Reach>(storage, std::forward<F>(f));
}

}  // namespace headwise::detail
