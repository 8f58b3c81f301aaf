// Internal: the library's deterministic matrix product (detail::product and the micro-kernels
// under it): the fused kernel's widened score and value tiles (kernels/widened_tiles.hpp), the
// step-by-step path's scores and A V (scores.hpp, attention_core.hpp, attend.hpp), the backward's
// products (attention_backward.hpp, kernels/fused_attention_backward.hpp, model/backward.hpp),
// latent attention's and the delta rule's. The stored arithmetics' products (detail/int8_,
// bf16_, f16_products.hpp) share its TileShape, compiled heights and PanelPrefetch. A layer's
// projections by its stored weights are another product (times_transposed, row_dot_product.hpp).
//
// Every element of C = A B is ONE chain of multiply-adds over k in ascending order, computed by
// the same instructions whatever the shapes: rows and columns at the edges are padded with zeros
// and go through the same micro-kernel, and a depth split into blocks continues the chain from
// the value stored in C. So a row of the result never depends on which other rows were computed
// with it. That is what makes decoding token by token bitwise equal to the full forward, and the
// result independent of the thread count. (Eigen's GEMM switches paths by shape: a 1-row product
// becomes a GEMV with another summation order.)
//
// Layout: A is packed k-major in blocks of `rows` (R) rows (or read in place from a row-major
// tile), B in panels of `lanes` (W) columns; the micro-kernel keeps an R x W tile of C in
// registers. The tile is chosen per instruction set at compile time, from the SIMD width and the
// number of vector registers: 6 x 2 packets (12 accumulators) where there are 16 registers
// (SSE2, AVX2: 6 x 16 floats with AVX2), 12 x 2 packets (24 accumulators) where there are 32
// (AVX-512: 12 x 32 floats; NEON). Results are bitwise reproducible within one build; builds for
// different instruction sets differ in rounding, as any two BLAS builds do. B may be stored in a
// narrower type (BF16, F16, int8: a KV cache's keys and values), widened to float as it is loaded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "headwise/detail/compiled.hpp"
#include "headwise/detail/parallel.hpp"
#include "headwise/detail/prefetch.hpp"
#include "headwise/detail/stored_numbers.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {


template <class Scalar>
struct TileShape {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;  // one SIMD register
  static constexpr Index packet = Eigen::internal::unpacket_traits<Packet>::size;
  static constexpr int registers = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;  // vector registers
  // R: rows of C per micro-tile: 2 R accumulators, 2 packets of B and a broadcast must fit.
  static constexpr Index rows = registers >= 32 ? 12 : 6;
  static constexpr Index lanes = 2 * packet;   // W: columns of C per micro-tile (two registers)
  static constexpr Index depth_block = 256;    // k per packed block (A and B stay in L1/L2)
  static constexpr Index row_block = 96;       // rows of A packed at once (a multiple of R)
  static_assert(row_block % rows == 0, "row blocks hold whole slivers");
};

/// A strided read-only view of a row-major matrix, or of its transpose.
template <class Scalar>
struct MatrixView {
  const Scalar* data;
  Index stride;           // distance between rows of the stored matrix
  bool transposed = false;  // true: the view is of the transpose, element (i, j) at data[j * stride + i]
};

/// How the micro-kernel reads A: a[k R + r] (pack_a), a[r lda + k] (a row-major tile, read in
/// place), or a[k lda + r] (the transpose of a row-major tile, read in place).
enum class ALayout { packed, rows, columns };

/// The body of micro_kernel (below) for the rows r... of a sliver. The rows are spelled out by a
/// pack expansion, not a loop, so that every accumulator has a constant index and stays in a
/// register (with a loop over r, GCC 12 keeps the 2 Rows accumulators in memory and reloads them
/// per k).
template <class Scalar, ALayout Layout, bool Accumulate, class BStored, Index... r>
inline void micro_kernel_rows_of(std::integer_sequence<Index, r...>, Index depth, const Scalar* a, Index lda,
                                 const BStored* b, Index ldb, Scalar* c, Index ldc) {
  using namespace Eigen::internal;
  using Shape = TileShape<Scalar>;
  using Packet = typename Shape::Packet;
  constexpr Index R = Shape::rows, P = Shape::packet, Rows = sizeof...(r);
  constexpr Index prefetch_rows = 64;  // rows of B ahead (4 KiB of floats with AVX2, 8 KiB with AVX-512; half for BF16)
  const Packet zero = pset1<Packet>(Scalar(0));
  Packet acc0[sizeof...(r)] = {(Accumulate ? ploadu<Packet>(c + r * ldc) : zero)...};
  Packet acc1[sizeof...(r)] = {(Accumulate ? ploadu<Packet>(c + r * ldc + P) : zero)...};
  for (Index k = 0; k < depth; ++k) {
    // B streams from memory when few rows share it (a decoding step, its grouped-query heads folded
    // into up to 4 rows): ask for it early, 64 rows ahead (bench/RESULTS.md, "Tuning constants").
    if constexpr (Rows <= 4)  // every cache line of the row (a row of W floats is two with AVX-512)
      for (std::size_t line = 0; line < Shape::lanes * sizeof(BStored); line += 64)
        prefetch_line(b, ((k + prefetch_rows) * ldb) * Index(sizeof(BStored)) + Index(line));
    const Packet b0 = load_widened<Packet>(b + k * ldb), b1 = load_widened<Packet>(b + k * ldb + P);
    const auto multiply_add = [&](Index row, Packet& first, Packet& second) {
      const Scalar a_rk = Layout == ALayout::packed ? a[k * R + row] : Layout == ALayout::rows ? a[row * lda + k] : a[k * lda + row];
      const Packet ar = pset1<Packet>(a_rk);
      first = pmadd(ar, b0, first);
      second = pmadd(ar, b1, second);
    };
    (multiply_add(r, acc0[r], acc1[r]), ...);
  }
  (pstoreu(c + r * ldc, acc0[r]), ...);
  (pstoreu(c + r * ldc + P, acc1[r]), ...);
}

/// c (Rows x W, leading dimension ldc) continues its chains: c += a b over `depth` (or, with
/// Accumulate false, c = a b: the chains start from 0 and c is not read).
/// a: an R-row sliver of which the first Rows rows are used, as ALayout says; b: depth x W, row k
/// at b + k ldb (ldb = W: packed by pack_b; larger: W columns of a row-major matrix, in place). Each row is the same chain of packet multiply-adds
/// whatever Rows and the layout of A are, so a short sliver (a decoding step's single query) costs
/// one row, not R, and gives the bits it would give in a full one. Written with Eigen's packet
/// primitives so that the 2 Rows accumulators stay in registers (plain loops vectorise the wrong way).
template <class Scalar, int Rows, ALayout Layout = ALayout::packed, bool Accumulate = true, class BStored = Scalar>
inline void micro_kernel(Index depth, const Scalar* a, Index lda, const BStored* b, Index ldb, Scalar* c, Index ldc) {
  static_assert(Rows >= 1 && Rows <= TileShape<Scalar>::rows, "a sliver has at most R rows");
  micro_kernel_rows_of<Scalar, Layout, Accumulate, BStored>(std::make_integer_sequence<Index, Rows>{}, depth, a, lda, b, ldb, c, ldc);
}

/// The next sliver height below h that the micro-kernels are compiled for: the largest power of
/// two under it. The heights are R and the powers of two below it: {12, 8, 4, 2, 1} with 32
/// registers, {6, 4, 2, 1} with 16.
constexpr int height_below(int h) {
  int p = 1;
  while (2 * p < h) p *= 2;
  return p;
}

/// A sliver of `rows` rows (1 .. Height) as slivers of the compiled heights, largest first (11
/// rows: 8, 2, 1), each one call kernel(std::integral_constant<int, H>, first row). A row's chains
/// are its own whatever the sliver, so the bits are those of one kernel for exactly that many
/// rows, from a third of the instantiations (one per height from 1 to R compiles the micro-kernels
/// three times over).
template <int Height, class Kernel>
inline void by_compiled_heights(Index rows, Index row, const Kernel& kernel) {
  if (rows >= Height) {
    kernel(std::integral_constant<int, Height>{}, row);
    rows -= Height, row += Height;
  }
  if constexpr (Height > 1)
    if (rows > 0) by_compiled_heights<height_below(Height)>(rows, row, kernel);
}

/// kernel(height, first row) over `rows` rows of a tile: in slivers of the compiled heights up to
/// Tallest (each row's sums held in registers), or row by row where Tallest is 1 (the portable
/// lanes of detail/lanes.hpp: a row's sums are its own, so the bits are the same either way).
template <int Tallest, class Kernel>
inline void by_lane_heights(Index rows, const Kernel& kernel) {
  if constexpr (Tallest == 1) {
    for (Index row = 0; row < rows; ++row) kernel(std::integral_constant<int, 1>{}, row);
  } else {
    by_compiled_heights<Tallest>(rows, 0, kernel);
  }
}

/// Where row `row` of a sliver starts, read as Layout says.
template <ALayout Layout, class Scalar>
inline const Scalar* sliver_row(const Scalar* a, Index lda, Index row) {
  return Layout == ALayout::rows ? a + row * lda : a + row;
}

/// micro_kernel on the first `rows` (1..R) rows of a sliver, as slivers of the compiled heights.
template <class Scalar, ALayout Layout = ALayout::packed, bool Accumulate = true, class BStored = Scalar>
inline void micro_kernel_rows(Index rows, Index depth, const Scalar* a, Index lda, const BStored* b, Index ldb, Scalar* c,
                              Index ldc) {
  by_compiled_heights<static_cast<int>(TileShape<Scalar>::rows)>(rows, 0, [&](auto height, Index row) {
    micro_kernel<Scalar, decltype(height)::value, Layout, Accumulate>(depth, sliver_row<Layout>(a, lda, row), lda, b, ldb,
                                                                      c + row * ldc, ldc);
  });
}

/// The most rows micro_kernel_pair takes: its 4 Rows accumulators, 4 packets of B and a broadcast
/// must fit in the registers (4 with 32 registers, 2 with 16).
template <class Scalar>
constexpr Index pair_rows = TileShape<Scalar>::registers >= 32 ? 4 : 2;

/// What a decoding step's panel product (the stored arithmetic's) asks for while it streams its
/// panels: each panel row `ahead_bytes` ahead, into L1 (0: none); and, at each row, as many bytes
/// as the row holds from next_phase on (advancing by them), into L2 (null: none): bytes the step
/// reads later, so that memory is read while the step computes: its next phase's (the tile's values
/// while its scores are computed, the next tile's keys while its values are; where d_head = d_v
/// one phase's rows cover the next phase's bytes exactly), or, for the int8 products, a value
/// product's own panel one key tile later and a key product's keys 512 tokens later where they lie
/// in another block (kernels/decoding_prefetch.hpp says which).
struct PanelPrefetch {
  Index ahead_bytes = 0;
  const char* next_phase = nullptr;
};

/// The asks of `prefetch` for the `row`-th panel row a product reads, `bytes` at `at` (a line per
/// 64 bytes, one for fewer).
inline void prefetch_panel_row(const PanelPrefetch& prefetch, const void* at, Index row, Index bytes) {
  if (prefetch.ahead_bytes)
    for (Index line = 0; line < bytes; line += 64) prefetch_line(at, prefetch.ahead_bytes + line);
  if (prefetch.next_phase)
    for (Index line = 0; line < bytes; line += 64) prefetch_line<CacheLevel::l2>(prefetch.next_phase, row * bytes + line);
}

/// The body of micro_kernel_pair: two W-column panels of B side by side (the second at b +
/// next), into c and c + W.
template <class Scalar, ALayout Layout, bool Accumulate, class BStored, Index... r>
inline void micro_kernel_pair_of(std::integer_sequence<Index, r...>, Index depth, const Scalar* a, Index lda, const BStored* b,
                                 Index ldb, Index next, const char* next_phase, Scalar* c, Index ldc) {
  using namespace Eigen::internal;
  using Shape = TileShape<Scalar>;
  using Packet = typename Shape::Packet;
  constexpr Index P = Shape::packet, W = Shape::lanes, R = Shape::rows;
  constexpr Index prefetch_rows = 64;  // as micro_kernel's
  const Packet zero = pset1<Packet>(Scalar(0));
  const auto start = [&](const Scalar* at) { return Accumulate ? ploadu<Packet>(at) : zero; };
  Packet acc[sizeof...(r)][4] = {{start(c + r * ldc), start(c + r * ldc + P), start(c + r * ldc + W), start(c + r * ldc + W + P)}...};
  const BStored* b2 = b + next;
  for (Index k = 0; k < depth; ++k) {
    for (std::size_t line = 0; line < W * sizeof(BStored); line += 64) {
      prefetch_line(b, ((k + prefetch_rows) * ldb) * Index(sizeof(BStored)) + Index(line));
      prefetch_line(b2, ((k + prefetch_rows) * ldb) * Index(sizeof(BStored)) + Index(line));
    }
    if (next_phase) prefetch_panel_row({0, next_phase}, nullptr, k, Index(2 * W * sizeof(BStored)));
    const Packet b0 = load_widened<Packet>(b + k * ldb), b1 = load_widened<Packet>(b + k * ldb + P);
    const Packet b2_0 = load_widened<Packet>(b2 + k * ldb), b2_1 = load_widened<Packet>(b2 + k * ldb + P);
    const auto multiply_add = [&](Index row, Packet* chains) {
      const Scalar a_rk = Layout == ALayout::packed ? a[k * R + row] : Layout == ALayout::rows ? a[row * lda + k] : a[k * lda + row];
      const Packet ar = pset1<Packet>(a_rk);
      chains[0] = pmadd(ar, b0, chains[0]);
      chains[1] = pmadd(ar, b1, chains[1]);
      chains[2] = pmadd(ar, b2_0, chains[2]);
      chains[3] = pmadd(ar, b2_1, chains[3]);
    };
    (multiply_add(r, acc[r]), ...);
  }
  ((pstoreu(c + r * ldc, acc[r][0]), pstoreu(c + r * ldc + P, acc[r][1]), pstoreu(c + r * ldc + W, acc[r][2]),
    pstoreu(c + r * ldc + W + P, acc[r][3])), ...);
}

/// Two panels of micro_kernel at once, for a sliver of 1 .. pair_rows rows (a decoding step):
/// c[:, 0, W) += a b and c[:, W, 2W) += a (b + next), continuing the chains in c; next_phase (if
/// not null): the bytes a decoding step reads next, asked for into L2 as these are read
/// (PanelPrefetch). Every entry is
/// the chain micro_kernel gives it (the same multiply-adds in the same order; Accumulate false:
/// from 0, c not read): the same bits, with twice the independent chains in flight to hide the
/// multiply-add's latency.
template <class Scalar, ALayout Layout, bool Accumulate, class BStored>
inline void micro_kernel_pair(Index rows, Index depth, const Scalar* a, Index lda, const BStored* b, Index ldb, Index next,
                              Scalar* c, Index ldc, const char* next_phase = nullptr) {
  by_compiled_heights<static_cast<int>(pair_rows<Scalar>)>(rows, 0, [&](auto height, Index row) {
    micro_kernel_pair_of<Scalar, Layout, Accumulate, BStored>(std::make_integer_sequence<Index, decltype(height)::value>{}, depth,
                                                              sliver_row<Layout>(a, lda, row), lda, b, ldb, next,
                                                              row == 0 ? next_phase : nullptr, c + row * ldc, ldc);
  });
}

/// Packs rows [0, rows) x depth [0, depth) of A in R-row slivers, k-major, zero rows past the edge:
/// out[(r0 / R) * depth * R + k * R + r] = A(r0 + r, k). out holds ceil(rows / R) * R * depth.
template <class Scalar>
inline void pack_a(Index rows, Index depth, MatrixView<Scalar> a, Scalar* out) {
  constexpr Index R = TileShape<Scalar>::rows;
  for (Index r0 = 0; r0 < rows; r0 += R, out += depth * R) {
    const Index nr = std::min(R, rows - r0);
    if (nr < R) std::fill(out, out + depth * R, Scalar(0));
    for (Index r = 0; r < nr; ++r) {
      if (a.transposed)
        for (Index k = 0; k < depth; ++k) out[k * R + r] = a.data[k * a.stride + r0 + r];
      else
        for (Index k = 0; k < depth; ++k) out[k * R + r] = a.data[(r0 + r) * a.stride + k];
    }
  }
}

/// A whole panel of W rows of a row-major matrix m (row w at m + w stride), transposed into
/// out[k W + w] for k in [0, depth) by blocks of P x P entries in registers (Eigen's ptranspose):
/// the keys' panels of S = Q Kᵀ, packed at a fraction of the cost of one entry at a time. Returns
/// the depth done (a multiple of P); the caller packs the rest.
HEADWISE_SIMD_ARGUMENTS_BEGIN  // (SIMD types as template arguments, as Eigen does)
template <class Scalar>
inline Index transpose_panel(Index depth, const Scalar* m, Index stride, Scalar* out) {
  using namespace Eigen::internal;
  using Packet = typename TileShape<Scalar>::Packet;
  constexpr Index P = TileShape<Scalar>::packet, W = TileShape<Scalar>::lanes;
  Index k0 = 0;
  for (; k0 + P <= depth; k0 += P)
    for (Index w0 = 0; w0 < W; w0 += P) {
      PacketBlock<Packet, static_cast<int>(P)> block;
      for (Index i = 0; i < P; ++i) block.packet[i] = ploadu<Packet>(m + (w0 + i) * stride + k0);
      ptranspose(block);
      for (Index i = 0; i < P; ++i) pstoreu(out + (k0 + i) * W + w0, block.packet[i]);
    }
  return k0;
}
HEADWISE_SIMD_ARGUMENTS_END

/// Packs depth [0, depth) x columns [0, cols) of B in W-column panels, zero columns past the edge:
/// out[(j0 / W) * depth * W + k * W + w] = B(k, j0 + w). out holds ceil(cols / W) * W * depth.
template <class Scalar>
inline void pack_b(Index depth, Index cols, MatrixView<Scalar> b, Scalar* out) {
  constexpr Index W = TileShape<Scalar>::lanes;
  for (Index j0 = 0; j0 < cols; j0 += W, out += depth * W) {
    const Index nw = std::min(W, cols - j0);
    if (nw < W) std::fill(out, out + depth * W, Scalar(0));
    if (b.transposed) {
      Index k0 = 0;
      if (nw == W) k0 = transpose_panel(depth, b.data + j0 * b.stride, b.stride, out);
      for (Index w = 0; w < nw; ++w)
        for (Index k = k0; k < depth; ++k) out[k * W + w] = b.data[(j0 + w) * b.stride + k];
    } else {
      for (Index k = 0; k < depth; ++k) std::copy_n(b.data + k * b.stride + j0, nw, out + k * W);
    }
  }
}

/// Scratch for tile products, reused across calls to avoid allocating per tile.
template <class Scalar>
struct ProductScratch {
  std::vector<Scalar> a, b, edge;
};

/// C (rows x cols, row-major, leading dimension ldc) += A (rows x depth) B (depth x cols); with
/// `fresh`, C = A B, C not read (its chains start at 0 in the first depth block: the bits of C set
/// to 0 first, without writing it twice). Each element is one ascending chain over k.
template <class Scalar>
void accumulate_product(Index rows, Index cols, Index depth, MatrixView<Scalar> a, MatrixView<Scalar> b, Scalar* c,
                        Index ldc, ProductScratch<Scalar>& scratch, bool fresh = false) {
  using Shape = TileShape<Scalar>;
  constexpr Index R = Shape::rows, W = Shape::lanes;
  if (rows <= 0 || cols <= 0 || depth <= 0) return;
  const Index kc_max = std::min(depth, Shape::depth_block);
  const Index mc_max = std::min((rows + R - 1) / R * R, Shape::row_block);
  scratch.a.resize(static_cast<std::size_t>(kc_max * mc_max));
  scratch.b.resize(static_cast<std::size_t>(kc_max * W));
  scratch.edge.resize(static_cast<std::size_t>(R * W));

  // Depth blocks in ascending order: each continues the chains left in C by the previous one.
  for (Index k0 = 0; k0 < depth; k0 += Shape::depth_block) {
    const Index kc = std::min(Shape::depth_block, depth - k0);
    const bool from_zero = fresh && k0 == 0;
    for (Index i0 = 0; i0 < rows; i0 += Shape::row_block) {
      const Index mc = std::min(Shape::row_block, rows - i0);
      // Pack A[i0 : i0 + mc, k0 : k0 + kc] in R-row slivers, k-major, zero rows past the edge.
      const MatrixView<Scalar> a_block{a.transposed ? a.data + k0 * a.stride + i0 : a.data + i0 * a.stride + k0,
                                       a.stride, a.transposed};
      pack_a<Scalar>(mc, kc, a_block, scratch.a.data());
      for (Index j0 = 0; j0 < cols; j0 += W) {
        const Index nw = std::min(W, cols - j0);
        // Pack B[k0 : k0 + kc, j0 : j0 + W], zero columns past the edge.
        const MatrixView<Scalar> b_block{b.transposed ? b.data + j0 * b.stride + k0 : b.data + k0 * b.stride + j0,
                                         b.stride, b.transposed};
        Scalar* bp = scratch.b.data();
        pack_b<Scalar>(kc, nw, b_block, bp);
        const Scalar* as = scratch.a.data();
        for (Index r0 = 0; r0 < mc; r0 += R, as += kc * R) {
          Scalar* ct = c + (i0 + r0) * ldc + j0;
          const Index nr = std::min(R, mc - r0);
          if (nw == W) {
            if (from_zero) micro_kernel_rows<Scalar, ALayout::packed, /*Accumulate=*/false>(nr, kc, as, 0, bp, W, ct, ldc);
            else micro_kernel_rows<Scalar>(nr, kc, as, 0, bp, W, ct, ldc);
            continue;
          }
          // A tile at the right edge: the same kernel on a padded copy, then the valid part back.
          Scalar* e = scratch.edge.data();
          for (Index r = 0; r < R; ++r)
            for (Index w = 0; w < W; ++w) e[r * W + w] = !from_zero && r < nr && w < nw ? ct[r * ldc + w] : Scalar(0);
          micro_kernel_rows<Scalar>(nr, kc, as, 0, bp, W, e, W);
          for (Index r = 0; r < nr; ++r)
            for (Index w = 0; w < nw; ++w) ct[r * ldc + w] = e[r * W + w];
        }
      }
    }
  }
}

/// C (rows x cols, leading dimension ldc) += A (rows x depth) B (depth x cols) with every operand
/// read in place, nothing packed: A's entry (r, k) at a[r lda + k] (ALayout::rows) or a[k lda + r]
/// (ALayout::columns: A is the transpose of a row-major tile), B's (k, j) at b[k ldb + j]. For
/// products of tiles already in cache (the fused backward's), where packing would cost as much as
/// it saves. Each element of C is one ascending chain over k continued from C, as in
/// accumulate_product; a column panel at the right edge goes through padded copies.
template <class Scalar, ALayout Layout>
void add_product_in_place(Index rows, Index cols, Index depth, const Scalar* a, Index lda, const Scalar* b, Index ldb,
                          Scalar* c, Index ldc, ProductScratch<Scalar>& scratch) {
  static_assert(Layout != ALayout::packed, "in place: A is a row-major tile or its transpose");
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  for (Index c0 = 0; c0 < cols; c0 += W) {
    const Index nw = std::min(W, cols - c0);
    const Scalar* panel = b + c0;
    Index ld = ldb;
    if (nw < W) {  // the edge panel: B's last columns, zero-padded to W
      scratch.b.assign(static_cast<std::size_t>(depth * W), Scalar(0));
      for (Index k = 0; k < depth; ++k) std::copy_n(b + k * ldb + c0, nw, scratch.b.data() + k * W);
      panel = scratch.b.data(), ld = W;
      scratch.edge.resize(static_cast<std::size_t>(R * W));
    }
    for (Index r0 = 0; r0 < rows; r0 += R) {
      const Index nr = std::min(R, rows - r0);
      const Scalar* sliver = Layout == ALayout::rows ? a + r0 * lda : a + r0;
      Scalar* ct = c + r0 * ldc + c0;
      if (nw == W) {
        micro_kernel_rows<Scalar, Layout>(nr, depth, sliver, lda, panel, ld, ct, ldc);
        continue;
      }
      Scalar* e = scratch.edge.data();
      for (Index r = 0; r < R; ++r)
        for (Index w = 0; w < W; ++w) e[r * W + w] = r < nr && w < nw ? ct[r * ldc + w] : Scalar(0);
      micro_kernel_rows<Scalar, Layout>(nr, depth, sliver, lda, panel, ld, e, W);
      for (Index r = 0; r < nr; ++r) std::copy_n(e + r * W, nw, ct + r * ldc);
    }
  }
}

/// C = A B for row-major Eigen matrices, split over `threads` threads by column panels; with
/// transpose_a, C = Aᵀ B (A read in place, not copied: a backward's weight gradients, Xᵀ dY).
/// a: (n, k) (transposed: (k, n)), b: (k, m) -> c: (n, m) (resized). Deterministic: see the top of this file.
template <class Scalar>
void product(const Eigen::Ref<const Matrix<Scalar>>& a, const Eigen::Ref<const Matrix<Scalar>>& b,
             Matrix<Scalar>& c, int threads, bool transpose_a = false) {
  constexpr Index W = TileShape<Scalar>::lanes;
  const Index n = transpose_a ? a.cols() : a.rows(), m = b.cols(), k = transpose_a ? a.rows() : a.cols();
  c.resize(n, m);  // (each part writes its own columns first: fresh pages are first touched in parallel)
  if (n == 0 || m == 0) return;
  if (k == 0) {  // (no chain: zeros)
    c.setZero();
    return;
  }
  const Index panels = (m + W - 1) / W;
  const int parts = static_cast<int>(std::max<Index>(1, std::min<Index>(threads_for(double(n) * double(m) * double(k), threads), panels)));
  const MatrixView<Scalar> av{a.data(), a.outerStride(), transpose_a}, bv{b.data(), b.outerStride()};
  parallel_region(parts, [&](int part) {
    const Index first = panels * part / parts * W, last = std::min(m, panels * (part + 1) / parts * W);
    ProductScratch<Scalar> scratch;
    accumulate_product<Scalar>(n, last - first, k, av, {bv.data + first, bv.stride}, c.data() + first, m, scratch, /*fresh=*/true);
  });
}

/// A B (with transpose_a, Aᵀ B) by product, as a new matrix.
template <class Scalar>
Matrix<Scalar> product_of(const Eigen::Ref<const Matrix<Scalar>>& a, const Eigen::Ref<const Matrix<Scalar>>& b, int threads = 1,
                          bool transpose_a = false) {
  Matrix<Scalar> c;
  product<Scalar>(a, b, c, threads, transpose_a);
  return c;
}

/// The compiled mode's instantiations (detail/compiled.hpp): the product the step-by-step path,
/// the backward and the latent layer call.
#define HEADWISE_PRODUCT_INSTANTIATIONS(PREFIX, S)                                                                   \
  PREFIX template void detail::product<S>(const Eigen::Ref<const Matrix<S>>&, const Eigen::Ref<const Matrix<S>>&, \
                                          Matrix<S>&, int, bool);

}  // namespace headwise::detail

namespace headwise {
HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_PRODUCT_INSTANTIATIONS)
}  // namespace headwise
