// Internal: C = A Bᵀ with B a weight matrix as a checkpoint stores it, [out, in] row-major, in its
// stored type (float, BF16, F16, FP8: detail/stored_numbers.hpp, an FP8 packet times its row's
// block scale). A decoding step reads it in place, widened in registers, so that it streams each
// weight byte once; a prefill widens a narrower B (or copies an unaligned float B) range by range
// into an aligned float buffer in L1 (dot_block), which changes no bit.
//
// Every element C(i, j) is the dot product of row i of A and row j of B computed one way: 2 P
// partial sums in two chains of packets (packet q of a row, entries [q P, q P + P), goes to chain
// q mod 2; lane l of a chain sums its entries in ascending k, the last packet of a row
// zero-padded), the chains added lane by lane, then the lanes in one fixed order (sum_four). The
// same instructions whatever the shapes, the micro-tile or the thread count, so a row of C never
// depends on the other rows: decoding token by token gives the bits of the forward over the whole
// prompt. This is the order of every product by a StoredMatrix (times_transposed: the models'
// projections, MLPs and LM heads). detail/tile_product.hpp's chains are another (the attention's
// own products, the backward, latent attention), and Eigen's product a third (a Linear, such as
// MultiHeadAttention::head(h)'s): the same weights multiplied two ways agree to rounding, not bit
// for bit.
//
// A decoding step (up to 4 rows of A) reads B one row at a time, both chains in registers: one
// sequential stream per thread, which the hardware prefetchers follow best (bench/RESULTS.md, "Tuning constants"). A row of BF16, F16
// or FP8 weights is also asked for 4 KiB ahead (decoding_prefetch_bytes).
//
// A prefill's micro-tile: Ra rows of A by Rb rows of B by both chains in 2 Ra Rb accumulators
// (2 x 6 x 2 with 32 vector registers, 1 x 6 x 2 with 16), each A packet used Rb times and each
// B packet Ra times. A is taken in blocks of up to 128 rows (1 MiB of them; 4 MiB on AMD with
// AVX-512: a_block_bytes), the depth in ranges of 1024 (512 with 16 registers): a range of a tile
// of Rb rows of B stays in L1 while the block's rows of A go by from L2 (or L3), the tiles'
// partial sums waiting between ranges (which changes no bit). The threads split A's rows in a
// prefill, B's in a decoding step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/lanes.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/prefetch.hpp"
#include "headwise/detail/stored_numbers.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// A row-major matrix in memory: rows x cols entries of T, row r at data + r stride.
template <class T>
struct RowMajorView {
  T* data;
  Index rows, cols, stride;
};

/// An FP8 matrix's scales, per row: entry (j, k) is widened times data[j stride + k / block]
/// (block a multiple of the packet: one scale per packet). Empty (data null) for other types.
struct RowScales {
  const float* data = nullptr;
  Index stride = 0, block = 0;
};

/// The B operand as stored: its rows and, for FP8, their scales.
template <class BStored>
struct StoredRows {
  RowMajorView<const BStored> rows;
  RowScales scales;
};

template <class Scalar>
struct RowDotShape {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr Index packet = Eigen::internal::unpacket_traits<Packet>::size;
  static constexpr int registers = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;
  static constexpr Index chains = 2;                        // C
  static constexpr Index a_rows = registers >= 32 ? 2 : 1;  // Ra
  static constexpr Index b_rows = 6;                        // Rb: C Ra Rb accumulators + Ra + 1 registers
  static constexpr Index decoding_rows = 4;                 // rows of A read against one row of B at a time, at most
  // k per range (a multiple of P): a range of Rb rows of B stays in L1, 24 KiB of floats with
  // AVX-512 (its CPUs' L1s are 48 KiB), 12 KiB otherwise (AVX2 parts with 32 KiB)
  static constexpr Index depth_block = registers >= 32 ? 1024 : 512;
  static constexpr Index rows_per_thread = 32;              // rows of A a thread needs before the threads split A, not B
  static constexpr Index row_block = 128;                   // rows of A per pass over B, at most: a float range of them in L2
  // and fewer where A's rows are long: a_block_bytes().
};

/// The bytes of A's rows a block holds at most (all their depth: each tile of B goes through all
/// of them), which bounds the rows per block where rows are long (an MLP's down projection, depth
/// 8192: each block is a pass over B, and a narrow B is widened once per block). On Intel, 1 MiB:
/// the rows stay in L2, where its L3 is slow to serve them; on AMD with AVX-512, 4 MiB: its L3
/// serves them fast enough that fewer passes win (bench/RESULTS.md, "Tuning constants"). The blocking changes no bit.
inline Index a_block_bytes() { return VectorTuning<>::a_block_bytes(); }

HEADWISE_SIMD_ARGUMENTS_BEGIN  // (SIMD types as template arguments, as Eigen does)

/// One step of k for the tile: acc[r Rb + w] += a_r(k .. k + P) b_w(k .. k + P), the rows of A
/// at a + r lda, those of B at b + w ldb (FP8: times scale[w lds]). Spelled out by packs so that
/// every accumulator keeps a constant index and its register.
template <class Scalar, class BStored, Index Rb, class Packet, Index... r, Index... w>
EIGEN_ALWAYS_INLINE void dot_step(std::integer_sequence<Index, r...>, std::integer_sequence<Index, w...>, Packet* acc,
                                  const Scalar* a, Index lda, const BStored* b, Index ldb, const float* scale, Index lds) {
  using namespace Eigen::internal;
  const Packet ap[sizeof...(r)] = {ploadu<Packet>(a + r * lda)...};
  const auto column = [&](auto wc) {
    constexpr Index j = decltype(wc)::value;
    Packet bw = load_widened<Packet>(b + j * ldb);
    if constexpr (is_fp8_entry<BStored>) bw = pmul(bw, pset1<Packet>(scale[j * lds]));
    ((acc[r * Rb + j] = pmadd(ap[r], bw, acc[r * Rb + j])), ...);
  };
  (column(std::integral_constant<Index, w>{}), ...);
}

/// Entry k of a row of B (at row, its scales at scale) widened, as a packet of them is.
template <class Scalar, class BStored>
EIGEN_ALWAYS_INLINE Scalar widened_entry(const BStored* row, const float* scale, Index block, Index k) {
  BStored x;
  std::memcpy(&x, row + k, sizeof x);  // (in place in a mapped file: no alignment assumed)
  if constexpr (is_fp8_entry<BStored>) return from_stored<Scalar>(x) * scale[k / block];
  else return from_stored<Scalar>(x);
}

/// The sums of four packets, each summed the one way (the halves of 512 bits added, then those of
/// 256, then (x0 + x2) + (x1 + x3): the order of Eigen's predux with AVX, and with AVX-512 where
/// AVX512DQ is on), four at a time: the same additions in vector lanes, so a tile's 24 sums cost 6
/// passes of shuffles rather than 24.
template <class Packet, class Scalar>
EIGEN_ALWAYS_INLINE void sum_four(const Packet& a, const Packet& b, const Packet& c, const Packet& d, Scalar* out) {
  constexpr int P = Eigen::internal::unpacket_traits<Packet>::size;
  if constexpr (std::is_same_v<Scalar, float> && VectorSums<P>::available) return VectorSums<P>::sum(a, b, c, d, out);
  out[0] = Eigen::internal::predux(a), out[1] = Eigen::internal::predux(b);
  out[2] = Eigen::internal::predux(c), out[3] = Eigen::internal::predux(d);
}

/// sums[i] = the sum of acc[i]'s lanes for i < count, four at a time (sum_four: the same bits for
/// a sum whatever the others beside it).
template <class Packet, class Scalar>
EIGEN_ALWAYS_INLINE void sum_packets(const Packet* acc, Index count, Scalar* sums) {
  Index i = 0;
  for (; i + 4 <= count; i += 4) sum_four(acc[i], acc[i + 1], acc[i + 2], acc[i + 3], sums + i);
  if (i < count) {
    const Packet zero = Eigen::internal::pset1<Packet>(Scalar(0));
    Scalar rest[4];
    sum_four(acc[i], i + 1 < count ? acc[i + 1] : zero, i + 2 < count ? acc[i + 2] : zero, zero, rest);
    for (Index k = 0; i + k < count; ++k) sums[i + k] = rest[k];
  }
}

/// A range [begin, end) of the depth k, of depth in all (begin a multiple of C P): a tile's chains
/// start at 0 and end in C, and between two ranges their partial sums wait in `partial` (the same
/// multiply-adds in the same order as in one pass: the blocking changes no bit).
struct DepthRange {
  Index begin, end, depth;
};

/// FP8: the block of columns entry k is in (its scale's index in the row), followed along
/// ascending k.
struct ScaleBlock {
  Index width, index, end;
  ScaleBlock(Index k, Index block) : width(std::max<Index>(block, 1)), index(k / width), end((index + 1) * width) {}
  Index at(Index k) {
    while (k >= end) ++index, end += width;
    return index;
  }
};

/// One step of k for count dot products: packets k + c P (chain c) for each chain c, into
/// acc[c count + i]; count = Ra Rb, rows of A at a + r lda, of B at b + w ldb (FP8: times their
/// blocks' scales, s.data + w s.stride + the block).
template <class Scalar, class BStored, Index Ra, Index Rb, class Packet, Index... chain>
EIGEN_ALWAYS_INLINE void chain_step(std::integer_sequence<Index, chain...>, Packet* acc, Index k, const Scalar* a, Index lda,
                                    const BStored* b, Index ldb, const RowScales& s, ScaleBlock& block) {
  constexpr Index P = RowDotShape<Scalar>::packet;
  const auto scale = [&](Index at) -> const float* {
    if constexpr (is_fp8_entry<BStored>) return s.data + block.at(at);
    else return nullptr;
  };
  (dot_step<Scalar, BStored, Rb>(std::make_integer_sequence<Index, Ra>{}, std::make_integer_sequence<Index, Rb>{}, acc + chain * Ra * Rb,
                                 a + k + chain * P, lda, b + k + chain * P, ldb, scale(k + chain * P), s.stride),
   ...);
}

/// How far ahead of its reads a decoding step asks for each row of B, in bytes: 4 KiB for the
/// narrow stored types (their widening slows the stream below what the prefetchers follow), none
/// for float (its step reads two lines a row, and the prefetchers keep up) (bench/RESULTS.md, "Tuning constants").
template <class BStored>
constexpr Index decoding_prefetch_bytes() {
  return sizeof(BStored) < sizeof(float) ? 4096 : 0;
}


/// The packets [k, stop) of Ra rows of A by Rb rows of B (k a multiple of C P): whole steps of the
/// C chains, each first asking for the lines `ahead` bytes further along B's rows (0: no hint),
/// then the last packets (fewer than C, chains 0 ..).
template <class Scalar, class BStored, Index Ra, Index Rb, Index ahead, class Packet>
EIGEN_ALWAYS_INLINE void chain_steps(Index k, Index stop, Packet* acc, const Scalar* a, Index lda, const BStored* b, Index ldb,
                                     const RowScales& s) {
  constexpr Index P = RowDotShape<Scalar>::packet, C = RowDotShape<Scalar>::chains;
  static_assert(C == 2, "the last packets are written for two chains");
  constexpr Index line = 64, step_bytes = C * P * Index(sizeof(BStored));
  ScaleBlock block(k, s.block);
  for (; k + C * P <= stop; k += C * P) {
    if constexpr (ahead > 0)
      for (Index w = 0; w < Rb; ++w)
        for (Index at = 0; at < step_bytes; at += line) prefetch_line(b + w * ldb + k, ahead + at);
    chain_step<Scalar, BStored, Ra, Rb>(std::make_integer_sequence<Index, C>{}, acc, k, a, lda, b, ldb, s, block);
  }
  if (k < stop) chain_step<Scalar, BStored, Ra, Rb>(std::integer_sequence<Index, 0>{}, acc, k, a, lda, b, ldb, s, block);
}

/// The last packet of rows [0, Ra) of A (a + r lda) and of rows [0, Rb) of B (b + w ldb, widened
/// entry by entry, the scales from s.data + w s.stride), zero-padded beyond the depth, into
/// acc[r Rb + w] (the chain of packet whole / P).
template <class Scalar, class BStored, Index Ra, Index Rb, class Packet>
void dot_last_packet(Index whole, Index depth, const Scalar* a, Index lda, const BStored* b, Index ldb, const RowScales& s, Packet* acc) {
  constexpr Index P = RowDotShape<Scalar>::packet;
  alignas(64) Scalar ta[std::size_t(Ra * P)] = {}, tb[std::size_t(Rb * P)] = {};
  for (Index r = 0; r < Ra; ++r) std::copy(a + r * lda + whole, a + r * lda + depth, ta + r * P);
  for (Index w = 0; w < Rb; ++w)
    for (Index k = whole; k < depth; ++k) tb[w * P + k - whole] = widened_entry<Scalar>(b + w * ldb, s.data + w * s.stride, s.block, k);
  dot_step<Scalar, Scalar, Rb>(std::make_integer_sequence<Index, Ra>{}, std::make_integer_sequence<Index, Rb>{}, acc, ta, P, tb, P, nullptr, 0);
}

/// to[i] = from[i], to[i] = x for each i: spelled out, so that a tile's accumulators stay in
/// registers (a loop here became a memcpy through the stack).
template <class Packet, Index... i>
EIGEN_ALWAYS_INLINE void copy_packets(std::integer_sequence<Index, i...>, const Packet* from, Packet* to) {
  ((to[i] = from[i]), ...);
}
template <class Packet, Index... i>
EIGEN_ALWAYS_INLINE void fill_packets(std::integer_sequence<Index, i...>, Packet* to, const Packet& x) {
  ((to[i] = x), ...);
}

/// Rows [0, rows) of A (a + r lda, rows a multiple of Ra) . rows [0, Rb) of B (b + w ldb, their
/// scales from s.data + w s.stride) over `range`, Ra rows of A at a time (the compiled tile
/// heights), continuing the partial sums of row r and chain c in partial[r C Rb + c Ra Rb + w]
/// (per tile of Ra rows: chain, then row, then row of B); at the end of the depth, the last packet
/// (zero-padded), the chains added and the sums into c[r ldc + w].
template <class Scalar, class BStored, Index Ra, Index Rb, Index ahead = 0, class Packet>
void dot_tiles(const DepthRange& range, const Scalar* a, Index lda, Index rows, const BStored* b, Index ldb, const RowScales& s,
               Packet* partial, Scalar* c, Index ldc) {
  using namespace Eigen::internal;
  constexpr Index P = RowDotShape<Scalar>::packet, C = RowDotShape<Scalar>::chains, n = Ra * Rb;
  const auto all = std::make_integer_sequence<Index, C * n>{};
  const Index whole = range.depth / P * P, stop = std::min(range.end, whole);
  for (Index i = 0; i < rows; i += Ra) {
    const Scalar* ai = a + i * lda;
    Packet* kept = partial + i * C * Rb;
    Packet acc[std::size_t(C * n)];
    if (range.begin == 0) fill_packets(all, acc, pset1<Packet>(Scalar(0)));
    else copy_packets(all, kept, acc);
    chain_steps<Scalar, BStored, Ra, Rb, ahead>(range.begin, stop, acc, ai, lda, b, ldb, s);
    if (range.end < range.depth) {
      copy_packets(all, acc, kept);
      continue;
    }
    if (whole < range.depth) dot_last_packet<Scalar, BStored, Ra, Rb>(whole, range.depth, ai, lda, b, ldb, s, acc + whole / P % C * n);
    for (Index k = 0; k < n; ++k) acc[k] = padd(acc[k], acc[n + k]);  // the chains, lane by lane
    Scalar sums[std::size_t(n)];
    sum_packets(acc, n, sums);
    for (Index r = 0; r < Ra; ++r)
      for (Index w = 0; w < Rb; ++w) c[(i + r) * ldc + w] = sums[r * Rb + w];
  }
}

/// Rows [0, rows) of B (b + w ldb, their scales from s.data + w s.stride) over `range`, widened
/// to Scalar into out + w range.depth (the same columns) as dot_step widens them, so a product
/// over them gives the bits of one that widens in registers.
template <class Scalar, class BStored>
void widen_rows(const BStored* b, Index ldb, const RowScales& s, Index rows, DepthRange range, Scalar* out) {
  using namespace Eigen::internal;
  using Packet = typename RowDotShape<Scalar>::Packet;
  constexpr Index P = RowDotShape<Scalar>::packet;
  for (Index w = 0; w < rows; ++w) {
    const BStored* row = b + w * ldb;
    const float* scale = s.data + w * s.stride;
    Scalar* to = out + w * range.depth;
    Index k = range.begin;
    for (; k + P <= range.end; k += P) {
      Packet x = load_widened<Packet>(row + k);
      if constexpr (is_fp8_entry<BStored>) x = pmul(x, pset1<Packet>(scale[k / s.block]));
      pstoreu(to + k, x);
    }
    for (; k < range.end; ++k) to[k] = widened_entry<Scalar>(row, scale, s.block, k);
  }
}

/// Whether every row of a float B starts at a multiple of the packet's size: each packet read is
/// then within one cache line, not across two, and a prefill's products run faster (bench/RESULTS.md, "Tuning constants").
template <class Scalar, class BStored>
bool packet_aligned(const RowMajorView<const BStored>& b) {
  constexpr std::size_t bytes = sizeof(typename RowDotShape<Scalar>::Packet);
  return reinterpret_cast<std::uintptr_t>(b.data) % bytes == 0 && (std::size_t(b.stride) * sizeof(BStored)) % bytes == 0;
}

/// Which part of C a call of dot_block computes: rows [row, row + rows) of A, rows [column,
/// column_end) of B.
struct DotBlock {
  Index row, rows, column, column_end;
};

/// A decoding step's block of C (at most decoding_rows rows of A): each row of B in turn against
/// all of them (a tile of Ra x 1 over the whole depth), widened in registers, the stream ahead
/// asked for (decoding_prefetch_bytes).
template <class Scalar, class BStored>
void dot_block_decoding(RowMajorView<const Scalar> a, const StoredRows<BStored>& stored, RowMajorView<Scalar> c, DotBlock block) {
  using Packet = typename RowDotShape<Scalar>::Packet;
  const Scalar* ai = a.data + block.row * a.stride;
  const DepthRange all{0, a.cols, a.cols};
  for (Index j = block.column; j < block.column_end; ++j) {
    RowScales sj = stored.scales;
    if constexpr (is_fp8_entry<BStored>) sj.data += j * sj.stride;
    const BStored* bj = stored.rows.data + j * stored.rows.stride;
    Scalar* cj = c.data + block.row * c.stride + j;
    const auto rows = [&](auto ra) {
      constexpr Index Ra = decltype(ra)::value;
      dot_tiles<Scalar, BStored, Ra, 1, decoding_prefetch_bytes<BStored>()>(all, ai, a.stride, Ra, bj, 0, sj, static_cast<Packet*>(nullptr), cj,
                                                                         c.stride);
    };
    static_assert(RowDotShape<Scalar>::decoding_rows == 4, "written for up to four rows");
    if (block.rows == 1) rows(std::integral_constant<Index, 1>{});
    else if (block.rows == 2) rows(std::integral_constant<Index, 2>{});
    else if (block.rows == 3) rows(std::integral_constant<Index, 3>{});
    else rows(std::integral_constant<Index, 4>{});
  }
}

/// C's block = A Bᵀ there. For a few rows of A (a decoding step), dot_block_decoding. For more (a
/// prefill): for each tile of Rb rows of B (then one by one at the end), the depth in ranges of
/// `depth_block`, each over all of the block's rows of A in slivers of the compiled heights (Ra
/// and the powers of two below it): a range of the B tile stays in L1 and the block's rows of A in
/// L2. A narrower B is widened range by range into a float copy in L1 (once for all the rows,
/// instead of once per sliver on the multiply-add's ports), aligned to the packet: a float B whose
/// rows are not (a tensor mapped where its file put it) is copied there too.
template <class Scalar, class BStored>
void dot_block(RowMajorView<const Scalar> a, const StoredRows<BStored>& stored, RowMajorView<Scalar> c, DotBlock block) {
  using Shape = RowDotShape<Scalar>;
  using Packet = typename Shape::Packet;
  constexpr Index Rb = Shape::b_rows, C = Shape::chains;
  if (block.rows <= Shape::decoding_rows) return dot_block_decoding<Scalar, BStored>(a, stored, c, block);
  thread_local std::vector<Packet> partial;  // (no allocation per step)
  thread_local std::vector<Scalar, Eigen::aligned_allocator<Scalar>> widened;
  partial.resize(static_cast<std::size_t>(block.rows * Rb * C));
  const bool widen_first = !std::is_same_v<Scalar, BStored> || !packet_aligned<Scalar>(stored.rows);
  if (widen_first) widened.resize(static_cast<std::size_t>(Rb * a.cols));
  const RowMajorView<const BStored>& b = stored.rows;
  const auto slivers = [&](auto tile, DepthRange range, Index j, const auto* bj, Index ldb, const RowScales& sj) {
    constexpr Index nb = decltype(tile)::value, Ra = Shape::a_rows;
    using B = std::remove_const_t<std::remove_pointer_t<decltype(bj)>>;
    const Index whole = block.rows / Ra * Ra;  // in tiles of Ra rows, the rest (fewer) one by one
    const Scalar* ai = a.data + block.row * a.stride;
    Scalar* cij = c.data + block.row * c.stride + j;
    dot_tiles<Scalar, B, Ra, nb>(range, ai, a.stride, whole, bj, ldb, sj, partial.data(), cij, c.stride);
    if (whole < block.rows)
      dot_tiles<Scalar, B, 1, nb>(range, ai + whole * a.stride, a.stride, block.rows - whole, bj, ldb, sj, partial.data() + whole * Rb * C,
                                  cij + whole * c.stride, c.stride);
  };
  const auto rows_of_b = [&](auto tile, Index j) {
    constexpr Index nb = decltype(tile)::value;
    for (Index k0 = 0; k0 < a.cols; k0 += Shape::depth_block) {
      const DepthRange range{k0, std::min(a.cols, k0 + Shape::depth_block), a.cols};
      const BStored* bj = b.data + j * b.stride;
      RowScales sj = stored.scales;
      if constexpr (is_fp8_entry<BStored>) sj.data += j * sj.stride;
      if (widen_first) {
        widen_rows<Scalar, BStored>(bj, b.stride, sj, nb, range, widened.data());
        slivers(tile, range, j, static_cast<const Scalar*>(widened.data()), a.cols, RowScales{});
        continue;
      }
      slivers(tile, range, j, bj, b.stride, sj);
    }
  };
  Index j = block.column;
  for (; j + Rb <= block.column_end; j += Rb) rows_of_b(std::integral_constant<Index, Rb>{}, j);
  for (; j < block.column_end; ++j) rows_of_b(std::integral_constant<Index, 1>{}, j);
}

HEADWISE_SIMD_ARGUMENTS_END

/// C (a.rows x b.rows) = A Bᵀ (A: n x k, B: m x k, both row-major), on up to `threads` threads: for
/// many rows of A (a prefill) each thread takes a contiguous share of them and all of B (each
/// streams B from the shared cache, and its rows of A stay in its own L2: faster than splitting B,
/// bench/RESULTS.md, "Tuning constants"); for a few (a decoding step) each takes a share of B's
/// rows (C's columns), so that both stream the weights. Deterministic: see the top of this file.
template <class Scalar, class BStored>
void row_dot_product(RowMajorView<const Scalar> a, const StoredRows<BStored>& stored, RowMajorView<Scalar> c, int threads) {
  using Shape = RowDotShape<Scalar>;
  constexpr Index Rb = Shape::b_rows;
  const RowMajorView<const BStored>& b = stored.rows;
  if (a.rows == 0 || b.rows == 0) return;
  if (a.cols == 0) {
    for (Index i = 0; i < a.rows; ++i) std::fill(c.data + i * c.stride, c.data + i * c.stride + b.rows, Scalar(0));
    return;
  }
  const Index tiles = (b.rows + Rb - 1) / Rb;
  const double flops = 2.0 * double(a.rows) * double(b.rows) * double(a.cols);
  const int parts = static_cast<int>(std::max<Index>(1, std::min<Index>(threads_for(flops, threads), tiles)));
  const Index slivers = (a.rows + Shape::a_rows - 1) / Shape::a_rows;
  const bool split_rows = slivers >= Index(parts) * Shape::rows_per_thread / Shape::a_rows;
  const Index rows = std::clamp<Index>(a_block_bytes() / (a.cols * Index(sizeof(Scalar))) / Shape::a_rows * Shape::a_rows,
                                       Shape::a_rows, Shape::row_block);  // rows of A per block
  parallel_region(parts, [&](int part) {
    if (split_rows) {
      const Index first = std::min(a.rows, slivers * part / parts * Shape::a_rows);
      const Index last = std::min(a.rows, slivers * (part + 1) / parts * Shape::a_rows);
      for (Index i0 = first; i0 < last; i0 += rows)
        dot_block<Scalar, BStored>(a, stored, c, {i0, std::min(rows, last - i0), 0, b.rows});
      return;
    }
    const Index j0 = tiles * part / parts * Rb, j1 = std::min(b.rows, tiles * (part + 1) / parts * Rb);
    for (Index i0 = 0; i0 < a.rows; i0 += rows) dot_block<Scalar, BStored>(a, stored, c, {i0, std::min(rows, a.rows - i0), j0, j1});
  });
}

}  // namespace headwise::detail
