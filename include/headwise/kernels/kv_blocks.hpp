// KvBlocks: one sequence's keys and values as the fused kernel reads them, in blocks of a fixed
// number of tokens (a whole number of the kernel's panels), each found through a block table. A
// PackedKeysValues (a KvCache) is one block holding every token; a sequence of a paged cache
// (paged_kv_cache.hpp) is blocks of a shared pool in any order, some of them shared with other
// sequences; a windowed sequence may have let its first blocks go (first_kept()).
//
// Layout of a block, per key/value head, as in packed_keys_values.hpp: key panels of W keys
// (d_head x W each, row c = component c of W keys), value panels of W value columns
// (block_tokens x W each, row j = the block's token j); under the stored arithmetic the rows of a
// panel lie in groups of 4 (int8) or 2 (BF16) per lane (StoreFormat::lane_entries). Token j of the sequence lives in block
// table[j / block_tokens - first_block], at row j % block_tokens. The kernel never lets a key tile's
// products cross a block: a score product covers one panel, and the product with V is split at
// block ends into consecutive runs of the same chain (detail/tile_product.hpp), so a sequence gives
// the same bits however its blocks lie.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/panel_layout.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/kv_storage.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// Where a store's values live: in their own panels, or in the keys, as each key's first d_v
/// components (the latent of multi-head latent attention is both key and value: stored once).
enum class ValueStorage { own, key_prefix };

/// How a store keeps what is appended: the values on their own or inside the keys, the number
/// type (KvStorage: as computed, BF16, F16, int8 with a scale per token and head), and how the
/// kernel multiplies by it (KvArithmetic: widened, or stored: int8 as integers, BF16 by pairs, their
/// panels laid out for that, or F16 by F16 chains, over the widened store's panels:
/// detail/int8_products.hpp, detail/bf16_products.hpp, detail/f16_products.hpp).
struct StoreFormat {
  ValueStorage values = ValueStorage::own;
  KvStorage storage = KvStorage::as_computed;
  KvArithmetic arithmetic = KvArithmetic::widened;

  /// How many entries of a key (components) or of a value column (tokens) share one 32-bit lane
  /// of a panel, as the stored arithmetic's instructions read them: 4 for int8 under it (quads), 2
  /// for BF16 (pairs), 1 otherwise (a panel row by row).
  constexpr Index lane_entries() const {
    if (arithmetic != KvArithmetic::stored) return 1;
    return storage == KvStorage::int8 ? detail::int8_quad : storage == KvStorage::bf16 ? detail::bf16_pair : 1;
  }
  /// True for F16 under the stored arithmetic: chains of F16 products (detail/f16_products.hpp),
  /// over the panels of a widened F16 store (one entry a lane).
  constexpr bool f16_products() const { return storage == KvStorage::f16 && arithmetic == KvArithmetic::stored; }
};

namespace detail {
/// Where entry (row, lane) of a W-wide panel lies: row-major (entries = 1), or in groups of
/// `entries` rows, each lane's group together (entry (row, lane) at (row / e) e W + lane e + row % e).
inline Index panel_offset(Index entries, Index row, Index lane, Index W) {
  return (row / entries) * entries * W + lane * entries + row % entries;
}

/// Throws unless a store of keys of width d_head can be kept as `format` says (the number type's
/// own limits are check_storage's).
inline void check_arithmetic(const char* where, const StoreFormat& format, Index d_head) {
  if (format.arithmetic == KvArithmetic::widened) return;
  if (format.storage == KvStorage::as_computed)
    invalid(where, "the stored arithmetic multiplies keys and values stored in int8 (as integers), BF16 (by pairs) or F16 (by F16 ",
            "chains); keys and values kept as computed take KvArithmetic::widened");
  const Index entries = format.lane_entries();
  const Index deepest = format.storage == KvStorage::int8 ? max_int8_depth : std::numeric_limits<int>::max();
  if (d_head % entries != 0 || d_head > deepest)
    invalid(where, storage_name(format.storage), " keys under the stored arithmetic need d_head a multiple of ", entries,
            " (the products take ", entries, " components at a time) and at most ", deepest, ", got ", d_head);
}

/// Throws unless values can be kept inside the keys (ValueStorage::key_prefix) as `format` says:
/// the keys' first d_v components (d_v <= d_head), stored as computed, or in int8 under the stored
/// arithmetic (whose kernel reads the values out of the key panels, with the keys' scales).
inline void check_values_in_keys(const char* where, const StoreFormat& format, Index d_head, Index d_v) {
  if (format.values != ValueStorage::key_prefix) return;
  if (d_v > d_head) invalid(where, "values as the keys' first d_v components need d_v <= d_head, got ", d_v, " > ", d_head);
  const bool int8_stored = format.storage == KvStorage::int8 && format.arithmetic == KvArithmetic::stored;
  if (format.storage != KvStorage::as_computed && !int8_stored)
    invalid(where, "values inside the keys are stored as computed, or in int8 under the stored arithmetic; not in ",
            storage_name(format.storage), " under the ", arithmetic_name(format.arithmetic), " arithmetic");
}
}  // namespace detail

/// What every block of a store shares: the heads' shape, the format, the block size, and where
/// the numbers are. Block b's head g begins at keys + b key_block + g key_head (in the stored
/// type), likewise for the values and the int8 scales (one float per token).
struct KvBlockPool {
  Index n_kv_heads = 0, d_head = 0, d_v = 0;
  StoreFormat format;
  Index block_tokens = 0;  ///< tokens per block: a multiple of the kernel's panel width
  const void* keys = nullptr;
  const void* values = nullptr;  ///< null where the values are the keys'
  const float* key_scales = nullptr;
  const float* value_scales = nullptr;  ///< int8 only
  Index key_head = 0, key_block = 0, value_head = 0, value_block = 0, scale_head = 0, scale_block = 0;
};

template <class Scalar>
class KvBlocks {
 public:
  static constexpr Index lanes = detail::TileShape<Scalar>::lanes;

  /// `size` tokens of `pool`'s blocks: tokens [(first_block + i) B, (first_block + i + 1) B) in
  /// block table[i] (B = pool.block_tokens); a null table: block i holds them (one store's own
  /// blocks). Checked by whoever makes one (PackedKeysValues::blocks, PagedKvCache).
  KvBlocks(const KvBlockPool& pool, const Index* table, Index first_block, Index size)
      : pool_(pool), table_(table), first_block_(first_block), size_(size) {}

  Index size() const { return size_; }
  Index n_kv_heads() const { return pool_.n_kv_heads; }
  Index d_head() const { return pool_.d_head; }
  Index d_v() const { return pool_.d_v; }
  Index block_tokens() const { return pool_.block_tokens; }
  bool values_are_keys() const { return pool_.format.values == ValueStorage::key_prefix; }
  KvStorage storage() const { return pool_.format.storage; }
  const StoreFormat& format() const { return pool_.format; }
  const KvBlockPool& pool() const { return pool_; }
  /// The first token still held: the blocks before it were let go (a window's bounded cache).
  Index first_kept() const { return first_block_ * pool_.block_tokens; }
  /// The first n tokens of the sequence (n <= size()): a shared prefix's view.
  KvBlocks first(Index n) const {
    if (n < 0 || n > size_) detail::invalid("KvBlocks::first", n, " tokens of a sequence of ", size_);
    return KvBlocks(pool_, table_, first_block_, n);
  }
  /// The pool block holding token j (first_kept() <= j).
  Index block_of(Index j) const {
    const Index b = j / pool_.block_tokens - first_block_;
    return table_ ? table_[b] : b;
  }
  /// The first token past the block holding token j.
  Index block_end(Index j) const { return (j / pool_.block_tokens + 1) * pool_.block_tokens; }

  /// The key panel holding token j (j a multiple of lanes) of head g: d_head x W, row c component c.
  template <class Stored>
  const Stored* key_panel(Index g, Index j) const {
    return static_cast<const Stored*>(pool_.keys) + block_of(j) * pool_.key_block + g * pool_.key_head +
           (j % pool_.block_tokens) / lanes * key_panel_stride();
  }
  /// Row j of head g's first value panel; panel q at + q value_panel_stride(), the rows of j's
  /// block after it at + lanes each.
  template <class Stored>
  const Stored* value_row(Index g, Index j) const {
    return static_cast<const Stored*>(pool_.values) + block_of(j) * pool_.value_block + g * pool_.value_head +
           (j % pool_.block_tokens) * lanes;
  }
  Index key_panel_stride() const { return pool_.d_head * lanes; }
  Index value_panel_stride() const { return pool_.block_tokens * lanes; }
  /// The int8 scales of token j of head g and of the tokens after it in its block.
  const float* key_scales(Index g, Index j) const { return scales(pool_.key_scales, g, j); }
  const float* value_scales(Index g, Index j) const { return scales(values_are_keys() ? pool_.key_scales : pool_.value_scales, g, j); }

  /// Key j of head g, component c, and entry (j, c) of its values, widened (times the int8 scale):
  /// for tests and inspection. Throws std::invalid_argument unless g < n_kv_heads,
  /// first_kept() <= j < size() and c < d_head (d_v), naming `where`.
  Scalar key(Index g, Index j, Index c, const char* where = "KvBlocks::key") const {
    check_entry(where, g, j, c, pool_.d_head);
    return stored_key(g, j, c);
  }
  Scalar value(Index g, Index j, Index c, const char* where = "KvBlocks::value") const {
    check_entry(where, g, j, c, pool_.d_v);
    if (values_are_keys()) return stored_key(g, j, c);
    return detail::with_stored_type<Scalar>(storage(), [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      const Index e = pool_.format.lane_entries();
      const Stored* group = value_row<Stored>(g, j / e * e);  // the rows of j's lane group
      const Index at = detail::panel_offset(e, j % e, c % lanes, lanes);
      const Scalar x = detail::from_stored<Scalar>(group[(c / lanes) * value_panel_stride() + at]);
      return storage() == KvStorage::int8 ? x * static_cast<Scalar>(*value_scales(g, j)) : x;
    });
  }

 private:
  const float* scales(const float* base, Index g, Index j) const {
    return base + block_of(j) * pool_.scale_block + g * pool_.scale_head + j % pool_.block_tokens;
  }
  Scalar stored_key(Index g, Index j, Index c) const {
    return detail::with_stored_type<Scalar>(storage(), [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      Stored entry = key_panel<Stored>(g, j / lanes * lanes)[detail::panel_offset(pool_.format.lane_entries(), c, j % lanes, lanes)];
      if constexpr (std::is_same_v<Stored, std::int8_t>)
        if (pool_.format.lane_entries() > 1) entry = detail::flip_sign(entry);  // (held as k + 128)
      const Scalar x = detail::from_stored<Scalar>(entry);
      return storage() == KvStorage::int8 ? x * static_cast<Scalar>(*key_scales(g, j)) : x;
    });
  }
  void check_entry(const char* where, Index g, Index j, Index c, Index width) const {
    if (g < 0 || g >= pool_.n_kv_heads) detail::invalid(where, "head ", g, " out of range [0, ", pool_.n_kv_heads, ")");
    if (j < first_kept() || j >= size_)
      detail::invalid(where, "token ", j, " out of range [", first_kept(), ", ", size_, ") (the tokens held)");
    if (c < 0 || c >= width) detail::invalid(where, "component ", c, " out of range [0, ", width, ")");
  }

  KvBlockPool pool_;
  const Index* table_;
  Index first_block_, size_;
};

}  // namespace headwise
