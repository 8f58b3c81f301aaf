// A weight matrix kept as a checkpoint stores it: [out, in] row-major (PyTorch's Linear layout),
// in F32, F64, BF16, F16, or FP8 (E4M3, E5M2) with a scale per block (DeepSeek-V3's 128 x 128
// weight_scale_inv), owned or read in place from memory someone else keeps alive (a mapped
// safetensors file). `times_transposed(x, w)` is x Wᵀ, each weight widened to float in registers
// as it is read (detail/row_dot_product.hpp), an FP8 one times its block's scale: a float layer
// streams the stored bytes, half of float32's for BF16, a quarter (and a scale per row and block
// of columns) for FP8; or MXFP4 (gpt-oss's experts: FP4 entries two to a byte, a power-of-two scale
// per 32, detail/mxfp4_products.hpp), about an eighth. A float64 product (the teaching and reference paths) reads F64 weights
// only: convert them once with `StoredMatrix::from`. How a product multiplies is the matrix's
// arithmetic (WeightArithmetic): widened, the default, or for MXFP4 stored, by integer products
// with the activations rounded to int8 per block of 32, as llama.cpp multiplies MXFP4
// (`w.with_arithmetic(WeightArithmetic::stored)`; detail/mxfp4_products.hpp states its rule).
//
//   auto w = headwise::StoredMatrix::from(w_out_in, headwise::WeightType::bf16);   // rounded once
//   Matrix<float> y = headwise::times_transposed<float>(x, w);                      // (n, out)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/mxfp4_products.hpp"
#include "headwise/detail/row_dot_product.hpp"
#include "headwise/detail/stored_numbers.hpp"
#include "headwise/types.hpp"

namespace headwise {
namespace detail {
/// Bytes aligned for the widest packet this build uses (EIGEN_MAX_ALIGN_BYTES: 64 with AVX-512, 32
/// with AVX2): a product's loads of a row then stay within cache lines.
using AlignedBytes = std::vector<unsigned char, Eigen::aligned_allocator<unsigned char>>;
}  // namespace detail

/// The type a StoredMatrix keeps its entries in.
enum class WeightType { f32, f64, bf16, f16, f8_e4m3, f8_e5m2, mxfp4 };

inline const char* weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::f32: return "F32";
    case WeightType::f64: return "F64";
    case WeightType::bf16: return "BF16";
    case WeightType::f16: return "F16";
    case WeightType::f8_e4m3: return "F8_E4M3";
    case WeightType::f8_e5m2: return "F8_E5M2";
    case WeightType::mxfp4: return "MXFP4";
  }
  return "unknown";
}

inline bool is_fp8(WeightType t) { return t == WeightType::f8_e4m3 || t == WeightType::f8_e5m2; }

/// How a product multiplies by a StoredMatrix: every entry widened to the computing type (the
/// default: the bits of the same product over the widened matrix), or in the stored type's own
/// arithmetic, which MXFP4 has (integer products with the activations rounded to int8 per block of
/// 32: detail/mxfp4_products.hpp) and the other types do not yet.
enum class WeightArithmetic { widened, stored };

inline const char* weight_arithmetic_name(WeightArithmetic a) { return a == WeightArithmetic::widened ? "widened" : "stored"; }

/// Bytes per entry (MXFP4: 1, the alignment its bytes need; an entry takes half of one).
inline std::size_t weight_type_size(WeightType t) {
  return t == WeightType::f64 ? 8 : t == WeightType::f32 ? 4 : is_fp8(t) || t == WeightType::mxfp4 ? 1 : 2;
}

/// The shape of a stored matrix: out rows of in entries.
struct StoredShape {
  Index rows = 0, cols = 0;
};

/// The scales of an FP8 matrix: entry (i, j) is its code's value times grid(i / block_rows, j /
/// block_cols), the grid [ceil(rows / block_rows), ceil(cols / block_cols)] (edge blocks partial),
/// as DeepSeek-V3's checkpoints and Hugging Face's FineGrainedFP8Config store weight_scale_inv.
/// block_cols is a multiple of 16 (a packet of entries never straddles two blocks).
struct BlockScales {
  Matrix<double> grid;
  Index block_rows = 128, block_cols = 128;

  /// The scales of rows [first, first + count) of the matrix, a grid row per row (block_rows 1):
  /// rows split from a fused tensor, or taken in another order, keep theirs.
  BlockScales rows(Index first, Index count) const {
    if (first < 0 || count < 0 || block_rows <= 0 || (first + count > 0 && (first + count - 1) / block_rows >= grid.rows()))
      detail::invalid("BlockScales::rows", "rows ", first, " .. ", first + count, " of a grid of ", grid.rows(), " blocks of ", block_rows);
    BlockScales r{Matrix<double>(count, grid.cols()), 1, block_cols};
    for (Index i = 0; i < count; ++i) r.grid.row(i) = grid.row((first + i) / block_rows);
    return r;
  }
};

/// The scales of matrices stacked by rows (W_Q | W_K | W_V), each part's given a grid row per row
/// (BlockScales::rows), all of one block width.
inline BlockScales stacked(const std::vector<BlockScales>& parts) {
  Index rows = 0;
  for (const BlockScales& p : parts) {
    if (p.block_rows != 1 || p.block_cols != parts.front().block_cols || p.grid.cols() != parts.front().grid.cols())
      detail::invalid("stacked", "scales of blocks ", p.block_rows, " x ", p.block_cols, " (", p.grid.cols(), " per row) beside ",
                      parts.front().block_rows, " x ", parts.front().block_cols, ": give each part a scale per row of one block width");
    rows += p.grid.rows();
  }
  BlockScales s{Matrix<double>(rows, parts.empty() ? 0 : parts.front().grid.cols()), 1, parts.empty() ? 16 : parts.front().block_cols};
  Index at = 0;
  for (const BlockScales& p : parts) s.grid.middleRows(at, p.grid.rows()) = p.grid, at += p.grid.rows();
  return s;
}

class StoredMatrix {
 public:
  StoredMatrix() = default;

  /// m's entries converted to `type` (BF16 and F16 rounded to nearest even), owned. An entry that
  /// is not finite, or would not be in `type` (F16 beyond 65504), is refused by its position. FP8
  /// needs its block scales: the overload below.
  template <class Derived>
  static StoredMatrix from(const Eigen::MatrixBase<Derived>& m, WeightType type) {
    if (is_fp8(type)) detail::invalid("StoredMatrix::from", weight_type_name(type), " entries need their block scales (BlockScales)");
    if (type == WeightType::mxfp4) detail::invalid("StoredMatrix::from", "MXFP4 is read as a checkpoint stores it (StoredMatrix::view_mxfp4)");
    StoredMatrix s;
    s.type_ = type, s.shape_ = {m.rows(), m.cols()};
    auto bytes = std::make_shared<detail::AlignedBytes>(std::size_t(m.size()) * weight_type_size(type));
    unsigned char* out = bytes->data();
    const auto put = [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!detail::is_fp8_entry<T>)
        for (Index r = 0; r < m.rows(); ++r)
          for (Index c = 0; c < m.cols(); ++c) {
            const double v = static_cast<double>(m(r, c));
            const T x = detail::to_stored<T>(v);
            if (!std::isfinite(v)) detail::invalid("StoredMatrix::from", "entry (", r, ", ", c, ") is ", v, ", not a finite weight");
            if (!std::isfinite(detail::from_stored<double>(x)))
              detail::invalid("StoredMatrix::from", "entry (", r, ", ", c, ") = ", v, " is beyond ", weight_type_name(type), "'s largest value");
            std::memcpy(out + (std::size_t(r) * std::size_t(m.cols()) + std::size_t(c)) * sizeof(T), &x, sizeof(T));
          }
    };
    with_entry_type(type, put);
    s.data_ = bytes->data(), s.owner_ = std::move(bytes);
    return s;
  }

  /// m's entries in FP8 `type` with `scales`: m(i, j) / its block's scale rounded to the nearest
  /// code (ties to even), owned. Exact for a matrix that is an FP8 one times these scales (a
  /// checkpoint's weights widened); a quotient beyond the type's largest value is refused.
  template <class Derived>
  static StoredMatrix from(const Eigen::MatrixBase<Derived>& m, WeightType type, const BlockScales& scales) {
    StoredMatrix s;
    s.type_ = type, s.shape_ = {m.rows(), m.cols()};
    s.set_scales(scales, "StoredMatrix::from");
    auto bytes = std::make_shared<detail::AlignedBytes>(std::size_t(m.size()));
    // Rows in runs of 64 on the default threads, each run a scale block of columns at a time (a
    // transposed m is then read a few lines a column); an entry beyond the type is refused by the
    // first such entry in row order, whatever the threads.
    constexpr Index run = 64;
    const Index runs = (m.rows() + run - 1) / run, width = scales.block_cols;
    std::vector<Index> refused(static_cast<std::size_t>(runs), -1);  // each run's first refused entry, r cols + c
    with_fp8_type(type, [&](auto tag) {
      using T = decltype(tag);
      detail::parallel_for<detail::Schedule::next_free>(detail::thread_count(0, "StoredMatrix::from"), runs, [&](Index k) {
        Index& first = refused[std::size_t(k)];
        for (Index c0 = 0; c0 < m.cols(); c0 += width)
          for (Index r = k * run; r < std::min(m.rows(), (k + 1) * run); ++r) {
            const double scale = scales.grid(r / scales.block_rows, c0 / width);
            for (Index c = c0; c < std::min(m.cols(), c0 + width); ++c) {
              const double q = static_cast<double>(m(r, c)) / scale;
              const bool near = std::fabs(q) <= 2 * detail::fp8_max<T>;  // (NaN and infinity not)
              const T x = detail::fp8_nearest<T>(near ? q : 0.0);
              if (!near || !(std::fabs(detail::from_stored<double>(x)) * detail::fp8_reading_factor<T> <= detail::fp8_max<T>)) {
                if (first < 0 || r * m.cols() + c < first) first = r * m.cols() + c;
                continue;
              }
              (*bytes)[std::size_t(r) * std::size_t(m.cols()) + std::size_t(c)] = x.bits;
            }
          }
      });
      for (const Index at : refused)
        if (at >= 0) {
          const Index r = at / m.cols(), c = at % m.cols();
          detail::invalid("StoredMatrix::from", "entry (", r, ", ", c, ") over its block's scale is ",
                          static_cast<double>(m(r, c)) / scales.grid(r / scales.block_rows, c / scales.block_cols), ", beyond ",
                          weight_type_name(type), "'s largest value ", detail::fp8_max<T>);
        }
    });
    s.data_ = bytes->data(), s.owner_ = std::move(bytes);
    return s;
  }

  /// shape.rows x shape.cols entries of `type`, row-major at data, read in place for as long as
  /// owner lives. data must be aligned to the entry's size (the caller copies otherwise).
  static StoredMatrix view(std::shared_ptr<const void> owner, const void* data, WeightType type, StoredShape shape) {
    check_view(data, type, shape);
    if (is_fp8(type)) detail::invalid("StoredMatrix::view", weight_type_name(type), " entries need their block scales (BlockScales)");
    if (type == WeightType::mxfp4) detail::invalid("StoredMatrix::view", "MXFP4 entries need their scales (StoredMatrix::view_mxfp4)");
    StoredMatrix s;
    s.owner_ = std::move(owner), s.data_ = data, s.type_ = type, s.shape_ = shape;
    return s;
  }

  /// FP8 entries (`type` E4M3 or E5M2) read in place the same way, each times its block's scale.
  /// Every code is checked once: a NaN (or E5M2's infinity) is refused.
  static StoredMatrix view(std::shared_ptr<const void> owner, const void* data, WeightType type, StoredShape shape,
                           const BlockScales& scales) {
    if (!is_fp8(type)) detail::invalid("StoredMatrix::view", "block scales are for FP8 entries, not ", weight_type_name(type));
    check_view(data, type, shape);
    StoredMatrix s;
    s.owner_ = std::move(owner), s.data_ = data, s.type_ = type, s.shape_ = shape;
    s.set_scales(scales, "StoredMatrix::view");
    const auto* codes = static_cast<const std::uint8_t*>(data);
    const std::size_t n = std::size_t(shape.rows) * std::size_t(shape.cols);
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned magnitude = codes[i] & 0x7fu;  // NaN: E4M3's S.1111.111, E5M2's S.11111.xx (and its infinities)
      if (type == WeightType::f8_e4m3 ? magnitude == 0x7fu : magnitude >= 0x7cu)
        detail::invalid("StoredMatrix::view", "entry (", Index(i / std::size_t(shape.cols)), ", ", Index(i % std::size_t(shape.cols)), ") is ",
                        type == WeightType::f8_e4m3 || (magnitude & 3u) ? "NaN" : "infinite", " (", weight_type_name(type), " code ", unsigned(codes[i]), ")");
    }
    return s;
  }

  /// MXFP4 entries read in place as gpt-oss's checkpoints store them (`*_blocks`, `*_scales`): row
  /// r's shape.cols / 2 bytes at codes + r cols / 2 (entry 2j in byte j's low nibble, 2j + 1 in its
  /// high one), its shape.cols / 32 scale bytes at scales + r cols / 32. cols must be a multiple of
  /// 32; every scale byte is checked once: one past 252 (a block beyond float's range, 255 the
  /// spec's NaN) is refused by its position.
  static StoredMatrix view_mxfp4(std::shared_ptr<const void> owner, const void* codes, const void* scales, StoredShape shape) {
    check_view(codes, WeightType::mxfp4, shape);
    if (shape.cols % detail::mxfp4_block != 0)
      detail::invalid("StoredMatrix::view_mxfp4", shape.cols, " columns: MXFP4 rows are whole blocks of ", detail::mxfp4_block);
    if (scales == nullptr && shape.rows > 0 && shape.cols > 0) detail::invalid("StoredMatrix::view_mxfp4", "no scales");
    const auto* s = static_cast<const std::uint8_t*>(scales);
    const Index per_row = shape.cols / detail::mxfp4_block;
    for (Index i = 0; i < shape.rows * per_row; ++i)
      if (s[i] > detail::mxfp4_largest_scale)
        detail::invalid("StoredMatrix::view_mxfp4", "the scale of row ", i / per_row, ", block ", i % per_row, " is 2^(", int(s[i]), " - 127)",
                        s[i] == 255 ? " (255: NaN in the MX spec)" : "", ": beyond float's range");
    StoredMatrix m;
    m.owner_ = std::move(owner), m.data_ = codes, m.type_ = WeightType::mxfp4, m.shape_ = shape, m.exponents_ = s;
    return m;
  }

  Index rows() const { return shape_.rows; }
  Index cols() const { return shape_.cols; }
  WeightType type() const { return type_; }
  WeightArithmetic arithmetic() const { return arithmetic_; }
  /// The same entries (sharing these bytes) multiplied by `a`; stored is refused for a type that
  /// has no stored arithmetic (every type but MXFP4).
  StoredMatrix with_arithmetic(WeightArithmetic a) const {
    if (a == WeightArithmetic::stored && type_ != WeightType::mxfp4)
      detail::invalid("StoredMatrix::with_arithmetic", weight_type_name(type_),
                      " weights have no stored arithmetic in headwise (MXFP4 has one: its codes times the activations rounded to int8)");
    StoredMatrix m = *this;
    m.arithmetic_ = a;
    return m;
  }
  const void* data() const { return data_; }
  /// The bytes a product reads: the entries, and an FP8 matrix's float scale per row and block of
  /// columns (MXFP4: half a byte per entry, a byte per 32).
  std::size_t bytes() const {
    if (type_ == WeightType::mxfp4) return std::size_t(shape_.rows) * std::size_t(shape_.cols / 2 + shape_.cols / detail::mxfp4_block);
    return std::size_t(shape_.rows) * (std::size_t(shape_.cols) * weight_type_size(type_) + std::size_t(scale_blocks()) * sizeof(float));
  }

  /// Rows [first, first + count), sharing these bytes (Phi-3's fused gate_up_proj: its halves).
  StoredMatrix middle_rows(Index first, Index count) const {
    if (first < 0 || count < 0 || first + count > shape_.rows)
      detail::invalid("StoredMatrix::middle_rows", "rows ", first, " .. ", first + count, " of a matrix of ", shape_.rows, " rows");
    StoredMatrix s = *this;
    if (type_ == WeightType::mxfp4) {
      s.data_ = static_cast<const unsigned char*>(data_) + std::size_t(first) * std::size_t(shape_.cols / 2);
      s.exponents_ = exponents_ + first * (shape_.cols / detail::mxfp4_block);
      s.shape_.rows = count;
      return s;
    }
    s.data_ = static_cast<const unsigned char*>(data_) + std::size_t(first) * std::size_t(shape_.cols) * weight_type_size(type_);
    s.shape_.rows = count;
    if (scales_) s.scale_rows_ = scale_rows_ + first * scale_blocks();
    return s;
  }

  /// The entries widened to Scalar, in a new matrix (for inspection and the reference paths).
  template <class Scalar>
  Matrix<Scalar> to_matrix() const {
    Matrix<Scalar> m(shape_.rows, shape_.cols);
    widen(0, m.size(), m.data());
    return m;
  }
  /// Columns [first, first + count) of every row widened to Scalar (head h's block of W_O).
  template <class Scalar>
  Matrix<Scalar> columns(Index first, Index count) const {
    if (first < 0 || count < 0 || first + count > shape_.cols)
      detail::invalid("StoredMatrix::columns", "columns ", first, " .. ", first + count, " of a matrix of ", shape_.cols, " columns");
    Matrix<Scalar> m(shape_.rows, count);
    for (Index i = 0; i < shape_.rows; ++i) widen(i * shape_.cols + first, count, m.row(i).data());
    return m;
  }
  /// Row i widened to Scalar (an embedding's row, an unembedding's column of W_U).
  template <class Scalar>
  RowVector<Scalar> row(Index i) const {
    if (i < 0 || i >= shape_.rows) detail::invalid("StoredMatrix::row", "row ", i, " of a matrix of ", shape_.rows, " rows");
    RowVector<Scalar> r(shape_.cols);
    widen(i * shape_.cols, shape_.cols, r.data());
    return r;
  }

  /// An FP8 matrix's scales as a product reads them (detail::RowScales: one float per row and
  /// block of columns, times fp8_reading_factor); empty for the other types.
  detail::RowScales row_scales() const { return {scale_rows_, scale_blocks(), scales_ ? block_cols_ : 0}; }
  /// An MXFP4 matrix's codes and scales as its product reads them.
  detail::Mxfp4Rows mxfp4_rows() const {
    return {static_cast<const std::uint8_t*>(data_), exponents_, shape_.rows, shape_.cols, shape_.cols / 2, shape_.cols / detail::mxfp4_block};
  }

  /// Calls f(T{}) with T the C++ type of `type`'s entries (MXFP4 has none: two entries to a byte).
  template <class F>
  static void with_entry_type(WeightType type, F&& f) {
    switch (type) {
      case WeightType::mxfp4: detail::invalid("StoredMatrix", "MXFP4 entries are two to a byte: no C++ type holds one");
      case WeightType::f32: return f(float{});
      case WeightType::f64: return f(double{});
      case WeightType::bf16: return f(Eigen::bfloat16{});
      case WeightType::f16: return f(Eigen::half{});
      case WeightType::f8_e4m3: return f(detail::Fp8E4M3{});
      case WeightType::f8_e5m2: return f(detail::Fp8E5M2{});
    }
  }

 private:
  template <class F>
  static void with_fp8_type(WeightType type, F&& f) {
    if (type == WeightType::f8_e4m3) return f(detail::Fp8E4M3{});
    if (type == WeightType::f8_e5m2) return f(detail::Fp8E5M2{});
    detail::invalid("StoredMatrix", "block scales are for FP8 entries, not ", weight_type_name(type));
  }
  /// A view's shape, size and data pointer checked (not its bytes).
  static void check_view(const void* data, WeightType type, StoredShape shape) {
    if (shape.rows < 0 || shape.cols < 0) detail::invalid("StoredMatrix::view", "a negative shape (", shape.rows, " x ", shape.cols, ")");
    if (shape.cols > 0 && std::size_t(shape.rows) > std::numeric_limits<std::size_t>::max() / weight_type_size(type) / std::size_t(shape.cols))
      detail::invalid("StoredMatrix::view", shape.rows, " x ", shape.cols, " entries of ", weight_type_name(type), " overflow a size");
    if (data == nullptr && shape.rows > 0 && shape.cols > 0)
      detail::invalid("StoredMatrix::view", "no data for ", shape.rows, " x ", shape.cols, " entries");
    if (reinterpret_cast<std::uintptr_t>(data) % weight_type_size(type) != 0)
      detail::invalid("StoredMatrix::view", "the ", weight_type_name(type), " entries are not aligned to their size");
  }
  Index scale_blocks() const { return scales_ ? (shape_.cols + block_cols_ - 1) / block_cols_ : 0; }

  /// Each row's scales from the grid in float32, times the reading factor (exact: a power of two), checked.
  void set_scales(const BlockScales& b, const char* where) {
    if (b.block_rows <= 0 || b.block_cols <= 0 || b.block_cols % 16 != 0)
      detail::invalid(where, "blocks of ", b.block_rows, " x ", b.block_cols, ": the rows must be > 0 and the columns a multiple of 16");
    const Index grid_rows = (shape_.rows + b.block_rows - 1) / b.block_rows, grid_cols = (shape_.cols + b.block_cols - 1) / b.block_cols;
    if (b.grid.rows() != grid_rows || b.grid.cols() != grid_cols)
      detail::invalid(where, "the scale grid is ", b.grid.rows(), " x ", b.grid.cols(), ", expected ", grid_rows, " x ", grid_cols, " for ",
                      shape_.rows, " x ", shape_.cols, " entries in blocks of ", b.block_rows, " x ", b.block_cols);
    block_cols_ = b.block_cols;
    auto rows = std::make_shared<std::vector<float>>(std::size_t(shape_.rows) * std::size_t(grid_cols));
    with_fp8_type(type_, [&](auto tag) {
      const float factor = detail::fp8_reading_factor<decltype(tag)>;
      for (Index i = 0; i < shape_.rows; ++i)
        for (Index j = 0; j < grid_cols; ++j) {
          const double g = b.grid(i / b.block_rows, j);
          const float scale = static_cast<float>(g) * factor;
          if (!std::isfinite(scale))
            detail::invalid(where, "the scale (", i / b.block_rows, ", ", j, ") = ", g, " is not finite in float32 times ", factor);
          (*rows)[std::size_t(i) * std::size_t(grid_cols) + std::size_t(j)] = scale;
        }
    });
    scale_rows_ = rows->data(), scales_ = std::move(rows);
  }

  /// Entries [first, first + count) widened into out (an FP8 one times its scale, as a product does).
  template <class Scalar>
  void widen(Index first, Index count, Scalar* out) const {
    if (type_ == WeightType::mxfp4) {
      for (Index i = first; i < first + count; ++i)
        out[i - first] = static_cast<Scalar>(detail::mxfp4_entry(mxfp4_rows(), i / shape_.cols, i % shape_.cols));
      return;
    }
    with_entry_type(type_, [&](auto tag) {
      using T = decltype(tag);
      const unsigned char* in = static_cast<const unsigned char*>(data_) + std::size_t(first) * sizeof(T);
      for (Index i = 0; i < count; ++i) {
        T x;
        std::memcpy(&x, in + std::size_t(i) * sizeof(T), sizeof(T));
        if constexpr (detail::is_fp8_entry<T>) {
          const Index r = (first + i) / shape_.cols, c = (first + i) % shape_.cols;
          out[i] = static_cast<Scalar>(detail::from_stored<float>(x) * scale_rows_[r * scale_blocks() + c / block_cols_]);
        } else {
          out[i] = detail::from_stored<Scalar>(x);
        }
      }
    });
  }

  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  WeightType type_ = WeightType::f32;
  StoredShape shape_;
  std::shared_ptr<const std::vector<float>> scales_;  ///< FP8: a row's scales, scale_blocks() per row
  const float* scale_rows_ = nullptr;                 ///< (this matrix's first row's, in scales_)
  const std::uint8_t* exponents_ = nullptr;           ///< MXFP4: this matrix's first row's scale bytes
  Index block_cols_ = 0;
  WeightArithmetic arithmetic_ = WeightArithmetic::widened;
};

/// x Wᵀ: (x.rows(), w.rows()) for x (n, w.cols()), on `threads` threads (0: the default count).
/// Deterministic: a row of the result is the same bits whatever the other rows and the thread
/// count. Scalar float reads F32, BF16, F16, FP8 and MXFP4 weights; double reads F64 weights.
template <class Scalar>
Matrix<Scalar> times_transposed(const Eigen::Ref<const Matrix<Scalar>>& x, const StoredMatrix& w, int threads = 0) {
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>, "float or double");
  if (x.cols() != w.cols())
    detail::invalid("times_transposed", "x has ", x.cols(), " columns but the weight matrix has ", w.cols(), " (its in dimension)");
  const int parts = detail::thread_count(threads, "times_transposed");
  Matrix<Scalar> y(x.rows(), w.rows());
  const detail::RowMajorView<const Scalar> a{x.data(), x.rows(), x.cols(), x.outerStride()};
  const detail::RowMajorView<Scalar> c{y.data(), y.rows(), y.cols(), y.cols()};
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    const detail::RowMajorView<const T> b{static_cast<const T*>(w.data()), w.rows(), w.cols(), w.cols()};
    detail::row_dot_product<Scalar, T>(a, {b, w.row_scales()}, c, parts);
  };
  if constexpr (std::is_same_v<Scalar, double>) {
    if (w.type() != WeightType::f64)
      detail::invalid("times_transposed", "a float64 product reads F64 weights, not ", weight_type_name(w.type()),
                      " (convert them once: StoredMatrix::from(w.to_matrix<double>(), WeightType::f64))");
    run(double{});
  } else {
    switch (w.type()) {
      case WeightType::f32: run(float{}); break;
      case WeightType::bf16: run(Eigen::bfloat16{}); break;
      case WeightType::f16: run(Eigen::half{}); break;
      case WeightType::f8_e4m3: run(detail::Fp8E4M3{}); break;
      case WeightType::f8_e5m2: run(detail::Fp8E5M2{}); break;
      case WeightType::mxfp4:
        if (w.arithmetic() == WeightArithmetic::stored) detail::mxfp4_row_dot_stored(a, w.mxfp4_rows(), c, parts);
        else detail::mxfp4_row_dot(a, w.mxfp4_rows(), c, parts);
        break;
      case WeightType::f64:
        detail::invalid("times_transposed", "a float32 product reads F32, BF16, F16 or FP8 weights, not F64 (convert them once: StoredMatrix::from(w.to_matrix<float>(), WeightType::f32))");
    }
  }
  return y;
}

/// The compiled mode's instantiations (detail/compiled.hpp): the product by stored weights.
#define HEADWISE_STORED_MATRIX_INSTANTIATIONS(PREFIX, S) \
  PREFIX template Matrix<S> times_transposed<S>(const Eigen::Ref<const Matrix<S>>&, const StoredMatrix&, int);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_STORED_MATRIX_INSTANTIATIONS)

}  // namespace headwise
