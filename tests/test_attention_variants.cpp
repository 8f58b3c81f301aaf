// Modern attention against PyTorch (attention-variants.safetensors, float64): rotary embeddings
// in every layout and scaling, sliding windows, ALiBi, soft-capping, sinks, boolean and additive
// masks, packed sequences and key padding; through the step-by-step path (one head at a time)
// and the fused kernel (all heads in one call), in float and double.
#include <string>

#include "headwise/attention_core.hpp"
#include "headwise/attend.hpp"
#include "headwise/rotary_embedding.hpp"
#include "headwise/variants/alibi.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"

using namespace headwise;
using headwise_test::IsExactly;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {

const io::SafetensorsFile& variants() {
  static const io::SafetensorsFile file = headwise_test::load_fixture("attention-variants.safetensors");
  return file;
}

/// A [heads, T, d] tensor as (T, heads d): heads side by side, as the layer lays them out.
template <class Scalar>
Matrix<Scalar> side_by_side(const std::string& name) {
  const Index heads = static_cast<Index>(variants().info(name).shape[0]);
  Matrix<Scalar> first = variants().slice<Scalar>(name, 0);
  Matrix<Scalar> all(first.rows(), heads * first.cols());
  for (Index h = 0; h < heads; ++h) all.middleCols(h * first.cols(), first.cols()) = variants().slice<Scalar>(name, h);
  return all;
}

Vector<double> vector_of(const std::string& name) {
  const RowVector<double> v = variants().row_vector<double>(name);
  return v.transpose();
}

/// One case: q, k, v (T, heads d) and the options; checks both paths against prefix.out/logsumexp.
template <class Scalar>
void check_case(const std::string& prefix, const Matrix<Scalar>& q, const Matrix<Scalar>& k, const Matrix<Scalar>& v,
                Index heads, const AttentionOptions& options) {
  CAPTURE(prefix);
  const Index d = q.cols() / heads;
  const Matrix<double> out = side_by_side<double>(prefix + ".out");
  const Matrix<double> lse = variants().matrix<double>(prefix + ".logsumexp");
  // The fused kernel, every head in one call, with small tiles so that masks cross tile edges.
  AttentionCall call;
  call.heads = {heads, heads}, call.options = &options, call.logsumexp = true, call.tiles = FusedTiles{8, 8};
  const AttentionResult<Scalar> small_tiles = attend<Scalar>(q, k, v, call);
  CHECK_THAT(small_tiles.z.template cast<double>(), IsNear(out, tolerance<Scalar>()));
  CHECK_THAT(small_tiles.logsumexp.template cast<double>(), IsNear(lse, tolerance<Scalar>()));
  // The default tiles too (one tile covers T = 37).
  call.tiles = FusedTiles{};
  const AttentionResult<Scalar> default_tiles = attend<Scalar>(q, k, v, call);
  CHECK_THAT(default_tiles.z.template cast<double>(), IsNear(out, tolerance<Scalar>()));
  // Keys in the smallest shards (one micro-tile of keys each) merged by the kernel: split across
  // jobs (all T rows in one query tile: split-key decoding), and in turn (8-row query tiles).
  call.tiles = FusedTiles{128, 1, 1};
  const AttentionResult<Scalar> split = attend<Scalar>(q, k, v, call);
  CHECK_THAT(split.z.template cast<double>(), IsNear(out, tolerance<Scalar>()));
  CHECK_THAT(split.logsumexp.template cast<double>(), IsNear(lse, tolerance<Scalar>()));
  call.tiles = FusedTiles{8, 1, 1};
  const AttentionResult<Scalar> in_turn = attend<Scalar>(q, k, v, call);
  CHECK_THAT(headwise_test::as_double(in_turn.z), IsExactly(split.z));
  CHECK_THAT(headwise_test::as_double(in_turn.logsumexp), IsExactly(split.logsumexp));
  // Step by step, head by head.
  for (Index h = 0; h < heads; ++h) {
    CAPTURE(h);
    const auto step = attention(q.middleCols(h * d, d), k.middleCols(h * d, d), v.middleCols(h * d, d),
                                options_of_head(options, h, heads, "test"));
    CHECK_THAT(step.z.template cast<double>(), IsNear(out.middleCols(h * d, d), tolerance<Scalar>()));
    CHECK_THAT(step.logsumexp.transpose().template cast<double>(), IsNear(lse.row(h), tolerance<Scalar>()));
  }
}

template <class Scalar>
void check_case(const std::string& prefix, const AttentionOptions& options) {
  check_case<Scalar>(prefix, side_by_side<Scalar>("q"), side_by_side<Scalar>("k"), side_by_side<Scalar>("v"), 4, options);
}

/// Q and K rotated by `rope` from first_position, checked against prefix.q_rot / k_rot, then the
/// causal attention on them against prefix.out.
template <class Scalar>
void check_rope_case(const std::string& prefix, const RotaryEmbedding& rope, Index first_position,
                     const std::string& inputs = "") {
  CAPTURE(prefix);
  Matrix<Scalar> q = side_by_side<Scalar>(inputs + "q"), k = side_by_side<Scalar>(inputs + "k");
  const Matrix<Scalar> v = side_by_side<Scalar>(inputs + "v");
  rope.rotate<Scalar>(q, first_position);
  rope.rotate<Scalar>(k, first_position, /*threads=*/2);
  CHECK_THAT(q.template cast<double>(), IsNear(side_by_side<double>(prefix + ".q_rot"), tolerance<Scalar>()));
  CHECK_THAT(k.template cast<double>(), IsNear(side_by_side<double>(prefix + ".k_rot"), tolerance<Scalar>()));
  check_case<Scalar>(prefix, q, k, v, 4, AttentionOptions{});
}

RopeConfig rope_of(Index d_head) {
  RopeConfig c;
  c.d_head = d_head;
  return c;
}

}  // namespace

TEMPLATE_TEST_CASE("RoPE, Hugging Face layout, from position 0 and from 50", "[variants][rope][fixture]", float, double) {
  const RotaryEmbedding rope(rope_of(16));
  CHECK_THAT(rope.inv_freq(), IsNear(vector_of("rope.inv_freq"), 1e-15));
  check_rope_case<TestType>("rope", rope, 0);
  check_rope_case<TestType>("rope_offset", rope, 50);
}

TEMPLATE_TEST_CASE("RoPE, GPT-J interleaved pairs and partial rotary", "[variants][rope][fixture]", float, double) {
  RopeConfig interleaved = rope_of(16);
  interleaved.layout = RopeLayout::interleaved;
  check_rope_case<TestType>("rope_interleaved", RotaryEmbedding(interleaved), 0);
  RopeConfig partial = rope_of(16);
  partial.rotary_fraction = 0.5;
  const RotaryEmbedding rope(partial);
  CHECK(rope.rotary_dims() == 8);
  CHECK_THAT(rope.inv_freq(), IsNear(vector_of("rope_partial.inv_freq"), 1e-15));
  check_rope_case<TestType>("rope_partial", rope, 0);
}

TEMPLATE_TEST_CASE("RoPE scaling: linear, llama3 and yarn as Hugging Face computes them", "[variants][rope][fixture]",
                   float, double) {
  RopeConfig linear = rope_of(16);
  linear.scaling.type = RopeScaling::Type::linear;
  linear.scaling.factor = 4;
  CHECK_THAT(RotaryEmbedding(linear).inv_freq(), IsNear(vector_of("rope_linear.inv_freq"), 1e-15));
  check_rope_case<TestType>("rope_linear", RotaryEmbedding(linear), 0);

  RopeConfig llama3 = rope_of(64);
  llama3.theta = 500000;
  llama3.scaling.type = RopeScaling::Type::llama3;
  llama3.scaling.factor = 8;
  llama3.scaling.low_freq_factor = 1;
  llama3.scaling.high_freq_factor = 4;
  llama3.scaling.original_max_position = 8192;
  CHECK_THAT(RotaryEmbedding(llama3).inv_freq(), IsNear(vector_of("rope_llama3.inv_freq"), 1e-14));
  check_rope_case<TestType>("rope_llama3", RotaryEmbedding(llama3), 0, "rope_llama3.");

  RopeConfig yarn = rope_of(16);
  yarn.scaling.type = RopeScaling::Type::yarn;
  yarn.scaling.factor = 4;
  yarn.scaling.original_max_position = 4096;
  const RotaryEmbedding rope(yarn);
  CHECK_THAT(rope.inv_freq(), IsNear(vector_of("rope_yarn.inv_freq"), 1e-14));
  CHECK_THAT(rope.attention_factor(), Catch::Matchers::WithinRel(1.138629436111989, 1e-14));
  check_rope_case<TestType>("rope_yarn", rope, 0);
}

TEMPLATE_TEST_CASE("sliding window of 8 keys", "[variants][window][fixture]", float, double) {
  AttentionOptions options;
  options.window = 8;
  check_case<TestType>("window8", options);
}

TEMPLATE_TEST_CASE("ALiBi with BLOOM's slopes, 4 and 6 heads", "[variants][alibi][fixture]", float, double) {
  CHECK_THAT(alibi_slopes(4), IsNear(vector_of("alibi.slopes"), 1e-15));
  CHECK_THAT(alibi_slopes(6), IsNear(vector_of("alibi6.slopes"), 1e-15));
  AttentionOptions options;
  options.alibi_slopes = alibi_slopes(4);
  check_case<TestType>("alibi", options);
  options.alibi_slopes = alibi_slopes(6);
  check_case<TestType>("alibi6", side_by_side<TestType>("alibi6.q"), side_by_side<TestType>("alibi6.k"),
                       side_by_side<TestType>("alibi6.v"), 6, options);
}

TEMPLATE_TEST_CASE("Gemma 2 soft-capping and gpt-oss sinks", "[variants][softcap][sinks][fixture]", float, double) {
  AttentionOptions capped;
  capped.softcap = 5.0;
  check_case<TestType>("softcap", side_by_side<TestType>("softcap.q"), side_by_side<TestType>("k"),
                       side_by_side<TestType>("v"), 4, capped);
  AttentionOptions sinks;
  sinks.sinks = vector_of("sinks.logits");
  check_case<TestType>("sinks", sinks);
}

TEMPLATE_TEST_CASE("boolean mask, additive bias, packed sequences, key padding", "[variants][masks][fixture]", float,
                   double) {
  AttentionOptions boolean;
  boolean.causal = false;
  boolean.mask = (variants().matrix<double>("mask_bool.mask").array() != 0);
  check_case<TestType>("mask_bool", boolean);

  AttentionOptions additive;
  additive.causal = false;
  additive.bias = variants().matrix<double>("mask_additive.bias");
  check_case<TestType>("mask_additive", additive);

  AttentionOptions varlen;
  for (double c : variants().values<double>("varlen.cu_seqlens")) varlen.cu_seqlens.push_back(static_cast<Index>(c));
  check_case<TestType>("varlen", varlen);

  AttentionOptions padding;
  padding.causal = false;
  padding.key_valid = (vector_of("noncausal_padding.key_valid").array() != 0);
  check_case<TestType>("noncausal_padding", padding);
}
