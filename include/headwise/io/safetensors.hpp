// Reading safetensors files (Hugging Face's checkpoint format) into Eigen matrices.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative to the end of the header),
// an optional "__metadata__" map of strings, then the raw little-endian row-major bytes.
// The file is validated as the format's reference implementation does before any tensor byte is
// read: header length <= 100,000,000 and inside the file, a JSON object, known dtypes, shape x
// dtype size equal to the byte range (overflow-checked), byte ranges contiguous, non-overlapping
// and inside the file. A bad file throws SafetensorsError naming the problem.
//
// SafetensorsFile::open maps the file read-only (POSIX mmap; elsewhere it reads it whole) and
// converts only the tensors asked for: opening a 500 MB checkpoint to take one layer's attention
// touches that layer's bytes, not the file. As with every memory-mapped reader (safetensors' own,
// llama.cpp's), the file must not be truncated while it is open: the system would signal a read
// past its new end (SIGBUS).
//
// This header needs nlohmann_json; the rest of headwise does not.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/platform.hpp"  // HEADWISE_POSIX: sys/mman.h
#include "headwise/detail/regular_file.hpp"
#include "headwise/stored_matrix.hpp"
#include "headwise/types.hpp"

namespace headwise::io {

/// A safetensors file that is malformed, unreadable, or asked for something it does not hold.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The element types of the format.
enum class Dtype { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

namespace detail {
struct DtypeEntry {
  Dtype dtype;
  const char* name;
  std::size_t size;
};
inline const std::vector<DtypeEntry>& dtype_table() {
  static const std::vector<DtypeEntry> table = {
      {Dtype::BOOL, "BOOL", 1}, {Dtype::U8, "U8", 1},     {Dtype::I8, "I8", 1},
      {Dtype::F8_E5M2, "F8_E5M2", 1}, {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::I16, "I16", 2},
      {Dtype::U16, "U16", 2},   {Dtype::F16, "F16", 2},   {Dtype::BF16, "BF16", 2},
      {Dtype::I32, "I32", 4},   {Dtype::U32, "U32", 4},   {Dtype::F32, "F32", 4},
      {Dtype::I64, "I64", 8},   {Dtype::U64, "U64", 8},   {Dtype::F64, "F64", 8}};
  return table;
}
}  // namespace detail

/// "F32", "BF16", ...
inline const char* dtype_name(Dtype dtype) {
  for (const auto& e : detail::dtype_table())
    if (e.dtype == dtype) return e.name;
  return "?";
}
/// Bytes per element.
inline std::size_t dtype_size(Dtype dtype) {
  for (const auto& e : detail::dtype_table())
    if (e.dtype == dtype) return e.size;
  return 0;
}
/// How a read treats FP8 (F8_E4M3, F8_E5M2) tensors: their stored values are a quantized weight's,
/// meaningful only with its scales, so reads refuse them unless the caller applies the scales
/// itself and asks for the values as stored (each exact in float).
enum class Fp8 { refuse, as_stored };

/// The dtype a header names, or nothing if the name is unknown.
inline std::optional<Dtype> parse_dtype(const std::string& name) {
  for (const auto& e : detail::dtype_table())
    if (name == e.name) return e.dtype;
  return std::nullopt;
}

/// One tensor's entry in the header.
struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::uint64_t> shape;
  std::uint64_t elements = 0;  ///< product of the shape (1 for a scalar)
  std::uint64_t begin = 0;     ///< byte range [begin, end) inside the data section
  std::uint64_t end = 0;
};

namespace detail {

/// An 8-bit float with `mantissa_bits` (3: E4M3, 2: E5M2) and the rest exponent (bias 7 or 15),
/// exactly in float (every value is exact there). E4M3 as OCP's e4m3fn and PyTorch's
/// float8_e4m3fn: no infinities, S.1111.111 is NaN, max 448; E5M2 as IEEE: S.11111.00 is inf,
/// S.11111.xx NaN. Exponent 0 is subnormal: mantissa 2^(1 - bias - mantissa_bits).
inline float fp8_to_float(std::uint8_t byte, int mantissa_bits) {
  const int exponent_bits = 7 - mantissa_bits, bias = (1 << (exponent_bits - 1)) - 1;
  const int exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1), mantissa = byte & ((1 << mantissa_bits) - 1);
  const float sign = (byte & 0x80u) ? -1.0f : 1.0f;
  const int top = (1 << exponent_bits) - 1;
  if (mantissa_bits == 3 && exponent == top && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  if (mantissa_bits == 2 && exponent == top)
    return mantissa == 0 ? sign * std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), 1 - bias - mantissa_bits);
  return sign * std::ldexp(static_cast<float>(mantissa + (1 << mantissa_bits)), exponent - bias - mantissa_bits);
}

/// fp8_to_float's 256 values of each format (mantissa_bits 3: E4M3, 2: E5M2), computed once:
/// a tensor's entries are read by lookup.
inline const std::array<float, 256>& fp8_values(int mantissa_bits) {
  static const std::array<std::array<float, 256>, 2> table = [] {
    std::array<std::array<float, 256>, 2> t{};
    for (unsigned c = 0; c < 256; ++c) t[0][c] = fp8_to_float(static_cast<std::uint8_t>(c), 2), t[1][c] = fp8_to_float(static_cast<std::uint8_t>(c), 3);
    return t;
  }();
  return table[mantissa_bits == 3 ? 1 : 0];
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // normal: rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal half: shift the mantissa up until its leading 1 is the implicit bit.
    exponent = 113u;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline float bfloat16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class T>
T load(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);  // the data section need not be aligned
  return value;
}

inline bool host_is_little_endian() {
  const std::uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

/// a * b, or nothing if it overflows 64 bits.
inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return std::nullopt;
  return a * b;
}

inline std::string shape_string(const std::vector<std::uint64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

/// The bytes of a file, read-only: a memory mapping, or a buffer. Shared by the copies of a
/// SafetensorsFile; the mapping is released with the last of them.
struct Bytes {
  std::shared_ptr<const void> owner;  // keeps the mapping or the buffer alive
  const unsigned char* data = nullptr;
  std::size_t size = 0;
};

inline Bytes bytes_of(std::vector<unsigned char> buffer) {
  auto owned = std::make_shared<const std::vector<unsigned char>>(std::move(buffer));
  return {owned, owned->data(), owned->size()};
}

inline std::string system_error_text() { return std::strerror(errno); }

#if HEADWISE_POSIX
/// Maps the regular file at `path` read-only. A directory, a pipe, a device or a file that cannot
/// be opened or mapped throws SafetensorsError (detail/regular_file.hpp).
inline Bytes map_file(const std::string& path) {
  headwise::detail::RegularFile file;
  headwise::detail::open_regular<SafetensorsError>(path, "headwise: safetensors: ", headwise::detail::any_file_size, file);
  if (file.size == 0) return {};  // mmap refuses a length of 0; an empty file is refused by the parser
  void* mapped = ::mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (mapped == MAP_FAILED) throw SafetensorsError("headwise: safetensors: cannot map " + path + ": " + system_error_text());
  // The mapping keeps the file's pages reachable once the descriptor is closed.
  std::shared_ptr<const void> owner(mapped, [size = file.size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  return {owner, static_cast<const unsigned char*>(mapped), file.size};
}
#else
/// Reads the regular file at `path` whole (where there is no mmap).
inline Bytes map_file(const std::string& path) {
  const std::string text = headwise::detail::read_regular_text<SafetensorsError>(path, "headwise: safetensors: ", headwise::detail::any_file_size);
  return bytes_of(std::vector<unsigned char>(text.begin(), text.end()));
}
#endif

/// The text of the regular file at `path`; throws SafetensorsError("headwise: <what>: ...").
inline std::string read_text(const std::string& path, const char* what) {
  return headwise::detail::read_regular_text<SafetensorsError>(path, std::string("headwise: ") + what + ": ", headwise::detail::any_file_size);
}

}  // namespace detail

/// A safetensors file, mapped (or read) and validated.
///   auto file = io::SafetensorsFile::open("model.safetensors");
///   Matrix<float> w = file.matrix<float>("h.0.attn.c_attn.weight");   // (768, 2304)

class SafetensorsFile {
 public:
  /// The largest header the format allows.
  static constexpr std::uint64_t max_header_length = 100000000;

  /// Maps the file at `path` read-only and validates its header; tensors are converted only
  /// when asked for. Copies of the returned object share the mapping.
  static SafetensorsFile open(const std::string& path) { return SafetensorsFile(detail::map_file(path), path); }

  /// Validates the bytes of a whole file held in memory; `name` is used in error messages.
  explicit SafetensorsFile(std::vector<unsigned char> bytes, std::string name = "<memory>")
      : SafetensorsFile(detail::bytes_of(std::move(bytes)), std::move(name)) {}

  const std::string& name() const { return name_; }
  /// The "__metadata__" map (empty if the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Tensor names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : tensors_) out.push_back(entry.first);
    return out;
  }
  bool contains(const std::string& tensor) const { return tensors_.count(tensor) != 0; }
  /// The header entry of `tensor`; throws SafetensorsError if there is none.
  const TensorInfo& info(const std::string& tensor) const {
    const auto it = tensors_.find(tensor);
    if (it == tensors_.end()) fail("no tensor named \"" + tensor + "\"");
    return it->second;
  }

  /// All elements of `tensor`, row-major, converted to Scalar (float types and integers; FP8 only
  /// with Fp8::as_stored).
  template <class Scalar>
  std::vector<Scalar> values(const std::string& tensor, Fp8 fp8 = Fp8::refuse) const {
    const TensorInfo& t = info(tensor);
    std::vector<Scalar> out(static_cast<std::size_t>(t.elements));
    convert(t, out.data(), 0, std::numeric_limits<std::uint64_t>::max(), fp8);
    return out;
  }

  /// A tensor of rank 0, 1 or 2 as a matrix: [] -> 1x1, [c] -> 1xc, [r, c] -> rxc.
  /// Ranks above 2 are accepted when every leading dimension is 1 ([1, 1, r, c] -> rxc).
  template <class Scalar>
  Matrix<Scalar> matrix(const std::string& tensor, Fp8 fp8 = Fp8::refuse) const {
    const TensorInfo& t = info(tensor);
    std::size_t leading = 0;
    while (t.shape.size() - leading > 2 && t.shape[leading] == 1) ++leading;
    if (t.shape.size() - leading > 2)
      fail("tensor \"" + tensor + "\" has shape " + detail::shape_string(t.shape) +
           ", expected at most 2 dimensions");
    const Index rows = t.shape.size() - leading == 2 ? dimension(t, leading) : 1;
    const Index cols = t.shape.empty() ? 1 : dimension(t, t.shape.size() - 1);
    Matrix<Scalar> m(rows, cols);
    convert(t, m.data(), 0, std::numeric_limits<std::uint64_t>::max(), fp8);
    return m;
  }

  /// A 2-D `tensor` as a product in Scalar reads weights (stored_matrix.hpp): in place, sharing
  /// the file's bytes (its mapping), where it is stored as such a product reads it (F32, BF16,
  /// F16 for float; F64 for double) and aligned to its entry size; copied in that type where it is
  /// not aligned (a file whose header is not padded); else converted once (to F32, or F64). FP8 is
  /// refused here: it needs its block scales (the overload below, detail::TensorReader).
  template <class Scalar>
  StoredMatrix stored_matrix(const std::string& tensor) const {
    const TensorInfo& t = info(tensor);
    if (t.shape.size() != 2)
      fail("tensor \"" + tensor + "\" has shape " + detail::shape_string(t.shape) + ", expected a weight matrix [out, in]");
    const StoredShape shape{dimension(t, 0), dimension(t, 1)};
    const std::optional<WeightType> readable = read_in_place<Scalar>(t.dtype);
    const unsigned char* p = bytes_.data + data_begin_ + t.begin;
    if (!readable) return StoredMatrix::from(matrix<Scalar>(tensor), std::is_same_v<Scalar, float> ? WeightType::f32 : WeightType::f64);
    if (reinterpret_cast<std::uintptr_t>(p) % weight_type_size(*readable) == 0) return StoredMatrix::view(bytes_.owner, p, *readable, shape);
    // not aligned to its entries: the file's bytes copied as they are into an aligned buffer
    auto copy = std::make_shared<headwise::detail::AlignedBytes>(p, p + t.end - t.begin);
    const void* data = copy->data();
    return StoredMatrix::view(std::move(copy), data, *readable, shape);
  }
  /// A 2-D FP8 `tensor` (F8_E4M3, F8_E5M2) in place with its block scales, for a float product:
  /// every code checked once (a NaN or infinite one is refused by its position).
  StoredMatrix stored_matrix(const std::string& tensor, const BlockScales& scales) const {
    const TensorInfo& t = info(tensor);
    if (t.shape.size() != 2 || (t.dtype != Dtype::F8_E4M3 && t.dtype != Dtype::F8_E5M2))
      fail("tensor \"" + tensor + "\" is " + dtype_name(t.dtype) + " " + detail::shape_string(t.shape) + ", expected an FP8 weight matrix [out, in]");
    const WeightType type = t.dtype == Dtype::F8_E4M3 ? WeightType::f8_e4m3 : WeightType::f8_e5m2;
    try {
      return StoredMatrix::view(bytes_.owner, bytes_.data + data_begin_ + t.begin, type, {dimension(t, 0), dimension(t, 1)}, scales);
    } catch (const std::invalid_argument& e) {
      fail("tensor \"" + tensor + "\": " + e.what());
    }
  }
  /// Matrix `index` of the MXFP4 tensors `blocks` U8 [count, out, in / 32, 16] (in this file) and
  /// `scales` U8 [count, out, in / 32] (in `scale_file`, which may be this one: shards split where
  /// they like), gpt-oss's experts, in place: an [out, in] StoredMatrix (view_mxfp4) keeping both
  /// files' bytes alive.
  StoredMatrix mxfp4_matrix(const std::string& blocks, const SafetensorsFile& scale_file, const std::string& scales, Index index) const {
    const TensorInfo &b = info(blocks), &s = scale_file.info(scales);
    if (b.dtype != Dtype::U8 || b.shape.size() != 4 || b.shape[3] != 16)
      fail("tensor \"" + blocks + "\" is " + dtype_name(b.dtype) + " " + detail::shape_string(b.shape) + ", expected MXFP4 blocks U8 [count, out, in / 32, 16]");
    if (s.dtype != Dtype::U8 || s.shape != std::vector<std::uint64_t>{b.shape[0], b.shape[1], b.shape[2]})
      fail("tensor \"" + scales + "\" is " + dtype_name(s.dtype) + " " + detail::shape_string(s.shape) + ", expected U8 " +
           detail::shape_string({b.shape[0], b.shape[1], b.shape[2]}) + ": a scale per block of \"" + blocks + "\"");
    if (index < 0 || static_cast<std::uint64_t>(index) >= b.shape[0])
      fail("matrix " + std::to_string(index) + " of tensor \"" + blocks + "\" is out of range [0, " + std::to_string(b.shape[0]) + ")");
    const Index out = dimension(b, 1), groups = dimension(b, 2);
    if (groups > std::numeric_limits<Index>::max() / headwise::detail::mxfp4_block)
      fail("tensor \"" + blocks + "\" has " + std::to_string(groups) + " blocks a row: too many");
    const StoredShape shape{out, groups * headwise::detail::mxfp4_block};
    const std::uint64_t code_bytes = b.elements / b.shape[0], scale_bytes = s.elements / s.shape[0];
    std::shared_ptr<const void> owner = bytes_.owner;
    if (scale_file.bytes_.owner != bytes_.owner)
      owner = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(bytes_.owner, scale_file.bytes_.owner);
    try {
      return StoredMatrix::view_mxfp4(std::move(owner), bytes_.data + data_begin_ + b.begin + std::uint64_t(index) * code_bytes,
                                      scale_file.bytes_.data + scale_file.data_begin_ + s.begin + std::uint64_t(index) * scale_bytes, shape);
    } catch (const std::invalid_argument& e) {
      fail("tensor \"" + scales + "\", matrix " + std::to_string(index) + ": " + e.what());
    }
  }
  /// The weight type a product in Scalar reads `dtype` as, in place; none: it must be converted.
  template <class Scalar>
  static std::optional<WeightType> read_in_place(Dtype dtype) {
    if constexpr (std::is_same_v<Scalar, float>) {
      if (dtype == Dtype::F32) return WeightType::f32;
      if (dtype == Dtype::BF16) return WeightType::bf16;
      if (dtype == Dtype::F16) return WeightType::f16;
    } else if (dtype == Dtype::F64) {
      return WeightType::f64;
    }
    return std::nullopt;
  }

  /// A 1-D tensor [c] as a row vector (1, c).
  template <class Scalar>
  RowVector<Scalar> row_vector(const std::string& tensor) const {
    const TensorInfo& t = info(tensor);
    if (t.shape.size() != 1)
      fail("tensor \"" + tensor + "\" has shape " + detail::shape_string(t.shape) +
           ", expected 1 dimension");
    RowVector<Scalar> v(dimension(t, 0));
    convert(t, v.data());
    return v;
  }

  /// Slice `index` of a 3-D tensor [s, r, c] as an (r, c) matrix, e.g. one head of [heads, T, d].
  template <class Scalar>
  Matrix<Scalar> slice(const std::string& tensor, Index index) const {
    const TensorInfo& t = info(tensor);
    if (t.shape.size() != 3)
      fail("tensor \"" + tensor + "\" has shape " + detail::shape_string(t.shape) +
           ", expected 3 dimensions");
    if (index < 0 || static_cast<std::uint64_t>(index) >= t.shape[0])
      fail("slice " + std::to_string(index) + " of tensor \"" + tensor + "\" is out of range [0, " +
           std::to_string(t.shape[0]) + ")");
    const Index rows = dimension(t, 1), cols = dimension(t, 2);
    Matrix<Scalar> m(rows, cols);
    if (m.size() == 0) return m;  // rows x cols <= elements / shape[0]: no product below overflows
    convert(t, m.data(), static_cast<std::uint64_t>(index) * static_cast<std::uint64_t>(m.size()),
            static_cast<std::uint64_t>(m.size()));
    return m;
  }

 private:
  SafetensorsFile(detail::Bytes bytes, std::string name) : bytes_(std::move(bytes)), name_(std::move(name)) { parse(); }

  /// Dimension i of t as an Eigen index; a dimension past 2^63 - 1 (legal in the format when
  /// another dimension is 0) cannot be one, and is refused.
  Index dimension(const TensorInfo& t, std::size_t i) const {
    if (t.shape[i] > static_cast<std::uint64_t>(std::numeric_limits<Index>::max()))
      fail("tensor \"" + t.name + "\" has shape " + detail::shape_string(t.shape) + ": dimension " +
           std::to_string(t.shape[i]) + " is larger than a matrix can have");
    return static_cast<Index>(t.shape[i]);
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw SafetensorsError("headwise: safetensors: " + name_ + ": " + what);
  }

  void parse();

  /// Throws unless the tensors' byte ranges tile the data section of `data_size` bytes: each starts
  /// where the previous one ended and holds its shape times its dtype's size.
  void check_tiling(std::uint64_t data_size) const;

  void read_metadata(const nlohmann::json& value);

  std::uint64_t read_unsigned(const std::string& tensor, const char* field, const nlohmann::json& v) const;

  TensorInfo read_entry(const std::string& name, const nlohmann::json& entry) const;

  /// Converts elements [first, first + count) of t (all of them by default) to Scalar; one
  /// switch on the dtype, then a plain loop.
  template <class Scalar>
  void convert(const TensorInfo& t, Scalar* out, std::uint64_t first = 0,
               std::uint64_t count = std::numeric_limits<std::uint64_t>::max(), Fp8 fp8 = Fp8::refuse) const {
    if ((t.dtype == Dtype::F8_E4M3 || t.dtype == Dtype::F8_E5M2) && fp8 == Fp8::refuse)
      fail("tensor \"" + t.name + "\" is " + dtype_name(t.dtype) + ": FP8 values are block-scaled weights, read with their "
           "weight_scale_inv by the attention loaders (quantization_config), not as they are stored");
    const unsigned char* p = bytes_.data + data_begin_ + t.begin + first * dtype_size(t.dtype);
    const auto n = static_cast<std::size_t>(std::min(count, t.elements - first));
    auto each = [&](auto decode) {
      const std::size_t size = dtype_size(t.dtype);
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<Scalar>(decode(p + i * size));
    };
    using detail::load;
    switch (t.dtype) {
      case Dtype::F64: return each([](const unsigned char* q) { return load<double>(q); });
      case Dtype::F32: return each([](const unsigned char* q) { return load<float>(q); });
      case Dtype::F16: return each([](const unsigned char* q) { return detail::half_to_float(load<std::uint16_t>(q)); });
      case Dtype::BF16: return each([](const unsigned char* q) { return detail::bfloat16_to_float(load<std::uint16_t>(q)); });
      case Dtype::BOOL: return each([](const unsigned char* q) { return *q != 0 ? 1 : 0; });
      case Dtype::U8: return each([](const unsigned char* q) { return *q; });
      case Dtype::I8: return each([](const unsigned char* q) { return load<std::int8_t>(q); });
      case Dtype::I16: return each([](const unsigned char* q) { return load<std::int16_t>(q); });
      case Dtype::U16: return each([](const unsigned char* q) { return load<std::uint16_t>(q); });
      case Dtype::I32: return each([](const unsigned char* q) { return load<std::int32_t>(q); });
      case Dtype::U32: return each([](const unsigned char* q) { return load<std::uint32_t>(q); });
      case Dtype::I64: return each([](const unsigned char* q) { return load<std::int64_t>(q); });
      case Dtype::U64: return each([](const unsigned char* q) { return load<std::uint64_t>(q); });
      case Dtype::F8_E4M3: return each([&v = detail::fp8_values(3)](const unsigned char* q) { return v[*q]; });
      case Dtype::F8_E5M2: return each([&v = detail::fp8_values(2)](const unsigned char* q) { return v[*q]; });
    }
    fail("tensor \"" + t.name + "\" has dtype " + dtype_name(t.dtype) + ", which headwise cannot convert");
  }

  detail::Bytes bytes_;
  std::string name_;
  std::uint64_t data_begin_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace headwise::io

// This header's definitions, where they are compiled (detail/compiled.hpp):
#include HEADWISE_IO_DEFINITIONS_OF("headwise/io/definitions/safetensors.hpp")
