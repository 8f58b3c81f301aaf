// The model families of 2026 in Hugging Face's layout (tests/data/*-tiny, from the shared
// fixtures' "Current model families"): every attention layer against its PyTorch float64
// reference through every path (support/layer_checks.hpp), and what each family adds checked on
// its own: QK-norm in its four forms, NoPE and per-layer RoPE, chunked attention, query scales,
// sinks, YaRN without truncation, LongRoPE, fused qkv_proj, the output gate, K = V.
#include <string>

#include "headwise/attention_backward.hpp"
#include "headwise/interpret.hpp"
#include "headwise/io/llama.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/layer_checks.hpp"
#include "support/matchers.hpp"

using namespace headwise;
using headwise_test::check_layers;
using headwise_test::IsNear;

namespace {
io::LlamaConfig config_of(const std::string& folder) {
  return io::read_llama_config(headwise_test::data_path(folder + "/config.json"));
}
/// Layer L's inverse frequencies against the reference's inv_freq.f64.
void check_inv_freq(const std::string& folder, Index layer, Index sequence_length, const std::string& file = "attention-reference.safetensors") {
  const io::LlamaConfig c = config_of(folder);
  const io::SafetensorsFile ref = headwise_test::load_fixture(folder + "/" + file);
  const RotaryEmbedding rope(c.layer(layer).rope.value());
  const RowVector<double> expected = ref.row_vector<double>("layers." + std::to_string(layer) + ".attn.inv_freq.f64");
  CHECK_THAT(Matrix<double>(rope.inv_freq(sequence_length).transpose()), IsNear(Matrix<double>(expected), 1e-14));
}
}  // namespace

TEMPLATE_TEST_CASE("Qwen3 (per-head QK-norm, head_dim 24) and OLMo 2 (QK-norm over the whole projection)", "[families][fixture]",
                   float, double) {
  check_layers<TestType>("qwen3-tiny", "qwen3-tiny/attention-reference.safetensors");
  check_layers<TestType>("olmo2-tiny", "olmo2-tiny/attention-reference.safetensors");
  CHECK(config_of("olmo2-tiny").qk_norm->query.over == RmsNorm::Over::projection);
}

TEMPLATE_TEST_CASE("Gemma 2 (query_pre_attn_scalar, soft-cap, alternating windows) with and without layer_types",
                   "[families][fixture]", float, double) {
  check_layers<TestType>("gemma2-tiny", "gemma2-tiny/attention-reference.safetensors");
  check_layers<TestType>("gemma2-tiny-layer-types", "gemma2-tiny-layer-types/attention-reference.safetensors");
  CHECK(config_of("gemma2-tiny").type_of(0) == io::LayerType::sliding);  // derived: (i + 1) % 2 != 0
  CHECK(config_of("gemma2-tiny").type_of(1) == io::LayerType::full);
  CHECK(config_of("gemma2-tiny-layer-types").type_of(0) == io::LayerType::full);
}

TEMPLATE_TEST_CASE("Gemma 3 ((1 + w) QK-norm, local and global RoPE) from a v4 and a v5 config", "[families][fixture][v5]",
                   float, double) {
  check_layers<TestType>("gemma3-tiny", "gemma3-tiny/attention-reference.safetensors");
  check_layers<TestType>("gemma3-tiny-v5", "gemma3-tiny-v5/attention-reference.safetensors");
  check_inv_freq("gemma3-tiny", 5, 40);  // global: theta 1e6, linear factor 8
  check_inv_freq("gemma3-tiny-v5", 0, 40);  // local: 10000, unscaled
}

TEMPLATE_TEST_CASE("gpt-oss (sinks, biases, YaRN with truncate false, alternating windows)", "[families][fixture][v5]", float,
                   double) {
  check_layers<TestType>("gpt-oss-tiny", "gpt-oss-tiny/attention-reference.safetensors");
  check_inv_freq("gpt-oss-tiny", 0, 40);
  // The sink-mass statistic: what each row's sink took, 1 - the row's sum of PyTorch's pattern.
  const io::SafetensorsFile ref = headwise_test::load_fixture("gpt-oss-tiny/attention-reference.safetensors");
  for (const Index l : {0, 1}) {
    const std::string p = "layers." + std::to_string(l) + ".attn.";
    const auto layer = io::load_llama_attention<TestType>(headwise_test::data_path("gpt-oss-tiny"), l);
    const auto run = interpret::inspect(layer, ref.matrix<TestType>(p + "input"));
    for (Index h = 0; h < layer.n_heads(); ++h) {
      const Matrix<double> taken = (1.0 - ref.slice<double>(p + "pattern.f64", h).rowwise().sum().array()).transpose();
      CHECK_THAT(Matrix<double>(run.attention.statistics.sink_mass.row(h).template cast<double>()),
                 IsNear(taken, headwise_test::tolerance<TestType>()));
    }
  }
}

TEMPLATE_TEST_CASE("Phi-3 (fused qkv_proj, partial rotary, LongRoPE's short and long factors)", "[families][fixture]", float,
                   double) {
  // T 40 > original 32: the long factors for every position, and decoding starts past 32 tokens
  // (a cache rotated with the short factors is refused once the sequence crosses 32).
  check_layers<TestType>("phi3-tiny", "phi3-tiny/attention-reference.safetensors", /*prefill=*/33);
  check_layers<TestType>("phi3-tiny", "phi3-tiny/attention-reference-short.safetensors");
  check_inv_freq("phi3-tiny", 0, 40);
  check_inv_freq("phi3-tiny", 0, 24, "attention-reference-short.safetensors");
  const auto layer = io::load_llama_attention<TestType>(headwise_test::data_path("phi3-tiny"), 0);
  KvCache<TestType> cache = layer.make_cache(40);
  const Matrix<TestType> x = Matrix<TestType>::Random(33, 64);
  layer.forward_incremental(x.topRows(32), cache);
  CHECK_THROWS_WITH(layer.forward_incremental(x.bottomRows(1), cache),
                    Catch::Contains("rotated with LongRoPE's short factors, and a sequence of 33 tokens"));
}

TEMPLATE_TEST_CASE("Llama 4 (chunked RoPE layers with an L2 norm after RoPE, a NoPE layer with the temperature) and SmolLM3 (NoPE)",
                   "[families][fixture]", float, double) {
  check_layers<TestType>("llama4-tiny", "llama4-tiny/attention-reference.safetensors");
  check_layers<TestType>("smollm3-tiny", "smollm3-tiny/attention-reference.safetensors");
  const io::LlamaConfig llama4 = config_of("llama4-tiny");
  CHECK(llama4.type_of(0) == io::LayerType::chunked);
  CHECK(*llama4.layer(0).chunk == 8);
  CHECK_FALSE(llama4.layer(3).rope);
  CHECK(llama4.layer(3).query_scale);
  CHECK_FALSE(config_of("smollm3-tiny").layer(3).rope);
}

TEST_CASE("Llama 4 Scout's and Maverick's rope scaling (llama3, low_freq_factor = high_freq_factor = 1) loads as Hugging Face "
          "computes it", "[families][rope]") {
  std::string text = headwise::io::read_text_file(headwise_test::data_path("llama4-tiny/config.json"), "config");
  const std::string scaling = R"("rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"})";
  text.replace(text.find("\"rope_scaling\": null"), std::string("\"rope_scaling\": null").size(), scaling);
  const io::LlamaConfig c = io::parse_llama_config(text, "llama4 config");
  const RotaryEmbedding rope(c.layer(0).rope.value());
  // Hugging Face's _compute_llama3_parameters with no band between the two wavelengths: 8192 /
  // low_freq_factor = 8192 / high_freq_factor. Wavelengths below it kept, above it divided by 16.
  const double pi = std::acos(-1.0);
  Matrix<double> expected(1, 8);
  for (Index i = 0; i < 8; ++i) {
    const double f = std::pow(500000.0, -2.0 * double(i) / 16.0);
    expected(0, i) = 2 * pi / f < 8192 ? f : f / 16;
  }
  CHECK(2 * pi / std::pow(500000.0, -2.0 * 7 / 16.0) > 8192);  // both sides of the boundary are tested
  CHECK(2 * pi / std::pow(500000.0, -2.0 * 1 / 16.0) < 8192);
  CHECK_THAT(Matrix<double>(rope.inv_freq(40).transpose()), IsNear(expected, 1e-15));
  RopeConfig above = c.layer(0).rope.value();
  above.scaling.low_freq_factor = 2;  // low > high: still refused
  CHECK_THROWS_WITH(RotaryEmbedding(above), Catch::Contains("0 < low_freq_factor <= high_freq_factor"));
}

TEMPLATE_TEST_CASE("Ministral 3 (YaRN with mscale, the query scale by position) and Llama from a v5 config", "[families][fixture][v5]",
                   float, double) {
  check_layers<TestType>("ministral3-tiny", "ministral3-tiny/attention-reference.safetensors");
  check_inv_freq("ministral3-tiny", 0, 40);
  check_layers<TestType>("llama-v5-tiny", "llama-v5-tiny/attention-reference.safetensors");
}

TEMPLATE_TEST_CASE("Qwen3-Next (its full-attention layer: (1 + w) QK-norm, partial RoPE, the output gate)", "[families][fixture]",
                   float, double) {
  check_layers<TestType>("qwen3-next-tiny", "qwen3-next-tiny/attention-reference.safetensors");
  const io::LlamaConfig c = config_of("qwen3-next-tiny");
  CHECK(io::attention_layer_numbers(c) == std::vector<Index>{3});
  CHECK_THROWS_WITH(io::load_llama_attention<TestType>(headwise_test::data_path("qwen3-next-tiny"), 0),
                    Catch::Contains("layer 0 of this qwen3_next model is a linear_attention layer (Gated DeltaNet), not softmax attention"));
  // The gate: Z_h ∘ σ(G_h) is what W_O reads, and the per-head sum still holds.
  const auto layer = io::load_llama_attention<TestType>(headwise_test::data_path("qwen3-next-tiny"), 3);
  const io::SafetensorsFile ref = headwise_test::load_fixture("qwen3-next-tiny/attention-reference.safetensors");
  const Matrix<TestType> x = ref.matrix<TestType>("layers.3.attn.input");
  const MultiHeadTrace<TestType> t = layer.trace(x);
  for (Index h = 0; h < layer.n_heads(); ++h) {
    const Matrix<double> logits = ref.slice<double>("layers.3.attn.gate.f64", h);
    CHECK_THAT(t.heads[h].gate.template cast<double>(), IsNear(Matrix<double>((1.0 + (-logits.array()).exp()).inverse()),
                                                                headwise_test::tolerance<TestType>()));
  }
}

TEMPLATE_TEST_CASE("Gemma 4 (scale 1, QK-norm w, value norm, K = V on full layers of their own head size, proportional RoPE)",
                   "[families][fixture][v5]", float, double) {
  check_layers<TestType>("gemma4-tiny", "gemma4-tiny/attention-reference.safetensors");
  const io::LlamaConfig c = config_of("gemma4-tiny");
  CHECK(c.head_dim_of(5) == 32);
  CHECK(c.kv_heads_of(5) == 1);
  check_inv_freq("gemma4-tiny", 5, 40);
  CHECK(c.kv_source_of(6) == Index(4));
  CHECK(c.kv_source_of(7) == Index(5));
}

// Any starting position: a chunked layer's tokens from the next chunk boundary on never see an
// earlier key, nor do a window-8 layer's from 7 past the start, so a forward over them alone,
// starting at their position, gives PyTorch's rows of the whole sequence: RoPE, chunks (p = 12 is
// inside a chunk), windows at absolute positions. On full-causal layers (Llama 4's NoPE layer,
// Ministral 3) the queries as they enter the scores still match: the query scale at absolute positions.
TEMPLATE_TEST_CASE("A forward over tokens that start at position p, on every path", "[families][fixture][positions]", float,
                   double) {
  struct Case {
    const char* folder;
    Index layer, first, exact_from;  // rows exact_from.. of the reference are reproduced
  };
  for (const Case c : {Case{"llama4-tiny", 0, 8, 8}, Case{"llama4-tiny", 1, 12, 16}, Case{"gemma2-tiny", 0, 5, 12},
                       Case{"llama4-tiny", 3, 12, 40}, Case{"ministral3-tiny", 1, 12, 40}}) {
    CAPTURE(c.folder, c.layer);
    const auto layer = io::load_llama_attention<TestType>(headwise_test::data_path(c.folder), c.layer);
    const io::SafetensorsFile ref = headwise_test::load_fixture(std::string(c.folder) + "/attention-reference.safetensors");
    const std::string p = "layers." + std::to_string(c.layer) + ".attn.";
    const Matrix<TestType> all = ref.matrix<TestType>(p + "input");
    const Index n = all.rows() - c.first, skip = c.exact_from - c.first;
    const Matrix<TestType> x = all.bottomRows(n);
    const Matrix<double> expected = ref.matrix<double>(p + "output.f64").bottomRows(n - skip);
    AttentionOptions at;
    at.first_key_position = c.first;
    const auto tol = headwise_test::tolerance<TestType>();
    CHECK_THAT(layer.forward(x, at).bottomRows(n - skip).template cast<double>(), IsNear(expected, tol));
    CHECK_THAT(layer.forward_step_by_step(x, at).bottomRows(n - skip).template cast<double>(), IsNear(expected, tol));
    const MultiHeadTrace<TestType> t = layer.trace(x, at);
    CHECK_THAT(t.output.bottomRows(n - skip).template cast<double>(), IsNear(expected, tol));
    const Matrix<double> q_rot = headwise_test::side_by_side<double>(ref, p + "q_rot.f64").bottomRows(n);
    for (Index h = 0; h < layer.n_heads(); ++h)
      CHECK_THAT(t.heads[h].q_rotated.template cast<double>(), IsNear(q_rot.middleCols(h * layer.d_head(), layer.d_head()), tol));
    const auto run = interpret::inspect(layer, x, at);
    CHECK_THAT(run.output.bottomRows(n - skip).template cast<double>(), IsNear(expected, tol));
    at.first_query_position = c.first + 1;
    CHECK_THROWS_WITH(layer.forward(x, at), Catch::Contains("a layer's queries and keys are the same tokens"));
  }
}

TEST_CASE("The families' configs and layers: what headwise does not read or compute is refused by name", "[families][errors]") {
  const auto fail = [](const std::string& json) { return io::parse_llama_config(json, "c.json"); };
  const std::string base = R"({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, )";
  CHECK_THROWS_WITH(fail(base + R"("model_type": "deepseek_v3"})"), Catch::Contains("no integer field \"kv_lora_rank\""));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "falcon"})"), Catch::Contains("model_type \"falcon\" is not one this loader reads"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "qwen3", "quantization_config": {"quant_method": "fp8"}})"),
                    Catch::Contains("quantization_config: weight_block_size is not two integers [rows, cols]"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "qwen3", "quantization_config": {"quant_method": "gptq", "bits": 4}})"),
                    Catch::Contains("quantization_config: \"bits\" is not a key headwise reads"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "llama4_text", "layer_types": ["full_attention", "sliding_attention"]})"),
                    Catch::Contains("layer_types[1] = \"sliding_attention\" is not a layer this model_type has (full_attention, chunked_attention)"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "llama4_text", "no_rope_layers": [1, 2]})"), Catch::Contains("no_rope_layers[1] = 2 is not 0 or 1"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "gemma4_text", "rope_parameters": {"rope_theta": 1e4}})"),
                    Catch::Contains("no \"layer_types\": gemma4_text configs list them"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "gemma3_text", "sliding_window": 4, "use_bidirectional_attention": true})"),
                    Catch::Contains("\"use_bidirectional_attention\" = true changes attention"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "gpt_oss", "sliding_window": 4, "max_position_embeddings": 1000, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 32, "original_max_position_embeddings": 100}})"),
                    Catch::Contains("\"factor\" = 32 disagrees with max_position_embeddings / original_max_position_embeddings = 10"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "phi3", "rope_scaling": {"type": "longrope", "short_factor": [1, 1], "long_factor": [1, 1, 1, 1, 1, 1, 1, 1]}})"),
                    Catch::Contains("rope_scaling \"short_factor\" must be a list of 8 numbers"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "gemma3_text", "sliding_window": 4, "rope_parameters": {"full_attention": {"rope_theta": 1e6}}})"),
                    Catch::Contains("\"rope_parameters\" has no entry for \"sliding_attention\""));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "ministral3", "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2, "llama_4_scaling_beta": 0.1, "finetuned": 1}})"),
                    Catch::Contains("rope_parameters has \"finetuned\" = 1"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "llama", "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2, "llama_4_scaling_beta": 0.1}})"),
                    Catch::Contains("rope_parameters has \"llama_4_scaling_beta\" = 0.1"));  // only Ministral 3 reads it
  const io::LlamaConfig v4 = fail(base + R"("model_type": "ministral3", "original_max_position_embeddings": 8, "rope_scaling": {"rope_type": "yarn", "factor": 2, "llama_4_scaling_beta": 0.1}})");
  REQUIRE(v4.layer(0).query_scale);  // read where parse_rope read it: v4's rope_scaling
  CHECK(v4.layer(0).query_scale->beta == 0.1);
  CHECK_THROWS_WITH(fail(base + R"("model_type": "qwen3", "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 1e300}})"),
                    Catch::Contains("\"partial_rotary_factor\" = " + std::to_string(1e300) + " must be in (0, 1]"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "phi3", "original_max_position_embeddings": 32, "rope_scaling": {"type": "longrope", "original_max_position_embeddings": 16, "short_factor": [1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [1, 1, 1, 1, 1, 1, 1, 1]}})"),
                    Catch::Contains("\"original_max_position_embeddings\" = 16 disagrees with the top-level 32"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "gemma4_text", "sliding_window": 4, "num_kv_shared_layers": 1, "layer_types": ["sliding_attention", "full_attention"], "rope_parameters": {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}}})"),
                    Catch::Contains("layer 1 shares keys and values (num_kv_shared_layers), but no earlier layer is of its type"));
  CHECK_THROWS_WITH(fail(base + R"("model_type": "llama", "head_dim": 4294967296, "num_attention_heads": 4294967296})"),
                    Catch::Contains("wider than 2^62 columns"));
  // The config classes' defaults where a key is absent (null where Hugging Face reads None).
  const io::LlamaConfig llama4 = fail(base + R"("model_type": "llama4_text", "no_rope_layers": [], "attn_temperature_tuning": 1})");
  CHECK(llama4.nope(3));  // every 4th layer from the default interval
  CHECK(*llama4.layer(0).chunk == 8192);
  CHECK(llama4.layer(0).qk_norm);  // use_qk_norm defaults to true
  CHECK_FALSE(fail(base + R"("model_type": "llama4_text", "attention_chunk_size": null})").layer(0).chunk);
  const io::LlamaConfig gemma2 = fail(base + R"("model_type": "gemma2", "sliding_window": 4})");
  CHECK(*gemma2.layer(0).divisor == 16.0);  // sqrt(256)
  CHECK(*gemma2.layer(0).softcap == 50.0);
  CHECK_FALSE(fail(base + R"("model_type": "gemma2", "sliding_window": 4, "attn_logit_softcapping": null})").layer(0).softcap);
  CHECK(fail(base + R"("model_type": "qwen3_next", "layer_types": ["linear_attention", "full_attention"]})").layer(1).rope->rotary_fraction == 0.25);
  const io::LlamaConfig sparse = fail(R"({"model_type": "qwen3_next", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4294967296, "full_attention_interval": 4294967296})");
  CHECK(io::attention_layer_numbers(sparse) == std::vector<Index>{4294967295});  // found without walking 2^32 layers

  // The layer: norms that do not fit, a chunk without the mask, the backward and head(h).
  MultiHeadWeights<double> w;
  w.w_q = w.w_k = w.w_v = w.w_o = Matrix<double>::Identity(8, 8);
  LayerConfig c;
  c.qk_norm = QkNorm{};
  c.qk_norm->query.weight = Vector<double>::Ones(3);
  CHECK_THROWS_WITH(MultiHeadAttention<double>(2, w, c), Catch::Contains("the query norm has 3 weights, expected 4 (d_head)"));
  c.qk_norm->query.weight = Vector<double>::Ones(4);
  const MultiHeadAttention<double> normed(2, w, c);
  const Matrix<double> x = Matrix<double>::Random(5, 8);
  CHECK_THROWS_WITH(backward_step_by_step(normed, x, x),
                    Catch::Contains("backward_step_by_step: the layer has a QK-norm (layer_backward differentiates it), which the backward does not differentiate"));
  CHECK_THROWS_WITH(normed.head(0), Catch::Contains("norms or scales its projections, which one AttentionHead does not compute"));
  AttentionOptions o;
  o.chunk = 0;
  CHECK_THROWS_WITH(normed.forward(x, o), Catch::Contains("chunk must be > 0, got 0"));
  o.chunk = 4, o.causal = false;
  CHECK_THROWS_WITH(normed.forward(x, o), Catch::Contains("chunked attention needs the causal mask"));
  LayerConfig shared;
  shared.shares_keys_values_of = 0;
  const MultiHeadAttention<double> reader(2, w, shared), writer(2, w);
  CHECK_THROWS_WITH(reader.trace(x), Catch::Contains("it reads layer 0's (KV sharing); call forward_reading_cache"));
  KvCache<double> cache = writer.make_cache(8);
  writer.forward_incremental(x.topRows(2), cache);
  CHECK_THROWS_WITH(reader.forward_reading_cache(x, cache), Catch::Contains("x has 5 tokens, the cache only 2"));
  LayerConfig rotated = shared;
  rotated.rope = RopeConfig{};
  const MultiHeadAttention<double> rotating_reader(2, w, rotated);
  CHECK_THROWS_WITH(rotating_reader.forward_reading_cache(x.topRows(2), cache),
                    Catch::Contains("the cache was filled by a layer without a rotary embedding"));
  CHECK_THROWS_WITH(layer_backward(reader, x, x), Catch::Contains("no keys and values of its own (KV sharing)"));
}
