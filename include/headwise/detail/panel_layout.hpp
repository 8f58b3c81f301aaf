// Internal: how the stored arithmetics lay keys out in their panels, the constants the KV stores
// and the products both read (kernels/kv_blocks.hpp, detail/int8_products.hpp,
// detail/bf16_products.hpp): how many entries share a 32-bit lane, the deepest key int8 takes, and
// int8's sign flip.
#pragma once

#include <cstdint>

#include "headwise/types.hpp"

namespace headwise::detail {

/// Entries of an int8 key (a column's tokens) that share one 32-bit lane.
constexpr Index int8_quad = 4;
/// The largest d_head the int8 stored arithmetic takes: its integer sums, Σ (k + 128) q over d_head
/// components of at most 255 x 127 each, stay below 2^31.
constexpr Index max_int8_depth = 65536;
/// An int8 key as the stored arithmetic's key panels hold it, k + 128 in a byte (and back).
inline std::int8_t flip_sign(std::int8_t x) { return static_cast<std::int8_t>(static_cast<std::uint8_t>(x) ^ 0x80u); }

/// Entries of a BF16 key (a column's tokens) that share one 32-bit lane.
constexpr Index bf16_pair = 2;

}  // namespace headwise::detail
