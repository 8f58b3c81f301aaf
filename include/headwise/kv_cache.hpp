// KvCache: the keys and values a layer has seen, for incremental decoding. Capacity is set up
// front and never grows, so a decoding step never reallocates; truncate() rolls back (for
// speculative decoding). Stores n_kv_heads heads (fewer than n_heads under grouped-query attention),
// already in the layout of the fused kernel. The cache remembers what filled it (the layer's
// rotary embedding, the window its calls used), so that a layer refuses, by name, a cache another
// kind of layer filled or a call whose window differs from the one its keys were attended with.
#pragma once

#include <optional>

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
  /// What filled the cache through a layer's forward_incremental; unset while it is empty, or if
  /// only append() filled it.
  const std::optional<KvCacheOrigin>& origin() const { return origin_; }

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
#if HEADWISE_EXTERN_TEMPLATES
HEADWISE_KV_CACHE_INSTANTIATIONS(extern, float)
HEADWISE_KV_CACHE_INSTANTIATIONS(extern, double)
#endif

}  // namespace headwise
