// Internal: what each instruction set does in registers, chosen once for the one a file is
// compiled for. A products file (detail/bf16_products.hpp, f16_products.hpp, int8_products.hpp)
// writes its algorithm once over a lanes type (load, broadcast, dot or fma, add, store) and keeps
// its portable lanes, lane by lane, which give the same bits; the widening of stored numbers
// (stored_numbers.hpp), the sums of four packets (row_dot_product.hpp), FP4 blocks
// (mxfp4_products.hpp) and exp's last step (exp_nonpositive.hpp) ask the traits below whether the
// instruction set does them. Every register form is a specialization of these in that
// instruction set's one file (detail/lanes_avx2.hpp for 256-bit registers, also under AVX-512;
// detail/lanes_avx512.hpp), and nowhere else. Unspecialized, each gives the portable form: it
// says `available = false`, or does nothing and leaves the work to the caller's loop, or is that
// loop itself (VectorQuadTranspose, VectorTuning).
#pragma once

#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

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

/// P floats widened from P stored entries (BF16, F16, int8, FP8) in one register.
template <int P, class Stored>
struct VectorWidening {
  static constexpr bool available = false;
};

/// The sums of four float packets of P lanes, each summed the one way detail/row_dot_product.hpp's
/// sum_four states, four at a time in registers.
template <int P>
struct VectorSums {
  static constexpr bool available = false;
};

/// 2^n times y for packets of P floats in one instruction (exp_nonpositive's last step).
template <int P>
struct VectorScale {
  static constexpr bool available = false;
};

/// A block of 32 FP4 (E2M1) codes times its scale, widened in registers of P floats
/// (mxfp4_products.hpp; the widest an instruction set has is used).
template <int P>
struct VectorFp4 {
  static constexpr bool available = false;
};

/// The stored arithmetic's pair of blocks of a row of B (see the top): the doubled FP4 magnitudes
/// in the pair's layout, the mask of its negative codes (bit e: byte e), each lane's block scale
/// halved (0 for a lone block's missing partner).
struct Fp4Pair {
  alignas(64) std::uint8_t magnitude[64];
  std::uint64_t negative;
  alignas(64) float scale[16];
};
/// A pair of blocks of a row of A rounded to int8, in the same layout, each lane's d.
struct Int8Pair {
  alignas(64) std::int8_t q[64];
  alignas(64) float scale[16];
};

/// MXFP4 weights under the stored arithmetic in registers of P int32 lanes (mxfp4_products.hpp: a
/// pair of blocks is 64 entries, their 16 lanes as that file lays them out; the widest an
/// instruction set has is used): decode_pair writes a pair's doubled FP4 magnitudes, the mask of
/// its negative codes and its lanes' scales; dot_pairs adds decoded pairs into the 16 float lanes,
/// dot_codes pairs read as stored. Not available unless the instruction set's file specializes it
/// (the products file's own loops compute the same bits).
template <int P>
struct VectorFp4Int8 {
  static constexpr bool available = false;
};

/// The instruction set's tuning of the stored weights' row-dot product: the bytes of A's rows a
/// block holds (detail/row_dot_product.hpp, a_block_bytes).
template <class = void>
struct VectorTuning {
  static Index a_block_bytes() { return Index(1) << 20; }
};

/// 16 bytes of four int8 keys' quads (key i's components 4i .. 4i + 3) as four value columns'
/// quads (column e's four tokens), each byte's sign bit flipped (int8 keys are stored as k + 128),
/// in one shuffle: kernels/int8_tiles.hpp's latent values read out of the keys.
template <class = void>
struct VectorQuadTranspose {
  static void flip_transpose(const std::int8_t* in, std::int8_t* out) {
    for (int e = 0; e < 4; ++e)
      for (int i = 0; i < 4; ++i) out[4 * e + i] = static_cast<std::int8_t>(static_cast<std::uint8_t>(in[4 * i + e]) ^ 0x80u);
  }
};

struct Fp8E4M3;
struct Fp8E5M2;

}  // namespace headwise::detail

#if defined(EIGEN_VECTORIZE_AVX2) && defined(EIGEN_VECTORIZE_FMA)
#include "headwise/detail/lanes_avx2.hpp"
#endif
#if defined(EIGEN_VECTORIZE_AVX512)
#include "headwise/detail/lanes_avx512.hpp"
#endif

namespace headwise::detail {

/// The lanes a build multiplies Stored panels of W lanes with: its registers where the
/// instruction set has them, else Portable.
template <class Stored, Index W, class Portable>
using LanesOf = std::conditional_t<std::is_void_v<typename VectorLanes<Stored, W>::type>, Portable,
                                   typename VectorLanes<Stored, W>::type>;

}  // namespace headwise::detail
