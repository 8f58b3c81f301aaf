// PagedKvCache: the keys and values of many sequences in one pool of fixed-size blocks, as vLLM's
// PagedAttention keeps them, for serving on a CPU. Each sequence is a block table: entry i names the
// pool block holding its tokens [i B, (i + 1) B). Sequences fork (the child references the
// parent's blocks and nothing is copied; the partly filled last block is copied by whichever of
// the two appends into it first: copy on write), are truncated and freed; a block goes back to the
// pool when no sequence references it. A windowed layer lets go of the blocks wholly before its
// window (forget_before), so a sequence's memory stays flat however long it decodes.
//
//   PagedKvCache<float> pool({/*blocks=*/512, /*block_tokens=*/64, /*n_kv_heads=*/8, /*d_head=*/128});
//   const Index prompt = pool.add_sequence();
//   pool.append(prompt, k, v);                       // k, v: (m, n_kv_heads d_head)
//   const Index a = pool.fork(prompt), b = pool.fork(prompt);
//   AttentionResult<float> r = attend<float>(q, pool.sequence(a), call);   // the kernel follows a's table
//
// The blocks have the layout of packed_keys_values.hpp (a block is B / W of the kernel's panels),
// so a sequence gives the bits of the same keys and values in one PackedKeysValues (a KvCache).
// Sequence ids are never reused: a freed id is refused by name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/errors.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/sizes.hpp"
#include "headwise/kernels/kv_blocks.hpp"
#include "headwise/kernels/packed_keys_values.hpp"
#include "headwise/kv_cache.hpp"
#include "headwise/types.hpp"

namespace headwise {

/// The shape of a pool, by named fields.
struct PagedKvShape {
  Index blocks = 0;         ///< blocks in the pool, > 0
  Index block_tokens = 64;  ///< tokens per block: a multiple of the kernel's panel width (KvBlocks<Scalar>::lanes)
  KvShape kv;               ///< what each token keeps (kv_cache.hpp); kv.d_v = 0: d_head
};

/// One entry of a batched layer call (MultiHeadAttention::forward_incremental on a PagedBatch):
/// `tokens` rows of the call's x for sequence `sequence` of the pool.
struct BatchRows {
  Index sequence = 0;
  Index tokens = 1;
  bool shares_prefix = false;  ///< its first PagedBatch::shared_prefix keys are the batch's shared prefix
};
/// A batched layer call's rows, by sequence, and the prefix its sharing sequences hold in common
/// (AttentionBatch::shared_prefix).
struct PagedBatch {
  std::vector<BatchRows> rows;
  Index shared_prefix = 0;
};

template <class Scalar>
class HEADWISE_ISA_TAG PagedKvCache {
 public:
  static constexpr Index lanes = KvBlocks<Scalar>::lanes;

  explicit PagedKvCache(const PagedKvShape& shape) : shape_(shape) {
    constexpr const char* where = "PagedKvCache";
    if (shape_.kv.d_v == 0) shape_.kv.d_v = shape_.kv.d_head;
    detail::check_storage<Scalar>(shape_.kv.format.storage, where);
    detail::check_values_in_keys(where, shape_.kv.format, shape_.kv.d_head, shape_.kv.d_v);
    if (shape_.blocks <= 0) detail::invalid(where, "blocks must be > 0, got ", shape_.blocks);
    if (shape_.block_tokens <= 0 || shape_.block_tokens % lanes != 0)
      detail::invalid(where, "block_tokens must be a positive multiple of the kernel's panel width ", lanes, ", got ",
                      shape_.block_tokens);
    if (shape_.kv.n_kv_heads <= 0 || shape_.kv.d_head <= 0 || shape_.kv.d_v <= 0)
      detail::invalid(where, "n_kv_heads, d_head and d_v must be > 0, got ", shape_.kv.n_kv_heads, ", ", shape_.kv.d_head, " and ", shape_.kv.d_v);
    detail::check_arithmetic(where, shape_.kv.format, shape_.kv.d_head);
    const Index B = shape_.block_tokens, padded = detail::round_up_within(shape_.kv.d_v, lanes, detail::max_elements<Scalar>());
    if (padded < 0) detail::invalid(where, "d_v ", shape_.kv.d_v, " is too large");
    layout_.key_head = detail::checked_size<Scalar>(where, "a block's keys", shape_.kv.d_head, B);
    layout_.key_block = detail::checked_size<Scalar>(where, "a block's keys", layout_.key_head, shape_.kv.n_kv_heads);
    layout_.value_head = values_are_keys() ? 0 : detail::checked_size<Scalar>(where, "a block's values", padded, B);
    layout_.value_block = detail::checked_size<Scalar>(where, "a block's values", layout_.value_head, shape_.kv.n_kv_heads);
    layout_.scale_head = B, layout_.scale_block = detail::checked_size<Scalar>(where, "a block's scales", B, shape_.kv.n_kv_heads);
    const Index keys = detail::checked_size<Scalar>(where, "the pool's keys", layout_.key_block, shape_.blocks);
    const Index values = detail::checked_size<Scalar>(where, "the pool's values", layout_.value_block, shape_.blocks);
    detail::with_stored_type<Scalar>(storage(), [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      detail::allocate_uninitialized(keys_.template get<Stored>(), keys, where, "the pool's keys");
      detail::allocate_uninitialized(values_.template get<Stored>(), values, where, "the pool's values");
    });
    if (storage() == KvStorage::int8) {  // zeroed: a scale past a sequence's tokens multiplies masked scores
      const Index scales = detail::checked_size<Scalar>(where, "the pool's int8 scales", layout_.scale_block, shape_.blocks);
      detail::allocate(key_scales_, scales, 0.0f, where, "the pool's int8 scales");
      detail::allocate(value_scales_, scales, 0.0f, where, "the pool's int8 scales");
    }
    references_.assign(static_cast<std::size_t>(shape_.blocks), 0);
    row_writes_.assign(static_cast<std::size_t>(detail::checked_size<Scalar>(where, "the pool's rows", shape_.blocks, B)), 0);
    for (Index b = shape_.blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
  }

  const PagedKvShape& shape() const { return shape_; }
  Index n_kv_heads() const { return shape_.kv.n_kv_heads; }
  Index d_head() const { return shape_.kv.d_head; }
  Index d_v() const { return shape_.kv.d_v; }
  Index block_tokens() const { return shape_.block_tokens; }
  KvStorage storage() const { return shape_.kv.format.storage; }
  /// How the kernel multiplies by what is stored (KvArithmetic).
  KvArithmetic arithmetic() const { return shape_.kv.format.arithmetic; }
  bool values_are_keys() const { return shape_.kv.format.values == ValueStorage::key_prefix; }
  Index block_count() const { return shape_.blocks; }
  Index free_blocks() const { return static_cast<Index>(free_.size()); }
  /// How many sequences reference pool block b.
  Index references(Index b) const {
    if (b < 0 || b >= shape_.blocks) detail::invalid("PagedKvCache::references", "block ", b, " is outside the pool's [0, ", shape_.blocks, ")");
    return references_[static_cast<std::size_t>(b)];
  }

  /// A new, empty sequence; returns its id.
  Index add_sequence() {
    sequences_.emplace(next_id_, Sequence{});
    return next_id_++;
  }
  /// A new sequence holding the tokens of `parent`: its blocks referenced, nothing copied (the
  /// partly filled last block is copied when either sequence appends into it).
  Index fork(Index parent) {
    const Sequence& from = live("PagedKvCache::fork", parent);
    for (const Index b : from.table) ++references_[static_cast<std::size_t>(b)];
    Sequence child = from;
    sequences_.emplace(next_id_, std::move(child));
    return next_id_++;
  }
  /// Forgets sequence s: its blocks go back to the pool where no other sequence references them.
  void free(Index s) {
    Sequence& seq = live("PagedKvCache::free", s);
    release(seq.table, 0);
    sequences_.erase(s);
  }
  /// Keeps tokens 0 .. position - 1 of s (first_kept(s) <= position <= size(s)); the blocks past
  /// them go back to the pool where no other sequence references them.
  void truncate(Index s, Index position) {
    Sequence& seq = live("PagedKvCache::truncate", s);
    const Index first = seq.first_block * shape_.block_tokens;
    if (position < first || position > seq.size)
      detail::invalid("PagedKvCache::truncate", "position ", position, " is outside [", first, ", ", seq.size, "] for sequence ", s,
                      first > 0 ? " (the keys before its window were let go)" : "");
    release(seq.table, blocks_up_to(position) - seq.first_block);
    seq.size = position;
    if (position == 0) seq.origin.reset();
  }
  /// Lets go of the blocks of s that hold only tokens before `position` (a window's keys that no
  /// later query sees): memory stays flat as a windowed sequence decodes.
  void forget_before(Index s, Index position) {
    Sequence& seq = live("PagedKvCache::forget_before", s);
    const Index count = std::min(std::max(position, Index(0)), seq.size) / shape_.block_tokens - seq.first_block;
    if (count <= 0) return;
    for (Index i = 0; i < count; ++i) drop(seq.table[static_cast<std::size_t>(i)]);
    seq.table.erase(seq.table.begin(), seq.table.begin() + count);
    seq.first_block += count;
  }

  /// Appends m tokens to sequence s: k (m, n_kv_heads d_head), v (m, n_kv_heads d_v), heads in
  /// columns. Throws, changing nothing, if a shape does not fit, an entry is not finite (or not in
  /// the stored type), or the pool has too few free blocks.
  void append(Index s, const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>& v, int threads = 1) {
    constexpr const char* where = "PagedKvCache::append";
    if (values_are_keys()) detail::invalid(where, "this pool's values are its keys' first ", d_v(), " components: append(s, k) alone");
    if (v.cols() != n_kv_heads() * d_v()) detail::invalid(where, "v has ", v.cols(), " columns, expected n_kv_heads d_v = ", n_kv_heads() * d_v());
    if (v.rows() != k.rows()) detail::invalid(where, "k has ", k.rows(), " rows but v has ", v.rows());
    append_rows(s, k, &v, threads);
  }
  /// Appends m tokens to a pool whose values are its keys' first d_v components.
  void append(Index s, const Eigen::Ref<const Matrix<Scalar>>& k, int threads = 1) {
    if (!values_are_keys()) detail::invalid("PagedKvCache::append", "this pool keeps values of their own: append(s, k, v)");
    append_rows(s, k, nullptr, threads);
  }

  /// What sequence s holds (its block table, size, first block), and when (the pool's count of
  /// writes), to put back with restore().
  struct Saved {
    Index sequence;
    std::vector<Index> table;
    Index size, first_block;
    std::uint64_t writes;
  };
  Saved save(Index s) const {
    const Sequence& seq = live("PagedKvCache::save", s);
    return {s, seq.table, seq.size, seq.first_block, writes_};
  }
  /// Puts sequence saved.sequence back as save() found it, its own blocks since (a copy on write
  /// included) given back: how a refused call changes nothing. Only appends and truncations may
  /// have happened to it since (not forget_before, which gives blocks away for good). Throws,
  /// changing nothing, if a saved block was since handed to another sequence or its saved rows
  /// written over (a truncation, then an append into the same block).
  void restore(const Saved& saved) {
    constexpr const char* where = "PagedKvCache::restore";
    Sequence& seq = live(where, saved.sequence);
    if (saved.first_block != seq.first_block)
      detail::invalid(where, "sequence ", saved.sequence, " let blocks go since it was saved");
    for (std::size_t i = 0; i < saved.table.size(); ++i) {
      const Index b = saved.table[i], start = (saved.first_block + static_cast<Index>(i)) * shape_.block_tokens;
      for (Index r = 0; r < std::clamp<Index>(saved.size - start, 0, shape_.block_tokens); ++r)
        if (row_writes_[static_cast<std::size_t>(b * shape_.block_tokens + r)] > saved.writes)
          detail::invalid(where, "token ", start + r, " of sequence ", saved.sequence, " (block ", b, ") was written over since it ",
                          "was saved (a truncation and an append into its block, or the block handed to another sequence)");
    }
    for (const Index b : saved.table)  // first: a block in both never reaches 0; one let go since leaves the free list
      if (references_[static_cast<std::size_t>(b)]++ == 0) free_.erase(std::find(free_.begin(), free_.end(), b));
    release(seq.table, 0);
    seq.table = saved.table, seq.size = saved.size;
  }

  Index size(Index s) const { return live("PagedKvCache::size", s).size; }
  /// The first token s still holds (its earlier blocks let go by forget_before).
  Index first_kept(Index s) const { return live("PagedKvCache::first_kept", s).first_block * shape_.block_tokens; }
  /// Pool blocks of s in order, from first_kept(s) on.
  const std::vector<Index>& block_table(Index s) const { return live("PagedKvCache::block_table", s).table; }
  /// What filled s through a layer (kv_cache.hpp); unset while it is empty.
  const std::optional<KvCacheOrigin>& origin(Index s) const { return live("PagedKvCache::origin", s).origin; }
  void set_origin(Index s, const KvCacheOrigin& origin) { live("PagedKvCache::set_origin", s).origin = origin; }
  /// Throws unless the pool keeps keys and values of `shape` (a layer's, kv_cache.hpp).
  void check_shape(const KvShape& shape, const char* where) const { detail::check_kv_shape(*this, shape, "pool", where); }
  /// Throws unless batch's entries name distinct live sequences whose tokens add up to `rows` (a
  /// batched layer call's x).
  void check_batch(const PagedBatch& batch, Index rows, const char* where) const {
    Index total = 0;
    for (std::size_t i = 0; i < batch.rows.size(); ++i) {
      const BatchRows& r = batch.rows[i];
      if (r.tokens < 0 || r.tokens > rows - total)
        detail::invalid(where, "entry ", i, " of the batch has ", r.tokens, " tokens, ", rows - total, " rows of x are left for it");
      for (std::size_t j = 0; j < i; ++j)
        if (batch.rows[j].sequence == r.sequence)
          detail::invalid(where, "sequence ", r.sequence, " is in the batch twice (entries ", j, " and ", i, ")");
      live(where, r.sequence);
      total += r.tokens;
    }
    if (total != rows) detail::invalid(where, "the batch's entries hold ", total, " tokens, x has ", rows, " rows");
  }
  /// Throws unless m tokens that record `next` may follow sequence s's (detail::check_origin).
  void check_continues(Index s, Index m, const KvCacheOrigin& next, const char* where) const {
    detail::check_origin(origin(s), next, size(s) + m, where);
  }
  bool holds(Index s) const { return sequences_.count(s) != 0; }

  /// Sequence s as the kernel reads it. Valid until s or the pool changes.
  KvBlocks<Scalar> sequence(Index s) const {
    const Sequence& seq = live("PagedKvCache::sequence", s);
    return KvBlocks<Scalar>(pool(), seq.table.data(), seq.first_block, seq.size);
  }
  /// `size` tokens of a block table kept outside the pool (a scheduler's): checked to name blocks
  /// of the pool that some sequence holds, each holding the tokens the view reads from it (entry
  /// i: tokens i B .. min(size, (i + 1) B) - 1 of some sequence holding that block there). The
  /// table must outlive the view.
  KvBlocks<Scalar> blocks(const std::vector<Index>& table, Index size) const {
    constexpr const char* where = "PagedKvCache::blocks";
    for (std::size_t i = 0; i < table.size(); ++i) {
      const Index b = table[i];
      if (b < 0 || b >= shape_.blocks)
        detail::invalid(where, "block table entry ", i, " is block ", b, ", outside the pool's [0, ", shape_.blocks, ")");
      if (references_[static_cast<std::size_t>(b)] == 0)
        detail::invalid(where, "block table entry ", i, " is block ", b, ", which no sequence holds (it is free)");
    }
    if (size < 0 || size > static_cast<Index>(table.size()) * shape_.block_tokens)
      detail::invalid(where, size, " tokens do not fit in a table of ", table.size(), " blocks of ", shape_.block_tokens);
    const std::vector<Index> held = tokens_held();
    for (std::size_t i = 0; i < table.size(); ++i) {
      const Index wanted = std::clamp<Index>(size - static_cast<Index>(i) * shape_.block_tokens, 0, shape_.block_tokens);
      if (wanted > held[static_cast<std::size_t>(table[i])])
        detail::invalid(where, "block table entry ", i, " reads ", wanted, " tokens of block ", table[i], ", which holds ",
                        held[static_cast<std::size_t>(table[i])], " of any sequence's (size ", size, " is past its tokens)");
    }
    return KvBlocks<Scalar>(pool(), table.data(), 0, size);
  }

 private:
  struct Sequence {
    std::vector<Index> table;
    Index size = 0, first_block = 0;
    std::optional<KvCacheOrigin> origin;
  };
  /// How many tokens each block holds for the sequences that hold it (the most of any).
  std::vector<Index> tokens_held() const {
    std::vector<Index> held(static_cast<std::size_t>(shape_.blocks), 0);
    for (const auto& [id, seq] : sequences_)
      for (std::size_t i = 0; i < seq.table.size(); ++i) {
        const Index start = (seq.first_block + static_cast<Index>(i)) * shape_.block_tokens;
        Index& h = held[static_cast<std::size_t>(seq.table[i])];
        h = std::max(h, std::clamp<Index>(seq.size - start, 0, shape_.block_tokens));
      }
    return held;
  }

  Sequence& live(const char* where, Index s) {
    const auto it = sequences_.find(s);
    if (it != sequences_.end()) return it->second;
    if (s >= 0 && s < next_id_) detail::invalid(where, "sequence ", s, " was freed");
    detail::invalid(where, "no sequence ", s, " (ids so far: 0 .. ", next_id_ - 1, ")");
  }
  const Sequence& live(const char* where, Index s) const { return const_cast<PagedKvCache*>(this)->live(where, s); }

  KvBlockPool pool() const {
    KvBlockPool p = layout_;
    p.n_kv_heads = shape_.kv.n_kv_heads, p.d_head = shape_.kv.d_head, p.d_v = shape_.kv.d_v, p.format = shape_.kv.format;
    p.block_tokens = shape_.block_tokens;
    detail::with_stored_type<Scalar>(storage(), [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      p.keys = keys_.template get<Stored>().data();
      p.values = values_are_keys() ? nullptr : values_.template get<Stored>().data();
    });
    p.key_scales = key_scales_.data(), p.value_scales = value_scales_.data();
    return p;
  }
  /// Blocks needed to hold tokens 0 .. position - 1.
  Index blocks_up_to(Index position) const { return (position + shape_.block_tokens - 1) / shape_.block_tokens; }
  void drop(Index b) {
    if (--references_[static_cast<std::size_t>(b)] == 0) free_.push_back(b);
  }
  /// Drops table entries from `keep` on.
  void release(std::vector<Index>& table, Index keep) {
    for (std::size_t i = static_cast<std::size_t>(keep); i < table.size(); ++i) drop(table[i]);
    table.resize(static_cast<std::size_t>(keep));
  }
  Index take_block() {
    const Index b = free_.back();
    free_.pop_back();
    references_[static_cast<std::size_t>(b)] = 1;
    return b;
  }
  /// Stamps rows [row, row + run) of block b with the count of writes so far (what restore() checks).
  void note_written(Index b, Index row, Index run) {
    ++writes_;
    std::fill_n(row_writes_.begin() + b * shape_.block_tokens + row, run, writes_);
  }

  /// append()'s work: every check first, then the blocks (a shared, partly filled last block copied
  /// first), then each block's run of tokens packed head by head.
  void append_rows(Index s, const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>* v, int threads) {
    constexpr const char* where = "PagedKvCache::append";
    Sequence& seq = live(where, s);
    if (k.cols() != n_kv_heads() * d_head()) detail::invalid(where, "k has ", k.cols(), " columns, expected n_kv_heads d_head = ", n_kv_heads() * d_head());
    if (!detail::storable(k, storage())) detail::refuse_unstorable<Scalar>(where, "k", k, d_head(), seq.size, storage());
    if (v && !detail::storable(*v, storage())) detail::refuse_unstorable<Scalar>(where, "v", *v, d_v(), seq.size, storage());
    threads = static_cast<int>(std::min<Index>(n_kv_heads(), detail::thread_count(threads, where)));
    const Index m = k.rows(), B = shape_.block_tokens;
    if (m == 0) return;
    const bool copy_last = seq.size % B != 0 && references_[static_cast<std::size_t>(seq.table.back())] > 1;
    const Index needed = blocks_up_to(seq.size + m) - seq.first_block - static_cast<Index>(seq.table.size()) + (copy_last ? 1 : 0);
    if (needed > free_blocks())
      detail::invalid(where, "appending ", m, " tokens to sequence ", s, " (holding ", seq.size, ") needs ", needed,
                      " free blocks of ", B, " tokens; the pool has ", free_blocks(), " of ", shape_.blocks);
    if (copy_last) {  // copy on write: the block another sequence also holds stays as it is
      const Index from = seq.table.back(), to = take_block();
      copy_block(from, to);
      note_written(to, 0, B);
      drop(from);
      seq.table.back() = to;
    }
    seq.table.reserve(static_cast<std::size_t>(blocks_up_to(seq.size + m) - seq.first_block));  // (no push_back below throws)
    while (static_cast<Index>(seq.table.size()) + seq.first_block < blocks_up_to(seq.size + m)) seq.table.push_back(take_block());
    for (Index t = 0; t < m;) {  // run by run of tokens in one block
      const Index pos = seq.size + t, run = std::min(m - t, B - pos % B);
      const Index block = seq.table[static_cast<std::size_t>(pos / B - seq.first_block)];
      note_written(block, pos % B, run);
      detail::parallel_for<detail::Schedule::by_part>(run >= 64 ? threads : 1, n_kv_heads(), [&](Index h) { pack(block, h, pos % B, k.block(t, h * d_head(), run, d_head()), v, t, run); });
      t += run;
    }
    seq.size += m;
  }
  /// Head h's run of tokens (rows t .. t + run - 1 of k and v) into block b at row `row`.
  void pack(Index b, Index h, Index row, const Eigen::Ref<const Matrix<Scalar>>& k_h, const Eigen::Ref<const Matrix<Scalar>>* v,
            Index t, Index run) {
    detail::with_stored_type<Scalar>(storage(), [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      const bool scaled = storage() == KvStorage::int8;
      const Index scales = b * layout_.scale_block + h * layout_.scale_head;
      const detail::HeadPanels<Stored> to{keys_.template get<Stored>().data() + b * layout_.key_block + h * layout_.key_head,
                                          v ? values_.template get<Stored>().data() + b * layout_.value_block + h * layout_.value_head : nullptr,
                                          shape_.block_tokens * lanes, scaled ? key_scales_.data() + scales : nullptr,
                                          scaled ? value_scales_.data() + scales : nullptr, shape_.kv.format.lane_entries()};
      if (!v) return detail::pack_head_rows<Scalar, Stored>(to, row, k_h, nullptr);
      const Eigen::Ref<const Matrix<Scalar>> v_h = v->block(t, h * d_v(), run, d_v());
      detail::pack_head_rows<Scalar, Stored>(to, row, k_h, &v_h);
    });
  }
  void copy_block(Index from, Index to) {
    detail::with_stored_type<Scalar>(storage(), [&](auto tag) {
      using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
      auto& keys = keys_.template get<Stored>();
      auto& values = values_.template get<Stored>();
      std::copy_n(keys.begin() + from * layout_.key_block, layout_.key_block, keys.begin() + to * layout_.key_block);
      std::copy_n(values.begin() + from * layout_.value_block, layout_.value_block, values.begin() + to * layout_.value_block);
    });
    if (storage() != KvStorage::int8) return;
    for (std::vector<float>* scales : {&key_scales_, &value_scales_})
      std::copy_n(scales->begin() + from * layout_.scale_block, layout_.scale_block, scales->begin() + to * layout_.scale_block);
  }

  PagedKvShape shape_;
  KvBlockPool layout_;  // the strides (the pointers are filled in by pool())
  detail::StoredBuffers<Scalar> keys_, values_;
  std::vector<float> key_scales_, value_scales_;
  std::vector<Index> references_, free_;
  std::vector<std::uint64_t> row_writes_;  // per block and row: the writes_ count when it was last written
  std::uint64_t writes_ = 0;
  std::unordered_map<Index, Sequence> sequences_;
  Index next_id_ = 0;
};

namespace detail {

/// One sequence of a pool seen as a store (size, append, truncate, blocks): what a layer's
/// forward_incremental fills and attends over.
template <class Scalar>
struct PagedSequence {
  PagedKvCache<Scalar>& pool;
  Index id;
  Index size() const { return pool.size(id); }
  void truncate(Index position) { pool.truncate(id, position); }
  void append(const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>& v, int threads) {
    pool.append(id, k, v, threads);
  }
  KvBlocks<Scalar> blocks() const { return pool.sequence(id); }
};

}  // namespace detail
/// The compiled mode's instantiations of the paged pool (detail/compiled.hpp).
#define HEADWISE_PAGED_KV_CACHE_INSTANTIATIONS(PREFIX, S) \
  PREFIX template class PagedKvCache<S>;
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_PAGED_KV_CACHE_INSTANTIATIONS)

}  // namespace headwise
