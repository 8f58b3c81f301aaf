// Internal: the stored arithmetic's exp (KvArithmetic::stored: the int8, BF16 and F16
// arithmetics, whose TileArithmetic sets short_exp): e^x by packets for x <= 0, a score less its
// row's running maximum, in fewer instructions than Eigen's pexp. kernels/fused_attention.hpp
// (exp_of_score) calls it on float packets that have an integer packet beside them
// (has_integer_packet); elsewhere Eigen's pexp.
//
// x = n ln 2 + f with n = round(x log2 e), |f| <= ln 2 / 2 (ln 2 in two parts, so f is exact to a
// rounding); e^f by Horner's rule on Eigen's (Cephes') polynomial without its seventh-degree term
// (below 1.2e-7 of e^f on that range); 2^n f by AVX-512's vscalefps, or elsewhere from n's bits (x
// log2 e plus 1.5 2^23 + 127 holds n + 127 in its lowest mantissa bits, which a shift moves into
// the exponent field). Eigen's pexp reaches its polynomial through a floor, a clamp on both sides
// and a general ldexp, which this one skips (bench/RESULTS.md, "Tuning constants"). Below -87 (where e^x is
// near float's smallest normal number, e^-87.34 = 1.2e-38) x is taken as -87; NaN stays NaN. Within 3.5 ulp
// of e^x on [-87, 0], checked against std::exp in double by the stored arithmetic's tests: far
// below the roundings of the weights that follow (to uint8, BF16 or F16).
#pragma once

#include <type_traits>

#include <Eigen/Core>

#include "headwise/detail/lanes.hpp"

namespace headwise::detail {

/// True where Eigen's packet of floats has an integer packet beside it (SSE, AVX, AVX-512, NEON),
/// which exp_nonpositive needs; a build without vectors (a float is its packet), ZVector and MSA
/// have none, and the stored arithmetic takes Eigen's pexp there.
template <class Packet, class = void>
struct has_integer_packet : std::false_type {};
template <class Packet>
struct has_integer_packet<Packet, std::void_t<decltype(sizeof(typename Eigen::internal::unpacket_traits<Packet>::integer_packet))>>
    : std::true_type {};  // (sizeof: a vector type as a template argument loses its attributes, a warning)

/// e^x for the float entries of x, each <= 0.
template <class Packet>
inline Packet exp_nonpositive(const Packet& x_in) {
  using namespace Eigen::internal;
  static_assert(std::is_same_v<typename unpacket_traits<Packet>::type, float>, "exp_nonpositive is float's");
  const Packet x = pmax(x_in, pset1<Packet>(-87.0f));  // (pmax keeps a NaN in its first argument)
  const Packet shifter = pset1<Packet>(12582912.0f + 127.0f);  // 1.5 2^23, plus the exponent's bias
  const Packet biased = pmadd(x, pset1<Packet>(1.44269504088896341f), shifter);
  const Packet n = psub(biased, shifter);
  Packet f = pmadd(n, pset1<Packet>(-0.693359375f), x);  // ln 2 = 0.693359375 - 2.12194440e-4
  f = pmadd(n, pset1<Packet>(2.12194440e-4f), f);
  Packet y = pset1<Packet>(1.3981999507E-3f);
  for (const float c : {8.3334519073E-3f, 4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f, 1.0f, 1.0f})
    y = pmadd(y, f, pset1<Packet>(c));
  if constexpr (VectorScale<unpacket_traits<Packet>::size>::available) return VectorScale<unpacket_traits<Packet>::size>::scale(y, n);
  using PacketI = typename unpacket_traits<Packet>::integer_packet;
  return pmul(y, preinterpret<Packet>(plogical_shift_left<23>(preinterpret<PacketI>(biased))));
}

}  // namespace headwise::detail
