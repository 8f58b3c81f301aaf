// A weight matrix kept as a checkpoint stores it: [out, in] row-major (PyTorch's Linear layout),
// in F32, F64, BF16 or F16, owned or read in place from memory someone else keeps alive (a mapped
// safetensors file). `times_transposed(x, w)` is x Wᵀ, each weight widened to float in registers
// as it is read (detail/row_dot_product.hpp): a float layer streams the stored bytes, half of
// float32's for BF16, and no widened copy is ever made. A float64 product (the teaching and
// reference paths) reads F64 weights only: convert them once with `StoredMatrix::from`.
//
//   auto w = headwise::StoredMatrix::from(w_out_in, headwise::WeightType::bf16);   // rounded once
//   Matrix<float> y = headwise::times_transposed<float>(x, w);                      // (n, out)
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/row_dot_product.hpp"
#include "headwise/detail/stored_numbers.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The type a StoredMatrix keeps its entries in.
enum class WeightType { f32, f64, bf16, f16 };

inline const char* weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::f32: return "F32";
    case WeightType::f64: return "F64";
    case WeightType::bf16: return "BF16";
    case WeightType::f16: return "F16";
  }
  return "unknown";
}

inline std::size_t weight_type_size(WeightType t) { return t == WeightType::f64 ? 8 : t == WeightType::f32 ? 4 : 2; }

/// The shape of a stored matrix: out rows of in entries.
struct StoredShape {
  Index rows = 0, cols = 0;
};

class StoredMatrix {
 public:
  StoredMatrix() = default;

  /// m's entries converted to `type` (BF16 and F16 rounded to nearest even), owned.
  template <class Derived>
  static StoredMatrix from(const Eigen::MatrixBase<Derived>& m, WeightType type) {
    StoredMatrix s;
    s.type_ = type, s.shape_ = {m.rows(), m.cols()};
    auto bytes = std::make_shared<std::vector<unsigned char>>(std::size_t(m.size()) * weight_type_size(type));
    unsigned char* out = bytes->data();
    const auto put = [&](auto tag) {
      using T = decltype(tag);
      for (Index r = 0; r < m.rows(); ++r)
        for (Index c = 0; c < m.cols(); ++c) {
          const T x = detail::to_stored<T>(static_cast<double>(m(r, c)));
          std::memcpy(out + (std::size_t(r) * std::size_t(m.cols()) + std::size_t(c)) * sizeof(T), &x, sizeof(T));
        }
    };
    with_entry_type(type, put);
    s.data_ = bytes->data(), s.owner_ = std::move(bytes);
    return s;
  }

  /// shape.rows x shape.cols entries of `type`, row-major at data, read in place for as long as
  /// owner lives. data must be aligned to the entry's size (the caller copies otherwise).
  static StoredMatrix view(std::shared_ptr<const void> owner, const void* data, WeightType type, StoredShape shape) {
    if (shape.rows < 0 || shape.cols < 0) detail::invalid("StoredMatrix::view", "a negative shape (", shape.rows, " x ", shape.cols, ")");
    if (shape.cols > 0 && std::size_t(shape.rows) > std::numeric_limits<std::size_t>::max() / weight_type_size(type) / std::size_t(shape.cols))
      detail::invalid("StoredMatrix::view", shape.rows, " x ", shape.cols, " entries of ", weight_type_name(type), " overflow a size");
    if (data == nullptr && shape.rows * shape.cols > 0) detail::invalid("StoredMatrix::view", "no data for ", shape.rows, " x ", shape.cols, " entries");
    if (reinterpret_cast<std::uintptr_t>(data) % weight_type_size(type) != 0)
      detail::invalid("StoredMatrix::view", "the ", weight_type_name(type), " entries are not aligned to their size");
    StoredMatrix s;
    s.owner_ = std::move(owner), s.data_ = data, s.type_ = type, s.shape_ = shape;
    return s;
  }

  Index rows() const { return shape_.rows; }
  Index cols() const { return shape_.cols; }
  WeightType type() const { return type_; }
  const void* data() const { return data_; }
  /// The bytes a product reads.
  std::size_t bytes() const { return std::size_t(shape_.rows) * std::size_t(shape_.cols) * weight_type_size(type_); }

  /// Rows [first, first + count), sharing these bytes (Phi-3's fused gate_up_proj: its halves).
  StoredMatrix middle_rows(Index first, Index count) const {
    if (first < 0 || count < 0 || first + count > shape_.rows)
      detail::invalid("StoredMatrix::middle_rows", "rows ", first, " .. ", first + count, " of a matrix of ", shape_.rows, " rows");
    StoredMatrix s = *this;
    s.data_ = static_cast<const unsigned char*>(data_) + std::size_t(first) * std::size_t(shape_.cols) * weight_type_size(type_);
    s.shape_.rows = count;
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

  /// Calls f(T{}) with T the C++ type of `type`'s entries.
  template <class F>
  static void with_entry_type(WeightType type, F&& f) {
    switch (type) {
      case WeightType::f32: return f(float{});
      case WeightType::f64: return f(double{});
      case WeightType::bf16: return f(Eigen::bfloat16{});
      case WeightType::f16: return f(Eigen::half{});
    }
  }

 private:
  /// Entries [first, first + count) widened into out.
  template <class Scalar>
  void widen(Index first, Index count, Scalar* out) const {
    with_entry_type(type_, [&](auto tag) {
      using T = decltype(tag);
      const unsigned char* in = static_cast<const unsigned char*>(data_) + std::size_t(first) * sizeof(T);
      for (Index i = 0; i < count; ++i) {
        T x;
        std::memcpy(&x, in + std::size_t(i) * sizeof(T), sizeof(T));
        out[i] = detail::from_stored<Scalar>(x);
      }
    });
  }

  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  WeightType type_ = WeightType::f32;
  StoredShape shape_;
};

/// x Wᵀ: (x.rows(), w.rows()) for x (n, w.cols()), on `threads` threads (0: the default count).
/// Deterministic: a row of the result is the same bits whatever the other rows and the thread
/// count. Scalar float reads F32, BF16 and F16 weights; double reads F64 weights.
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
    detail::row_dot_product<Scalar, T>(a, b, c, parts);
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
      case WeightType::f64:
        detail::invalid("times_transposed", "a float32 product reads F32, BF16 or F16 weights, not F64 (convert them once: StoredMatrix::from(w.to_matrix<float>(), WeightType::f32))");
    }
  }
  return y;
}

}  // namespace headwise
