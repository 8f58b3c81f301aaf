// Internal: the lanes each stored arithmetic's products run on, chosen once for the instruction
// set a file is compiled for. A products file (detail/bf16_products.hpp, detail/f16_products.hpp)
// writes its algorithm once over a lanes type (load, broadcast, dot or fma, add, store) and keeps
// its portable lanes, lane by lane, which give the same bits; an instruction set's registers are
// specializations of VectorLanes and VectorRounding in that instruction set's one file
// (detail/lanes_avx512.hpp, detail/lanes_avx2.hpp), and nowhere else.
#pragma once

#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// The registers that multiply panels of W lanes of Stored numbers (Eigen::half: F16 chains,
/// Eigen::bfloat16: BF16 pairs, std::int8_t: int8 quads) under the stored arithmetic: none (void) unless the instruction
/// set's file specializes it.
template <class Stored, Index W>
struct VectorLanes {
  using type = void;
};

/// Rounds the leading entries of x[0, n) to Stored's bits (to nearest, ties to even) in
/// registers and says how many it did: none unless the instruction set's file specializes it
/// (the products file's own loop rounds the rest, by the same rule). F16 and BF16 round floats;
/// uint8 rounds x times `inverse`, clamped to [0, 255] (int8 weights, detail/int8_products.hpp).
template <class Stored>
struct VectorRounding {
  static Index round(const float*, Index, std::uint16_t*) { return 0; }
  static Index round(const float*, Index, float, std::uint8_t*) { return 0; }
};

}  // namespace headwise::detail

#if defined(EIGEN_VECTORIZE_AVX512)
#include "headwise/detail/lanes_avx512.hpp"
#elif defined(EIGEN_VECTORIZE_AVX2) && defined(EIGEN_VECTORIZE_FMA)
#include "headwise/detail/lanes_avx2.hpp"
#endif

namespace headwise::detail {

/// The lanes a build multiplies Stored panels of W lanes with: its registers where the
/// instruction set has them, else Portable.
template <class Stored, Index W, class Portable>
using LanesOf = std::conditional_t<std::is_void_v<typename VectorLanes<Stored, W>::type>, Portable,
                                   typename VectorLanes<Stored, W>::type>;

/// kernel(height, first row) over `rows` rows of a tile: in slivers of the compiled heights up to
/// Tallest (each row's sums held in registers), or row by row where Tallest is 1 (the portable
/// lanes: a row's sums are its own, so the bits are the same either way).
template <int Tallest, class Kernel>
inline void by_lane_heights(Index rows, const Kernel& kernel) {
  if constexpr (Tallest == 1) {
    for (Index row = 0; row < rows; ++row) kernel(std::integral_constant<int, 1>{}, row);
  } else {
    by_compiled_heights<Tallest>(rows, 0, kernel);
  }
}

}  // namespace headwise::detail
