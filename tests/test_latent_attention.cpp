// Multi-head latent attention (DeepSeek-V3) against PyTorch's float64 references, through the
// loader, on both paths: the expanded teaching view (every intermediate) and the absorbed fused
// path (its absorbed queries and latent keys against the fixture's); FP8 block-scaled weights;
// decoding through the latent cache bitwise the forward, on any thread count; the study tools on
// its heads; and what the loader and the layer refuse by name.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "headwise/interpret.hpp"
#include "headwise/io/latent_attention.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/layer_checks.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

using namespace headwise;
using headwise_test::IsNear;

namespace {
std::string layer_prefix(Index l) { return "layers." + std::to_string(l) + ".attn."; }

template <class Scalar>
void check_latent_layer(const MultiHeadLatentAttention<Scalar>& layer, const io::SafetensorsFile& ref, Index l) {
  CAPTURE(l);
  const std::string p = layer_prefix(l);
  const Matrix<Scalar> x = ref.matrix<Scalar>(p + "input");
  const Matrix<double> expected = ref.matrix<double>(p + "output.f64");
  const auto tol = headwise_test::tolerance<Scalar>();
  CHECK_THAT(layer.forward(x).template cast<double>(), IsNear(expected, tol));
  CHECK_THAT(layer.forward_step_by_step(x).template cast<double>(), IsNear(expected, tol));
  // The expanded form's intermediates, head by head.
  const LatentAttentionTrace<Scalar> t = layer.trace(x);
  CHECK_THAT(t.output.template cast<double>(), IsNear(expected, tol));
  CHECK_THAT(t.c_kv.template cast<double>(), IsNear(ref.matrix<double>(p + "c_kv.f64"), tol));
  CHECK_THAT(t.k_pe.template cast<double>(), IsNear(ref.matrix<double>(p + "k_rope.f64"), tol));
  for (Index h = 0; h < layer.n_heads(); ++h) {
    CAPTURE(h);
    const HeadTrace<Scalar>& head = t.heads[std::size_t(h)];
    CHECK_THAT(head.q_rotated.template cast<double>(), IsNear(ref.slice<double>(p + "q_rot.f64", h), tol));
    CHECK_THAT(head.k_rotated.template cast<double>(), IsNear(ref.slice<double>(p + "k_rot.f64", h), tol));
    CHECK_THAT(head.v.template cast<double>(), IsNear(ref.slice<double>(p + "v.f64", h), tol));
    CHECK_THAT(head.weights.template cast<double>(), IsNear(ref.slice<double>(p + "pattern.f64", h), tol));
  }
  // The absorbed form: each head's [q_nope W_UK | RoPE(q_pe)] and the latent keys [c_kv | RoPE(k_pe)].
  ForwardRecord<Scalar> record;
  record.keep_queries = record.keep_keys_values = true;
  layer.attend_heads(x, {}, record);
  const Matrix<Scalar>& q = record.q;
  const Index L = layer.latent_width(), R = layer.kv_lora_rank();
  for (Index h = 0; h < layer.n_heads(); ++h) {
    CHECK_THAT(Matrix<double>(q.middleCols(h * L, R).template cast<double>()), IsNear(ref.slice<double>(p + "q_absorbed.f64", h), tol));
    CHECK_THAT(Matrix<double>(q.middleCols(h * L + R, L - R).template cast<double>()), IsNear(ref.slice<double>(p + "q_rope.f64", h), tol));
  }
  const Matrix<double> latent = record.k.template cast<double>();  // one latent head, L wide
  REQUIRE(latent.cols() == L);
  REQUIRE(record.v.cols() == R);
  CHECK(record.v == record.k.leftCols(R));  // the values: c_kv, the latent keys' first kv_lora_rank columns
  CHECK_THAT(latent.leftCols(R), IsNear(ref.matrix<double>(p + "c_kv.f64"), tol));
  CHECK_THAT(latent.rightCols(L - R), IsNear(ref.matrix<double>(p + "k_rope.f64"), tol));
}
}  // namespace

TEMPLATE_TEST_CASE("DeepSeek-V3 latent attention reproduces PyTorch on both paths, and FP8 weights load exactly",
                   "[latent][fixture]", float, double) {
  for (const char* folder : {"deepseek-v3-tiny", "deepseek-v3-tiny-fp8"}) {
    CAPTURE(folder);
    const auto layers = io::load_latent_attention_layers<TestType>(headwise_test::data_path(folder));
    const io::SafetensorsFile ref = headwise_test::load_fixture(std::string(folder) + "/attention-reference.safetensors");
    REQUIRE(layers.size() == 2);
    CHECK(layers[0].latent_width() == 40);  // 32 + 8 numbers per token in the cache
    CHECK(layers[0].divisor() == Approx(1 / 0.3423796404971102).epsilon(1e-14));
    for (Index l = 0; l < 2; ++l) check_latent_layer(layers[std::size_t(l)], ref, l);
  }
  // The FP8 checkpoint is the float one quantized: its outputs differ from the float one's by the
  // quantization error (a few percent), not by more and not by nothing.
  const io::SafetensorsFile full = headwise_test::load_fixture("deepseek-v3-tiny/attention-reference.safetensors");
  const auto fp8 = io::load_latent_attention_layers<TestType>(headwise_test::data_path("deepseek-v3-tiny-fp8"));
  // (kept as stored in a float layer: a quarter of the bytes a decoding step reads)
  CHECK(fp8[0].weights().kept_as == (std::is_same_v<TestType, float> ? WeightType::f8_e4m3 : WeightType::f64));
  const Matrix<double> expected = full.matrix<double>("layers.0.attn.output.f64");
  const Matrix<double> quantized = fp8[0].forward(full.matrix<TestType>("layers.0.attn.input")).template cast<double>();
  const double relative = (quantized - expected).norm() / expected.norm();
  CHECK(relative > 1e-3);
  CHECK(relative < 0.1);
}

TEMPLATE_TEST_CASE("latent attention: decoding through the latent cache is bitwise the forward, on 1 and 2 threads",
                   "[latent][decode]", float, double) {
  const auto layers = io::load_latent_attention_layers<TestType>(headwise_test::data_path("deepseek-v3-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("deepseek-v3-tiny/attention-reference.safetensors");
  const Matrix<TestType> x = ref.matrix<TestType>("layers.1.attn.input");
  const auto& layer = layers[1];
  AttentionOptions one;
  one.threads = 1;
  const Matrix<TestType> whole = layer.forward(x, one);
  AttentionOptions two;
  two.threads = 2;
  CHECK_THAT(headwise_test::as_double(layer.forward(x, two)), headwise_test::IsExactly(whole));
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3; ++trial) {
    KvCache<TestType> cache = layer.make_cache(x.rows());
    Matrix<TestType> decoded(x.rows(), x.cols());
    for (Index i0 = 0; i0 < x.rows();) {
      const Index m = std::min<Index>(std::uniform_int_distribution<Index>(1, 7)(rng), x.rows() - i0);
      decoded.middleRows(i0, m) = layer.forward_incremental(x.middleRows(i0, m), cache, trial % 2 ? two : one);
      i0 += m;
    }
    CHECK_THAT(headwise_test::as_double(decoded), headwise_test::IsExactly(whole));
    CHECK(cache.size() == x.rows());
  }
  // The cache holds latent_width numbers per token and nothing else: c_kv, then RoPE(k_pe).
  KvCache<TestType> cache = layer.make_cache(4);
  layer.forward_incremental(x.topRows(2), cache);
  CHECK(cache.d_head() == 40);
  CHECK(cache.values_are_keys());
  CHECK_THROWS_WITH(layer.forward_incremental(x.topRows(3), cache), Catch::Contains("would exceed the cache's capacity of 4"));
  KvCache<TestType> other(8, 1, 40);
  CHECK_THROWS_WITH(layer.forward_incremental(x.topRows(1), other), Catch::Contains("values 40 wide of their own; this layer keeps 1 heads of keys"));
  // A step that fails leaves the cache as it was: the tokens appended before the failure are taken back.
  CHECK_THROWS_WITH(layer.forward_incremental(x.middleRows(2, 1), cache, one, ablate_head(4)),
                    Catch::Contains("head 4 of hook_z, which holds 4 heads side by side"));
  CHECK(cache.size() == 2);
  CHECK_THAT(headwise_test::as_double(layer.forward_incremental(x.middleRows(2, 2), cache, one)),
             headwise_test::IsExactly(Matrix<TestType>(whole.middleRows(2, 2))));
  AttentionOptions windowed;
  windowed.window = 8;
  CHECK_THROWS_WITH(layer.forward_incremental(x.middleRows(4, 0), cache, windowed), Catch::Contains("the cache's keys were attended with no window; this call asks for a window of 8"));
  // A plain q_proj (q_lora_rank null) and rotate_half without de-interleaving: the two paths agree.
  LatentAttentionWeights<TestType> w = layer.weights();
  w.w_q = w.w_q_a * w.w_q_b;
  w.w_q_a.resize(0, 0), w.w_q_b.resize(0, 0), w.q_a_norm.resize(0);
  LatentAttentionConfig c = layer.config();
  c.rope_interleave = false;
  const MultiHeadLatentAttention<TestType> plain(w, c);
  CHECK(plain.q_lora_rank() == 0);
  CHECK_THAT(plain.forward(x).template cast<double>(),
             IsNear(plain.forward_step_by_step(x).template cast<double>(), headwise_test::tolerance<TestType>()));
  KvCache<TestType> plain_cache = plain.make_cache(x.rows());
  Matrix<TestType> plain_decoded(x.rows(), x.cols());
  for (Index t = 0; t < x.rows(); ++t) plain_decoded.row(t) = plain.forward_incremental(x.middleRows(t, 1), plain_cache);
  CHECK_THAT(headwise_test::as_double(plain_decoded), headwise_test::IsExactly(plain.forward(x)));
  CHECK(plain.forward(Matrix<TestType>(0, x.cols())).rows() == 0);
}

TEMPLATE_TEST_CASE("values stored as the keys' first components: the same bits as values of their own, over key shards and threads",
                   "[latent][kernel]", float, double) {
  std::mt19937 rng(11);
  const Index n = 300, d = 40, dv = 29, rows_per_position = 4;
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, d, rng);
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n * rows_per_position, d, rng);
  PackedKeysValues<TestType> shared(n, 1, d, dv, {ValueStorage::key_prefix}), own(n, 1, d, dv);
  shared.append(k);
  own.append(k, k.leftCols(dv));
  AttentionOptions options;
  options.query_rows_per_position = rows_per_position;
  AttentionCall call;
  call.options = &options, call.logsumexp = true;
  for (const Index shard : {Index(64), Index(1024)})
    for (const int threads : {1, 2, 3}) {
      CAPTURE(shard, threads);
      options.threads = threads;
      call.tiles.key_shard = shard, call.tiles.keys = 32;
      const AttentionResult<TestType> base = attend<TestType>(q, own, call);
      const AttentionResult<TestType> r = attend<TestType>(q, shared, call);
      CHECK_THAT(headwise_test::as_double(r.z), headwise_test::IsExactly(base.z));
      // The last query row group decodes alone (split-key jobs) to the same bits.
      const AttentionResult<TestType> last = attend<TestType>(q.bottomRows(rows_per_position), shared, call);
      CHECK_THAT(headwise_test::as_double(last.z), headwise_test::IsExactly(Matrix<TestType>(base.z.bottomRows(rows_per_position))));
    }
  // Folded rows are queries at one position each: row r sits at position r / rows_per_position.
  options.threads = 0;
  const AttentionResult<TestType> base = attend<TestType>(q, own, call);
  call.path = AttentionPath::step_by_step;
  const AttentionResult<TestType> steps = attend<TestType>(q, shared, call);
  CHECK_THAT(headwise_test::as_double(steps.z), IsNear(headwise_test::as_double(base.z), headwise_test::tolerance<TestType>()));
  for (Index r = 0; r < 8; ++r) {
    const Matrix<double> qd = headwise_test::as_double(Matrix<TestType>(q.row(r)));
    const Matrix<double> kd = headwise_test::as_double(Matrix<TestType>(k.topRows(r / rows_per_position + 1)));
    const Matrix<double> z = headwise_test::reference_attention(qd, kd, Matrix<double>(kd.leftCols(dv)), std::sqrt(double(d)), false);
    CHECK_THAT(headwise_test::as_double(Matrix<TestType>(base.z.row(r))), IsNear(z, headwise_test::tolerance<TestType>()));
  }
  CHECK_THROWS_WITH(shared.append(k, k), Catch::Contains("this store's values are its keys' first 29 components: append(k) alone"));
  CHECK_THROWS_WITH(own.append(k), Catch::Contains("this store keeps values of their own"));
  CHECK_THROWS_WITH(PackedKeysValues<TestType>(4, 1, 8, 9, {ValueStorage::key_prefix}), Catch::Contains("need d_v <= d_head"));
  options.query_rows_per_position = 7;
  CHECK_THROWS_WITH(attend<TestType>(q, shared, call), Catch::Contains("not whole groups of query_rows_per_position = 7"));
  options.query_rows_per_position = 4;
  options.sinks = Vector<double>::Zero(1);
  CHECK_THROWS_WITH(attend<TestType>(q, shared, call), Catch::Contains("ALiBi slopes and sinks are per head"));
}

TEST_CASE("latent attention heads under the study tools: patterns, statistics, interventions, contribution norms, attribution",
          "[latent][interpret]") {
  const auto layers = io::load_latent_attention_layers<double>(headwise_test::data_path("deepseek-v3-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("deepseek-v3-tiny/attention-reference.safetensors");
  const auto& layer = layers[0];
  const Matrix<double> x = ref.matrix<double>("layers.0.attn.input");
  const ForwardRecord<double> run = interpret::inspect(layer, x);
  const auto tol = headwise_test::tolerance<double>();
  for (Index h = 0; h < layer.n_heads(); ++h) {
    CAPTURE(h);
    const Matrix<double> pattern = ref.slice<double>("layers.0.attn.pattern.f64", h);
    CHECK_THAT(run.pattern(h), IsNear(pattern, tol));  // from the absorbed queries, the latent keys and the logsumexp
    CHECK_THAT(Matrix<double>(run.attention.statistics.first_token_mass.row(h)), IsNear(Matrix<double>(pattern.col(0).transpose()), tol));
    CHECK(run.z_head(h).cols() == 16);
  }
  // Ablating head 2 removes its contribution from the sum, on both paths.
  const LatentAttentionTrace<double> t = layer.trace(x);
  const HookFunction<double> iv = ablate_head(2);
  const Matrix<double> without = t.output - t.contributions[2];
  CHECK_THAT(layer.forward(x, {}, iv), IsNear(without, tol));
  CHECK_THAT(layer.forward_step_by_step(x, {}, iv), IsNear(without, tol));
  CHECK_THAT(interpret::inspect(layer, x, {}, iv).output, IsNear(without, tol));
  // ‖Z_h W_O[h]‖ per head and row, against the trace's contributions.
  const Matrix<double> norms = interpret::contribution_norms(layer, run.attention.z);
  for (Index h = 0; h < layer.n_heads(); ++h)
    CHECK_THAT(Matrix<double>(norms.row(h)), IsNear(Matrix<double>(t.contributions[std::size_t(h)].rowwise().norm().transpose()), tol));
  // Attribution patching equals activation patching within one layer (the W_O sum is linear in Z).
  const Matrix<double> corrupted = x.colwise().reverse();
  const Matrix<double> direction = Matrix<double>::Ones(x.rows(), x.cols());
  const interpret::Attribution<double> a = interpret::attribution_patching(layer, x, corrupted, direction);
  const Matrix<double> z_corrupt = layer.head_outputs(corrupted);
  const double patched = (layer.forward(x, {}, patch_head<double>(1, z_corrupt.middleCols(16, 16))) - layer.forward(x)).sum();
  CHECK(a.per_head(1) == Approx(patched).epsilon(1e-9));
}

TEST_CASE("latent attention: what the loader and the layer refuse by name", "[latent][errors]") {
  const std::string folder = std::string(HEADWISE_TEST_TMP_DIR) + "/deepseek-config";
  std::filesystem::create_directories(folder);
  const std::string base = headwise_test::data_path("deepseek-v3-tiny-fp8");
  std::filesystem::copy_file(base + "/model.safetensors", folder + "/model.safetensors", std::filesystem::copy_options::overwrite_existing);
  std::string config;
  {
    std::ifstream in(base + "/config.json");
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string c = config;
    const auto at = c.find(from);
    REQUIRE(at != std::string::npos);
    c.replace(at, from.size(), to);
    std::ofstream(folder + "/config.json") << c;
  };
  with("\"weight_block_size\"", "\"weight_block_sizes\"");
  CHECK_THROWS_WITH(io::load_latent_attention_layers<float>(folder), Catch::Contains("quantization_config: \"weight_block_sizes\" is not a key headwise reads"));
  with("\"fp8\"", "\"int8\"");
  CHECK_THROWS_WITH(io::load_latent_attention_layers<float>(folder), Catch::Contains("quant_method is not \"fp8\""));
  with("\"e4m3\"", "\"e5m2\"");
  CHECK_THROWS_WITH(io::load_latent_attention_layers<float>(folder), Catch::Contains("is F8_E4M3, but quantization_config's fmt says e5m2"));
  with("\"quantization_config\"", "\"quantization\"");
  CHECK_THROWS_WITH(io::load_latent_attention_layers<float>(folder), Catch::Contains("\"quantization\" is not a key of a deepseek_v3 config.json"));
  with("128,", "64,");
  CHECK_THROWS_WITH(io::load_latent_attention_layers<float>(folder), Catch::Contains("one scale per weight_block_size block"));
  with("\"activation_scheme\": \"dynamic\"", "\"activation_scheme\": \"static\"");
  CHECK_THROWS_WITH(io::load_latent_attention_layers<float>(folder), Catch::Contains("static activation scales are not read"));
  CHECK_THROWS_WITH(io::load_llama_attention_layers<float>(headwise_test::data_path("deepseek-v3-tiny")),
                    Catch::Contains("is multi-head latent attention: load it with io::load_latent_attention"));
  CHECK_THROWS_WITH(io::load_latent_attention_layers<float>(headwise_test::data_path("llama-tiny")),
                    Catch::Contains("is not multi-head latent attention"));
  const auto layers = io::load_latent_attention_layers<float>(headwise_test::data_path("deepseek-v3-tiny"));
  AttentionOptions bad;
  bad.sinks = Vector<double>::Zero(4);
  CHECK_THROWS_WITH(layers[0].forward(Matrix<float>::Zero(3, 160), bad), Catch::Contains("sinks are not read by a latent attention layer"));
  CHECK_THROWS_WITH(layers[0].forward(Matrix<float>::Zero(3, 16)), Catch::Contains("x has 16 columns, expected d_model = 160"));
  LatentAttentionWeights<float> w = layers[0].weights();
  w.w_kv_b = Matrix<float>::Zero(32, 100);
  CHECK_THROWS_WITH(MultiHeadLatentAttention<float>(w, layers[0].config()), Catch::Contains("w_kv_b is 32x100, expected 32x128"));
}
