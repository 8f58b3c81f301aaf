// Whole decoder models (tests/data/*-model-tiny) against PyTorch's float64 run of each: the logits
// and every residual-stream hook (TransformerLens's names), GPT-2 from the tokenizer's ids, Qwen3-MoE's
// routing, GPT-2's reference interventions (a zero ablation and a patch of one head's Z); and what
// a run or a loader refuses by name.
#include <cmath>
#include <filesystem>
#include <type_traits>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "headwise/interpret/model_head_scores.hpp"
#include "headwise/io/decoder_model.hpp"
#include "headwise/text/byte_level_bpe.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/layer_checks.hpp"
#include "support/matchers.hpp"
#include "support/safetensors_writer.hpp"

using namespace headwise;
using headwise_test::IsNear;

namespace {
std::vector<Index> ids_of(const io::SafetensorsFile& ref, const std::string& name) {
  std::vector<Index> ids;
  for (const double v : ref.values<double>(name)) ids.push_back(static_cast<Index>(v));
  return ids;
}
/// A [T, heads, d] tensor as (T, heads d).
Matrix<double> rows_of(const io::SafetensorsFile& ref, const std::string& name) {
  const auto& shape = ref.info(name).shape;
  const std::vector<double> v = ref.values<double>(name);
  return Eigen::Map<const Matrix<double>>(v.data(), Index(shape[0]), Index(shape[1] * shape[2]));
}

template <class Scalar>
void check_model(const std::string& folder) {
  CAPTURE(folder);
  const auto model = io::load_decoder_model<Scalar>(headwise_test::data_path(folder));
  const io::SafetensorsFile ref = headwise_test::load_fixture(folder + "/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  model::RunOptions<Scalar> options;
  for (const std::string& h : model.hook_names()) options.hooks.insert(h);
  for (Index l = 0; l < model.n_layers(); ++l) {
    options.hooks.insert("blocks." + std::to_string(l) + ".attn.statistics");
    if (model.blocks[static_cast<std::size_t>(l)].experts) options.hooks.insert("blocks." + std::to_string(l) + ".mlp.routing");
  }
  const auto run = model.run(ids, options);
  const auto tol = headwise_test::tolerance<Scalar>();
  CHECK_THAT(run.logits.template cast<double>(), IsNear(ref.matrix<double>("logits.f64"), tol));
  CHECK_THAT(run.hooks.at("ln_final.out").template cast<double>(), IsNear(ref.matrix<double>("ln_final.out.f64"), tol));
  for (Index l = 0; l < model.n_layers(); ++l) {
    CAPTURE(l);
    const std::string p = "blocks." + std::to_string(l) + ".";
    for (const char* h : {"hook_resid_pre", "attn_in", "attn.output", "hook_attn_out", "hook_resid_mid", "mlp_in", "mlp.output",
                          "hook_mlp_out", "hook_resid_post"}) {
      CAPTURE(h);
      CHECK_THAT(run.hooks.at(p + h).template cast<double>(), IsNear(ref.matrix<double>(p + h + ".f64"), tol));
    }
    for (const char* h : {"attn.q", "attn.k", "attn.v", "attn.hook_pattern"}) {
      CAPTURE(h);
      CHECK_THAT(run.hooks.at(p + h).template cast<double>(), IsNear(headwise_test::side_by_side<double>(ref, p + h + ".f64"), tol));
    }
    CHECK_THAT(run.hooks.at(p + "attn.hook_z").template cast<double>(), IsNear(rows_of(ref, p + "attn.hook_z.f64"), tol));
    // Per-row statistics of every head from the fused kernel: the first-token mass is PyTorch's pattern's column 0.
    const auto& stats = run.statistics.at(l);
    for (Index h = 0; h < stats.first_token_mass.rows(); ++h)
      CHECK_THAT(Matrix<double>(stats.first_token_mass.row(h).template cast<double>()),
                 IsNear(Matrix<double>(ref.slice<double>(p + "attn.hook_pattern.f64", h).col(0).transpose()), tol));
    if (model.blocks[static_cast<std::size_t>(l)].experts) {
      const auto& routing = run.routing.at(l);
      CHECK_THAT(routing.logits.template cast<double>(), IsNear(ref.matrix<double>(p + "mlp.router_logits.f64"), tol));
      CHECK_THAT(routing.weights.template cast<double>(), IsNear(ref.matrix<double>(p + "mlp.topk_weights.f64"), tol));
      const std::vector<double> experts = ref.values<double>(p + "mlp.topk_experts");
      for (Index t = 0; t < routing.experts.rows(); ++t)
        for (Index j = 0; j < routing.experts.cols(); ++j)
          CHECK(routing.experts(t, j) == Index(experts[static_cast<std::size_t>(t * routing.experts.cols() + j)]));
    }
  }
  CHECK_THAT(Matrix<double>(model.logits(ids).template cast<double>()), headwise_test::IsExactly(run.logits));
}
}  // namespace

TEMPLATE_TEST_CASE("Whole models: GPT-2, Llama, Qwen3, Qwen3-MoE and Gemma 3, logits and every hook", "[model][fixture]", float,
                   double) {
  for (const char* folder : {"gpt2-model-tiny", "llama-model-tiny", "qwen3-model-tiny", "qwen3moe-model-tiny", "gemma3-model-tiny"})
    check_model<TestType>(folder);
}

TEMPLATE_TEST_CASE("GPT-2 from text, and the reference interventions: a head ablated, a head's Z patched", "[model][fixture]", float,
                   double) {
  const auto model = io::load_decoder_model<TestType>(headwise_test::data_path("gpt2-model-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("gpt2-model-tiny/model-reference.safetensors");
  const auto bpe = text::BpeTokenizer::from_tokenizer_json(headwise_test::data_path("gpt2-tokenizer/tokenizer.json"));
  const std::vector<Index> ids = bpe.encode("When Mary and John went to the store, John gave a drink to");
  CHECK(ids == ids_of(ref, "input_ids"));
  const auto tol = headwise_test::tolerance<TestType>();
  model::RunOptions<TestType> ablate;
  ablate.interventions.emplace(1, HeadInterventions<TestType>(4));
  ablate.interventions.at(1).ablate(2);
  CHECK_THAT(model.run(ids, ablate).logits.template cast<double>(), IsNear(ref.matrix<double>("interventions.zero_ablate.logits.f64"), tol));
  model::RunOptions<TestType> patch;
  patch.interventions.emplace(0, HeadInterventions<TestType>(4));
  patch.interventions.at(0).patch(1, ref.matrix<TestType>("interventions.patch.source_z.f64"));
  CHECK_THAT(model.run(ids, patch).logits.template cast<double>(), IsNear(ref.matrix<double>("interventions.patch.logits.f64"), tol));
  // The loss of next tokens, from PyTorch's logits (log-softmax here in the test) and from the model's.
  const Matrix<double> reference = ref.matrix<double>("logits.f64");
  double expected_loss = 0;
  for (Index t = 0; t + 1 < reference.rows(); ++t) {
    const double top = reference.row(t).maxCoeff();
    expected_loss += top + std::log((reference.row(t).array() - top).exp().sum()) - reference(t, ids[std::size_t(t) + 1]);
  }
  expected_loss /= double(reference.rows() - 1);
  CHECK(model::next_token_loss(model.logits(ids), ids) == Approx(expected_loss).epsilon(std::is_same_v<TestType, float> ? 1e-5 : 1e-12));
  CHECK_THROWS_WITH(model::next_token_loss(model.logits(ids), {1}), Catch::Contains("logits for 14 tokens and 1 ids"));
  // Patching the residual stream: the last layer's output taken from the source run makes the
  // logits the source run's, whatever came before.
  model::RunOptions<TestType> record;
  record.hooks = {"blocks.2.hook_resid_post"};
  const auto source_run = model.run(ids_of(ref, "interventions.patch.source_input_ids"), record);
  model::RunOptions<TestType> patched;
  patched.patches["blocks.2.hook_resid_post"] = source_run.hooks.at("blocks.2.hook_resid_post");
  CHECK_THAT(headwise_test::as_double(model.run(ids, patched).logits), headwise_test::IsExactly(source_run.logits));
  // The source run's Z of layer 0, head 1, recorded by the model itself, is the reference's.
  model::RunOptions<TestType> source;
  source.hooks = {"blocks.0.attn.hook_z"};
  const auto z = model.run(ids_of(ref, "interventions.patch.source_input_ids"), source).hooks.at("blocks.0.attn.hook_z");
  CHECK_THAT(Matrix<double>(z.middleCols(12, 12).template cast<double>()), IsNear(ref.matrix<double>("interventions.patch.source_z.f64"), tol));
}

TEST_CASE("Whole models: bad ids, too many tokens, unknown hooks, missing tensors, unread configs are refused by name",
          "[model][errors]") {
  const auto model = io::load_decoder_model<float>(headwise_test::data_path("gpt2-model-tiny"));
  CHECK_THROWS_WITH(model.run({1, 50257}), Catch::Contains("token 1 has id 50257, not in [0, 50257)"));
  CHECK_THROWS_WITH(model.run(std::vector<Index>(1025, 1)), Catch::Contains("1025 tokens, more than the model's 1024 positions"));
  model::RunOptions<float> o;
  o.hooks = {"blocks.9.hook_resid_pre"};
  CHECK_THROWS_WITH(model.run({1, 2}, o), Catch::Contains("no hook \"blocks.9.hook_resid_pre\" in this model"));
  model::RunOptions<float> p;
  p.patches["blocks.0.hook_resid_mid"] = Matrix<float>::Zero(3, 48);
  CHECK_THROWS_WITH(model.run({1, 2}, p), Catch::Contains("the patch for blocks.0.hook_resid_mid is 3x48, the stream there is 2x48"));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(headwise_test::data_path("gemma2-tiny")),
                    Catch::Contains("model_type \"gemma2\" has attention headwise loads, but no whole-model code yet"));
  // A Llama checkpoint without one MLP tensor.
  const std::string folder = std::string(HEADWISE_TEST_TMP_DIR) + "/model-missing-mlp";
  std::filesystem::create_directories(folder);
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "silu", "rms_norm_eps": 1e-5})";
  std::map<std::string, headwise_test::TensorSpec> tensors;
  for (const char* name : {"q_proj", "k_proj", "v_proj", "o_proj"}) tensors[std::string("model.layers.0.self_attn.") + name + ".weight"] = {{8, 8}, 0.1f};
  for (const char* name : {"gate_proj", "up_proj"}) tensors[std::string("model.layers.0.mlp.") + name + ".weight"] = {{8, 8}, 0.1f};
  for (const char* name : {"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight", "model.norm.weight"})
    tensors[name] = {{8}, 1.0f};
  tensors["model.embed_tokens.weight"] = tensors["lm_head.weight"] = {{4, 8}, 0.5f};
  const std::vector<unsigned char> bytes = headwise_test::write_safetensors(tensors);
  std::ofstream(folder + "/model.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("missing tensor \"model.layers.0.mlp.down_proj.weight\""));
  std::ofstream(folder + "/config.json") << R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 4, "hidden_act": "gelu"})";
  CHECK_THROWS_WITH(io::load_decoder_model<float>(folder), Catch::Contains("hidden_act \"gelu\" is not one the model code has for llama"));
}

TEMPLATE_TEST_CASE("Decoding token by token equals the whole forward's logits bit for bit; generation", "[model][fixture][decode]",
                   float, double) {
  for (const char* folder : {"gpt2-model-tiny", "llama-model-tiny", "qwen3moe-model-tiny", "gemma3-model-tiny"}) {
    CAPTURE(folder);
    const auto model = io::load_decoder_model<TestType>(headwise_test::data_path(folder));
    const io::SafetensorsFile ref = headwise_test::load_fixture(std::string(folder) + "/model-reference.safetensors");
    const std::vector<Index> ids = ids_of(ref, "input_ids");
    const Matrix<TestType> whole = model.logits(ids);
    auto caches = model.make_caches(static_cast<Index>(ids.size()));
    Matrix<TestType> decoded(whole.rows(), whole.cols());
    const std::size_t prompt = 5;  // a prompt of 5, then one token at a time
    decoded.topRows(prompt) = model.decode(std::vector<Index>(ids.begin(), ids.begin() + prompt), caches);
    for (std::size_t t = prompt; t < ids.size(); ++t) decoded.row(Index(t)) = model.decode({ids[t]}, caches);
    CHECK_THAT(headwise_test::as_double(decoded), headwise_test::IsExactly(whole));
    // Greedy generation: each new token the argmax of the forward over everything before it.
    const std::vector<Index> generated = model.generate(std::vector<Index>(ids.begin(), ids.begin() + prompt), 4);
    std::vector<Index> sequence(ids.begin(), ids.begin() + prompt);
    for (const Index next : generated) {
      Index best = 0;
      model.logits(sequence).row(Index(sequence.size()) - 1).maxCoeff(&best);
      CHECK(next == best);
      sequence.push_back(next);
    }
    typename model::DecoderModel<TestType>::Sampling sampled;
    sampled.temperature = 0.8, sampled.top_k = 5, sampled.seed = 7;
    CHECK(model.generate(ids, 3, sampled) == model.generate(ids, 3, sampled));  // the seed fixes the draw
    sampled.top_k = 1;
    CHECK(model.generate(ids, 3, sampled) == model.generate(ids, 3));  // top-1 sampling is greedy
  }
}

TEST_CASE("Head studies over a whole model: the scores from PyTorch's patterns, a table and a page", "[model][fixture][interpret]") {
  const auto model = io::load_decoder_model<double>(headwise_test::data_path("gpt2-model-tiny"));
  const io::SafetensorsFile ref = headwise_test::load_fixture("gpt2-model-tiny/model-reference.safetensors");
  const std::vector<Index> ids = ids_of(ref, "input_ids");
  const interpret::ModelHeadScores s = interpret::score_model_heads(model, ids, 10, 3);
  const std::vector<int> tokens(ids.begin(), ids.end());
  for (Index l = 0; l < model.n_layers(); ++l)
    for (Index h = 0; h < 4; ++h) {
      const Matrix<double> p = ref.slice<double>("blocks." + std::to_string(l) + ".attn.hook_pattern.f64", h);
      CHECK(s.previous_token(l, h) == Approx(interpret::previous_token_score(p)).epsilon(1e-12));
      CHECK(s.first_token(l, h) == Approx(interpret::first_token_score(p)).epsilon(1e-12));
      CHECK(s.duplicate_token(l, h) == Approx(interpret::duplicate_token_score(p, tokens)).epsilon(1e-12));  // "John" repeats
      CHECK(std::abs(s.sink_mass(l, h)) < 1e-12);  // GPT-2 has no sinks
      CHECK((s.induction(l, h) >= 0.0 && s.induction(l, h) <= 1.0));
    }
  CHECK(s.induction.sum() > 0.0);
  const std::string table = interpret::head_score_table(s);
  CHECK_THAT(table, Catch::Contains("previous token") && Catch::Contains("2.3 "));
  const std::string page = interpret::head_score_page(s, "gpt2-model-tiny");
  CHECK_THAT(page, Catch::StartsWith("<!DOCTYPE html>") && Catch::Contains("induction score of every head"));
  CHECK_THROWS_WITH(interpret::score_model_heads(model, {1}), Catch::Contains("the text has 1 tokens: at least 2 are needed"));
}
