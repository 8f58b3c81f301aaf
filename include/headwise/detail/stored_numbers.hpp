// Numbers kept narrower than they are computed (BF16, F16, int8 and FP8 before their scales): one
// entry converted to and from its stored type, and a packet of them widened to float in registers
// (the B operand of detail/tile_product.hpp's and detail/row_dot_product.hpp's micro-kernels). The
// KV storage types (kv_storage.hpp) and the weights a checkpoint stores (stored_matrix.hpp) are
// made of these.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "headwise/detail/lanes.hpp"

namespace headwise {
namespace detail {

/// An FP8 weight as a checkpoint stores it, one byte: E4M3 as PyTorch's float8_e4m3fn (no
/// infinities, max 448) or E5M2 as IEEE's layout. It is read through F16, whose bits hold it: an
/// E5M2 byte is an F16's top byte, and E4M3's seven exponent and mantissa bits put one place lower
/// make an F16 of 2^-8 times its value (the 2^8 goes into the block's scale, exactly:
/// fp8_reading_factor). Codes that are NaN or infinite never get here (the loader refuses them).
struct Fp8E4M3 {
  std::uint8_t bits;
};
struct Fp8E5M2 {
  std::uint8_t bits;
};
template <class T>
constexpr bool is_fp8_entry = std::is_same_v<T, Fp8E4M3> || std::is_same_v<T, Fp8E5M2>;
/// An FP8 code's value over its F16 reading (from_stored).
template <class T>
constexpr float fp8_reading_factor = std::is_same_v<T, Fp8E4M3> ? 256.0f : 1.0f;

inline std::uint16_t half_bits_of(Fp8E4M3 x) {
  return static_cast<std::uint16_t>(((x.bits & 0x7fu) << 7) | ((x.bits & 0x80u) << 8));
}
inline std::uint16_t half_bits_of(Fp8E5M2 x) { return static_cast<std::uint16_t>(x.bits << 8); }

/// The largest finite value of an FP8 type: 448 (E4M3), 57344 (E5M2).
template <class T>
constexpr double fp8_max = std::is_same_v<T, Fp8E4M3> ? 448.0 : 57344.0;

/// The FP8 code nearest v (ties to even), for finite v. A v whose nearest value is beyond the
/// largest finite one gets the code the caller refuses (E4M3's NaN, E5M2's infinity): its value,
/// once widened, exceeds fp8_max. Normal results by the bits of v (the mantissa cut to the type's
/// with its rest rounded), FP8's subnormals and zero by one scaling.
template <class T>
T fp8_nearest(double v) {
  constexpr bool e4m3 = std::is_same_v<T, Fp8E4M3>;
  constexpr int mantissa = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  constexpr int top_field = e4m3 ? 15 : 30;               // the exponent field of the largest finite value
  constexpr std::uint8_t beyond = e4m3 ? 0x7Fu : 0x7Cu;   // NaN (E4M3), infinity (E5M2)
  const auto bits = Eigen::numext::bit_cast<std::uint64_t>(v);
  const auto sign = static_cast<std::uint8_t>((bits >> 56) & 0x80u);
  const int e = static_cast<int>((bits >> 52) & 0x7FFu) - 1023;  // v's binade
  if (e < 1 - bias) {  // below FP8's normal binades: steps of its subnormals, 2^(1 - bias - mantissa)
    constexpr double steps = double(std::uint64_t(1) << (bias - 1 + mantissa));
    const auto q = static_cast<unsigned>(std::nearbyint(std::fabs(v) * steps));  // (2^mantissa: the lowest normal's code)
    return T{static_cast<std::uint8_t>(sign | q)};
  }
  constexpr int drop = 52 - mantissa;
  const std::uint64_t fraction = bits & ((std::uint64_t(1) << 52) - 1), rest = fraction & ((std::uint64_t(1) << drop) - 1);
  const std::uint64_t half = std::uint64_t(1) << (drop - 1);
  std::uint64_t q = fraction >> drop;
  int field = e + bias;
  if (rest > half || (rest == half && (q & 1u))) ++q;
  if (q >> mantissa) q = 0, ++field;  // (rounding carried into the next binade)
  if (field > top_field) return T{static_cast<std::uint8_t>(sign | beyond)};
  return T{static_cast<std::uint8_t>(sign | static_cast<unsigned>(field) << mantissa | static_cast<unsigned>(q))};
}

/// x in float, rounded to odd: the float toward zero from x with its last bit set where x is not a
/// float. Rounding that to BF16 or F16 (at least 2 bits fewer) is x rounded to nearest even once,
/// where rounding x to nearest float first could round twice.
inline float rounded_to_odd(double x) {
  float f = static_cast<float>(x);
  if (!std::isfinite(x) || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return Eigen::numext::bit_cast<float>(Eigen::numext::bit_cast<std::uint32_t>(f) | 1u);
}

/// x converted to the stored type (round to nearest even); an int8 entry is already quantized.
template <class Stored, class Scalar>
Stored to_stored(Scalar x) {
  if constexpr (std::is_same_v<Stored, Eigen::bfloat16> || std::is_same_v<Stored, Eigen::half>) {
    if constexpr (std::is_same_v<Scalar, double>) return Stored(rounded_to_odd(x));
    else return Stored(static_cast<float>(x));
  } else {
    return static_cast<Stored>(x);
  }
}

/// A stored entry widened to Scalar (an int8 entry before its scale, an FP8 one its F16 reading).
template <class Scalar, class Stored>
Scalar from_stored(Stored x) {
  if constexpr (is_fp8_entry<Stored>)
    return static_cast<Scalar>(static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(half_bits_of(x))));
  else if constexpr (std::is_same_v<Stored, Eigen::bfloat16> || std::is_same_v<Stored, Eigen::half>)
    return static_cast<Scalar>(static_cast<float>(x));
  else return static_cast<Scalar>(x);
}

/// One packet of floats widened from P stored entries (the micro-kernel's B operand): a plain load
/// for floats, and in registers for BF16, F16, FP8 and int8 where the instruction set widens them
/// (VectorWidening, detail/lanes.hpp), else entry by entry.
template <class Packet, class Stored>
inline Packet load_widened(const Stored* p) {
  using namespace Eigen::internal;
  using Scalar = typename unpacket_traits<Packet>::type;
  if constexpr (std::is_same_v<Stored, Scalar>) {
    return ploadu<Packet>(p);
  } else {
    static_assert(std::is_same_v<Scalar, float>, "stored BF16, F16 and int8 widen to float");
    constexpr int P = unpacket_traits<Packet>::size;
    if constexpr (VectorWidening<P, Stored>::available) {
      return VectorWidening<P, Stored>::load(p);
    } else {
      alignas(64) float widened[static_cast<std::size_t>(P)];
      for (int i = 0; i < P; ++i) widened[i] = from_stored<float>(p[i]);
      return pload<Packet>(widened);
    }
  }
}

}  // namespace detail
}  // namespace headwise
