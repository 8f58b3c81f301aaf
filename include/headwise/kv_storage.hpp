// How a KV cache stores its keys and values: as computed (float32 or float64), or in BF16, F16 or
// int8 with one float32 scale per token and key/value head (symmetric: x ≈ q scale, q in
// [-127, 127], scale = max |x| / 127). A key or value is converted once, when it is appended; the
// fused kernel reads what is stored and widens it to float in registers, so the forward over a
// prompt and decoding token by token attend to the same stored numbers and give the same bits.
// BF16, F16 and int8 are for float32 layers (a float64 layer stores what it computes).
//
// How the kernel multiplies by what is stored is the arithmetic (KvArithmetic): widened (the
// default and the reference: every stored entry widened to float32 in registers, then float
// multiply-adds) or stored: int8 keys and values by integer dot products, as the CPU's int8
// instructions (VNNI) compute them, BF16 ones by BF16 pair products accumulated in float32, as
// AVX512-BF16's vdpbf16ps computes them, F16 ones by chains of F16 multiply-adds, as AVX512-FP16's
// vfmadd231ph computes them, summed in float32 (detail/int8_products.hpp, detail/bf16_products.hpp
// and detail/f16_products.hpp say what is rounded, and how).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/stored_numbers.hpp"
#include "headwise/types.hpp"

namespace headwise {

enum class KvStorage { as_computed, bf16, f16, int8 };

/// How the fused kernel multiplies by stored keys and values (see the top of this file).
enum class KvArithmetic { widened, stored };

inline const char* arithmetic_name(KvArithmetic a) { return a == KvArithmetic::widened ? "widened" : "stored"; }

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

/// Which storages a dispatch (with_stored_type) compiles the kernel for: every one a store of
/// Scalar may hold, or as computed alone, for a store that the call packed itself (attend on
/// matrices): a file that calls only that compiles one stored type's kernel, not four.
struct AnyStorage {};
struct AsComputedOnly {};

/// Calls f(tag) with tag a value of StoredTypeOf<Scalar, storage> (a null pointer of it): the one
/// dispatch from a store's run-time storage to the kernel's compile-time one.
template <class Scalar, class Reach = AnyStorage, class F>
decltype(auto) with_stored_type(KvStorage storage, F&& f) {
  static_assert(std::is_same_v<Reach, AnyStorage> || std::is_same_v<Reach, AsComputedOnly>);
  if constexpr (std::is_same_v<Reach, AsComputedOnly>) {
    if (storage != KvStorage::as_computed)
      invalid("with_stored_type", "a store in ", storage_name(storage), " reached a call compiled for keys and values as computed only");
  } else if constexpr (std::is_same_v<Scalar, float>) {
    if (storage == KvStorage::bf16) return f(static_cast<const Eigen::bfloat16*>(nullptr));
    if (storage == KvStorage::f16) return f(static_cast<const Eigen::half*>(nullptr));
    if (storage == KvStorage::int8) return f(static_cast<const std::int8_t*>(nullptr));
  }
  return f(static_cast<const Scalar*>(nullptr));
}

}  // namespace detail
}  // namespace headwise
