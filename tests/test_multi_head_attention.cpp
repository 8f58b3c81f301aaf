// Multi-head attention: the per-head sum, the properties and the errors (GPT-2 layers against
// PyTorch are in test_gpt2.cpp).
#include <random>
#include <string>

#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

TEMPLATE_TEST_CASE("the sum of per-head contributions equals the concatenate-then-W_O form", "[mha][property]",
                   float, double) {
  const Index n = GENERATE(0, 1, 6, 31);
  const Index n_heads = GENERATE(1, 2, 4);
  CAPTURE(n, n_heads);
  std::mt19937 rng(static_cast<unsigned>(17 * n + n_heads));
  const auto mha = headwise_test::random_layer<TestType>(8 * n_heads, n_heads, n_heads, rng);
  const Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, mha.d_model(), rng);
  const auto trace = mha.trace(x);

  Matrix<TestType> concatenated(n, n_heads * mha.d_head());
  Matrix<TestType> sum = mha.b_o().replicate(n, 1);
  for (Index h = 0; h < n_heads; ++h) {
    concatenated.middleCols(h * mha.d_head(), mha.d_head()) = trace.heads[h].z;
    sum += trace.heads[h].z * mha.w_o_block(h);
  }
  const Matrix<TestType> textbook = mha.project_heads(concatenated);
  CHECK_THAT(headwise_test::as_double(sum), IsNear(textbook, 10 * tolerance<TestType>()));
  CHECK_THAT(headwise_test::as_double(trace.output), IsNear(textbook, 10 * tolerance<TestType>()));
  CHECK_THAT(headwise_test::as_double(mha.forward(x)), IsNear(textbook, 10 * tolerance<TestType>()));
  CHECK_THAT(headwise_test::as_double(mha.forward_step_by_step(x)), IsNear(textbook, 10 * tolerance<TestType>()));
  for (Index h = 0; h < n_heads; ++h)
    CHECK_THAT(headwise_test::as_double(mha.head_contribution(trace.heads[h].z, h)),
               IsNear(trace.heads[h].z * mha.w_o_block(h), tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("changing a future token leaves earlier outputs unchanged", "[mha][property]", float, double) {
  const Index n = GENERATE(2, 5, 40);
  const Index changed = GENERATE(0, 1);  // the last token, or the middle one
  CAPTURE(n, changed);
  std::mt19937 rng(static_cast<unsigned>(n));
  const auto mha = headwise_test::random_layer<TestType>(16, 4, 4, rng);
  Matrix<TestType> x = headwise_test::random_matrix<TestType>(n, 16, rng);
  const Matrix<TestType> before_x = x;
  const Matrix<TestType> before = mha.forward(x);
  const Index t = changed == 0 ? n - 1 : n / 2;
  x.row(t) = headwise_test::random_row<TestType>(16, rng, 5.0);
  const Matrix<TestType> after = mha.forward(x);
  CHECK_THAT(headwise_test::as_double(after.topRows(t)), IsExactly(before.topRows(t)));
  const Matrix<TestType> after_step_by_step = mha.forward_step_by_step(x);
  CHECK_THAT(headwise_test::as_double(after_step_by_step.topRows(t)),
             IsExactly(mha.forward_step_by_step(before_x).topRows(t)));
  CHECK_FALSE((after.row(t).array() == before.row(t).array()).all());
}

TEMPLATE_TEST_CASE("n = 0 tokens gives an empty output", "[mha]", float, double) {
  std::mt19937 rng(1);
  const auto mha = headwise_test::random_layer<TestType>(8, 2, 2, rng);
  const Matrix<TestType> out = mha.forward(Matrix<TestType>(0, 8));
  CHECK(out.rows() == 0);
  CHECK(out.cols() == 8);
}

TEMPLATE_TEST_CASE("multi-head attention refuses bad configurations and inputs", "[mha][errors]", float, double) {
  std::mt19937 rng(2);
  MultiHeadWeights<TestType> w;
  w.w_q = w.w_k = w.w_v = w.w_o = Matrix<TestType>::Zero(10, 10);
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(0, w), "headwise: MultiHeadAttention: n_heads must be > 0, got 0");
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(-2, w), "headwise: MultiHeadAttention: n_heads must be > 0, got -2");
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(3, w),
                      "headwise: MultiHeadAttention: d_model = 10 is not divisible by n_heads = 3");
  auto bad = w;
  bad.w_k = Matrix<TestType>::Zero(10, 8);
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(2, bad),
                      "headwise: MultiHeadAttention: w_k is 10x8, expected 10x(n_kv_heads d_head) with d_head = 5");
  bad.w_k = Matrix<TestType>::Zero(10, 15);  // 3 key/value heads for 2 query heads
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(2, bad),
                      "headwise: MultiHeadAttention: n_heads = 2 is not divisible by n_kv_heads = 3");
  bad = w;
  bad.w_o = Matrix<TestType>::Zero(10, 9);
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(2, bad), "headwise: MultiHeadAttention: w_o is 10x9, expected 10x10");
  bad = w;
  bad.b_v = RowVector<TestType>::Zero(3);
  REQUIRE_THROWS_WITH(MultiHeadAttention<TestType>(2, bad),
                      "headwise: MultiHeadAttention: b_v has 3 entries, expected 0 or 10");

  const MultiHeadAttention<TestType> mha(2, w);
  REQUIRE_THROWS_WITH(mha.forward(Matrix<TestType>::Zero(4, 9)),
                      "headwise: MultiHeadAttention::forward: x has 9 columns, expected d_model = 10");
  REQUIRE_THROWS_WITH(mha.trace(Matrix<TestType>::Zero(4, 11)),
                      "headwise: MultiHeadAttention::trace: x has 11 columns, expected d_model = 10");
  Matrix<TestType> x = Matrix<TestType>::Zero(4, 10);
  x(2, 3) = std::numeric_limits<TestType>::quiet_NaN();
  REQUIRE_THROWS_WITH(mha.forward(x),
                      "headwise: MultiHeadAttention::forward: x has a non-finite value (nan) at row 2, column 3");
  AttentionOptions options;
  options.divisor = std::numeric_limits<double>::quiet_NaN();
  REQUIRE_THROWS_WITH(mha.forward(Matrix<TestType>::Zero(4, 10), options),
                      "headwise: MultiHeadAttention::forward: divisor must be finite and > 0, got nan");
  options.divisor = 0.0;
  REQUIRE_THROWS_WITH(mha.trace(Matrix<TestType>::Zero(4, 10), options),
                      "headwise: MultiHeadAttention::trace: divisor must be finite and > 0, got 0");
  REQUIRE_THROWS_WITH(mha.head(2), "headwise: head: head 2 out of range [0, 2)");
  REQUIRE_THROWS_WITH(mha.head_contribution(Matrix<TestType>::Zero(4, 4), 0),
                      "headwise: head_contribution: z_h has 4 columns, expected d_head = 5");
}

TEST_CASE("A layer keeping its weights in BF16, F16 or FP8 computes with them rounded once, and decoding gives the forward's bits",
          "[mha][stored_matrix]") {
  std::mt19937 rng(41);
  const Index d_model = 48, n_heads = 4, n_kv_heads = 2, n = 23;
  const auto float_layer = headwise_test::random_layer<float>(d_model, n_heads, n_kv_heads, rng);
  const Matrix<float> x = headwise_test::random_matrix<float>(n, d_model, rng);
  // FP8's scales as a checkpoint's quantizer makes them: a block's largest |w| over 448 (E4M3) or
  // 57344 (E5M2), blocks of 8 x 16 on [out, in] (edge blocks partial).
  const auto scales_of = [](const Matrix<float>& w_in_out, WeightType type) {
    const Matrix<float> w = w_in_out.transpose();
    headwise::BlockScales s{Matrix<double>((w.rows() + 7) / 8, (w.cols() + 15) / 16), 8, 16};
    for (Index i = 0; i < s.grid.rows(); ++i)
      for (Index j = 0; j < s.grid.cols(); ++j) {
        const Index r = std::min<Index>(8, w.rows() - 8 * i), c = std::min<Index>(16, w.cols() - 16 * j);
        s.grid(i, j) = double(float(w.block(8 * i, 16 * j, r, c).cwiseAbs().maxCoeff() / (type == WeightType::f8_e4m3 ? 448.0 : 57344.0)));
      }
    return s;
  };
  for (const WeightType type : {WeightType::bf16, WeightType::f16, WeightType::f8_e4m3, WeightType::f8_e5m2}) {
    CAPTURE(weight_type_name(type));
    const auto rounded = [&](const Matrix<float>& w) {
      const StoredMatrix s = headwise::is_fp8(type) ? StoredMatrix::from(w.transpose(), type, scales_of(w, type)) : StoredMatrix::from(w.transpose(), type);
      return s.to_matrix<float>().transpose().eval();
    };
    const auto part = [&](QkvPart p) { return Matrix<float>(float_layer.layout().part(float_layer.w_qkv(), p)); };
    MultiHeadWeights<float> w;
    w.w_q = part(QkvPart::query), w.w_k = part(QkvPart::key), w.w_v = part(QkvPart::value), w.w_o = float_layer.w_o();
    w.b_q = float_layer.layout().part(float_layer.b_qkv(), QkvPart::query), w.b_k = float_layer.layout().part(float_layer.b_qkv(), QkvPart::key);
    w.b_v = float_layer.layout().part(float_layer.b_qkv(), QkvPart::value), w.b_o = float_layer.b_o();
    MultiHeadWeights<double> reference;  // float64 on the rounded values
    reference.w_q = rounded(w.w_q).cast<double>(), reference.w_k = rounded(w.w_k).cast<double>();
    reference.w_v = rounded(w.w_v).cast<double>(), reference.w_o = rounded(w.w_o).cast<double>();
    reference.b_q = w.b_q.cast<double>(), reference.b_k = w.b_k.cast<double>(), reference.b_v = w.b_v.cast<double>(), reference.b_o = w.b_o.cast<double>();
    w.kept_as = type;
    if (headwise::is_fp8(type))
      w.fp8_scales = MultiHeadWeights<float>::Fp8Scales{scales_of(w.w_q, type), scales_of(w.w_k, type), scales_of(w.w_v, type), scales_of(w.w_o, type), {}};
    const MultiHeadAttention<float> kept(n_heads, w);
    CHECK(kept.stored_w_qkv().type() == type);
    CHECK(kept.stored_w_o().type() == type);
    const std::size_t scales = headwise::is_fp8(type) ? std::size_t(2 * d_model * (d_model / 16) * 4) : 0;  // a float per row and 16 columns
    CHECK(kept.stored_w_qkv().bytes() == std::size_t(d_model * (d_model + 2 * d_model / 2)) * headwise::weight_type_size(type) + scales);
    CHECK_THAT(headwise_test::as_double(kept.w_o()), IsExactly(reference.w_o));
    const Matrix<double> expected = MultiHeadAttention<double>(n_heads, reference).forward(x.cast<double>());
    const Matrix<float> forward = kept.forward(x);
    CHECK_THAT(headwise_test::as_double(forward), IsNear(expected, tolerance<float>()));
    auto cache = kept.make_cache(n);
    for (Index t = 0; t < n; ++t) CHECK_THAT(headwise_test::as_double(kept.forward_incremental(x.row(t), cache)), IsExactly(forward.row(t)));
    if (headwise::is_fp8(type)) {  // the scales are required, and only with FP8
      w.fp8_scales.reset();
      CHECK_THROWS_WITH(MultiHeadAttention<float>(n_heads, w), Catch::Contains("kept_as is " + std::string(weight_type_name(type)) + " but fp8_scales are not given"));
    }
  }
  // The type must be one the layer's products read.
  MultiHeadWeights<double> w;
  w.w_q = w.w_k = w.w_v = w.w_o = Matrix<double>::Identity(8, 8);
  w.kept_as = WeightType::bf16;
  CHECK_THROWS_WITH(MultiHeadAttention<double>(2, w), Catch::Contains("kept_as is BF16: a float64 layer keeps F64 weights"));
  MultiHeadWeights<float> f;
  f.w_q = f.w_k = f.w_v = f.w_o = Matrix<float>::Identity(8, 8);
  f.kept_as = WeightType::f64;
  CHECK_THROWS_WITH(MultiHeadAttention<float>(2, f), Catch::Contains("kept_as is F64: a float layer keeps F32, BF16, F16 or FP8 weights"));
  f.kept_as = WeightType::bf16;
  f.fp8_scales = MultiHeadWeights<float>::Fp8Scales{};
  CHECK_THROWS_WITH(MultiHeadAttention<float>(2, f), Catch::Contains("kept_as is BF16 but fp8_scales are given (they are for FP8)"));
}
