// Multi-head attention: GPT-2 layers against PyTorch, the per-head sum, and the properties.
#include <random>
#include <string>

#include "headwise/multi_head_attention.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {

// GPT-2's c_attn [d, 3d] is W_Q | W_K | W_V as column blocks; c_proj is W_O.
template <class Scalar>
MultiHeadAttention<Scalar> gpt2_layer(const io::SafetensorsFile& model, int layer, Index n_heads) {
  const std::string p = "h." + std::to_string(layer) + ".attn.";
  const Matrix<Scalar> c_attn = model.matrix<Scalar>(p + "c_attn.weight");
  const RowVector<Scalar> c_attn_b = model.row_vector<Scalar>(p + "c_attn.bias");
  const Index d = c_attn.rows();
  MultiHeadWeights<Scalar> w;
  w.w_q = c_attn.leftCols(d);
  w.w_k = c_attn.middleCols(d, d);
  w.w_v = c_attn.rightCols(d);
  w.b_q = c_attn_b.head(d);
  w.b_k = c_attn_b.segment(d, d);
  w.b_v = c_attn_b.tail(d);
  w.w_o = model.matrix<Scalar>(p + "c_proj.weight");
  w.b_o = model.row_vector<Scalar>(p + "c_proj.bias");
  return MultiHeadAttention<Scalar>(n_heads, std::move(w));
}

template <class Scalar>
MultiHeadAttention<Scalar> random_layer(Index d_model, Index n_heads, std::mt19937& rng) {
  const double scale = 1.0 / std::sqrt(double(d_model));
  MultiHeadWeights<Scalar> w;
  w.w_q = headwise_test::random_matrix<Scalar>(d_model, d_model, rng, scale);
  w.w_k = headwise_test::random_matrix<Scalar>(d_model, d_model, rng, scale);
  w.w_v = headwise_test::random_matrix<Scalar>(d_model, d_model, rng, scale);
  w.w_o = headwise_test::random_matrix<Scalar>(d_model, d_model, rng, scale);
  w.b_q = headwise_test::random_row<Scalar>(d_model, rng, 0.1);
  w.b_k = headwise_test::random_row<Scalar>(d_model, rng, 0.1);
  w.b_v = headwise_test::random_row<Scalar>(d_model, rng, 0.1);
  w.b_o = headwise_test::random_row<Scalar>(d_model, rng, 0.1);
  return MultiHeadAttention<Scalar>(n_heads, std::move(w));
}

}  // namespace

TEMPLATE_TEST_CASE("gpt2-tiny: every layer's output and pattern match PyTorch", "[mha][fixture]", float, double) {
  const auto model = headwise_test::load_fixture("gpt2-tiny/model.safetensors");
  const auto reference = headwise_test::load_fixture("gpt2-tiny/attention-reference.safetensors");
  // float32 within 1e-5 of the float64 reference; float64 within 1e-10.
  const double rel = sizeof(TestType) == 4 ? 1e-5 : 1e-10;
  for (int layer = 0; layer < 2; ++layer) {
    CAPTURE(layer);
    const std::string p = "h." + std::to_string(layer) + ".attn.";
    const auto mha = gpt2_layer<TestType>(model, layer, 4);
    const Matrix<TestType> x = reference.matrix<TestType>(p + "input");
    const Matrix<double> expected = reference.matrix<double>(p + "output.f64");
    CHECK_THAT(headwise_test::as_double(mha.forward(x)), IsNear(expected, rel));
    CHECK_THAT(headwise_test::as_double(mha.forward_step_by_step(x)), IsNear(expected, rel));

    const auto trace = mha.trace(x);
    CHECK_THAT(headwise_test::as_double(trace.output), IsNear(expected, rel));
    for (Index h = 0; h < 4; ++h) {
      CAPTURE(h);
      CHECK_THAT(headwise_test::as_double(trace.heads[h].weights),
                 IsNear(reference.slice<double>(p + "pattern.f64", h), rel));
    }
  }
}

TEMPLATE_TEST_CASE("the sum of per-head contributions equals the concatenate-then-W_O form", "[mha][property]",
                   float, double) {
  const Index n = GENERATE(0, 1, 6, 31);
  const Index n_heads = GENERATE(1, 2, 4);
  CAPTURE(n, n_heads);
  std::mt19937 rng(static_cast<unsigned>(17 * n + n_heads));
  const auto mha = random_layer<TestType>(8 * n_heads, n_heads, rng);
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
  const auto mha = random_layer<TestType>(16, 4, rng);
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
  const auto mha = random_layer<TestType>(8, 2, rng);
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
                      "headwise: AttentionHead::trace: divisor must be finite and > 0, got 0");
  REQUIRE_THROWS_WITH(mha.head(2), "headwise: head: head 2 out of range [0, 2)");
  REQUIRE_THROWS_WITH(mha.head_contribution(Matrix<TestType>::Zero(4, 4), 0),
                      "headwise: head_contribution: z_h has 4 columns, expected d_head = 5");
}
