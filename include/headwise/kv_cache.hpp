// KvCache: the keys and values a layer has seen, for incremental decoding. Capacity is set up
// front and never grows, so a decoding step never reallocates; truncate() rolls back (for
// speculative decoding). Stores n_kv_heads heads (fewer than n_heads under grouped-query attention)
// of keys d_head wide and values d_v wide (or the keys' first d_v components: a latent cache), as
// computed or in BF16, F16 or int8, already in the layout of the fused kernel (PackedKeysValues).
// Also the checks a layer makes of a cache, shared with PagedKvCache: its shape and format
// (KvShape, check_kv_shape) and what filled it (KvCacheOrigin: the rotary embedding and its LongRoPE
// factors, the window, the chunk), so that a layer refuses, by name, a cache another kind of layer
// filled or a call whose window or chunk differs from the one its keys were attended with.
#pragma once

#include <optional>
#include <string>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/kernels/packed_keys_values.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/types.hpp"

namespace headwise {

template <class Scalar>
class HEADWISE_ISA_TAG MultiHeadAttention;
template <class Scalar>
class HEADWISE_ISA_TAG MultiHeadLatentAttention;

/// What filled a cache: the rotary embedding of the layer (none for a layer without one) and the
/// sliding window its calls used (none for no window).
struct KvCacheOrigin {
  std::optional<RopeConfig> rope;
  std::optional<Index> window;
  std::optional<Index> chunk;
  bool long_factors = false;  ///< LongRoPE: the keys were rotated with the long factors
};

/// The keys and values a layer keeps per token: n_kv_heads heads of keys d_head wide and values
/// d_v wide, in `format` (values of their own or the keys' first d_v components; the number type).
/// A layer's make_cache (and make_paged_cache(layer, ...), paged_decoding.hpp) make stores of its
/// shape; its calls refuse any other.
struct KvShape {
  Index n_kv_heads = 0, d_head = 0, d_v = 0;
  StoreFormat format;
};

namespace detail {

/// Throws unless `store` (a KvCache or a PagedKvCache, called `what` in the message) keeps keys and
/// values of `shape`.
template <class Store>
void check_kv_shape(const Store& store, const KvShape& shape, const char* what, const char* where) {
  const bool own = shape.format.values == ValueStorage::own;
  if (store.n_kv_heads() != shape.n_kv_heads || store.d_head() != shape.d_head || store.d_v() != shape.d_v ||
      store.values_are_keys() == own)
    invalid(where, "the ", what, " holds ", store.n_kv_heads(), " heads of keys ", store.d_head(), " wide and values ",
            store.d_v(), " wide", store.values_are_keys() ? " inside the keys" : " of their own", "; this layer keeps ",
            shape.n_kv_heads, " heads of keys ", shape.d_head, " and values ", shape.d_v, own ? " of their own" : " inside the keys",
            " (the layer's make_cache or make_paged_cache gives its own)");
  if (store.storage() != shape.format.storage)
    invalid(where, "the ", what, " stores keys and values ", storage_name(store.storage()), ", this layer ",
            storage_name(shape.format.storage), " (config().kv_storage; the layer's make_cache or make_paged_cache gives its own)");
  if (store.arithmetic() != shape.format.arithmetic)
    invalid(where, "the ", what, " keeps keys and values for the ", arithmetic_name(store.arithmetic()), " arithmetic, this layer the ",
            arithmetic_name(shape.format.arithmetic), " (config().kv_arithmetic; the layer's make_cache or make_paged_cache gives its own)");
}

inline std::string window_words(const char* some, const char* none, const std::optional<Index>& size) {
  return size ? some + std::to_string(*size) : std::string(none);
}

/// Throws unless tokens that record `next` (the sequence then `end` tokens long) may follow those
/// of a store `filled` records: the same rotary embedding (and LongRoPE factors), window and chunk,
/// the only way decoding gives the forward's bits. Nothing is checked while nothing filled it.
inline void check_origin(const std::optional<KvCacheOrigin>& filled, const KvCacheOrigin& next, Index end, const char* where) {
  if (!filled) return;
  const KvCacheOrigin& theirs = *filled;
  if (theirs.long_factors != next.long_factors)
    invalid(where, "the cache's keys were rotated with LongRoPE's short factors, and a sequence of ", end,
            " tokens (past original_max_position = ", next.rope ? next.rope->scaling.original_max_position : 0,
            ") uses the long ones for every position, as Hugging Face does: run forward over the whole sequence",
            " into a fresh cache (keys rotated two ways are never mixed)");
  if (theirs.chunk != next.chunk)
    invalid(where, "the cache's keys were attended with ", window_words("chunks of ", "no chunks", theirs.chunk),
            "; this call asks for ", window_words("chunks of ", "none", next.chunk));
  if (theirs.rope.has_value() != next.rope.has_value() || (theirs.rope && *theirs.rope != *next.rope))
    invalid(where, "the cache was filled by a layer ", theirs.rope ? "with" : "without", " a rotary embedding",
            theirs.rope && next.rope ? " of other settings" : "", "; this layer has ", next.rope ? "one" : "none",
            " (a cache belongs to one layer)");
  if (theirs.window != next.window)
    invalid(where, "the cache's keys were attended with ", window_words("a window of ", "no window", theirs.window),
            "; this call asks for ", window_words("a window of ", "none", next.window),
            " (decoding equals the forward only with the same window throughout)");
}

}  // namespace detail

/// A per-layer KV cache.
///   KvCache<float> cache = layer.make_cache(/*capacity=*/1024);
///   Matrix<float> y0 = layer.forward_incremental(prompt, cache);   // (p, d_model)
///   Matrix<float> y1 = layer.forward_incremental(next_token, cache);
template <class Scalar>
class HEADWISE_ISA_TAG KvCache {
 public:
  /// Room for `capacity` tokens of n_kv_heads heads of width d_head.
  KvCache(Index capacity, Index n_kv_heads, Index d_head) : store_(capacity, n_kv_heads, d_head, d_head) {}
  /// Room for `capacity` tokens of n_kv_heads heads, keys of width d_head and values of d_v, the
  /// values kept on their own or as the keys' first d_v components (a latent cache:
  /// MultiHeadLatentAttention::make_cache), the numbers as computed or in BF16, F16, int8.
  KvCache(Index capacity, Index n_kv_heads, Index d_head, Index d_v, StoreFormat format)
      : store_(capacity, n_kv_heads, d_head, d_v, format) {}

  /// Tokens held (the position the next token will take).
  Index size() const { return store_.size(); }
  Index capacity() const { return store_.capacity(); }
  Index n_kv_heads() const { return store_.n_kv_heads(); }
  Index d_head() const { return store_.d_head(); }
  Index d_v() const { return store_.d_v(); }
  bool values_are_keys() const { return store_.values_are_keys(); }
  /// The number type its keys and values are stored in.
  KvStorage storage() const { return store_.storage(); }
  /// How the kernel multiplies by what is stored (KvArithmetic).
  KvArithmetic arithmetic() const { return store_.format().arithmetic; }
  /// What filled the cache through a layer's forward_incremental; unset while it is empty, or if
  /// only append() filled it.
  const std::optional<KvCacheOrigin>& origin() const { return origin_; }

  /// Throws unless the cache keeps keys and values of `shape` and has room for m more tokens that
  /// record `next` (what check_origin asks), the checks of a layer's forward_incremental.
  void check_append(const KvShape& shape, Index m, const KvCacheOrigin& next, const char* where) const {
    detail::check_kv_shape(*this, shape, "cache", where);
    if (m > capacity() - size())
      detail::invalid(where, "appending ", m, " tokens to ", size(), " would exceed the cache's capacity of ", capacity(), " tokens");
    detail::check_origin(origin_, next, size() + m, where);
  }

  /// Forgets everything, what filled it included.
  void reset() {
    store_.clear();
    origin_.reset();
  }
  /// Keeps tokens 0 .. position - 1 and forgets the rest. 0 <= position <= size().
  void truncate(Index position) {
    store_.truncate(position);
    if (position == 0) origin_.reset();
  }

  /// Appends keys and values of m tokens as they are: k, v: (m, n_kv_heads d_head). These are the
  /// keys as the layer stores them, rotated already if the layer has a rotary embedding (append
  /// applies none). Throws, appending nothing, if the capacity would be exceeded.
  void append(const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>& v) {
    store_.append(k, v);
  }
  /// Appends the keys of m tokens to a cache whose values are the keys' first d_v components.
  void append(const Eigen::Ref<const Matrix<Scalar>>& k) { store_.append(k); }

  /// Key j of key/value head h, component c; value likewise: for inspection. Throws
  /// std::invalid_argument unless h < n_kv_heads(), j < size() and c < d_head().
  Scalar key(Index h, Index j, Index c) const { return store_.key(h, j, c); }
  Scalar value(Index h, Index j, Index c) const { return store_.value(h, j, c); }

  /// The packed store the fused kernel reads.
  const PackedKeysValues<Scalar>& packed() const { return store_; }

 private:
  friend class MultiHeadAttention<Scalar>;
  friend class MultiHeadLatentAttention<Scalar>;
  PackedKeysValues<Scalar>& store() { return store_; }

  PackedKeysValues<Scalar> store_;
  std::optional<KvCacheOrigin> origin_;
};

/// The compiled mode's instantiations of the cache (detail/compiled.hpp).
#define HEADWISE_KV_CACHE_INSTANTIATIONS(PREFIX, S) \
  PREFIX template class KvCache<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_KV_CACHE_INSTANTIATIONS)

}  // namespace headwise
