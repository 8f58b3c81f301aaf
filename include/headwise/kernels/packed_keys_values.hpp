// PackedKeysValues: keys and values of n_kv_heads heads, stored in the layout the fused kernel
// multiplies by, with room for `capacity` tokens. The fused kernel reads them as they are, so a
// KV cache built on it costs no repacking per decoding step.
//
// Layout, per key/value head, in panels of W = detail::TileShape<Scalar>::lanes columns:
//   keys    Kᵀ in panels of W keys:         panel p = keys [pW, pW + W), d_head x W, row c = dim c
//   values  V in panels of W value columns: panel q = columns [qW, qW + W), capacity x W, row j = key j
// except that under KvArithmetic::stored int8 and BF16 stores put 4 (2) rows in each 32-bit lane
// (StoreFormat::lane_entries): a key's components, a value column's tokens; int8 keys as k + 128.
// Appending token t writes column t % W of key panel t / W and row t of every value panel: no
// existing entry moves, so appending never reallocates. A store whose values are the first d_v
// columns of its keys (ValueStorage::key_prefix: multi-head latent attention's latent, which is
// both) keeps no value panels: the kernel reads the values out of the key panels. The numbers are
// stored as computed or in BF16, F16 or int8 (kv_storage.hpp), converted when appended; an entry
// not finite in the stored type is refused by name and nothing is appended. The kernel
// reads a store through blocks() (kv_blocks.hpp): one block of all its tokens. The packing of a
// head's tokens into panels (detail::pack_head_rows) is the paged cache's too.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kernels/kv_blocks.hpp"
#include "headwise/kv_storage.hpp"
#include "headwise/types.hpp"

namespace headwise {

namespace detail {

/// True if every entry of m is finite, and stays finite in `storage` (F16 ends at 65504).
template <class Derived>
bool storable(const Eigen::MatrixBase<Derived>& m, KvStorage storage) {
  using Scalar = typename Derived::Scalar;
  if (!all_finite(m)) return false;
  if (storage == KvStorage::f16) return m.size() == 0 || m.cwiseAbs().maxCoeff() < Scalar(65520);  // rounds to 65504 below
  if (storage == KvStorage::bf16)
    return m.size() == 0 || std::isfinite(static_cast<float>(Eigen::bfloat16(static_cast<float>(m.cwiseAbs().maxCoeff()))));
  return true;
}

/// Throws naming the first entry of m (rows to append, row t at position first + t; heads of
/// `width` columns) that is not finite, or not finite in `storage`.
template <class Scalar>
void refuse_unstorable(const char* where, const char* name, const Eigen::Ref<const Matrix<Scalar>>& m, Index width,
                       Index first, KvStorage storage) {
  for (Index t = 0; t < m.rows(); ++t)
    for (Index c = 0; c < m.cols(); ++c)
      if (!std::isfinite(m(t, c)))
        invalid(where, name, " of the token at position ", first + t, " (head ", c / width, ", component ", c % width,
                ") is not finite (", m(t, c), "): keys and values must be finite");
      else if (!storable(m.block(t, c, 1, 1), storage))
        invalid(where, name, " of the token at position ", first + t, " (head ", c / width, ", component ", c % width, ") is ",
                m(t, c), ", finite in ", scalar_name<Scalar>(), " but not in ", storage_name(storage),
                storage == KvStorage::f16 ? " (largest 65504)" : "");
}

/// A buffer of each type a store may keep its numbers in; only the store's own is allocated.
template <class Scalar>
struct StoredBuffers {
  template <class Stored>
  using Buffer = std::vector<Stored, UninitializedAllocator<Stored>>;
  Buffer<Scalar> computed;
  Buffer<Eigen::bfloat16> bf16;
  Buffer<Eigen::half> f16;
  Buffer<std::int8_t> i8;

  template <class Stored>
  Buffer<Stored>& get() {
    if constexpr (std::is_same_v<Stored, Eigen::bfloat16>) return bf16;
    else if constexpr (std::is_same_v<Stored, Eigen::half>) return f16;
    else if constexpr (std::is_same_v<Stored, std::int8_t>) return i8;
    else return computed;
  }
  template <class Stored>
  const Buffer<Stored>& get() const {
    return const_cast<StoredBuffers*>(this)->template get<Stored>();
  }
};

/// Where one head's tokens of one block go: its key panels (panel p at keys + p d_head W), its
/// value panels (panel q at values + q value_stride, row j at + j W; null where the values are the
/// keys'), its tokens' int8 scales (entry j: token j's), and how many rows share a lane
/// (StoreFormat::lane_entries: 4 for int8, 2 for BF16 under the stored arithmetic, else 1).
template <class Stored>
struct HeadPanels {
  Stored* keys;
  Stored* values;
  Index value_stride;
  float* key_scales;
  float* value_scales;
  Index entries = 1;
};

/// Entry j of an int8 store's scales; null for the other types (which keep none).
inline float* scale_at(float* scales, Index j) { return scales ? scales + j : nullptr; }

/// One token's head x into `out` in the stored type; int8 quantizes it with the token's scale
/// max |x| / 127, written to *scale.
template <class Out, class In>
void store_token(Out&& out, const In& x, float* scale) {
  using Stored = typename std::decay_t<Out>::Scalar;
  if constexpr (std::is_same_v<Stored, std::int8_t>) {
    *scale = int8_scale(x.template cast<float>());
    for (Index c = 0; c < x.size(); ++c) out(c) = quantize_int8(static_cast<float>(x(c)), *scale);
  } else {
    for (Index c = 0; c < x.size(); ++c) out(c) = to_stored<Stored>(x(c));
  }
}

/// A key of 0 as a key panel holds it (the stored arithmetic's int8 keys: 128, flip_sign).
template <class Stored>
Stored zero_key(Index entries) {
  if constexpr (std::is_same_v<Stored, std::int8_t>) return entries > 1 ? flip_sign(0) : Stored(0);
  else return to_stored<Stored>(0.0f);
}

/// Writes tokens first .. first + m - 1 of one head into its panels: keys k (m, d_head) and, unless
/// null, values v (m, d_v), converted to Stored. A key panel is zeroed as its first token arrives
/// (the kernel reads a panel's columns past the tokens held, and masks them: they must hold
/// numbers); value rows are zero past column d_v.
template <class Scalar, class Stored>
void pack_head_rows(const HeadPanels<Stored>& to, Index first, const Eigen::Ref<const Matrix<Scalar>>& k,
                    const Eigen::Ref<const Matrix<Scalar>>* v) {
  constexpr Index W = TileShape<Scalar>::lanes;
  using Panel = Eigen::Map<Eigen::Matrix<Stored, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  const Index d_head = k.cols();
  for (Index t = 0; t < k.rows();) {
    const Index pos = first + t, column = pos % W, width = std::min(W - column, k.rows() - t);
    Panel panel(to.keys + (pos / W) * d_head * W, d_head, W);
    if (column == 0 && width < W) panel.setConstant(zero_key<Stored>(to.entries));
    if constexpr (std::is_same_v<Stored, Scalar>) {
      panel.middleCols(column, width) = k.middleRows(t, width).transpose();
    } else {
      Eigen::Matrix<Stored, Eigen::Dynamic, 1> key(to.entries > 1 ? d_head : 0);
      for (Index w = 0; w < width; ++w) {
        if (to.entries > 1) {  // component c of key w at panel_offset(c, w) (int8: as k + 128)
          store_token(key, k.row(t + w), scale_at(to.key_scales, pos + w));
          for (Index c = 0; c < d_head; ++c) {
            Stored& entry = panel.data()[panel_offset(to.entries, c, column + w, W)];
            if constexpr (std::is_same_v<Stored, std::int8_t>) entry = flip_sign(key(c));
            else entry = key(c);
          }
          continue;
        }
        store_token(panel.col(column + w), k.row(t + w), scale_at(to.key_scales, pos + w));
      }
    }
    t += width;
  }
  if (!v) return;
  const Index d_v = v->cols(), padded = (d_v + W - 1) / W * W;
  if constexpr (std::is_same_v<Stored, Scalar>) {
    for (Index c0 = 0; c0 < d_v; c0 += W) {
      const Index width = std::min(W, d_v - c0);
      Panel panel(to.values + (c0 / W) * to.value_stride + first * W, v->rows(), W);
      panel.leftCols(width) = v->middleCols(c0, width);
      if (width < W) panel.rightCols(W - width).setZero();
    }
  } else {
    Eigen::Matrix<Stored, 1, Eigen::Dynamic> row(padded);
    for (Index t = 0; t < v->rows(); ++t) {
      row.setConstant(to_stored<Stored>(Scalar(0)));
      const Index pos = first + t;
      store_token(row.head(d_v), v->row(t), scale_at(to.value_scales, pos));
      for (Index c0 = 0; c0 < padded; c0 += W) {
        Stored* panel = to.values + (c0 / W) * to.value_stride;
        const Index e = to.entries;
        if (e == 1) {
          std::copy(row.data() + c0, row.data() + c0 + W, panel + pos * W);
          continue;
        }
        Stored* group = panel + pos / e * e * W;  // token pos's column w at panel_offset(pos % e, w)
        if (pos % e == 0) std::fill(group, group + e * W, to_stored<Stored>(Scalar(0)));  // (the group's later tokens: zeros until appended)
        for (Index w = 0; w < W; ++w) group[panel_offset(e, pos % e, w, W)] = row(c0 + w);
      }
    }
  }
}

}  // namespace detail

template <class Scalar>
class HEADWISE_ISA_TAG PackedKeysValues {
 public:
  static constexpr Index lanes = detail::TileShape<Scalar>::lanes;

  /// Room for `capacity` tokens of n_kv_heads heads, keys of width d_head and values of d_v (with
  /// ValueStorage::key_prefix, the keys' first d_v components, d_v <= d_head), stored as `format` says.
  PackedKeysValues(Index capacity, Index n_kv_heads, Index d_head, Index d_v, StoreFormat format = {});

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
  /// With threads > 1 (0: the default, detail::thread_count; at most detail::max_threads), heads
  /// are packed in parallel; the store is the same either way. Reach: the storages the packing is
  /// compiled for (kv_storage.hpp); detail::AsComputedOnly for a store that the caller made as
  /// computed (attend on matrices), which then compiles no narrow type's packing.
  template <class Reach = detail::AnyStorage>
  void append(const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>& v, int threads = 1);
  /// Appends m tokens to a store whose values are its keys' first d_v components: k (m, n_kv_heads d_head).
  void append(const Eigen::Ref<const Matrix<Scalar>>& k, int threads = 1);

  /// Forgets every token from position `size` on (speculative decoding rolls back this way).
  void truncate(Index size) {
    if (size < 0 || size > size_)
      detail::invalid("PackedKeysValues::truncate", "position ", size, " is outside [0, ", size_, "]");
    size_ = size;
  }
  void clear() { size_ = 0; }

  /// Head h's key panels as computed: panel p at keys(h) + p * key_panel_stride().
  const Scalar* keys(Index h) const { return keys_.computed.data() + h * key_head_size_; }
  Index key_panel_stride() const { return d_head_ * lanes; }
  Index value_panel_stride() const { return rows_ * lanes; }

  /// The store as the fused kernel reads it: one block of all its tokens (kv_blocks.hpp). Valid
  /// while the store lives and is not moved.
  KvBlocks<Scalar> blocks() const;

  /// Key j of head h, component c, and entry (j, c) of head h's values: for tests and inspection.
  /// Throws std::invalid_argument unless h < n_kv_heads, j < size() and c < d_head (d_v).
  Scalar key(Index h, Index j, Index c) const { return blocks().key(h, j, c, "PackedKeysValues::key"); }
  Scalar value(Index h, Index j, Index c) const { return blocks().value(h, j, c, "PackedKeysValues::value"); }

 private:
  /// append()'s work: checks, then packs the keys (and the values, unless they are the keys').
  template <class Reach>
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
    std::atomic<bool> finite{true};
    detail::parallel_for<detail::Schedule::by_part>(k.rows() >= 64 ? threads : 1, n_kv_heads_, [&](Index h) {
      const auto k_h = k.middleCols(h * d_head_, d_head_);
      if (!detail::storable(k_h, format_.storage) || (v && !detail::storable(v->middleCols(h * d_v_, d_v_), format_.storage)))
        finite.store(false, std::memory_order_relaxed);
      pack_head<Reach>(h, k_h, v);  // (packing a narrow type allocates a row: an exception reaches the caller)
    });
    if (!finite.load()) refuse_non_finite<Reach>(where, k, v);
    size_ += k.rows();
  }


  static Index round_up(Index x) {
    const Index rounded = detail::round_up_within(x, lanes, detail::max_elements<Scalar>());
    if (rounded < 0) detail::invalid("PackedKeysValues", "width ", x, " is too large to round up to whole panels");
    return rounded;
  }

  template <class Stored>
  using Buffer = std::vector<Stored, detail::UninitializedAllocator<Stored>>;
  template <class Stored>
  using PanelOf = Eigen::Map<Eigen::Matrix<Stored, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

  template <class Stored>
  Buffer<Stored>& key_buffer() { return keys_.template get<Stored>(); }
  template <class Stored>
  Buffer<Stored>& value_buffer() { return values_.template get<Stored>(); }
  /// Tokens size_ .. size_ + m - 1 of head h: keys k_h (m, d_head), and head h's columns of v.
  template <class Reach>
  void pack_head(Index h, const Eigen::Ref<const Matrix<Scalar>>& k_h, const Eigen::Ref<const Matrix<Scalar>>* v) {
    detail::with_stored_type<Scalar, Reach>(format_.storage, [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      const bool scaled = format_.storage == KvStorage::int8;
      const detail::HeadPanels<Stored> to{key_buffer<Stored>().data() + h * key_head_size_,
                                          v ? value_buffer<Stored>().data() + h * value_head_size_ : nullptr,
                                          value_panel_stride(), scaled ? key_scales_.data() + h * rows_ : nullptr,
                                          scaled ? value_scales_.data() + h * rows_ : nullptr, format_.lane_entries()};
      if (!v) return detail::pack_head_rows<Scalar, Stored>(to, size_, k_h, nullptr);
      const Eigen::Ref<const Matrix<Scalar>> v_h = v->middleCols(h * d_v_, d_v_);
      detail::pack_head_rows<Scalar, Stored>(to, size_, k_h, &v_h);
    });
  }

  /// Everything stored is finite: the kernel multiplies the probabilities of a query's future keys
  /// (exact zeros) by their values, and 0 x inf would carry a later token into earlier rows. After
  /// an append that met a non-finite k or v: zeroes what it wrote into the key panel it began in
  /// (the kernel reads a panel's columns past size()), then throws naming the first bad entry.
  template <class Reach>
  void refuse_non_finite(const char* where, const Eigen::Ref<const Matrix<Scalar>>& k,
                         const Eigen::Ref<const Matrix<Scalar>>* v) {
    if (const Index column = size_ % lanes; column != 0)
      detail::with_stored_type<Scalar, Reach>(format_.storage, [&](auto tag) {
        using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
        for (Index h = 0; h < n_kv_heads_; ++h) {
          Stored* panel = key_buffer<Stored>().data() + h * key_head_size_ + (size_ / lanes) * key_panel_stride();
          for (Index c = 0; c < d_head_; ++c)
            for (Index w = column; w < lanes; ++w) panel[detail::panel_offset(format_.lane_entries(), c, w, lanes)] = detail::zero_key<Stored>(format_.lane_entries());
        }
      });
    detail::refuse_unstorable<Scalar>(where, "k", k, d_head_, size_, format_.storage);
    if (v) detail::refuse_unstorable<Scalar>(where, "v", *v, d_v_, size_, format_.storage);
  }

  Index capacity_, n_kv_heads_, d_head_, d_v_;
  StoreFormat format_;
  Index rows_ = 0, key_head_size_ = 0, value_head_size_ = 0, size_ = 0;
  detail::StoredBuffers<Scalar> keys_, values_;  // in the stored type
  std::vector<float> key_scales_, value_scales_;  // int8: head h's token j at h rows_ + j
};

template <class Scalar>
template <class Reach>
void PackedKeysValues<Scalar>::append(const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>& v, int threads) {
  constexpr const char* where = "PackedKeysValues::append";
  if (values_are_keys())
    detail::invalid(where, "this store's values are its keys' first ", d_v_, " components: append(k) alone");
  if (v.cols() != n_kv_heads_ * d_v_)
    detail::invalid(where, "v has ", v.cols(), " columns, expected n_kv_heads d_v = ", n_kv_heads_ * d_v_);
  if (v.rows() != k.rows()) detail::invalid(where, "k has ", k.rows(), " rows but v has ", v.rows());
  append_rows<Reach>(k, &v, threads);
}

template <class Scalar>
void PackedKeysValues<Scalar>::append(const Eigen::Ref<const Matrix<Scalar>>& k, int threads) {
  if (!values_are_keys())
    detail::invalid("PackedKeysValues::append", "this store keeps values of their own: append(k, v)");
  append_rows<detail::AnyStorage>(k, nullptr, threads);
}

template <class Scalar>
KvBlocks<Scalar> PackedKeysValues<Scalar>::blocks() const {
  KvBlockPool pool;
  pool.n_kv_heads = n_kv_heads_, pool.d_head = d_head_, pool.d_v = d_v_, pool.format = format_;
  pool.block_tokens = std::max(rows_, lanes);
  detail::with_stored_type<Scalar>(format_.storage, [&](auto tag) {
    using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    auto& self = const_cast<PackedKeysValues&>(*this);
    pool.keys = self.template key_buffer<Stored>().data();
    pool.values = values_are_keys() ? nullptr : self.template value_buffer<Stored>().data();
  });
  pool.key_scales = key_scales_.data(), pool.value_scales = value_scales_.data();
  pool.key_head = key_head_size_, pool.value_head = value_head_size_, pool.scale_head = rows_;
  return KvBlocks<Scalar>(pool, nullptr, 0, size_);
}

template <class Scalar>
PackedKeysValues<Scalar>::PackedKeysValues(Index capacity, Index n_kv_heads, Index d_head, Index d_v, StoreFormat format)
    : capacity_(capacity), n_kv_heads_(n_kv_heads), d_head_(d_head), d_v_(d_v), format_(format) {
  constexpr const char* where = "PackedKeysValues";
  detail::check_storage<Scalar>(format.storage, where);
  if (capacity < 0) detail::invalid(where, "capacity must be >= 0, got ", capacity);
  if (n_kv_heads <= 0) detail::invalid(where, "n_kv_heads must be > 0, got ", n_kv_heads);
  if (d_head <= 0 || d_v <= 0) detail::invalid(where, "d_head and d_v must be > 0, got ", d_head, " and ", d_v);
  detail::check_arithmetic(where, format, d_head);
  detail::check_values_in_keys(where, format, d_head, d_v);
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

/// The compiled mode's instantiations of the packed store (detail/compiled.hpp); append is a
/// member template, instantiated by name.
#define HEADWISE_PACKED_KEYS_VALUES_INSTANTIATIONS(PREFIX, S) \
  PREFIX template class PackedKeysValues<S>;                  \
  PREFIX template void PackedKeysValues<S>::append<detail::AnyStorage>(const Eigen::Ref<const Matrix<S>>&, const Eigen::Ref<const Matrix<S>>&, int);
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_PACKED_KEYS_VALUES_INSTANTIATIONS)

}  // namespace headwise
