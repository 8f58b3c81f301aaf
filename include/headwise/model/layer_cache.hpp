// LayerCache: what one layer of a whole model keeps between decoding calls: the keys and values of
// an attention layer (ordinary or latent: a KvCache), or the conv inputs and recurrent state of a
// Gated DeltaNet layer (Qwen3-Next). DecoderModel::make_caches gives one per layer.
#pragma once

#include <utility>
#include <variant>

#include "headwise/detail/errors.hpp"
#include "headwise/gated_delta_net.hpp"
#include "headwise/kv_cache.hpp"
#include "headwise/types.hpp"

namespace headwise::model {

template <class Scalar>
class LayerCache {
 public:
  explicit LayerCache(KvCache<Scalar> keys_values) : held_(std::move(keys_values)) {}
  explicit LayerCache(GatedDeltaNetCache<Scalar> state) : held_(std::move(state)) {}

  bool recurrent() const { return std::holds_alternative<GatedDeltaNetCache<Scalar>>(held_); }
  /// The tokens the layer has seen.
  Index size() const { return recurrent() ? state().tokens : keys_values().size(); }
  /// Forgets the tokens from `position` on (speculative decoding, patching): an attention layer's
  /// cache only; a recurrent state cannot be rolled back (one at `position` itself is kept).
  void truncate(Index position) {
    if (!recurrent()) return keys_values().truncate(position);
    if (position != size())
      detail::invalid("LayerCache::truncate", "a Gated DeltaNet layer's state holds ", size(), " tokens folded together: it cannot go back to ",
                      position, " (run the model again from the start)");
  }

  KvCache<Scalar>& keys_values() { return checked<KvCache<Scalar>>("LayerCache::keys_values", "a Gated DeltaNet state"); }
  const KvCache<Scalar>& keys_values() const { return const_cast<LayerCache*>(this)->keys_values(); }
  GatedDeltaNetCache<Scalar>& state() { return checked<GatedDeltaNetCache<Scalar>>("LayerCache::state", "an attention layer's keys and values"); }
  const GatedDeltaNetCache<Scalar>& state() const { return const_cast<LayerCache*>(this)->state(); }

 private:
  template <class T>
  T& checked(const char* what, const char* held) {
    if (!std::holds_alternative<T>(held_)) detail::invalid(what, "this layer's cache holds ", held);
    return std::get<T>(held_);
  }
  std::variant<KvCache<Scalar>, GatedDeltaNetCache<Scalar>> held_;
};

}  // namespace headwise::model
