// Internal: the matrix products of the fused kernel and of the layer's projections.
//
// Every element of C = A B is ONE chain of multiply-adds over k in ascending order, computed by
// the same instructions whatever the shapes: rows and columns at the edges are padded with zeros
// and go through the same micro-kernel, and a depth split into blocks continues the chain from
// the value stored in C. So a row of the result never depends on which other rows were computed
// with it. That is what makes decoding token by token bitwise equal to the full forward, and the
// result independent of the thread count. (Eigen's GEMM switches paths by shape: a 1-row product
// becomes a GEMV with another summation order.)
//
// Layout: A is packed k-major in blocks of `rows` (R) rows, B in panels of `lanes` (W) columns;
// the micro-kernel keeps an R x W tile of C in registers (6 x 16 floats = 12 AVX registers).
#pragma once

#include <algorithm>
#include <vector>

#include "headwise/detail/parallel.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

template <class Scalar>
struct TileShape {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;  // one SIMD register
  static constexpr Index packet = Eigen::internal::unpacket_traits<Packet>::size;
  static constexpr Index rows = 6;             // R: rows of C per micro-tile
  static constexpr Index lanes = 2 * packet;   // W: columns of C per micro-tile (two registers)
  static constexpr Index depth_block = 256;    // k per packed block (A and B stay in L1/L2)
  static constexpr Index row_block = 96;       // rows of A packed at once
};

/// A strided read-only view of a row-major matrix, or of its transpose.
template <class Scalar>
struct MatrixView {
  const Scalar* data;
  Index stride;           // distance between rows of the stored matrix
  bool transposed = false;  // true: the view is of the transpose, element (i, j) at data[j * stride + i]
};

/// c (Rows x W, leading dimension ldc) continues its chains: c += a_packed b_packed over `depth`.
/// a_packed: depth x R (k-major, an R-row sliver of which the first Rows rows are used);
/// b_packed: depth x W. Each row is the same chain of packet multiply-adds whatever Rows is, so a
/// short sliver (a decoding step's single query) costs one row, not R. Written with Eigen's packet
/// primitives so that the 2 Rows accumulators stay in registers (plain loops vectorise the wrong way).
template <class Scalar, int Rows>
inline void micro_kernel(Index depth, const Scalar* a, const Scalar* b, Scalar* c, Index ldc) {
  using namespace Eigen::internal;
  using Shape = TileShape<Scalar>;
  using Packet = typename Shape::Packet;
  constexpr Index R = Shape::rows, P = Shape::packet, W = Shape::lanes;
  static_assert(Rows >= 1 && Rows <= R, "a sliver has at most R rows");
  constexpr Index prefetch_rows = 16;  // rows of B ahead: 1 KiB for float
  Packet acc[Rows][2];
  for (Index r = 0; r < Rows; ++r) {
    acc[r][0] = ploadu<Packet>(c + r * ldc);
    acc[r][1] = ploadu<Packet>(c + r * ldc + P);
  }
  for (Index k = 0; k < depth; ++k) {
    // B streams from memory when few rows share it (a decoding step): ask for it early.
    if (Rows <= 2) prefetch(b + (k + prefetch_rows) * W);
    const Packet b0 = ploadu<Packet>(b + k * W), b1 = ploadu<Packet>(b + k * W + P);
    for (Index r = 0; r < Rows; ++r) {
      const Packet ar = pset1<Packet>(a[k * R + r]);
      acc[r][0] = pmadd(ar, b0, acc[r][0]);
      acc[r][1] = pmadd(ar, b1, acc[r][1]);
    }
  }
  for (Index r = 0; r < Rows; ++r) {
    pstoreu(c + r * ldc, acc[r][0]);
    pstoreu(c + r * ldc + P, acc[r][1]);
  }
}

/// micro_kernel on the first `rows` (1..R) rows of a sliver.
template <class Scalar>
inline void micro_kernel_rows(Index rows, Index depth, const Scalar* a, const Scalar* b, Scalar* c, Index ldc) {
  static_assert(TileShape<Scalar>::rows == 6, "one case per sliver height");
  switch (rows) {
    case 1: return micro_kernel<Scalar, 1>(depth, a, b, c, ldc);
    case 2: return micro_kernel<Scalar, 2>(depth, a, b, c, ldc);
    case 3: return micro_kernel<Scalar, 3>(depth, a, b, c, ldc);
    case 4: return micro_kernel<Scalar, 4>(depth, a, b, c, ldc);
    case 5: return micro_kernel<Scalar, 5>(depth, a, b, c, ldc);
    default: return micro_kernel<Scalar, 6>(depth, a, b, c, ldc);
  }
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

/// Packs depth [0, depth) x columns [0, cols) of B in W-column panels, zero columns past the edge:
/// out[(j0 / W) * depth * W + k * W + w] = B(k, j0 + w). out holds ceil(cols / W) * W * depth.
template <class Scalar>
inline void pack_b(Index depth, Index cols, MatrixView<Scalar> b, Scalar* out) {
  constexpr Index W = TileShape<Scalar>::lanes;
  for (Index j0 = 0; j0 < cols; j0 += W, out += depth * W) {
    const Index nw = std::min(W, cols - j0);
    if (nw < W) std::fill(out, out + depth * W, Scalar(0));
    if (b.transposed) {
      for (Index w = 0; w < nw; ++w)
        for (Index k = 0; k < depth; ++k) out[k * W + w] = b.data[(j0 + w) * b.stride + k];
    } else {
      for (Index k = 0; k < depth; ++k) std::copy_n(b.data + k * b.stride + j0, nw, out + k * W);
    }
  }
}

/// C[0 : rows, 0 : cols] += A B on packed operands; cols a multiple of W (C padded to whole panels).
/// a_packed: R-row slivers of `depth` (pack_a); b_packed: W-column panels, panel p at
/// b_packed + p * b_panel_stride and its row k at k * W (pack_b, or a slice of a packed panel).
template <class Scalar>
inline void multiply_packed(Index rows, Index cols, Index depth, const Scalar* a_packed, const Scalar* b_packed,
                            Index b_panel_stride, Scalar* c, Index ldc) {
  constexpr Index R = TileShape<Scalar>::rows, W = TileShape<Scalar>::lanes;
  for (Index j0 = 0; j0 < cols; j0 += W) {
    const Scalar* bp = b_packed + (j0 / W) * b_panel_stride;
    const Scalar* ap = a_packed;
    for (Index r0 = 0; r0 < rows; r0 += R, ap += depth * R)
      micro_kernel_rows(std::min(R, rows - r0), depth, ap, bp, c + r0 * ldc + j0, ldc);
  }
}

/// Scratch for tile products, reused across calls to avoid allocating per tile.
template <class Scalar>
struct ProductScratch {
  std::vector<Scalar> a, b, edge;
};

/// C (rows x cols, row-major, leading dimension ldc) += A (rows x depth) B (depth x cols).
/// Set C to 0 first for a plain product. Each element is one ascending chain over k.
template <class Scalar>
void accumulate_product(Index rows, Index cols, Index depth, MatrixView<Scalar> a, MatrixView<Scalar> b, Scalar* c,
                        Index ldc, ProductScratch<Scalar>& scratch) {
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
            micro_kernel_rows(nr, kc, as, bp, ct, ldc);
            continue;
          }
          // A tile at the right edge: the same kernel on a padded copy, then the valid part back.
          Scalar* e = scratch.edge.data();
          for (Index r = 0; r < R; ++r)
            for (Index w = 0; w < W; ++w) e[r * W + w] = r < nr && w < nw ? ct[r * ldc + w] : Scalar(0);
          micro_kernel_rows(nr, kc, as, bp, e, W);
          for (Index r = 0; r < nr; ++r)
            for (Index w = 0; w < nw; ++w) ct[r * ldc + w] = e[r * W + w];
        }
      }
    }
  }
}

/// C = A B for row-major Eigen matrices, split over `threads` OpenMP threads by column panels.
/// a: (n, k), b: (k, m) -> c: (n, m) (resized). Deterministic: see the top of this file.
template <class Scalar>
void product(const Eigen::Ref<const Matrix<Scalar>>& a, const Eigen::Ref<const Matrix<Scalar>>& b,
             Matrix<Scalar>& c, int threads) {
  constexpr Index W = TileShape<Scalar>::lanes;
  const Index n = a.rows(), m = b.cols(), k = a.cols();
  c.setZero(n, m);
  if (n == 0 || m == 0) return;
  const Index panels = (m + W - 1) / W;
  const int parts = static_cast<int>(std::max<Index>(1, std::min<Index>(threads, panels)));
  const MatrixView<Scalar> av{a.data(), a.outerStride()}, bv{b.data(), b.outerStride()};
  ExceptionCarrier carrier;  // scratch allocation may throw; no exception may leave the region
HEADWISE_OMP(omp parallel for num_threads(parts) schedule(static) if (parts > 1))
  for (int part = 0; part < parts; ++part)
    carrier.run([&] {
      const Index first = panels * part / parts * W, last = std::min(m, panels * (part + 1) / parts * W);
      ProductScratch<Scalar> scratch;
      accumulate_product<Scalar>(n, last - first, k, av, {bv.data + first, bv.stride}, c.data() + first, m, scratch);
    });
  carrier.rethrow();
}

}  // namespace headwise::detail
