// What a decoding step asks memory for while it computes (detail::PanelPrefetch): a piece of what
// the step reads later, into L2, and (the widened products, the BF16 and F16 value products) each
// product's own panels a little ahead, into L1. A
// decoding step reads a key tile's keys (its scores), computes the softmax, then reads the tile's
// values: left to itself, memory would idle while the scores and the softmax are computed. The
// widened tiles (kernels/fused_attention.hpp) and the BF16 and F16 stored arithmetics'
// (kernels/panel_tiles.hpp; F16's unmeasured) ask for their next phase's bytes (score_phase_prefetch,
// value_phase_prefetch); the int8 stored arithmetic's (kernels/int8_tiles.hpp) for the value
// panels one key tile later (next_tile_value_panel), and for keys in another block 512 tokens
// ahead (key_panel_ahead). Measured at Llama 3 8B's
// heads, one thread, 32768 tokens (AMD EPYC Zen 4, bench/RESULTS.md): float32 13.9 -> 10.7 ms a
// step (0.92 of the triad), BF16 widened 8.1 -> 6.4, BF16 stored 7.7 -> 6.8, int8 stored 4.0-4.6
// -> 3.7-3.9 (a phase ahead) -> 2.9-3.3 (a tile ahead) -> 2.8-3.1 (the keys left to the core) ->
// 2.5-2.7 (key tiles of 2048: default_key_tile).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"
#include "headwise/variants/key_range.hpp"

namespace headwise::detail {

/// How far ahead of each panel row a decoding step's BF16 (and F16) value products ask for their own panels,
/// into L1 (the next phase's bytes already wait in L2; the widened products ask by rows, the int8
/// ones not at all, below): 4 KiB. Measured at Llama 3 8B's heads, one thread (Zen 4, two binaries
/// alternated four times), keys and values 4 KiB ahead against the keys 16 KiB ahead (best on Zen 5
/// before the next phase was asked for): BF16 stored at 32768 tokens 6.0-6.6 ms against 6.4-7.3,
/// at 131072 25.8-26.3 against 26.1-27.5; both 2 KiB ahead: slower (6.1-7.1). With key tiles of
/// 1024 (default_key_tile) the key products ask for nothing into L1: 5.91-5.98 against 6.10-6.30
/// ms at 32768, 24.1-24.3 against 25.2-25.3 at 131072 (bench_decode, two binaries alternated,
/// three repetitions interleaved each; float32 the same in both).
constexpr Index decoding_value_prefetch_bytes = 4096;

/// Score product `part` of `parts` of a decoding step's key tile (entries of `Stored`): its piece
/// of the values the tile's rows read next, tokens `tokens` of head g
/// (cut at the first token's block end): a region per value panel, value_panel_stride() entries
/// apart, each cut into parts / regions pieces, a piece per product. Values inside the keys (a
/// latent) have no bytes of their own: none.
template <class Stored, class Call>
PanelPrefetch score_phase_prefetch(const Call& call, Index g, KeyRange tokens, Index part, Index parts) {
  constexpr Index W = std::decay_t<decltype(call.kv)>::lanes;
  const Index regions = call.dv_padded() / W, pieces = std::max<Index>(1, parts / regions), region = part / pieces;
  const Index held = std::min(tokens.end, call.kv.block_end(tokens.begin)) - tokens.begin;
  const Index piece_bytes = held * W * Index(sizeof(Stored)) / pieces;
  PanelPrefetch prefetch;
  if (call.kv.values_are_keys() || region >= regions || piece_bytes < 64) return prefetch;  // (values inside the keys: read already)
  const Stored* values = call.kv.template value_row<Stored>(g, tokens.begin) + region * call.kv.value_panel_stride();
  prefetch.next_phase = reinterpret_cast<const char*>(values) + part % pieces * piece_bytes;
  return prefetch;
}

/// Value product `part` of `parts` of a decoding step's key tile at j0 (entries of `Stored`): its
/// own panel ahead, and its piece of the next key tile's keys (those in that tile's first block,
/// and held), cut into `parts` pieces.
template <class Stored, class Call>
PanelPrefetch value_phase_prefetch(const Call& call, Index g, Index j0, Index part, Index parts) {
  const Index next = j0 + call.tk, tokens = std::min({call.tk, call.kv.block_end(next) - next, call.kv.size() - next});
  const Index piece_bytes = tokens * call.kv.d_head() * Index(sizeof(Stored)) / parts;
  PanelPrefetch prefetch{decoding_value_prefetch_bytes};
  if (tokens <= 0 || piece_bytes < 64) return prefetch;
  prefetch.next_phase = reinterpret_cast<const char*>(call.kv.template key_panel<Stored>(g, next)) + part * piece_bytes;
  return prefetch;
}

/// The int8 products ask further ahead, into L2, and for nothing into L1 (what they read waits in
/// L2 already; the core's own prefetcher takes it on): the value products each for its own panel
/// one key tile later (next_tile_value_panel), two phases ahead where the others ask one; the key
/// products for the keys int8_key_lead tokens later, only where those lie in another block (a
/// paged cache's; key_panel_ahead). An int8 step computes about as long as its bytes take to arrive
/// (Zen 4: 8.3 ns a token and key/value head in cache, 10.2 ns its bytes at the float32 step's
/// rate), so a phase's lead hid only part of the memory's time. Measured at Llama 3 8B's heads, one
/// thread (Zen 4, binaries alternated, bench/RESULTS.md): 32768 tokens 3.5-3.9 ms a step -> 2.9-3.3
/// ms a tile ahead; two and four tiles ahead the same or slower; without the panels 4 KiB ahead
/// into L1, 3% faster in cache and the same from memory. The widened and BF16 products, which take
/// two panels at once, were the same or slower a tile ahead: they keep one phase. A head's keys in
/// one block are one stream, which the core's own prefetcher follows better than the asks (131072
/// tokens in one block: 12.5 against 13.3-14.4 ms a step; 32768 the same or faster). Paged blocks
/// of 64 tokens with key tiles of 2048 (default_key_tile): the keys asked for a tile later 20.9-22.5
/// ms, 512 tokens later 18.4-19.3, one block later 17.8-18.8 (at 512-key tiles, 17.0-18.1).
constexpr Index int8_key_lead = 512;
template <class Call>
PanelPrefetch key_panel_ahead(const Call& call, Index g, Index j) {
  PanelPrefetch prefetch;
  if (j + int8_key_lead < call.kv.size() && call.kv.block_end(j) <= j + int8_key_lead)
    prefetch.next_phase = reinterpret_cast<const char*>(call.kv.template key_panel<std::int8_t>(g, j + int8_key_lead));
  return prefetch;
}
/// The value panel `panel` (its W columns) over the rows `run` (in one block), one key tile later;
/// nothing where those rows lie in two blocks (blocks that do not divide
/// the key tile: their rows are not together).
template <class Call>
PanelPrefetch next_tile_value_panel(const Call& call, Index g, KeyRange run, Index panel) {
  PanelPrefetch prefetch;
  const Index later = run.begin + call.tk;
  if (later < call.kv.size() && run.end + call.tk <= call.kv.block_end(later))
    prefetch.next_phase =
        reinterpret_cast<const char*>(call.kv.template value_row<std::int8_t>(g, later) + panel * call.kv.value_panel_stride());
  return prefetch;
}

}  // namespace headwise::detail
