// The fused kernel's arithmetics, one file each: the table the kernel's stored type (the tag
// with_kernel_type gives, kv_storage.hpp) is looked up in at compile time, as ggml keeps a row of
// type traits per number type. TileArithmetic<Stored> says how the query tile is rounded, what
// the score and value tiles multiply and what scratch they need; the loop around them
// (kernels/fused_attention.hpp) names none. A new arithmetic is a file here and a line in
// with_kernel_type.
#pragma once

#include "headwise/kernels/widened_tiles.hpp"  // the primary template: keys and values widened as loaded
#include "headwise/kernels/bf16_tiles.hpp"     // Bf16Products: BF16 pairs
#include "headwise/kernels/f16_tiles.hpp"      // F16Products: F16 chains
#include "headwise/kernels/int8_tiles.hpp"     // Int8Products: integer sums
