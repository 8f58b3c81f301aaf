// Weights kept as stored (stored_matrix.hpp): x Wᵀ with W in F32, BF16, F16, FP8 with block
// scales (float) or F64 (double) against Eigen's float64 product of the same stored values (FP8
// decoded here from the formats' definition); a row of the result the same bits alone, among any
// other rows and on any thread count (decoding = the forward); the conversions' rounding; and
// what is refused.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "headwise/stored_matrix.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using headwise::Index;
using headwise::Matrix;
using headwise::StoredMatrix;
using headwise::WeightType;
using headwise_test::as_double;
using headwise_test::IsExactly;
using headwise_test::IsNear;

namespace {
// Shapes through every path and tile height (rows of x: 1..4 against one row of B at a time, 5..9
// and 70 against 2 x 6 or 1 x 6 tiles), B's row tail (out not a multiple of 6), the depth's
// partial last packet (in not a multiple of 8 or 16), the depth's packets leaving 0 or 1 after the
// last whole step of the two chains, depths of several ranges (2100: three of 1024 or five of 512,
// partial sums kept between them), and rows long enough that fewer rows of A go in a block (9000:
// 28 floats or 12 doubles).
struct Shape {
  Index n, in, out;
};
const std::vector<Shape> shapes = {{1, 64, 48}, {1, 37, 13}, {3, 100, 7}, {5, 16, 1}, {9, 129, 31}, {12, 7, 25}, {2, 1, 6}, {6, 2100, 13}, {4, 80, 7}, {70, 9000, 9}};

template <class Scalar>
void check_types(const std::vector<WeightType>& types) {
  std::mt19937 rng(7);
  for (const Shape s : shapes)
    for (const WeightType type : types) {
      CAPTURE(s.n, s.in, s.out, headwise::weight_type_name(type));
      const Matrix<Scalar> x = headwise_test::random_matrix<Scalar>(s.n, s.in, rng);
      const StoredMatrix w = StoredMatrix::from(headwise_test::random_matrix<double>(s.out, s.in, rng), type);
      CHECK(w.bytes() == std::size_t(s.out * s.in) * headwise::weight_type_size(type));
      // The reference: Eigen's float64 product of the same stored values.
      const Eigen::MatrixXd expected = x.template cast<double>() * w.to_matrix<double>().transpose();
      const Matrix<Scalar> y = headwise::times_transposed<Scalar>(x, w, 1);
      CHECK_THAT(as_double(y), IsNear(expected, headwise_test::tolerance<Scalar>()));
      // Each row alone, and the whole on 2 and 3 threads: the same bits.
      for (Index i = 0; i < s.n; ++i) CHECK_THAT(as_double(headwise::times_transposed<Scalar>(x.row(i), w, 1)), IsExactly(y.row(i)));
      for (const int threads : {2, 3}) CHECK_THAT(as_double(headwise::times_transposed<Scalar>(x, w, threads)), IsExactly(y));
    }
}
}  // namespace

TEST_CASE("x W^T with W as stored: float with F32, BF16 and F16 weights, double with F64", "[stored_matrix]") {
  check_types<float>({WeightType::f32, WeightType::bf16, WeightType::f16});
  check_types<double>({WeightType::f64});
}

namespace {
// An FP8 code's value from the formats' definition (OCP 8-bit floats): sign, exponent bits with
// bias 7 (E4M3) or 15 (E5M2), mantissa bits; exponent 0 subnormal.
double fp8_value(unsigned code, WeightType type) {
  const int mantissa_bits = type == WeightType::f8_e4m3 ? 3 : 2, bias = type == WeightType::f8_e4m3 ? 7 : 15;
  const int e = int(code & 0x7fu) >> mantissa_bits, m = int(code) & ((1 << mantissa_bits) - 1);
  const double magnitude = e == 0 ? std::ldexp(double(m), 1 - bias - mantissa_bits)
                                  : std::ldexp(double(m + (1 << mantissa_bits)), e - bias - mantissa_bits);
  return code & 0x80u ? -magnitude : magnitude;
}
bool fp8_finite(unsigned code, WeightType type) {
  return type == WeightType::f8_e4m3 ? (code & 0x7fu) != 0x7fu : (code & 0x7fu) < 0x7cu;
}

// Random finite codes (out x in) and scales in blocks of block_rows x block_cols, as bytes and as
// the float64 matrix of their values times the scales rounded to float (what a float product
// multiplies by).
struct Fp8Case {
  std::shared_ptr<std::vector<unsigned char>> codes;
  headwise::BlockScales scales;
  Eigen::MatrixXd weights;
};
Fp8Case fp8_case(Index out, Index in, WeightType type, Index block_rows, Index block_cols, std::mt19937& rng) {
  Fp8Case f;
  f.codes = std::make_shared<std::vector<unsigned char>>(std::size_t(out * in));
  for (unsigned char& c : *f.codes) {
    do c = static_cast<unsigned char>(rng() & 0xffu);
    while (!fp8_finite(c, type));
  }
  f.scales.block_rows = block_rows, f.scales.block_cols = block_cols;
  f.scales.grid.resize((out + block_rows - 1) / block_rows, (in + block_cols - 1) / block_cols);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  for (Index i = 0; i < f.scales.grid.size(); ++i) f.scales.grid.data()[i] = double(float(std::ldexp(u(rng), type == WeightType::f8_e4m3 ? -9 : -14)));
  f.weights.resize(out, in);
  for (Index i = 0; i < out; ++i)
    for (Index j = 0; j < in; ++j)
      f.weights(i, j) = double(float(fp8_value((*f.codes)[std::size_t(i * in + j)], type) * f.scales.grid(i / block_rows, j / block_cols)));
  return f;
}
}  // namespace

TEST_CASE("x W^T with FP8 weights in place, each times its block's scale", "[stored_matrix][fp8]") {
  std::mt19937 rng(13);
  for (const WeightType type : {WeightType::f8_e4m3, WeightType::f8_e5m2})
    for (const Shape s : shapes)
      for (const auto& [block_rows, block_cols] : {std::pair<Index, Index>{3, 16}, {128, 128}, {5, 32}}) {
        CAPTURE(s.n, s.in, s.out, headwise::weight_type_name(type), block_rows, block_cols);
        const Fp8Case f = fp8_case(s.out, s.in, type, block_rows, block_cols, rng);
        const StoredMatrix w = StoredMatrix::view(f.codes, f.codes->data(), type, {s.out, s.in}, f.scales);
        CHECK(w.data() == f.codes->data());
        CHECK(w.bytes() == std::size_t(s.out * s.in + s.out * ((s.in + block_cols - 1) / block_cols) * 4));  // codes, a float scale per row and block
        CHECK_THAT(as_double(w.to_matrix<float>()), IsExactly(f.weights));
        const Matrix<float> x = headwise_test::random_matrix<float>(s.n, s.in, rng);
        const Matrix<float> y = headwise::times_transposed<float>(x, w, 1);
        CHECK_THAT(as_double(y), IsNear(Eigen::MatrixXd(x.cast<double>() * f.weights.transpose()), headwise_test::tolerance<float>()));
        for (Index i = 0; i < s.n; ++i) CHECK_THAT(as_double(headwise::times_transposed<float>(x.row(i), w, 1)), IsExactly(y.row(i)));
        for (const int threads : {2, 3}) CHECK_THAT(as_double(headwise::times_transposed<float>(x, w, threads)), IsExactly(y));
        // Rows of it share its codes and scales; converting the widened values back is exact.
        if (s.out > 4) CHECK_THAT(as_double(w.middle_rows(3, s.out - 4).to_matrix<float>()), IsExactly(f.weights.middleRows(3, s.out - 4)));
        const StoredMatrix back = StoredMatrix::from(f.weights, type, f.scales);
        CHECK(std::equal(f.codes->begin(), f.codes->end(), static_cast<const unsigned char*>(back.data())));
      }
}

TEST_CASE("Every finite FP8 code widens to its value", "[stored_matrix][fp8]") {
  for (const WeightType type : {WeightType::f8_e4m3, WeightType::f8_e5m2}) {
    std::vector<unsigned char> finite;
    for (unsigned c = 0; c < 256; ++c)
      if (fp8_finite(c, type)) finite.push_back(static_cast<unsigned char>(c));
    auto codes = std::make_shared<std::vector<unsigned char>>(finite);
    headwise::BlockScales one{Eigen::MatrixXd::Ones(1, (Index(finite.size()) + 15) / 16), 1, 16};
    const StoredMatrix w = StoredMatrix::view(codes, codes->data(), type, {1, Index(finite.size())}, one);
    Eigen::RowVectorXd expected(Index(finite.size()));
    for (Index j = 0; j < expected.size(); ++j) expected(j) = fp8_value(finite[std::size_t(j)], type);
    CAPTURE(headwise::weight_type_name(type));
    CHECK_THAT(as_double(w.to_matrix<float>()), IsExactly(expected));
    // And through a product: x = e_j picks entry j.
    const Matrix<float> picks = Matrix<float>::Identity(expected.size(), expected.size());
    CHECK_THAT(as_double(headwise::times_transposed<float>(picks, w, 1)), IsExactly(Eigen::VectorXd(expected.transpose())));
    // Rounding to the nearest code, ties to even: halfway between 1 and the next code goes to 1.
    const double step = type == WeightType::f8_e4m3 ? 0.125 : 0.25;
    Eigen::MatrixXd m(1, 16);
    m.setZero();
    m(0, 0) = 1 + step / 2, m(0, 1) = 1 + 1.5 * step, m(0, 2) = -(1 + step / 4);
    const Eigen::MatrixXd rounded = StoredMatrix::from(m, type, {Eigen::MatrixXd::Ones(1, 1), 1, 16}).to_matrix<double>();
    CHECK(rounded(0, 0) == 1.0);
    CHECK(rounded(0, 1) == 1 + 2 * step);
    CHECK(rounded(0, 2) == -1.0);
  }
}

TEST_CASE("Conversion to FP8: each quotient to its nearest code, ties to even, subnormals too, past the largest refused", "[stored_matrix][fp8]") {
  std::mt19937_64 rng(29);
  for (const WeightType type : {WeightType::f8_e4m3, WeightType::f8_e5m2}) {
    CAPTURE(headwise::weight_type_name(type));
    const bool e4m3 = type == WeightType::f8_e4m3;
    // The non-negative finite codes by value, and past the largest the value the next code would
    // have (E4M3's NaN, E5M2's infinity): a quotient nearest that one is refused.
    std::vector<std::pair<double, unsigned>> codes;
    for (unsigned c = 0; c < 128; ++c)
      if (fp8_finite(c, type)) codes.emplace_back(fp8_value(c, type), c);
    std::sort(codes.begin(), codes.end());
    const unsigned beyond = e4m3 ? 0x7F : 0x7C;
    codes.emplace_back(e4m3 ? 480.0 : 65536.0, beyond);
    const auto nearest = [&](double a) {  // (a >= 0)
      if (a >= codes.back().first) return codes.back();
      const auto hi = std::lower_bound(codes.begin(), codes.end(), std::pair<double, unsigned>{a, 0});
      if (hi == codes.begin() || hi->first == a) return *hi;
      const auto lo = hi - 1;
      if (a - lo->first != hi->first - a) return a - lo->first < hi->first - a ? *lo : *hi;
      return lo->second % 2 == 0 ? *lo : *hi;
    };
    std::vector<double> values;
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (std::size_t i = 0; i + 1 < codes.size(); ++i) {
      const double lo = codes[i].first, hi = codes[i + 1].first, mid = (lo + hi) / 2;
      for (const double v : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, hi), lo + (hi - lo) * unit(rng)}) values.push_back(v);
    }
    for (const double v : {465.0, 479.0, 496.0, 500.0, 600.0, 895.0, 59392.0, 61439.0, 61440.0, 65536.0, 100000.0, 114687.0})
      if (v <= 2 * codes[codes.size() - 2].first) values.push_back(v);
    std::vector<double> kept, expected;
    for (const double v : values) {
      const double x = unit(rng) < 0.5 ? -v : v;
      const auto [value, code] = nearest(v);
      CAPTURE(x);
      if (code == beyond) {
        Eigen::MatrixXd one = Eigen::MatrixXd::Zero(1, 16);
        one(0, 5) = x;
        CHECK_THROWS_WITH(StoredMatrix::from(one, type, {Eigen::MatrixXd::Ones(1, 1), 1, 16}), Catch::Contains("entry (0, 5) over its block's scale is"));
        continue;
      }
      kept.push_back(x), expected.push_back(x < 0 ? -value : value);
    }
    const Index n = Index(kept.size()), padded = (n + 15) / 16 * 16;
    Eigen::MatrixXd m = Eigen::MatrixXd::Zero(1, padded), want = Eigen::MatrixXd::Zero(1, padded);
    for (Index j = 0; j < n; ++j) m(0, j) = kept[std::size_t(j)], want(0, j) = expected[std::size_t(j)];
    CHECK_THAT(as_double(StoredMatrix::from(m, type, {Eigen::MatrixXd::Ones(1, padded / 16), 1, 16}).to_matrix<float>()), IsExactly(want));
  }
}

TEST_CASE("FP8 weights: NaN codes, bad scales and blocks are refused by name", "[stored_matrix][fp8][errors]") {
  auto codes = std::make_shared<std::vector<unsigned char>>(32, static_cast<unsigned char>(0x38));  // 1.0 in E4M3
  const headwise::BlockScales one{Eigen::MatrixXd::Ones(1, 1), 2, 16};
  (*codes)[17] = 0x7f;
  CHECK_THROWS_WITH(StoredMatrix::view(codes, codes->data(), WeightType::f8_e4m3, {2, 16}, one),
                    Catch::Contains("entry (1, 1) is NaN (F8_E4M3 code 127)"));
  (*codes)[17] = 0xfc;
  CHECK_THROWS_WITH(StoredMatrix::view(codes, codes->data(), WeightType::f8_e5m2, {2, 16}, one),
                    Catch::Contains("entry (1, 1) is infinite (F8_E5M2 code 252)"));
  (*codes)[17] = 0x38;
  CHECK_THROWS_WITH(StoredMatrix::view(codes, codes->data(), WeightType::f8_e4m3, {2, 16}),
                    Catch::Contains("F8_E4M3 entries need their block scales"));
  CHECK_THROWS_WITH(StoredMatrix::view(codes, codes->data(), WeightType::bf16, {2, 8}, one), Catch::Contains("block scales are for FP8 entries, not BF16"));
  CHECK_THROWS_WITH(StoredMatrix::view(codes, codes->data(), WeightType::f8_e4m3, {2, 16}, {Eigen::MatrixXd::Ones(1, 2), 2, 8}),
                    Catch::Contains("the columns a multiple of 16"));
  CHECK_THROWS_WITH(StoredMatrix::view(codes, codes->data(), WeightType::f8_e4m3, {2, 16}, {Eigen::MatrixXd::Ones(1, 1), 1, 16}),
                    Catch::Contains("the scale grid is 1 x 1, expected 2 x 1 for 2 x 16 entries in blocks of 1 x 16"));
  CHECK_THROWS_WITH(StoredMatrix::view(codes, codes->data(), WeightType::f8_e4m3, {2, 16}, {Eigen::MatrixXd::Constant(1, 1, 1e38), 2, 16}),
                    Catch::Contains("the scale (0, 0) = 1e+38 is not finite in float32 times 256"));
  CHECK_THROWS_WITH(StoredMatrix::from(Eigen::MatrixXd::Constant(1, 16, 465.0), WeightType::f8_e4m3, {Eigen::MatrixXd::Ones(1, 1), 1, 16}),
                    Catch::Contains("entry (0, 0) over its block's scale is 465, beyond F8_E4M3's largest value 448"));
  CHECK_THROWS_WITH(StoredMatrix::from(Eigen::MatrixXd::Ones(1, 16), WeightType::f8_e5m2), Catch::Contains("F8_E5M2 entries need their block scales"));
}

TEST_CASE("A large product on two threads: the columns split between them, the bits of one", "[stored_matrix]") {
  std::mt19937 rng(11);
  const Matrix<float> x = headwise_test::random_matrix<float>(70, 300, rng);
  const StoredMatrix w = StoredMatrix::from(headwise_test::random_matrix<double>(1000, 300, rng), WeightType::bf16);
  const Matrix<float> y = headwise::times_transposed<float>(x, w, 2);
  CHECK_THAT(as_double(y), IsNear(Eigen::MatrixXd(x.cast<double>() * w.to_matrix<double>().transpose()), 1e-5));
  CHECK_THAT(as_double(headwise::times_transposed<float>(x.middleRows(33, 1), w, 1)), IsExactly(y.middleRows(33, 1)));
}

TEST_CASE("A dot product's lanes are added in the one documented order, four sums at a time", "[stored_matrix]") {
  // row_dot_product.hpp: the halves of the packet added until 4 lanes remain, then (x0 + x2) +
  // (x1 + x3). Lanes of very different sizes make every other order give other bits.
  using Packet = headwise::detail::RowDotShape<float>::Packet;
  constexpr Index P = headwise::detail::RowDotShape<float>::packet;
  if constexpr (P == 8 || P == 16) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
    std::uniform_int_distribution<int> exponent(-30, 30);
    for (Index count = 1; count <= 24; ++count) {
      std::vector<float> lanes(static_cast<std::size_t>(count * P));
      for (float& v : lanes) v = std::ldexp(mantissa(rng), exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
      Packet packets[24];
      for (Index i = 0; i < count; ++i) packets[i] = Eigen::internal::ploadu<Packet>(lanes.data() + i * P);
      float sums[24];
      headwise::detail::sum_packets(packets, count, sums);
      for (Index i = 0; i < count; ++i) {
        float x[P];
        std::copy(lanes.begin() + i * P, lanes.begin() + (i + 1) * P, x);
        for (Index half = P / 2; half >= 4; half /= 2)
          for (Index l = 0; l < half; ++l) x[l] += x[l + half];
        CAPTURE(count, i);
        CHECK(sums[i] == (x[0] + x[2]) + (x[1] + x[3]));
      }
    }
  } else {
    SUCCEED("no 8- or 16-lane float packets in this build");
  }
}

TEST_CASE("Every entry of x W^T is summed in the one documented order, decoding or not", "[stored_matrix]") {
  // row_dot_product.hpp: packet q of a row (P entries) goes to chain q mod 2, each lane of a chain
  // a fused multiply-add chain in ascending k from 0, the last packet zero-padded; the two chains
  // added lane by lane, then the lanes as sum_four adds them. Written out here in
  // scalar code (std::fma: builds whose packets fuse their multiply-adds) for F32 and BF16 weights,
  // one row of x (a decoding step) and many (a prefill).
  using Shape = headwise::detail::RowDotShape<float>;
  constexpr Index P = Shape::packet, C = Shape::chains;
#if defined(EIGEN_VECTORIZE_FMA)
  static_assert(P >= 4 && C == 2, "written for packets of 4 or more lanes and two chains");
  std::mt19937 rng(17);
  for (const Index in : {Index(1), P - 1, 3 * P, 5 * P + 3, 4 * C * P, Index(2100)})
    for (const WeightType type : {WeightType::f32, WeightType::bf16}) {
      CAPTURE(in, headwise::weight_type_name(type));
      const Matrix<float> x = headwise_test::random_matrix<float>(9, in, rng);
      const StoredMatrix w = StoredMatrix::from(headwise_test::random_matrix<double>(8, in, rng), type);
      const Matrix<float> b = w.to_matrix<float>();  // (BF16 widens exactly)
      Matrix<float> expected(x.rows(), b.rows());
      for (Index i = 0; i < x.rows(); ++i)
        for (Index j = 0; j < b.rows(); ++j) {
          std::vector<float> chain(static_cast<std::size_t>(C * P), 0.0f);
          for (Index k = 0; k < (in + P - 1) / P * P; ++k) {
            float& lane = chain[std::size_t(k / P % C * P + k % P)];
            lane = k < in ? std::fma(x(i, k), b(j, k), lane) : std::fma(0.0f, 0.0f, lane);
          }
          float lanes[P];
          for (Index l = 0; l < P; ++l) lanes[l] = chain[l] + chain[P + l];
          for (Index half = P / 2; half >= 4; half /= 2)
            for (Index l = 0; l < half; ++l) lanes[l] += lanes[l + half];
          expected(i, j) = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
        }
      CHECK_THAT(as_double(headwise::times_transposed<float>(x, w, 1)), IsExactly(expected));
      for (Index i = 0; i < x.rows(); ++i) CHECK_THAT(as_double(headwise::times_transposed<float>(x.row(i), w, 2)), IsExactly(expected.row(i)));
    }
#else
  SUCCEED("no fused multiply-adds in this build's packets (" << P << " lanes, " << C << " chains)");
#endif
}

TEST_CASE("Conversion to BF16 and F16 rounds to nearest, ties to even", "[stored_matrix]") {
  // BF16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (ties to 1, the even
  // one); 1 + 3 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6 (ties to 1 + 2^-6). F16 keeps 11: 1 + 2^-11 ties to 1.
  Eigen::MatrixXd m(1, 4);
  m << 1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -8), 1 + 1.5 * std::ldexp(1.0, -8), -2.5;
  CHECK_THAT(as_double(StoredMatrix::from(m, WeightType::bf16).to_matrix<double>()),
             IsExactly(Eigen::RowVector4d(1.0, 1 + std::ldexp(1.0, -6), 1 + std::ldexp(1.0, -7), -2.5)));
  Eigen::MatrixXd h(1, 2);
  h << 1 + std::ldexp(1.0, -11), 65504.0;
  CHECK_THAT(as_double(StoredMatrix::from(h, WeightType::f16).to_matrix<double>()), IsExactly(Eigen::RowVector2d(1.0, 65504.0)));
  // Rounded once from float64: just above a tie rounds up, where rounding to float first (which
  // drops the 2^-30 or 2^-40) would make it the tie and round down.
  Eigen::MatrixXd above(1, 2);
  above << 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), -(1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30));
  CHECK_THAT(as_double(StoredMatrix::from(above, WeightType::bf16).to_matrix<double>()),
             IsExactly(Eigen::RowVector2d(1 + std::ldexp(1.0, -7), -(1 + std::ldexp(1.0, -7)))));
  Eigen::MatrixXd above_half(1, 1);
  above_half << 1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK_THAT(as_double(StoredMatrix::from(above_half, WeightType::f16).to_matrix<double>()), IsExactly(Eigen::RowVector<double, 1>(1 + std::ldexp(1.0, -10))));
}

TEST_CASE("Conversion refuses weights that are not finite, or would not be in the stored type", "[stored_matrix][errors]") {
  Eigen::MatrixXd m = Eigen::MatrixXd::Zero(2, 3);
  m(1, 2) = 65520.0;  // rounds to F16's infinity (65504 is its largest value); BF16 and F32 hold it
  CHECK_THROWS_WITH(StoredMatrix::from(m, WeightType::f16), Catch::Contains("entry (1, 2) = 65520 is beyond F16's largest value"));
  CHECK(StoredMatrix::from(m, WeightType::bf16).row<double>(1)(2) == 65536.0);
  m(1, 2) = 1e300;  // finite in float64, not in float32
  CHECK_THROWS_WITH(StoredMatrix::from(m, WeightType::f32), Catch::Contains("entry (1, 2) = 1e+300 is beyond F32's largest value"));
  CHECK(StoredMatrix::from(m, WeightType::f64).row<double>(1)(2) == 1e300);
  m(0, 1) = std::nan("");
  CHECK_THROWS_WITH(StoredMatrix::from(m, WeightType::f64), Catch::Contains("entry (0, 1) is nan, not a finite weight"));
}

TEST_CASE("Stored weights in place: a view of memory someone else keeps alive", "[stored_matrix]") {
  auto buffer = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  const StoredMatrix w = StoredMatrix::view(buffer, buffer->data(), WeightType::f32, {2, 3});
  Matrix<float> x(1, 3);
  x << 1, 0, -1;
  CHECK_THAT(as_double(headwise::times_transposed<float>(x, w)), IsExactly(Eigen::RowVector2d(-2, -2)));
  CHECK(w.data() == buffer->data());  // read where it is, not copied
}

TEST_CASE("Float weights in place off the packet's alignment: the bits of aligned ones", "[stored_matrix]") {
  // A mapped tensor lies where its file puts it (8-byte aligned in safetensors): a prefill copies
  // its ranges to aligned memory first, a decoding step reads it as it is; the same products.
  std::mt19937 rng(11);
  const Index n = 9, in = 2100, out = 13;
  const Matrix<float> x = headwise_test::random_matrix<float>(n, in, rng);
  const StoredMatrix owned = StoredMatrix::from(headwise_test::random_matrix<double>(out, in, rng), WeightType::f32);
  REQUIRE(reinterpret_cast<std::uintptr_t>(owned.data()) % EIGEN_MAX_ALIGN_BYTES == 0);  // (owned bytes: aligned for this build's widest packet)
  auto buffer = std::make_shared<std::vector<float>>(std::size_t(out * in + 16));
  for (const Index shift : {1, 2, 3}) {
    CAPTURE(shift);
    float* at = buffer->data() + shift;
    std::copy_n(static_cast<const float*>(owned.data()), out * in, at);
    const StoredMatrix moved = StoredMatrix::view(buffer, at, WeightType::f32, {out, in});
    const Matrix<float> expected = headwise::times_transposed<float>(x, owned, 1);
    CHECK_THAT(as_double(headwise::times_transposed<float>(x, moved, 1)), IsExactly(expected));
    CHECK_THAT(as_double(headwise::times_transposed<float>(x, moved, 2)), IsExactly(expected));
    for (Index i = 0; i < n; ++i) CHECK_THAT(as_double(headwise::times_transposed<float>(x.row(i), moved, 1)), IsExactly(expected.row(i)));
  }
}

TEST_CASE("Stored weights: wrong shapes, types and alignments are refused by name", "[stored_matrix][errors]") {
  const StoredMatrix w = StoredMatrix::from(Eigen::MatrixXd::Ones(4, 3), WeightType::bf16);
  CHECK_THROWS_WITH(headwise::times_transposed<float>(Matrix<float>::Ones(2, 4), w),
                    Catch::Contains("x has 4 columns but the weight matrix has 3 (its in dimension)"));
  CHECK_THROWS_WITH(headwise::times_transposed<double>(Matrix<double>::Ones(2, 3), w), Catch::Contains("a float64 product reads F64 weights, not BF16"));
  CHECK_THROWS_WITH(headwise::times_transposed<float>(Matrix<float>::Ones(2, 3), StoredMatrix::from(Eigen::MatrixXd::Ones(4, 3), WeightType::f64)),
                    Catch::Contains("a float32 product reads F32, BF16, F16 or FP8 weights, not F64"));
  auto bytes = std::make_shared<std::vector<unsigned char>>(64);
  CHECK_THROWS_WITH(StoredMatrix::view(bytes, bytes->data() + 1, WeightType::f32, {2, 2}), Catch::Contains("F32 entries are not aligned to their size"));
  CHECK_THROWS_WITH(headwise::times_transposed<float>(Matrix<float>::Ones(1, 3), w, -1), Catch::Contains("times_transposed"));
  CHECK_THROWS_WITH(StoredMatrix::view(bytes, bytes->data(), WeightType::f32, {-1, 2}), Catch::Contains("a negative shape (-1 x 2)"));
  CHECK_THROWS_WITH(StoredMatrix::view(bytes, bytes->data(), WeightType::bf16, {Index(1) << 62, Index(1) << 62}),
                    Catch::Contains("entries of BF16 overflow a size"));
  CHECK_THROWS_WITH(StoredMatrix::view(nullptr, nullptr, WeightType::f32, {2, 2}), Catch::Contains("no data for 2 x 2 entries"));
  CHECK_THROWS_WITH(w.row<float>(4), Catch::Contains("row 4 of a matrix of 4 rows"));
  CHECK_THROWS_WITH(w.middle_rows(3, 2), Catch::Contains("rows 3 .. 5 of a matrix of 4 rows"));
}

TEST_CASE("x W^T with MXFP4 weights in place: the float product's bits over the decoded values", "[stored_matrix][mxfp4]") {
  // Codes and scales drawn at random (scale bytes 100..140), decoded here from the format's
  // definition: a nibble's sign, two exponent bits (bias 1, 0: subnormal) and a mantissa bit;
  // 2^(s - 127) per 32 entries of a row; the low nibble first.
  std::mt19937 rng(5);
  const Index out = 13, in = 96;
  std::vector<std::uint8_t> codes(std::size_t(out * in / 2)), scales(std::size_t(out * in / 32));
  for (auto& c : codes) c = static_cast<std::uint8_t>(rng() & 0xFF);
  for (auto& s : scales) s = static_cast<std::uint8_t>(100 + rng() % 41);
  const auto fp4 = [](unsigned nibble) {
    const unsigned e = (nibble >> 1) & 3, m = nibble & 1;
    const double magnitude = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, int(e) - 1);
    return nibble & 8 ? -magnitude : magnitude;
  };
  Matrix<double> decoded(out, in);
  for (Index r = 0; r < out; ++r)
    for (Index k = 0; k < in; ++k) {
      const std::uint8_t byte = codes[std::size_t(r * in / 2 + k / 2)];
      decoded(r, k) = fp4(k % 2 ? byte >> 4 : byte & 0x0F) * std::ldexp(1.0, int(scales[std::size_t(r * in / 32 + k / 32)]) - 127);
    }
  const StoredMatrix w = StoredMatrix::view_mxfp4(nullptr, codes.data(), scales.data(), {out, in});
  CHECK(w.type() == WeightType::mxfp4);
  CHECK(w.bytes() == std::size_t(out * (in / 2 + in / 32)));
  CHECK_THAT(w.to_matrix<double>(), IsExactly(decoded));
  CHECK_THAT(w.middle_rows(4, 3).to_matrix<double>(), IsExactly(decoded.middleRows(4, 3)));
  CHECK_THAT(as_double(w.row<float>(7)), IsExactly(decoded.row(7)));
  CHECK_THAT(as_double(w.columns<float>(33, 5)), IsExactly(decoded.middleCols(33, 5)));
  const StoredMatrix dense = StoredMatrix::from(decoded.cast<float>(), WeightType::f32);
  for (const Index rows : {1, 3, 5, 70})
    for (const int threads : {1, 2}) {
      CAPTURE(rows, threads);
      const Matrix<float> x = headwise_test::random_matrix<float>(rows, in, rng);
      const Matrix<float> y = headwise::times_transposed<float>(x, w, threads);
      CHECK_THAT(as_double(y), IsExactly(headwise::times_transposed<float>(x, dense, 1)));  // (the float product: its own tests)
      CHECK_THAT(as_double(y), IsNear(x.cast<double>() * decoded.transpose(), 1e-5));
    }
}

namespace {
// MXFP4 codes and scales at random (scale bytes 100..140), as a checkpoint stores them.
struct Mxfp4Case {
  std::vector<std::uint8_t> codes, scales;
  Index out, in;
};
Mxfp4Case mxfp4_case(Index out, Index in, std::mt19937& rng) {
  Mxfp4Case c{std::vector<std::uint8_t>(std::size_t(out * in / 2)), std::vector<std::uint8_t>(std::size_t(out * in / 32)), out, in};
  for (auto& b : c.codes) b = static_cast<std::uint8_t>(rng() & 0xFF);
  for (auto& e : c.scales) e = static_cast<std::uint8_t>(100 + rng() % 41);
  return c;
}
// Entry (r, k) of the stored arithmetic's doubled FP4 values: the nibble's magnitude from E2M1
// (0, 0.5, 1, 1.5, 2, 3, 4, 6) times 2, its sign bit 3.
int doubled_fp4(const Mxfp4Case& c, Index r, Index k) {
  const std::uint8_t byte = c.codes[std::size_t(r * c.in / 2 + k / 2)];
  const unsigned nibble = k % 2 ? byte >> 4 : byte & 0x0F;
  static const int magnitude[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return nibble & 8 ? -magnitude[nibble & 7] : magnitude[nibble & 7];
}
// C(i, j) under the stored arithmetic, restated from detail/mxfp4_products.hpp's rule: x rounded
// to int8 per block of 32; blocks in pairs; lane L (0..15) of pair p is block 2p + (L / 4) % 2's
// entries 8 (L % 4) + 2t + L / 8, t = 0..3; each lane's integer sum times d w by one fma, in pair
// order; the lanes summed L + 8, L + 4, then (0 + 2) + (1 + 3).
float stored_reference(const Matrix<float>& x, Index i, const Mxfp4Case& c, Index j) {
  const Index blocks = c.in / 32;
  std::vector<int> q(std::size_t(c.in), 0);
  std::vector<float> d(static_cast<std::size_t>(blocks));
  for (Index b = 0; b < blocks; ++b) {
    float largest = 0;
    bool finite = true;
    for (Index k = 0; k < 32; ++k) finite = finite && std::isfinite(x(i, 32 * b + k)), largest = std::max(largest, std::fabs(x(i, 32 * b + k)));
    d[std::size_t(b)] = finite ? largest / 127.0f : std::numeric_limits<float>::quiet_NaN();
    if (finite && d[std::size_t(b)] > 0)
      for (Index k = 0; k < 32; ++k) q[std::size_t(32 * b + k)] = int(std::clamp(std::nearbyint(x(i, 32 * b + k) / d[std::size_t(b)]), -127.0f, 127.0f));
  }
  float lanes[16] = {};
  for (Index p = 0; 2 * p < blocks; ++p)
    for (int lane = 0; lane < 16; ++lane) {
      const Index b = 2 * p + (lane / 4) % 2;
      if (b >= blocks) continue;  // (a lone block's partner adds nothing)
      int sum = 0;
      for (int t = 0; t < 4; ++t) {
        const Index k = 32 * b + 8 * (lane % 4) + 2 * t + lane / 8;
        sum += q[std::size_t(k)] * doubled_fp4(c, j, k);
      }
      const float w = std::ldexp(1.0f, int(c.scales[std::size_t(j * blocks + b)]) - 128);
      lanes[lane] = std::fma(float(sum), d[std::size_t(b)] * w, lanes[lane]);
    }
  for (int l = 0; l < 8; ++l) lanes[l] += lanes[l + 8];
  for (int l = 0; l < 4; ++l) lanes[l] += lanes[l + 4];
  return (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
}
}  // namespace

TEST_CASE("x W^T with MXFP4 weights by the stored arithmetic: int8 activations per block, the one order, any threads", "[stored_matrix][mxfp4]") {
  std::mt19937 rng(17);
  for (const Index in : {32, 96, 128, 2880}) {
    const Mxfp4Case c = mxfp4_case(13, in, rng);
    const StoredMatrix widened = StoredMatrix::view_mxfp4(nullptr, c.codes.data(), c.scales.data(), {c.out, in});
    const StoredMatrix w = widened.with_arithmetic(headwise::WeightArithmetic::stored);
    CHECK(w.arithmetic() == headwise::WeightArithmetic::stored);
    CHECK(w.middle_rows(2, 5).arithmetic() == headwise::WeightArithmetic::stored);
    const Matrix<double> decoded = widened.to_matrix<double>();
    for (const Index rows : {1, 3, 70}) {
      CAPTURE(in, rows);
      Matrix<float> x = headwise_test::random_matrix<float>(rows, in, rng);
      if (rows > 1) x.block(1, 0, 1, 32).setZero();  // (a block of zeros)
      const Matrix<float> y = headwise::times_transposed<float>(x, w, 1);
      Matrix<double> expected(rows, c.out), bound(rows, c.out);
      for (Index i = 0; i < rows; ++i)
        for (Index j = 0; j < c.out; ++j) {
          expected(i, j) = stored_reference(x, i, c, j);
          // int8 rounding moves each entry by at most half its block's d (max |x| / 254)
          double b = 0;
          for (Index k = 0; k < in; ++k)
            b += std::fabs(decoded(j, k)) * (x.row(i).segment(k / 32 * 32, 32).cwiseAbs().maxCoeff() / 254.0 + 1e-5 * std::fabs(x(i, k)));
          bound(i, j) = b;
        }
      CHECK_THAT(as_double(y), IsExactly(expected));
      CHECK(((y.cast<double>() - x.cast<double>() * decoded.transpose()).cwiseAbs().array() <= bound.array()).all());
      for (const int threads : {2, 3}) CHECK_THAT(as_double(headwise::times_transposed<float>(x, w, threads)), IsExactly(y));
      for (Index i = 0; i < rows; ++i) CHECK_THAT(as_double(headwise::times_transposed<float>(x.row(i), w, 1)), IsExactly(y.row(i)));
      if (rows > 1) {  // a value that is not finite makes its own row NaN, and no other
        Matrix<float> bad = x;
        bad(rows - 1, in - 1) = std::numeric_limits<float>::infinity();
        const Matrix<float> z = headwise::times_transposed<float>(bad, w, 2);
        CHECK(z.row(rows - 1).array().isNaN().all());
        CHECK_THAT(as_double(z.topRows(rows - 1)), IsExactly(y.topRows(rows - 1)));
      }
    }
  }
  const StoredMatrix bf16 = StoredMatrix::from(Matrix<float>::Ones(2, 32), WeightType::bf16);
  CHECK_THROWS_WITH(bf16.with_arithmetic(headwise::WeightArithmetic::stored),
                    Catch::Contains("BF16 weights have no stored arithmetic in headwise (MXFP4 has one"));
  CHECK(bf16.with_arithmetic(headwise::WeightArithmetic::widened).arithmetic() == headwise::WeightArithmetic::widened);
}

TEST_CASE("MXFP4 weights: scales beyond float, partial blocks and float64 products are refused by name", "[stored_matrix][mxfp4][errors]") {
  std::vector<std::uint8_t> codes(32, 0x11), scales(2, 127);
  scales[1] = 255;
  CHECK_THROWS_WITH(StoredMatrix::view_mxfp4(nullptr, codes.data(), scales.data(), {2, 32}),
                    Catch::Contains("the scale of row 1, block 0 is 2^(255 - 127) (255: NaN in the MX spec): beyond float's range"));
  scales[1] = 253;
  CHECK_THROWS_WITH(StoredMatrix::view_mxfp4(nullptr, codes.data(), scales.data(), {2, 32}), Catch::Contains("2^(253 - 127)"));
  scales[1] = 252;  // 6 2^125: float's
  const StoredMatrix w = StoredMatrix::view_mxfp4(nullptr, codes.data(), scales.data(), {2, 32});
  CHECK(w.to_matrix<float>().allFinite());
  CHECK_THROWS_WITH(StoredMatrix::view_mxfp4(nullptr, codes.data(), scales.data(), {1, 48}),
                    Catch::Contains("48 columns: MXFP4 rows are whole blocks of 32"));
  CHECK_THROWS_WITH(headwise::times_transposed<double>(Matrix<double>::Ones(1, 32), w), Catch::Contains("a float64 product reads F64 weights, not MXFP4"));
  CHECK_THROWS_WITH(StoredMatrix::from(Matrix<float>::Ones(2, 32), WeightType::mxfp4), Catch::Contains("MXFP4 is read as a checkpoint stores it"));
}
