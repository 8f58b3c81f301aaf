// Internal: the fused kernel's products under KvArithmetic::stored with F16 keys and values
// (kv_storage.hpp): chains of F16 fused multiply-adds, as AVX512-FP16's vfmadd231ph computes them,
// 32 terms long, their sums added in float32.
//
// What is rounded, and how (the whole of the policy; everything else is as widened):
//   queries  each row of the scaled query tile Qs (one head) to F16, to nearest (ties to even),
//            the rule the keys were stored by (attend refuses a query with an entry that rounds
//            beyond 65504, from 65520 on, before the kernel runs)
//   scores   S_ij = Σ over the chunks of f16_chain components of d_head (the last may be shorter),
//            in ascending order, in float32 from 0, of the chunk's chain h: h = fma(q_ic, k_jc, h)
//            over its components ascending, from h = +0, each step rounded once to F16 (nearest,
//            ties to even; subnormals kept; beyond 65504 infinite)
//   weights  P = exp(S - m) by exp_nonpositive (detail/exp_nonpositive.hpp); for the product with V,
//            to F16 (nearest, ties to even; 2^-25 and below zero)
//   values   acc_ic += h for each chunk of f16_chain keys of the key tile (the keys j0 + 32 t ...,
//            counted from the tile's first), h the chunk's chain h = fma(p_ij, v_jc, h) over the
//            keys of the chunk the row's sliver sees, ascending, from h = +0 (a chain crosses the
//            blocks of a paged store: it is the same chain wherever the keys lie). A key the row
//            does not see has p = 0, and fma(0, v, h) = h: the sliver's span changes no bits
// A chain that leaves F16's range (beyond 65504) is infinite: the kernel notes a score a row sees
// that is not finite (FusedCall::overflow), a value chain's infinity reaches the result, and
// attend refuses either by name (check_overflow): no key is dropped in silence as -inf. With
// AVX512-FP16 the chains are vfmadd231ph's, which keep subnormals whatever MXCSR says; elsewhere
// the same chains lane by lane (F16LanesOf: each step one double multiply-add of F16 numbers, the
// product exact and the sum exact unless |c| dwarfs |a b|, where its rounding cannot land on an
// F16 tie: in effect rounded once to F16): for one key tile, the same bits on every CPU, far
// slower than the widened arithmetic there (bench/RESULTS.md, "Tuning constants").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include <Eigen/Core>

#include "headwise/detail/lanes.hpp"
#include "headwise/detail/tile_product.hpp"
#include "headwise/types.hpp"

namespace headwise::detail {

/// Terms in one F16 chain (components of a score, keys of a value product) before its sum joins
/// the float32 accumulator: 32 roundings of F16 (11 bits) at most.
constexpr Index f16_chain = 32;

/// x rounded to F16 (nearest, ties to even; subnormals kept; |x| >= 65520 infinite), as a float
/// (every F16 number is one). F16's spacing at x is 2^(e - 10), e = max(x's exponent, -14); with
/// c = 1.5 2^(e + 42), x + c lies in [2^(e + 42), 2^(e + 43)), where double's spacing is that one,
/// so (x + c) - c is x rounded to it, to nearest with ties to even, and the subtraction exact
/// (double arithmetic as IEEE's: no excess precision, no reassociation, as -ffast-math would).
inline float f16_nearest(double x) {
  if (std::isnan(x)) return static_cast<float>(x);
  if (!(std::abs(x) < 65520.0)) return std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(x));
  const auto exponent = static_cast<std::int64_t>((Eigen::numext::bit_cast<std::uint64_t>(x) >> 52) & 0x7ff) - 1023;
  const std::int64_t e = std::max<std::int64_t>(exponent, -14);
  const double c = Eigen::numext::bit_cast<double>(static_cast<std::uint64_t>(e + 42 + 1023) << 52 | std::uint64_t(1) << 51);
  return static_cast<float>(std::copysign((x + c) - c, x));  // (a zero keeps x's sign, as IEEE's rounding)
}

/// fma(a, b, c) of three F16 numbers (held in floats), rounded once to F16. a b is exact in
/// double; a b + c is exact in double unless |c| > |a b| by far, where its rounding cannot land
/// on one of F16's ties: one rounding either way.
inline float f16_fma(float a, float b, float c) { return f16_nearest(double(a) * double(b) + double(c)); }

/// An F16's bits as the float it is, and back (exact).
inline float f16_value(std::uint16_t bits) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits)); }
inline std::uint16_t f16_bits(float f16) { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(f16)); }

/// x[0, n) to F16 bits at out, to nearest with ties to even (in registers where the instruction
/// set rounds them, VectorRounding; else Eigen's conversion: the same rounding).
inline void round_to_f16(const float* x, Index n, std::uint16_t* out) {
  for (Index j = VectorRounding<Eigen::half>::round(x, n, out); j < n; ++j) out[j] = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(x[j]));
}
template <class Scalar>
inline void round_to_f16(const Scalar* x, Index n, std::uint16_t* out) {  // (a float64 call never holds F16 keys)
  for (Index j = 0; j < n; ++j) out[j] = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(static_cast<float>(x[j])));
}

/// W lanes of F16 chains and their float32 sums, lane by lane (F16Lanes' portable form).
template <Index W>
struct PortableF16Lanes {
  struct Halves { float x[static_cast<std::size_t>(W)]; };  // F16 numbers, held exactly in floats
  struct Floats { float x[static_cast<std::size_t>(W)]; };
  static Halves zero() { return Halves{}; }
  static Floats zero_floats() { return Floats{}; }
  static Halves load(const std::uint16_t* bits) {
    Halves h;
    for (Index w = 0; w < W; ++w) h.x[w] = f16_value(bits[w]);
    return h;
  }
  static Halves broadcast(std::uint16_t bits) {
    Halves h;
    std::fill(h.x, h.x + W, f16_value(bits));
    return h;
  }
  static void fma(const Halves& a, const Halves& b, Halves& acc) {
    for (Index w = 0; w < W; ++w) acc.x[w] = f16_fma(a.x[w], b.x[w], acc.x[w]);
  }
  static void store(std::uint16_t* bits, const Halves& h) {
    for (Index w = 0; w < W; ++w) bits[w] = f16_bits(h.x[w]);
  }
  static Floats load_floats(const float* f) {
    Floats a;
    std::copy(f, f + W, a.x);
    return a;
  }
  static void store_floats(float* f, const Floats& a) { std::copy(a.x, a.x + W, f); }
  static void add(Floats& acc, const Halves& h) {
    for (Index w = 0; w < W; ++w) acc.x[w] += h.x[w];
  }
};

/// The lanes a build multiplies F16 panels of W lanes with (detail/lanes.hpp): AVX512-FP16's
/// registers where it has them (W = 32), else lane by lane.
template <Index W>
using F16LanesOf = LanesOf<Eigen::half, W, PortableF16Lanes<W>>;

/// One step of every chain of rows r...: h[r][p] = fma(a[r lda], panel p's row (W lanes at row +
/// p next), h[r][p]); `asked`: the row's number for prefetch (PanelPrefetch).
template <class Lanes, Index W, Index Panels, class Halves, std::size_t Rows, Index... r>
inline void f16_chain_step(std::integer_sequence<Index, r...>, const std::uint16_t* a, Index lda, const std::uint16_t* row, Index next,
                           const PanelPrefetch& prefetch, Index asked, Halves (&h)[Rows][static_cast<std::size_t>(Panels)]) {
  Halves b[static_cast<std::size_t>(Panels)];
  for (Index p = 0; p < Panels; ++p) {
    prefetch_panel_row(prefetch, row + p * next, asked + p, W * Index(sizeof(std::uint16_t)));
    b[p] = Lanes::load(row + p * next);
  }
  const auto step = [&](Index i) {
    const Halves x = Lanes::broadcast(a[i * lda]);
    for (Index p = 0; p < Panels; ++p) Lanes::fma(x, b[p], h[i][p]);
  };
  (step(r), ...);
}

/// The body of f16_score_products for rows r...: out[r][p W, (p + 1) W) = the chained sums of row
/// r of a (F16 bits, lda apart) against panel p's rows (W keys' component c at c W; panel p at
/// panel + p next), chunk by chunk of f16_chain components.
template <class Lanes, Index W, Index Panels, Index... r>
inline void f16_score_products_of(std::integer_sequence<Index, r...>, Index depth, const std::uint16_t* a, Index lda,
                                  const std::uint16_t* panel, Index next, const PanelPrefetch& prefetch, float* out, Index ldo) {
  using Halves = typename Lanes::Halves;
  typename Lanes::Floats acc[sizeof...(r)][static_cast<std::size_t>(Panels)];
  const auto start = [&](Index row) {
    for (Index p = 0; p < Panels; ++p) acc[row][p] = Lanes::zero_floats();
  };
  (start(r), ...);
  for (Index c0 = 0; c0 < depth; c0 += f16_chain) {
    Halves h[sizeof...(r)][static_cast<std::size_t>(Panels)];
    const auto begin = [&](Index row) {
      for (Index p = 0; p < Panels; ++p) h[row][p] = Lanes::zero();
    };
    (begin(r), ...);
    for (Index c = c0; c < std::min(depth, c0 + f16_chain); ++c)
      f16_chain_step<Lanes, W, Panels>(std::integer_sequence<Index, r...>{}, a + c, lda, panel + c * W, next, prefetch, c * Panels, h);
    const auto sum = [&](Index row) {
      for (Index p = 0; p < Panels; ++p) Lanes::add(acc[row][p], h[row][p]);
    };
    (sum(r), ...);
  }
  const auto finish = [&](Index row) {
    for (Index p = 0; p < Panels; ++p) Lanes::store_floats(out + row * ldo + p * W, acc[row][p]);
  };
  (finish(r), ...);
}

/// kernel(height, first row) over `rows` rows (by_lane_heights): with AVX512-FP16's registers
/// each row's chains and float sums held in them, up to 8 rows of one panel or 4 of two.
template <class Lanes, Index W, Index Panels, class Kernel>
inline void by_f16_heights(Index rows, const Kernel& kernel) {
  by_lane_heights<std::is_same_v<Lanes, PortableF16Lanes<W>> ? 1 : Panels == 1 ? 8 : 4>(rows, kernel);
}

/// S[r][0, Panels W) = Qs_r . k_w by F16 chains (see the top) for `rows` rows of a (F16 bits, lda
/// entries apart) against Panels key panels of W keys (the second at panel + next), into out
/// (leading dimension ldo). prefetch: what to ask for ahead (PanelPrefetch).
template <Index W, Index Panels>
inline void f16_score_products(Index rows, Index depth, const std::uint16_t* a, Index lda, const std::uint16_t* panel, Index next,
                               const PanelPrefetch& prefetch, float* out, Index ldo) {
  using Lanes = F16LanesOf<W>;
  by_f16_heights<Lanes, W, Panels>(rows, [&](auto height, Index row) {
    f16_score_products_of<Lanes, W, Panels>(std::make_integer_sequence<Index, decltype(height)::value>{}, depth, a + row * lda, lda,
                                           panel, next, prefetch, out + row * ldo, ldo);
  });
}

/// Where a run of keys lies in its value chains: the first key's place in its chunk of f16_chain,
/// whether the chunk's chain began in an earlier run (its F16 sums wait in `carry`), and whether
/// the run ends the sliver's keys (a chunk cut short is added, as if its other keys had weight 0).
struct F16Run {
  Index tokens = 0;
  Index phase = 0;
  bool continues = false;
  bool last = false;
};

/// The body of f16_value_products for rows r...
template <class Lanes, Index W, Index Panels, Index... r>
inline void f16_value_products_of(std::integer_sequence<Index, r...>, const F16Run& run, const std::uint16_t* p, Index ldp,
                                  const std::uint16_t* values, Index next, const PanelPrefetch& prefetch, std::uint16_t* carry,
                                  Index ldcarry, float* acc, Index ldacc) {
  using Halves = typename Lanes::Halves;
  typename Lanes::Floats sums[sizeof...(r)][static_cast<std::size_t>(Panels)];
  Halves h[sizeof...(r)][static_cast<std::size_t>(Panels)];
  const auto start = [&](Index row) {
    for (Index c = 0; c < Panels; ++c) {
      sums[row][c] = Lanes::load_floats(acc + row * ldacc + c * W);
      h[row][c] = run.continues ? Lanes::load(carry + row * ldcarry + c * W) : Lanes::zero();
    }
  };
  (start(r), ...);
  Index phase = run.phase;
  for (Index t = 0; t < run.tokens;) {  // chunk by chunk (no branch among a chunk's steps)
    const Index end = std::min(run.tokens, t + f16_chain - phase);
    phase += end - t;
    for (; t < end; ++t)
      f16_chain_step<Lanes, W, Panels>(std::integer_sequence<Index, r...>{}, p + t, ldp, values + t * W, next, prefetch, t * Panels, h);
    if (phase == f16_chain) {
      phase = 0;
      const auto sum = [&](Index row) {
        for (Index c = 0; c < Panels; ++c) Lanes::add(sums[row][c], h[row][c]), h[row][c] = Lanes::zero();
      };
      (sum(r), ...);
    }
  }
  const auto finish = [&](Index row) {
    for (Index c = 0; c < Panels; ++c) {
      if (phase != 0 && run.last) Lanes::add(sums[row][c], h[row][c]);
      else if (phase != 0) Lanes::store(carry + row * ldcarry + c * W, h[row][c]);
      Lanes::store_floats(acc + row * ldacc + c * W, sums[row][c]);
    }
  };
  (finish(r), ...);
}

/// acc[r][0, Panels W) += P_r V over the run's keys by F16 chains (see the top): row r's weights
/// (F16 bits) at p + r ldp, key t's W value columns at values + t W (the second panel at + next);
/// a chunk's unfinished chains in carry[r][0, Panels W) (leading dimension ldcarry) between runs.
template <Index W, Index Panels>
inline void f16_value_products(Index rows, const F16Run& run, const std::uint16_t* p, Index ldp, const std::uint16_t* values,
                               Index next, const PanelPrefetch& prefetch, std::uint16_t* carry, Index ldcarry, float* acc,
                               Index ldacc) {
  using Lanes = F16LanesOf<W>;
  by_f16_heights<Lanes, W, Panels>(rows, [&](auto height, Index row) {
    f16_value_products_of<Lanes, W, Panels>(std::make_integer_sequence<Index, decltype(height)::value>{}, run, p + row * ldp, ldp,
                                           values, next, prefetch, carry + row * ldcarry, ldcarry, acc + row * ldacc, ldacc);
  });
}

}  // namespace headwise::detail
