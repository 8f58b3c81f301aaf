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
// both) keeps no value panels: the kernel reads the values out of the key panels.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Where a store's values live: in their own panels, or in the keys, as each key's first d_v
/// components (the latent of multi-head latent attention is both key and value: stored once).
enum class ValueStorage { own, key_prefix };

template <class Scalar>
class PackedKeysValues {
 public:
  static constexpr Index lanes = detail::TileShape<Scalar>::lanes;

  /// Room for `capacity` tokens of n_kv_heads heads, keys of width d_head and values of d_v (with
  /// ValueStorage::key_prefix, the keys' first d_v components, d_v <= d_head).
  PackedKeysValues(Index capacity, Index n_kv_heads, Index d_head, Index d_v, ValueStorage values = ValueStorage::own)
      : capacity_(capacity), n_kv_heads_(n_kv_heads), d_head_(d_head), d_v_(d_v), storage_(values) {
    constexpr const char* where = "PackedKeysValues";
    if (capacity < 0) detail::invalid(where, "capacity must be >= 0, got ", capacity);
    if (n_kv_heads <= 0) detail::invalid(where, "n_kv_heads must be > 0, got ", n_kv_heads);
    if (d_head <= 0 || d_v <= 0) detail::invalid(where, "d_head and d_v must be > 0, got ", d_head, " and ", d_v);
    if (values == ValueStorage::key_prefix && d_v > d_head)
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
    detail::allocate_uninitialized(keys_, key_count, where, "the keys");
    detail::allocate_uninitialized(values_, value_count, where, "the values");
  }

  Index size() const { return size_; }
  Index capacity() const { return capacity_; }
  Index n_kv_heads() const { return n_kv_heads_; }
  Index d_head() const { return d_head_; }
  Index d_v() const { return d_v_; }
  /// True if the values are the keys' first d_v components (ValueStorage::key_prefix).
  bool values_are_keys() const { return storage_ == ValueStorage::key_prefix; }

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

  /// Head h's key panels: panel p at keys(h) + p * key_panel_stride().
  const Scalar* keys(Index h) const { return keys_.data() + h * key_head_size_; }
  Index key_panel_stride() const { return d_head_ * lanes; }
  /// Head h's value panels: panel q at values(h) + q * value_panel_stride(), row j at j * lanes.
  /// Null where the values are the keys' (values_are_keys()): read them from keys(h).
  const Scalar* values(Index h) const { return values_are_keys() ? nullptr : values_.data() + h * value_head_size_; }
  Index value_panel_stride() const { return rows_ * lanes; }

  /// Key j of head h, and entry (j, c) of head h's values: for tests and inspection. Throws
  /// std::invalid_argument unless h < n_kv_heads, j < size() and c < d_head (d_v).
  Scalar key(Index h, Index j, Index c) const {
    check_entry("PackedKeysValues::key", h, j, c, d_head_);
    return keys(h)[(j / lanes) * key_panel_stride() + c * lanes + j % lanes];
  }
  Scalar value(Index h, Index j, Index c) const {
    check_entry("PackedKeysValues::value", h, j, c, d_v_);
    if (values_are_keys()) return keys(h)[(j / lanes) * key_panel_stride() + c * lanes + j % lanes];
    return values(h)[(c / lanes) * value_panel_stride() + j * lanes + c % lanes];
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
        finite = finite && detail::all_finite(k_h);
        append_keys(h, k_h);
        if (!v) continue;
        const auto v_h = v->middleCols(h * d_v_, d_v_);
        finite = finite && detail::all_finite(v_h);
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
  using PanelMap = Eigen::Map<Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

  /// Writes tokens size_ .. size_ + m - 1 of key head h: a new panel is zeroed first (the kernel
  /// reads a panel's columns past size() and masks them; they must hold numbers).
  void append_keys(Index h, const Eigen::Ref<const Matrix<Scalar>>& k) {
    for (Index t = 0; t < k.rows();) {
      const Index pos = size_ + t, column = pos % lanes, width = std::min(lanes - column, k.rows() - t);
      PanelMap panel(keys_.data() + h * key_head_size_ + (pos / lanes) * key_panel_stride(), d_head_, lanes);
      if (column == 0 && width < lanes) panel.setZero();
      panel.middleCols(column, width) = k.middleRows(t, width).transpose();
      t += width;
    }
  }

  /// Writes rows size_ .. size_ + m - 1 of every value panel of head h, zero past column d_v.
  void append_values(Index h, const Eigen::Ref<const Matrix<Scalar>>& v) {
    for (Index c0 = 0; c0 < d_v_; c0 += lanes) {
      const Index width = std::min(lanes, d_v_ - c0);
      PanelMap panel(values_.data() + h * value_head_size_ + (c0 / lanes) * value_panel_stride(), rows_, lanes);
      panel.block(size_, 0, v.rows(), width) = v.middleCols(c0, width);
      if (width < lanes) panel.block(size_, width, v.rows(), lanes - width).setZero();
    }
  }

  /// Everything stored is finite: the kernel multiplies the probabilities of a query's future keys
  /// (exact zeros) by their values, and 0 x inf would carry a later token into earlier rows. After
  /// an append that met a non-finite k or v: zeroes what it wrote into the key panel it began in
  /// (the kernel reads a panel's columns past size()), then throws naming the first bad entry.
  void refuse_non_finite(const char* where, const Eigen::Ref<const Matrix<Scalar>>& k,
                         const Eigen::Ref<const Matrix<Scalar>>* v) {
    if (const Index column = size_ % lanes; column != 0)
      for (Index h = 0; h < n_kv_heads_; ++h)
        PanelMap(keys_.data() + h * key_head_size_ + (size_ / lanes) * key_panel_stride(), d_head_, lanes)
            .rightCols(lanes - column)
            .setZero();
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
  }

  Index capacity_, n_kv_heads_, d_head_, d_v_;
  ValueStorage storage_;
  Index rows_ = 0, key_head_size_ = 0, value_head_size_ = 0, size_ = 0;
  std::vector<Scalar, detail::UninitializedAllocator<Scalar>> keys_, values_;
};

}  // namespace headwise
