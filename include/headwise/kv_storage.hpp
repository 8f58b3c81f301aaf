// How a KV cache stores its keys and values: as computed (float32 or float64), or in BF16, F16 or
// int8 with one float32 scale per token and key/value head (symmetric: x ≈ q scale, q in
// [-127, 127], scale = max |x| / 127). A key or value is converted once, when it is appended; the
// fused kernel reads what is stored and widens it to float in registers, so the forward over a
// prompt and decoding token by token attend to the same stored numbers and give the same bits.
// BF16, F16 and int8 are for float32 layers (a float64 layer stores what it computes).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

namespace headwise {

enum class KvStorage { as_computed, bf16, f16, int8 };

inline const char* storage_name(KvStorage s) {
  switch (s) {
    case KvStorage::as_computed: return "as computed";
    case KvStorage::bf16: return "BF16";
    case KvStorage::f16: return "F16";
    case KvStorage::int8: return "int8";
  }
  return "unknown";
}

namespace detail {

/// The element type a storage keeps for a layer computing in Scalar.
template <class Scalar, KvStorage S>
struct StoredTypeOf {
  using type = Scalar;
};
template <class Scalar>
struct StoredTypeOf<Scalar, KvStorage::bf16> {
  using type = Eigen::bfloat16;
};
template <class Scalar>
struct StoredTypeOf<Scalar, KvStorage::f16> {
  using type = Eigen::half;
};
template <class Scalar>
struct StoredTypeOf<Scalar, KvStorage::int8> {
  using type = std::int8_t;
};

/// Throws unless `storage` can hold what a layer computing in Scalar appends.
template <class Scalar>
void check_storage(KvStorage storage, const char* where) {
  if (storage != KvStorage::as_computed && !std::is_same_v<Scalar, float>)
    invalid(where, "keys and values in ", storage_name(storage), " are for float32 layers: a float64 layer stores them as computed");
}

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

/// The int8 scale of the values x (one token's head): max |x| / 127, 0 for all zeros.
template <class Derived>
float int8_scale(const Eigen::MatrixBase<Derived>& x) {
  const float largest = x.size() ? static_cast<float>(x.cwiseAbs().maxCoeff()) : 0.0f;
  return largest / 127.0f;
}
/// x / scale rounded to the nearest integer (ties to even), in [-127, 127].
inline std::int8_t quantize_int8(float x, float scale) {
  if (scale == 0.0f) return 0;
  const float q = std::nearbyint(x / scale);
  return static_cast<std::int8_t>(std::max(-127.0f, std::min(127.0f, q)));
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

/// Calls f(tag) with tag a value of StoredTypeOf<Scalar, storage> (a null pointer of it): the one
/// dispatch from a store's run-time storage to the kernel's compile-time one.
template <class Scalar, class F>
decltype(auto) with_stored_type(KvStorage storage, F&& f) {
  if constexpr (std::is_same_v<Scalar, float>) {
    if (storage == KvStorage::bf16) return f(static_cast<const Eigen::bfloat16*>(nullptr));
    if (storage == KvStorage::f16) return f(static_cast<const Eigen::half*>(nullptr));
    if (storage == KvStorage::int8) return f(static_cast<const std::int8_t*>(nullptr));
  }
  return f(static_cast<const Scalar*>(nullptr));
}

}  // namespace detail
}  // namespace headwise
