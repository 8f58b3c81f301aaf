// Gradients, step by step: every step's backward against central finite differences (double),
// the whole layer against PyTorch autograd (mha-grad-reference.safetensors), and the causal
// structure of the gradients.
#include <functional>
#include <string>
#include <random>

#include "headwise/attention_backward.hpp"
#include "headwise/headwise.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {

using Mat = Matrix<double>;

/// ∂f/∂m by central differences, entry by entry (f reads m).
Mat numeric_gradient(Mat& m, const std::function<double()>& f, double step = 1e-6) {
  Mat g(m.rows(), m.cols());
  for (Index i = 0; i < m.size(); ++i) {
    const double keep = m.data()[i];
    m.data()[i] = keep + step;
    const double up = f();
    m.data()[i] = keep - step;
    const double down = f();
    m.data()[i] = keep;
    g.data()[i] = (up - down) / (2 * step);
  }
  return g;
}

/// L = Σ out ∘ r: its gradient with respect to out is r.
double loss(const Mat& out, const Mat& r) { return out.cwiseProduct(r).sum(); }

}  // namespace

TEST_CASE("each step's backward equals central finite differences", "[backward][steps]") {
  std::mt19937 rng(3);
  const Index n = 7, d = 4;
  Mat x = headwise_test::random_matrix<double>(n, 6, rng), w = headwise_test::random_matrix<double>(6, d, rng);
  const RowVector<double> b = headwise_test::random_row<double>(d, rng);
  const Mat r = headwise_test::random_matrix<double>(n, d, rng);
  SECTION("Linear") {
    const Linear<double> linear(w, b);
    const LinearGradients<double> g = linear.backward(x, r);
    CHECK_THAT(g.dx, IsNear(numeric_gradient(x, [&] { return loss(linear.forward(x), r); }), 1e-8));
    CHECK_THAT(g.dw, IsNear(numeric_gradient(w, [&] { return loss(x * w + b.replicate(n, 1), r); }), 1e-8));
    CHECK_THAT(g.db, IsNear(r.colwise().sum(), 1e-15));
  }
  Mat q = headwise_test::random_matrix<double>(n, d, rng), k = headwise_test::random_matrix<double>(n, d, rng);
  const Mat rs = headwise_test::random_matrix<double>(n, n, rng);
  SECTION("ScaledScores") {
    ScaledScores<double> step(1.7);
    step.forward(q, k);
    const ScoreGradients<double> g = step.backward(rs);
    CHECK_THAT(g.dq, IsNear(numeric_gradient(q, [&] { return loss(ScaledScores<double>(1.7).forward(q, k), rs); }), 1e-8));
    CHECK_THAT(g.dk, IsNear(numeric_gradient(k, [&] { return loss(ScaledScores<double>(1.7).forward(q, k), rs); }), 1e-8));
  }
  SECTION("CausalMask, with a window, a soft-cap and ALiBi; RowSoftmax, with a sink") {
    AttentionOptions o;
    o.window = 4, o.softcap = 1.5, o.alibi_slopes = Vector<double>::Constant(1, 0.25), o.sinks = Vector<double>::Constant(1, 0.5);
    Mat s = headwise_test::random_matrix<double>(n, n, rng, 2.0);
    // Through mask and softmax together: L = Σ softmax(mask(s)) ∘ rs.
    const auto through = [&] { return loss(RowSoftmax<double>(o).forward(CausalMask<double>(o).forward(s)), rs); };
    CausalMask<double> mask(o);
    RowSoftmax<double> softmax(o);
    softmax.forward(mask.forward(s));
    const Mat ds = mask.backward(softmax.backward(rs));
    CHECK_THAT(ds, IsNear(numeric_gradient(s, through), 1e-8));
    CHECK(ds(0, 5) == 0.0);  // above the diagonal
    CHECK(ds(6, 1) == 0.0);  // outside the window
  }
  SECTION("HeadSum") {
    Mat z = headwise_test::random_matrix<double>(n, 2 * d, rng), w_o = headwise_test::random_matrix<double>(2 * d, 5, rng);
    const Mat ro = headwise_test::random_matrix<double>(n, 5, rng);
    HeadSum<double> sum(w_o, RowVector<double>::Zero(5), 2);
    sum.forward(z);
    const HeadSumGradients<double> g = sum.backward(ro);
    CHECK_THAT(g.dz, IsNear(numeric_gradient(z, [&] { return loss(HeadSum<double>(w_o, {}, 2).forward(z), ro); }), 1e-8));
    CHECK_THAT(g.dw_o, IsNear(numeric_gradient(w_o, [&] { return loss(HeadSum<double>(w_o, {}, 2).forward(z), ro); }), 1e-8));
  }
  SECTION("RotaryEmbedding (yarn: the attention factor scales the gradient too)") {
    RopeConfig c;
    c.d_head = d, c.scaling.type = RopeScaling::Type::yarn, c.scaling.factor = 4, c.scaling.original_max_position = 16;
    const RotaryEmbedding rope(c);
    Mat dq = r;
    rope.rotate_gradient<double>(dq, 3);
    CHECK_THAT(dq, IsNear(numeric_gradient(q, [&] { Mat y = q; rope.rotate<double>(y, 3); return loss(y, r); }), 1e-8));
  }
}

TEMPLATE_TEST_CASE("layer backward reproduces PyTorch autograd (mha-grad-reference)", "[backward][fixture]", float, double) {
  const io::SafetensorsFile ref = headwise_test::load_fixture("mha-grad-reference.safetensors");
  MultiHeadWeights<TestType> w;
  w.w_q = ref.matrix<TestType>("W_Q"), w.w_k = ref.matrix<TestType>("W_K"), w.w_v = ref.matrix<TestType>("W_V");
  w.w_o = ref.matrix<TestType>("W_O");
  w.b_q = ref.row_vector<TestType>("b_Q"), w.b_k = ref.row_vector<TestType>("b_K"), w.b_v = ref.row_vector<TestType>("b_V");
  w.b_o = ref.row_vector<TestType>("b_O");
  const MultiHeadAttention<TestType> layer(4, std::move(w));
  const Matrix<TestType> x = ref.matrix<TestType>("X"), dy = ref.matrix<TestType>("dY");
  CHECK_THAT(headwise_test::as_double(layer.forward(x)), IsNear(ref.matrix<double>("Y"), tolerance<TestType>()));
  const MultiHeadGradients<TestType> g = backward_step_by_step(layer, x, dy);
  const double tol = tolerance<TestType>();
  CHECK_THAT(headwise_test::as_double(g.dx), IsNear(ref.matrix<double>("dX"), tol));
  CHECK_THAT(headwise_test::as_double(g.dw_q), IsNear(ref.matrix<double>("dW_Q"), tol));
  CHECK_THAT(headwise_test::as_double(g.dw_k), IsNear(ref.matrix<double>("dW_K"), tol));
  CHECK_THAT(headwise_test::as_double(g.dw_v), IsNear(ref.matrix<double>("dW_V"), tol));
  CHECK_THAT(headwise_test::as_double(g.dw_o), IsNear(ref.matrix<double>("dW_O"), tol));
  CHECK_THAT(headwise_test::as_double(g.db_q), IsNear(ref.matrix<double>("db_Q"), tol));
  // db_K is 0 in exact arithmetic (a softmax ignores a constant added to a whole row of scores):
  // both sides are rounding noise, checked on the scale of dW_K.
  CHECK_THAT(headwise_test::as_double(g.db_k), IsNear(ref.matrix<double>("db_K"), tol, ref.matrix<double>("dW_K").cwiseAbs().maxCoeff()));
  CHECK_THAT(headwise_test::as_double(g.db_v), IsNear(ref.matrix<double>("db_V"), tol));
  CHECK_THAT(headwise_test::as_double(g.db_o), IsNear(ref.matrix<double>("db_O"), tol));
  // The fused path, recomputing the forward and from a kept one.
  const MultiHeadGradients<TestType> fused = layer_backward(layer, x, dy);
  CHECK_THAT(headwise_test::as_double(fused.dx), IsNear(ref.matrix<double>("dX"), tol));
  CHECK_THAT(headwise_test::as_double(fused.dw_q), IsNear(ref.matrix<double>("dW_Q"), tol));
  CHECK_THAT(headwise_test::as_double(fused.dw_k), IsNear(ref.matrix<double>("dW_K"), tol));
  CHECK_THAT(headwise_test::as_double(fused.dw_v), IsNear(ref.matrix<double>("dW_V"), tol));
  CHECK_THAT(headwise_test::as_double(fused.dw_o), IsNear(ref.matrix<double>("dW_O"), tol));
  CHECK_THAT(headwise_test::as_double(fused.db_v), IsNear(ref.matrix<double>("db_V"), tol));
  CHECK_THAT(headwise_test::as_double(fused.db_o), IsNear(ref.matrix<double>("db_O"), tol));
  ForwardRecord<TestType> record;
  CHECK_THAT(headwise_test::as_double(forward_for_backward(layer, x, record)), IsNear(ref.matrix<double>("Y"), tol));
  CHECK_THAT(headwise_test::as_double(layer_backward(layer, x, dy, {}, &record).dx), headwise_test::IsExactly(fused.dx));
  const ForwardRecord<TestType> kept_nothing;  // a record of no forward (or of one that kept only Z): refused
  CHECK_THROWS_WITH(layer_backward(layer, x, dy, {}, &kept_nothing),
                    Catch::Matchers::Contains("the record holds") && Catch::Matchers::Contains("forward_for_backward keeps them"));
}

TEMPLATE_TEST_CASE("fused backward == step-by-step backward, every variant, odd tiles, any thread count",
                   "[backward][fused]", float, double) {
  const std::string name = GENERATE(as<std::string>{}, "causal", "bidirectional", "window", "softcap+sinks",
                                    "alibi", "mask", "bias", "varlen", "padding");
  const Index n = GENERATE(1, 37, 150);
  CAPTURE(name, n);
  constexpr Index H = 4, G = 2, d = 8;
  std::mt19937 rng(static_cast<unsigned>(n + name.size()));
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, H * d, rng, 1.5);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, G * d, rng, 1.5);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n, G * d, rng);
  const Matrix<TestType> d_o = headwise_test::random_matrix<TestType>(n, H * d, rng);
  AttentionOptions o;
  std::bernoulli_distribution coin(0.25);
  if (name == "bidirectional") o.causal = false;
  if (name == "window") o.window = 9;
  if (name == "softcap+sinks") o.softcap = 1.0, o.sinks = (Vector<double>(H) << 0.5, -1.0, 2.0, 0.0).finished();
  if (name == "alibi") o.alibi_slopes = alibi_slopes(H);
  if (name == "mask") {
    o.mask.resize(n, n);
    for (Index i = 0; i < n; ++i)
      for (Index j = 0; j < n; ++j) o.mask(i, j) = i % 5 != 2 && !coin(rng);
  }
  if (name == "bias") o.causal = false, o.bias = Matrix<double>::Random(n, n);
  if (name == "varlen") o.cu_seqlens = n > 2 ? std::vector<Index>{0, n / 2, n} : std::vector<Index>{0, n};
  if (name == "padding") o.causal = false, o.key_valid = Eigen::Array<bool, Eigen::Dynamic, 1>::Constant(n, true), o.key_valid.tail(n / 3).setConstant(false);
  AttentionCall call;
  call.heads = {H, G}, call.options = &o, call.logsumexp = true;
  const AttentionResult<TestType> forward = attend<TestType>(q, k, v, call);
  // Step by step, head by head, through the step classes.
  Matrix<double> dq = Matrix<double>::Zero(n, H * d), dk = Matrix<double>::Zero(n, G * d), dv = Matrix<double>::Zero(n, G * d);
  for (Index h = 0; h < H; ++h) {
    const Index g = h / (H / G);
    const AttentionOptions oh = options_of_head(o, h, H, "test");
    ScaledScores<TestType> scores(std::sqrt(double(d)));
    CausalMask<TestType> mask(oh);
    RowSoftmax<TestType> softmax(oh);
    const Matrix<TestType> a = softmax.forward(mask.forward(scores.forward(q.middleCols(h * d, d), k.middleCols(g * d, d))));
    const Matrix<TestType> da = d_o.middleCols(h * d, d) * v.middleCols(g * d, d).transpose();
    dv.middleCols(g * d, d) += (a.transpose() * d_o.middleCols(h * d, d)).template cast<double>();
    const ScoreGradients<TestType> sg = scores.backward(mask.backward(softmax.backward(da)));
    dq.middleCols(h * d, d) = sg.dq.template cast<double>();
    dk.middleCols(g * d, d) += sg.dk.template cast<double>();
  }
  const double tol = 10 * tolerance<TestType>();
  for (const FusedTiles tiles : {FusedTiles{}, FusedTiles{7, 5}}) {
    AttentionOptions threads = o;
    threads.threads = 1;
    AttentionCall backward = call;
    backward.options = &threads, backward.tiles = tiles;
    const AttentionGradients<TestType> one = attend_backward<TestType>(q, k, v, forward, d_o, backward);
    CHECK_THAT(headwise_test::as_double(one.dq), IsNear(dq, tol));
    CHECK_THAT(headwise_test::as_double(one.dk), IsNear(dk, tol));
    CHECK_THAT(headwise_test::as_double(one.dv), IsNear(dv, tol));
    threads.threads = 3;
    const AttentionGradients<TestType> three = attend_backward<TestType>(q, k, v, forward, d_o, backward);
    CHECK_THAT(headwise_test::as_double(three.dq), headwise_test::IsExactly(one.dq));
    CHECK_THAT(headwise_test::as_double(three.dk), headwise_test::IsExactly(one.dk));
    CHECK_THAT(headwise_test::as_double(three.dv), headwise_test::IsExactly(one.dv));
  }
}

TEST_CASE("layer backward with RoPE, grouped-query heads, a soft-cap and sinks: finite differences", "[backward][layer]") {
  std::mt19937 rng(5);
  LayerConfig config;
  config.rope = RopeConfig{}, config.softcap = 3.0, config.sinks = (Vector<double>(4) << 0.1, -0.5, 1.0, 0.0).finished();
  const Index d_model = 16, n = 9;
  MultiHeadAttention<double> layer = headwise_test::random_layer<double>(d_model, 4, 2, rng, 2.0, config);
  Mat x = headwise_test::random_matrix<double>(n, d_model, rng);
  const Mat r = headwise_test::random_matrix<double>(n, d_model, rng);
  const MultiHeadGradients<double> g = backward_step_by_step(layer, x, r);
  CHECK_THAT(g.dx, IsNear(numeric_gradient(x, [&] { return loss(layer.forward_step_by_step(x), r); }), 1e-7));
  // A weight: W_K (grouped: each of its 2 heads serves 2 query heads).
  Mat w_k = layer.w_qkv().middleCols(d_model, d_model / 2);
  const auto with_w_k = [&] {
    MultiHeadWeights<double> w;
    w.w_q = layer.w_qkv().leftCols(d_model), w.w_k = w_k, w.w_v = layer.w_qkv().rightCols(d_model / 2);
    w.b_q = layer.b_qkv().head(d_model), w.b_k = layer.b_qkv().segment(d_model, d_model / 2);
    w.b_v = layer.b_qkv().tail(d_model / 2), w.w_o = layer.w_o(), w.b_o = layer.b_o();
    return loss(MultiHeadAttention<double>(4, std::move(w), config).forward_step_by_step(x), r);
  };
  CHECK_THAT(g.dw_k, IsNear(numeric_gradient(w_k, with_w_k), 1e-7));
  // The fused path agrees with the step-by-step one.
  const MultiHeadGradients<double> fused = layer_backward(layer, x, r);
  CHECK_THAT(fused.dx, IsNear(g.dx, 1e-12));
  CHECK_THAT(fused.dw_q, IsNear(g.dw_q, 1e-12));
  CHECK_THAT(fused.dw_k, IsNear(g.dw_k, 1e-12));
  CHECK_THAT(fused.dw_v, IsNear(g.dw_v, 1e-12));
  CHECK_THAT(fused.dw_o, IsNear(g.dw_o, 1e-12));
  CHECK_THAT(fused.db_q, IsNear(g.db_q, 1e-12, 1.0));
}

TEST_CASE("gradients are causal: dY at position i reaches no key or value after i", "[backward][causal]") {
  std::mt19937 rng(8);
  const auto layer = headwise_test::random_layer<double>(16, 2, 1, rng);
  const Mat x = headwise_test::random_matrix<double>(10, 16, rng);
  for (Index i : {0, 4, 9}) {
    CAPTURE(i);
    Mat dy = Mat::Zero(10, 16);
    dy.row(i) = headwise_test::random_row<double>(16, rng);
    const MultiHeadGradients<double> g = backward_step_by_step(layer, x, dy);
    for (const auto& head : g.heads) {
      CHECK((head.dk.bottomRows(9 - i).array() == 0).all());
      CHECK((head.dv.bottomRows(9 - i).array() == 0).all());
    }
    CHECK((g.dx.bottomRows(9 - i).array() == 0).all());  // a later token's input does not change row i
  }
}
