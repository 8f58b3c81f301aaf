// PackedKeysValues: keys and values of n_kv_heads heads, stored in the layout the fused kernel
// multiplies by, with room for `capacity` tokens. The fused kernel reads them as they are, so a
// KV cache built on it costs no repacking per decoding step.
//
// Layout, per key/value head, in panels of W = detail::TileShape<Scalar>::lanes columns:
//   keys    Kᵀ in panels of W keys:         panel p = keys [pW, pW + W), d_head x W, row c = dim c
//   values  V in panels of W value columns: panel q = columns [qW, qW + W), capacity x W, row j = key j
// Appending token t writes column t % W of key panel t / W and row t of every value panel: no
// existing entry moves, so appending never reallocates. A store whose values are the first d_v
// columns of its keys (ValueStorage::key_prefix: multi-head latent attention's latent, which is
// both) keeps no value panels: the kernel reads the values out of the key panels. The numbers are
// stored as computed or in BF16, F16 or int8 (kv_storage.hpp), converted when appended.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kv_storage.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Where a store's values live: in their own panels, or in the keys, as each key's first d_v
/// components (the latent of multi-head latent attention is both key and value: stored once).
enum class ValueStorage { own, key_prefix };

/// How a store keeps what is appended: the values on their own or inside the keys, and the number
/// type (KvStorage: as computed, BF16, F16, int8 with a scale per token and head).
struct StoreFormat {
  ValueStorage values = ValueStorage::own;
  KvStorage storage = KvStorage::as_computed;
};

template <class Scalar>
class PackedKeysValues {
 public:
  static constexpr Index lanes = detail::TileShape<Scalar>::lanes;

  /// Room for `capacity` tokens of n_kv_heads heads, keys of width d_head and values of d_v (with
  /// ValueStorage::key_prefix, the keys' first d_v components, d_v <= d_head), stored as `format` says.
  PackedKeysValues(Index capacity, Index n_kv_heads, Index d_head, Index d_v, StoreFormat format = {})
      : capacity_(capacity), n_kv_heads_(n_kv_heads), d_head_(d_head), d_v_(d_v), format_(format) {
    constexpr const char* where = "PackedKeysValues";
    detail::check_storage<Scalar>(format.storage, where);
    if (format.values == ValueStorage::key_prefix && format.storage != KvStorage::as_computed)
      detail::invalid(where, "values inside the keys are stored as computed, not in ", storage_name(format.storage));
    if (capacity < 0) detail::invalid(where, "capacity must be >= 0, got ", capacity);
    if (n_kv_heads <= 0) detail::invalid(where, "n_kv_heads must be > 0, got ", n_kv_heads);
    if (d_head <= 0 || d_v <= 0) detail::invalid(where, "d_head and d_v must be > 0, got ", d_head, " and ", d_v);
    if (format.values == ValueStorage::key_prefix && d_v > d_head)
      detail::invalid(where, "values as the keys' first d_v components need d_v <= d_head, got ", d_v, " > ", d_head);
    // Every size is checked before anything is allocated: a capacity near 2^63 must be refused,
    // not wrap around to a small buffer that appending would overrun.
    rows_ = detail::round_up_within(capacity, lanes, detail::max_elements<Scalar>());
    if (rows_ < 0) detail::invalid(where, "capacity ", capacity, " is too large to round up to whole panels");
    key_head_size_ = detail::checked_size<Scalar>(where, "one head's keys", rows_, d_head_);
    value_head_size_ = values_are_keys() ? 0 : detail::checked_size<Scalar>(where, "one head's values", rows_, round_up(d_v_));
    const Index key_count = detail::checked_size<Scalar>(where, "the keys", n_kv_heads_, key_head_size_);
    const Index value_count = detail::checked_size<Scalar>(where, "the values", n_kv_heads_, value_head_size_);
    // Not zeroed here: append zeroes each key panel as its first token arrives (the kernel reads a
    // panel's columns past size() and masks them) and the padding columns of each value row; value
    // rows past size() are never read. Making a store costs no pass over it.
    detail::with_stored_type<Scalar>(format.storage, [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      detail::allocate_uninitialized(key_buffer<Stored>(), key_count, where, "the keys");
      detail::allocate_uninitialized(value_buffer<Stored>(), value_count, where, "the values");
    });
    if (format.storage == KvStorage::int8) {
      const Index scales = detail::checked_size<Scalar>(where, "the int8 scales", n_kv_heads_, rows_);
      detail::allocate(key_scales_, scales, 0.0f, where, "the int8 scales");
      detail::allocate(value_scales_, scales, 0.0f, where, "the int8 scales");
    }
  }

  Index size() const { return size_; }
  Index capacity() const { return capacity_; }
  Index n_kv_heads() const { return n_kv_heads_; }
  Index d_head() const { return d_head_; }
  Index d_v() const { return d_v_; }
  /// True if the values are the keys' first d_v components (ValueStorage::key_prefix).
  bool values_are_keys() const { return format_.values == ValueStorage::key_prefix; }
  /// The number type the keys and values are stored in.
  KvStorage storage() const { return format_.storage; }
  const StoreFormat& format() const { return format_; }

  /// Appends m tokens. k: (m, n_kv_heads d_head), v: (m, n_kv_heads d_v), head by head in columns.
  /// With threads > 1 (0: OpenMP's default; at most detail::max_threads), heads are packed in
  /// parallel (OpenMP); the store is the same either way.
  void append(const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>& v, int threads = 1) {
    constexpr const char* where = "PackedKeysValues::append";
    if (values_are_keys())
      detail::invalid(where, "this store's values are its keys' first ", d_v_, " components: append(k) alone");
    if (v.cols() != n_kv_heads_ * d_v_)
      detail::invalid(where, "v has ", v.cols(), " columns, expected n_kv_heads d_v = ", n_kv_heads_ * d_v_);
    if (v.rows() != k.rows()) detail::invalid(where, "k has ", k.rows(), " rows but v has ", v.rows());
    append_rows(k, &v, threads);
  }
  /// Appends m tokens to a store whose values are its keys' first d_v components: k (m, n_kv_heads d_head).
  void append(const Eigen::Ref<const Matrix<Scalar>>& k, int threads = 1) {
    if (!values_are_keys())
      detail::invalid("PackedKeysValues::append", "this store keeps values of their own: append(k, v)");
    append_rows(k, nullptr, threads);
  }

  /// Forgets every token from position `size` on (speculative decoding rolls back this way).
  void truncate(Index size) {
    if (size < 0 || size > size_)
      detail::invalid("PackedKeysValues::truncate", "position ", size, " is outside [0, ", size_, "]");
    size_ = size;
  }
  void clear() { size_ = 0; }

  /// Head h's key panels: panel p at keys(h) + p * key_panel_stride() (stored as computed).
  const Scalar* keys(Index h) const { return keys_.data() + h * key_head_size_; }
  /// Head h's key and value panels in the stored type (StoredTypeOf<Scalar, storage()>), and the
  /// int8 scales of its tokens (entry j: token j's; zero past size()).
  template <class Stored>
  const Stored* key_panels(Index h) const { return const_cast<PackedKeysValues*>(this)->key_buffer<Stored>().data() + h * key_head_size_; }
  template <class Stored>
  const Stored* value_panels(Index h) const {
    return const_cast<PackedKeysValues*>(this)->value_buffer<Stored>().data() + h * value_head_size_;
  }
  const float* key_scales(Index h) const { return key_scales_.data() + h * rows_; }
  const float* value_scales(Index h) const { return value_scales_.data() + h * rows_; }
  Index key_panel_stride() const { return d_head_ * lanes; }
  /// Head h's value panels: panel q at values(h) + q * value_panel_stride(), row j at j * lanes.
  /// Null where the values are the keys' (values_are_keys()): read them from keys(h).
  const Scalar* values(Index h) const { return values_are_keys() ? nullptr : values_.data() + h * value_head_size_; }
  Index value_panel_stride() const { return rows_ * lanes; }

  /// Key j of head h, and entry (j, c) of head h's values: for tests and inspection. Throws
  /// std::invalid_argument unless h < n_kv_heads, j < size() and c < d_head (d_v).
  Scalar key(Index h, Index j, Index c) const {
    check_entry("PackedKeysValues::key", h, j, c, d_head_);
    return stored_key(h, j, c);
  }
  Scalar value(Index h, Index j, Index c) const {
    check_entry("PackedKeysValues::value", h, j, c, d_v_);
    if (values_are_keys()) return stored_key(h, j, c);
    return detail::with_stored_type<Scalar>(format_.storage, [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      const Scalar x = detail::from_stored<Scalar>(value_panels<Stored>(h)[(c / lanes) * value_panel_stride() + j * lanes + c % lanes]);
      return format_.storage == KvStorage::int8 ? x * static_cast<Scalar>(value_scales(h)[j]) : x;
    });
  }

 private:
  /// append()'s work: checks, then packs the keys (and the values, unless they are the keys').
  void append_rows(const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>* v, int threads) {
    constexpr const char* where = "PackedKeysValues::append";
    if (k.cols() != n_kv_heads_ * d_head_)
      detail::invalid(where, "k has ", k.cols(), " columns, expected n_kv_heads d_head = ", n_kv_heads_ * d_head_);
    if (k.rows() > capacity_ - size_)
      detail::invalid(where, "appending ", k.rows(), " tokens to ", size_, " would exceed the capacity of ",
                      capacity_, " tokens");
    // Head by head, panel by panel: the keys of the tokens that share a key panel are one block
    // transposed into it, the values one block copied into each value panel. Each head's rows are
    // checked as they are packed (one read of k and v, by the thread that packs them). Thread t
    // packs the heads of part t (schedule(static) gives part t to thread t), the split the fused
    // kernel's detail::JobRuns uses, so that each thread then attends first to what it packed.
    threads = static_cast<int>(std::min<Index>(n_kv_heads_, detail::thread_count(threads, where)));
    if (k.rows() == 0) return;  // nothing to pack (and a 0-row block's columns may lie at a null pointer)
    bool finite = true;
    HEADWISE_OMP(omp parallel for num_threads(threads) schedule(static) reduction(&& : finite) if (threads > 1 && k.rows() >= 64))
    for (int part = 0; part < threads; ++part)  // heads [G part / threads, G (part + 1) / threads)
      for (Index h = n_kv_heads_ * part / threads; h < n_kv_heads_ * (part + 1) / threads; ++h) {
        const auto k_h = k.middleCols(h * d_head_, d_head_);
        finite = finite && storable(k_h);
        append_keys(h, k_h);
        if (!v) continue;
        const auto v_h = v->middleCols(h * d_v_, d_v_);
        finite = finite && storable(v_h);
        append_values(h, v_h);
      }
    if (!finite) refuse_non_finite(where, k, v);
    size_ += k.rows();
  }


  static Index round_up(Index x) {
    const Index rounded = detail::round_up_within(x, lanes, detail::max_elements<Scalar>());
    if (rounded < 0) detail::invalid("PackedKeysValues", "width ", x, " is too large to round up to whole panels");
    return rounded;
  }

  void check_entry(const char* where, Index h, Index j, Index c, Index width) const {
    if (h < 0 || h >= n_kv_heads_) detail::invalid(where, "head ", h, " out of range [0, ", n_kv_heads_, ")");
    if (j < 0 || j >= size_) detail::invalid(where, "token ", j, " out of range [0, ", size_, ") (the tokens held)");
    if (c < 0 || c >= width) detail::invalid(where, "component ", c, " out of range [0, ", width, ")");
  }
  template <class Stored>
  using Buffer = std::vector<Stored, detail::UninitializedAllocator<Stored>>;
  template <class Stored>
  using PanelOf = Eigen::Map<Eigen::Matrix<Stored, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  using PanelMap = PanelOf<Scalar>;

  /// The buffers of the stored type: as computed, BF16, F16 or int8 (only one is allocated).
  template <class Stored>
  Buffer<Stored>& key_buffer() {
    if constexpr (std::is_same_v<Stored, Eigen::bfloat16>) return keys_bf16_;
    else if constexpr (std::is_same_v<Stored, Eigen::half>) return keys_f16_;
    else if constexpr (std::is_same_v<Stored, std::int8_t>) return keys_i8_;
    else return keys_;
  }
  template <class Stored>
  Buffer<Stored>& value_buffer() {
    if constexpr (std::is_same_v<Stored, Eigen::bfloat16>) return values_bf16_;
    else if constexpr (std::is_same_v<Stored, Eigen::half>) return values_f16_;
    else if constexpr (std::is_same_v<Stored, std::int8_t>) return values_i8_;
    else return values_;
  }
  /// Key j of head h, component c, widened (times its scale for int8).
  Scalar stored_key(Index h, Index j, Index c) const {
    return detail::with_stored_type<Scalar>(format_.storage, [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      const Scalar x = detail::from_stored<Scalar>(key_panels<Stored>(h)[(j / lanes) * key_panel_stride() + c * lanes + j % lanes]);
      return format_.storage == KvStorage::int8 ? x * static_cast<Scalar>(key_scales(h)[j]) : x;
    });
  }
  /// True if every entry of m is finite, and stays finite in the stored type (F16 ends at 65504).
  template <class Derived>
  bool storable(const Eigen::MatrixBase<Derived>& m) const {
    if (!detail::all_finite(m)) return false;
    if (format_.storage == KvStorage::f16) return m.size() == 0 || m.cwiseAbs().maxCoeff() < Scalar(65520);  // rounds to 65504 below
    if (format_.storage == KvStorage::bf16)
      return m.size() == 0 || std::isfinite(static_cast<float>(Eigen::bfloat16(static_cast<float>(m.cwiseAbs().maxCoeff()))));
    return true;
  }

  /// Writes tokens size_ .. size_ + m - 1 of key head h: a new panel is zeroed first (the kernel
  /// reads a panel's columns past size() and masks them; they must hold numbers). Stored types:
  /// each entry converted (int8: quantized with its token's scale over the head).
  void append_keys(Index h, const Eigen::Ref<const Matrix<Scalar>>& k) {
    detail::with_stored_type<Scalar>(format_.storage, [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      for (Index t = 0; t < k.rows();) {
        const Index pos = size_ + t, column = pos % lanes, width = std::min(lanes - column, k.rows() - t);
        PanelOf<Stored> panel(key_buffer<Stored>().data() + h * key_head_size_ + (pos / lanes) * key_panel_stride(), d_head_, lanes);
        if (column == 0 && width < lanes) panel.setConstant(detail::to_stored<Stored>(Scalar(0)));
        if constexpr (std::is_same_v<Stored, Scalar>) {
          panel.middleCols(column, width) = k.middleRows(t, width).transpose();
        } else {
          for (Index w = 0; w < width; ++w) store_token(panel.col(column + w), k.row(t + w), key_scales_, h * rows_ + pos + w);
        }
        t += width;
      }
    });
  }

  /// Writes rows size_ .. size_ + m - 1 of every value panel of head h, zero past column d_v.
  void append_values(Index h, const Eigen::Ref<const Matrix<Scalar>>& v) {
    detail::with_stored_type<Scalar>(format_.storage, [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      Stored* base = value_buffer<Stored>().data() + h * value_head_size_;
      if constexpr (std::is_same_v<Stored, Scalar>) {
        for (Index c0 = 0; c0 < d_v_; c0 += lanes) {
          const Index width = std::min(lanes, d_v_ - c0);
          PanelMap panel(base + (c0 / lanes) * value_panel_stride(), rows_, lanes);
          panel.block(size_, 0, v.rows(), width) = v.middleCols(c0, width);
          if (width < lanes) panel.block(size_, width, v.rows(), lanes - width).setZero();
        }
      } else {
        Eigen::Matrix<Stored, 1, Eigen::Dynamic> row(round_up(d_v_));
        for (Index t = 0; t < v.rows(); ++t) {
          row.setConstant(detail::to_stored<Stored>(Scalar(0)));
          store_token(row.head(d_v_), v.row(t), value_scales_, h * rows_ + size_ + t);
          for (Index c0 = 0; c0 < row.size(); c0 += lanes)
            std::copy(row.data() + c0, row.data() + c0 + lanes, base + (c0 / lanes) * value_panel_stride() + (size_ + t) * lanes);
        }
      }
    });
  }

  /// One token's head x into `out` in the stored type; int8 quantizes with the token's scale
  /// max |x| / 127, kept at scales[at].
  template <class Out, class In>
  void store_token(Out&& out, const In& x, std::vector<float>& scales, Index at) {
    using Stored = typename std::decay_t<Out>::Scalar;
    if constexpr (std::is_same_v<Stored, std::int8_t>) {
      const float scale = detail::int8_scale(x.template cast<float>());
      scales[static_cast<std::size_t>(at)] = scale;
      for (Index c = 0; c < x.size(); ++c) out(c) = detail::quantize_int8(static_cast<float>(x(c)), scale);
    } else {
      for (Index c = 0; c < x.size(); ++c) out(c) = detail::to_stored<Stored>(x(c));
    }
  }

  /// Everything stored is finite: the kernel multiplies the probabilities of a query's future keys
  /// (exact zeros) by their values, and 0 x inf would carry a later token into earlier rows. After
  /// an append that met a non-finite k or v: zeroes what it wrote into the key panel it began in
  /// (the kernel reads a panel's columns past size()), then throws naming the first bad entry.
  void refuse_non_finite(const char* where, const Eigen::Ref<const Matrix<Scalar>>& k,
                         const Eigen::Ref<const Matrix<Scalar>>* v) {
    if (const Index column = size_ % lanes; column != 0)
      detail::with_stored_type<Scalar>(format_.storage, [&](auto tag) {
        using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
        for (Index h = 0; h < n_kv_heads_; ++h)
          PanelOf<Stored>(key_buffer<Stored>().data() + h * key_head_size_ + (size_ / lanes) * key_panel_stride(), d_head_, lanes)
              .rightCols(lanes - column)
              .setConstant(detail::to_stored<Stored>(Scalar(0)));
      });
    require_finite_rows(where, "k", k, d_head_);
    if (v) require_finite_rows(where, "v", *v, d_v_);
  }

  /// Throws naming the first non-finite entry of m (rows to append) by position and head.
  void require_finite_rows(const char* where, const char* name, const Eigen::Ref<const Matrix<Scalar>>& m,
                           Index width) const {
    for (Index t = 0; t < m.rows(); ++t)
      for (Index c = 0; c < m.cols(); ++c)
        if (!std::isfinite(m(t, c)))
          detail::invalid(where, name, " of the token at position ", size_ + t, " (head ", c / width, ", component ", c % width,
                          ") is not finite (", m(t, c), "): keys and values must be finite");
        else if (!storable(m.block(t, c, 1, 1)))
          detail::invalid(where, name, " of the token at position ", size_ + t, " (head ", c / width, ", component ", c % width,
                          ") is ", m(t, c), ", finite in ", detail::scalar_name<Scalar>(), " but not in ", storage_name(format_.storage),
                          format_.storage == KvStorage::f16 ? " (largest 65504)" : "");
  }

  Index capacity_, n_kv_heads_, d_head_, d_v_;
  StoreFormat format_;
  Index rows_ = 0, key_head_size_ = 0, value_head_size_ = 0, size_ = 0;
  Buffer<Scalar> keys_, values_;
  Buffer<Eigen::bfloat16> keys_bf16_, values_bf16_;
  Buffer<Eigen::half> keys_f16_, values_f16_;
  Buffer<std::int8_t> keys_i8_, values_i8_;
  std::vector<float> key_scales_, value_scales_;  // int8: head h's token j at h rows_ + j
};

}  // namespace headwise
