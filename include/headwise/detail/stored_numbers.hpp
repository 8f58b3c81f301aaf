// Numbers kept narrower than they are computed (BF16, F16, int8 before its scale): one entry
// converted to and from its stored type, and a packet of them widened to float in registers (the
// micro-kernel's B operand, detail/tile_product.hpp). The KV storage types (kv_storage.hpp) are
// made of these.
#pragma once

#include <type_traits>

#include <Eigen/Core>

namespace headwise {
namespace detail {

/// x converted to the stored type (round to nearest even); an int8 entry is already quantized.
template <class Stored, class Scalar>
Stored to_stored(Scalar x) {
  if constexpr (std::is_same_v<Stored, Eigen::bfloat16> || std::is_same_v<Stored, Eigen::half>) return Stored(static_cast<float>(x));
  else return static_cast<Stored>(x);
}

/// A stored entry widened to Scalar (an int8 entry before its scale).
template <class Scalar, class Stored>
Scalar from_stored(Stored x) {
  if constexpr (std::is_same_v<Stored, Eigen::bfloat16> || std::is_same_v<Stored, Eigen::half>)
    return static_cast<Scalar>(static_cast<float>(x));
  else return static_cast<Scalar>(x);
}

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"  // SIMD types as template arguments, as Eigen does
#endif
/// One packet of floats widened from P stored entries (the micro-kernel's B operand): a plain load
/// for floats, and by instructions for BF16 (a shift), F16 (F16C) and int8 where the instruction
/// set has them, else entry by entry.
template <class Packet, class Stored>
inline Packet load_widened(const Stored* p) {
  using namespace Eigen::internal;
  using Scalar = typename unpacket_traits<Packet>::type;
  if constexpr (std::is_same_v<Stored, Scalar>) {
    return ploadu<Packet>(p);
  } else {
    static_assert(std::is_same_v<Scalar, float>, "stored BF16, F16 and int8 widen to float");
    constexpr int P = unpacket_traits<Packet>::size;
#if defined(EIGEN_VECTORIZE_AVX512)
    if constexpr (P == 16) {
      if constexpr (std::is_same_v<Stored, Eigen::bfloat16>)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
      if constexpr (std::is_same_v<Stored, Eigen::half>) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      if constexpr (std::is_same_v<Stored, std::int8_t>)
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    }
#endif
#if defined(EIGEN_VECTORIZE_AVX2)
    if constexpr (P == 8) {
      if constexpr (std::is_same_v<Stored, Eigen::bfloat16>)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#if defined(__F16C__)
      if constexpr (std::is_same_v<Stored, Eigen::half>) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#endif
      if constexpr (std::is_same_v<Stored, std::int8_t>)
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    }
#endif
    alignas(64) float widened[static_cast<std::size_t>(P)];
    for (int i = 0; i < P; ++i) widened[i] = from_stored<float>(p[i]);
    return pload<Packet>(widened);
  }
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace detail
}  // namespace headwise
