// Ring attention across MPI ranks (run by CTest under mpirun on 2 and 3 ranks): each rank's rows
// equal PyTorch's for Llama, Qwen2 and Mistral layers split across the ranks, and the rows of the
// single-process call within the merge bounds (float 1e-6, double 1e-14 relative) for every
// position-dependent variant, even and uneven blocks (a rank with no rows included). Bad input on
// one rank makes every rank throw the same error. Only CHECKs here: a REQUIRE failing on one rank
// would leave the others waiting in the next collective call.
#include <random>
#include <string>

#include "headwise/distributed/ring_attention.hpp"  // and <mpi.h>
#include "headwise/io/llama.hpp"
#include "headwise/variants/alibi.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/matchers.hpp"
#include "support/random.hpp"

using namespace headwise;
using headwise_test::IsNear;
using headwise_test::tolerance;

namespace {

int rank_of_world() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int ranks_of_world() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/// Where rank r's block starts in n rows: even blocks, or uneven ones where rank r holds a share
/// proportional to r (rank 0 holds nothing).
Index block_start(Index n, int r, int ranks, bool even) {
  if (even) return n * r / ranks;
  return ranks == 1 ? 0 : n * r * (r - 1) / (Index(ranks) * (ranks - 1));
}

struct Block {
  Index first, rows;
};
Block my_block(Index n, bool even) {
  const int r = rank_of_world(), p = ranks_of_world();
  const Index first = block_start(n, r, p, even), end = block_start(n, r + 1, p, even);
  return {first, end - first};
}

template <class Scalar>
constexpr double merge_tolerance() {
  return std::is_same<Scalar, float>::value ? 1e-6 : 1e-14;
}

AttentionOptions options_named(const std::string& name, Index heads) {
  AttentionOptions o;
  if (name == "bidirectional") o.causal = false;
  if (name == "window") o.window = 23;
  if (name == "alibi+softcap") o.alibi_slopes = alibi_slopes(heads), o.softcap = 3.0;
  if (name == "varlen") o.cu_seqlens = {0, 40, 41, 101};
  if (name == "sinks") o.sinks = Vector<double>::LinSpaced(heads, -2.0, 3.0);
  return o;
}

}  // namespace

TEMPLATE_TEST_CASE("ring attention: each rank's rows equal the single-process call", "[ring]", float, double) {
  const std::string name = GENERATE(as<std::string>{}, "causal", "bidirectional", "window", "alibi+softcap", "varlen",
                                     "sinks");
  const Index n_kv_heads = GENERATE(4, 2);
  const bool even = GENERATE(true, false);
  CAPTURE(name, n_kv_heads, even, rank_of_world(), ranks_of_world());
  constexpr Index H = 4, d = 16, n = 101;
  std::mt19937 rng(static_cast<unsigned>(name.size() * 13 + n_kv_heads));  // the same sequence on every rank
  const Matrix<TestType> q = headwise_test::random_matrix<TestType>(n, H * d, rng);
  const Matrix<TestType> k = headwise_test::random_matrix<TestType>(n, n_kv_heads * d, rng);
  const Matrix<TestType> v = headwise_test::random_matrix<TestType>(n, n_kv_heads * d, rng);
  const AttentionOptions options = options_named(name, H);
  AttentionCall call;
  call.heads = {H, n_kv_heads}, call.options = &options, call.logsumexp = true;
  const AttentionResult<TestType> whole = attend<TestType>(q, k, v, call);

  const Block b = my_block(n, even);
  CHECK(distributed::ring_layout(MPI_COMM_WORLD, b.rows).first() == b.first);
  AttentionCall ring;
  ring.heads = {H, n_kv_heads}, ring.options = &options;
  const PartialAttention<TestType> mine = distributed::ring_attention<TestType>(
      MPI_COMM_WORLD, q.middleRows(b.first, b.rows), k.middleRows(b.first, b.rows), v.middleRows(b.first, b.rows), ring);
  CHECK_THAT(headwise_test::as_double(mine.z),
             IsNear(headwise_test::as_double(whole.z.middleRows(b.first, b.rows)), merge_tolerance<TestType>()));
  CHECK_THAT(headwise_test::as_double(mine.logsumexp),
             IsNear(headwise_test::as_double(whole.logsumexp.middleCols(b.first, b.rows)), merge_tolerance<TestType>()));
}

TEMPLATE_TEST_CASE("ring forward: Llama, Qwen2 and Mistral layers split across ranks, as PyTorch computes them",
                   "[ring][fixture]", float, double) {
  const std::string folder = GENERATE(as<std::string>{}, "llama-tiny", "qwen2-tiny", "mistral-tiny");
  const bool even = GENERATE(true, false);
  CAPTURE(folder, even, rank_of_world(), ranks_of_world());
  const auto layers = io::load_llama_attention_layers<TestType>(headwise_test::data_path(folder));
  const io::SafetensorsFile ref = headwise_test::load_fixture(folder + "/attention-reference.safetensors");
  for (std::size_t l = 0; l < layers.size(); ++l) {
    CAPTURE(l);
    const std::string p = "layers." + std::to_string(l) + ".attn.";
    const Matrix<TestType> x = ref.matrix<TestType>(p + "input");
    const Matrix<double> expected = ref.matrix<double>(p + "output.f64");
    const Block b = my_block(x.rows(), even);
    const Matrix<TestType> mine = distributed::ring_forward<TestType>(MPI_COMM_WORLD, layers[l], x.middleRows(b.first, b.rows));
    CHECK_THAT(headwise_test::as_double(mine), IsNear(expected.middleRows(b.first, b.rows), tolerance<TestType>()));
    const Matrix<TestType> single = layers[l].forward(x);
    CHECK_THAT(headwise_test::as_double(mine), IsNear(headwise_test::as_double(single.middleRows(b.first, b.rows)),
                                                      merge_tolerance<TestType>()));
  }
}

TEST_CASE("ring attention: bad input on one rank is refused by every rank, by name", "[ring][errors]") {
  const int rank = rank_of_world(), last = ranks_of_world() - 1;
  std::mt19937 rng(4);
  Matrix<double> q = headwise_test::random_matrix<double>(6, 8, rng);
  const Matrix<double> kv = headwise_test::random_matrix<double>(6, 8, rng);
  const auto call = [&](const Matrix<double>& queries, const AttentionOptions& o = {}, Index heads = 2) {
    AttentionCall ring;
    ring.heads = {heads, 2}, ring.options = &o;
    return distributed::ring_attention<double>(MPI_COMM_WORLD, queries, kv, kv, ring);
  };
  // A NaN in the last rank's queries: every rank hears of it, with the rank's name.
  Matrix<double> bad = q;
  if (rank == last) bad(2, 3) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(call(bad), "headwise: ring_attention: q, k and v must be finite (on rank " + std::to_string(last) + ")");
  // Options the ring cannot split.
  AttentionOptions masked;
  masked.key_valid = Eigen::Array<bool, Eigen::Dynamic, 1>::Constant(6, true);
  CHECK_THROWS_WITH(call(q, masked), "headwise: ring_attention: a per-element mask, bias or key_valid cannot be split "
                                     "across ranks; use causal, window or cu_seqlens (on rank 0)");
  AttentionOptions shifted;
  shifted.first_key_position = 3;
  CHECK_THROWS_WITH(call(q, shifted), Catch::Contains("first_query_position and first_key_position come from the ranks"));
  // Head counts that do not fit, and widths that differ between ranks.
  CHECK_THROWS_WITH(call(q, {}, 3), Catch::Contains("n_heads = 3 must be a positive multiple of n_kv_heads = 2"));
  if (ranks_of_world() > 1) {
    const Matrix<double> wider = headwise_test::random_matrix<double>(6, rank == last ? 16 : 8, rng);
    const Matrix<double> keys = rank == last ? Matrix<double>(kv.replicate(1, 2)) : kv;
    AttentionCall two;
    two.heads = {2, 2};
    CHECK_THROWS_WITH(distributed::ring_attention<double>(MPI_COMM_WORLD, wider, keys, kv, two),
                      "headwise: ring attention: the width of q differs between ranks (from 8 to 16)");
  }
  // And after all that, a good call still runs: no rank was left behind.
  CHECK(call(q).z.rows() == 6);
}

// Issue 18, stress finding 10: ranks that made different calls got wrong rows, not an error.
TEST_CASE("ring attention: ranks that disagree on the call are refused by every rank, by name", "[ring][errors]") {
  const int rank = rank_of_world(), ranks = ranks_of_world(), last = ranks - 1;
  std::mt19937 rng(5);
  const Matrix<double> q = headwise_test::random_matrix<double>(6, 8, rng);
  const Matrix<double> kv = headwise_test::random_matrix<double>(6, 8, rng);
  const auto call = [&](const AttentionOptions& o, Index heads = 2, Index kv_heads = 2) {
    AttentionCall ring;
    ring.heads = {heads, kv_heads}, ring.options = &o;
    return distributed::ring_attention<double>(MPI_COMM_WORLD, q, kv, kv, ring);
  };
  // cu_seqlens past the sequence: every rank holds 6 rows.
  AttentionOptions past;
  past.cu_seqlens = {0, 6 * Index(ranks) + 1};
  CHECK_THROWS_WITH(call(past), "headwise: ring_attention: cu_seqlens must end at the sequence's length, " +
                                    std::to_string(6 * ranks) + " rows over all ranks, got " + std::to_string(6 * ranks + 1) +
                                    " (on rank 0)");
  if (ranks == 1) return;
  const bool odd_one = rank == last;
  AttentionOptions o;
  o.causal = !odd_one;
  CHECK_THROWS_WITH(call(o), "headwise: ring attention: causal differs between ranks (from 0 to 1)");
  o = {};
  if (odd_one) o.window = 3;
  CHECK_THROWS_WITH(call(o), "headwise: ring attention: window differs between ranks (from -1 to 3)");
  o = {};
  o.cu_seqlens = {0, odd_one ? 4 : 5, 6 * Index(ranks)};
  CHECK_THROWS_WITH(call(o), "headwise: ring attention: cu_seqlens differs between ranks (entry 1)");
  o = {};
  o.sinks = Vector<double>::Constant(2, odd_one ? 0.5 : 0.25);
  CHECK_THROWS_WITH(call(o), Catch::Contains("sinks differs between ranks"));
  o = {};
  o.softcap = odd_one ? 30.0 : 50.0;
  CHECK_THROWS_WITH(call(o), Catch::Contains("softcap differs between ranks"));
  // The same widths, another split into heads: 2 heads of 4 against 1 of 8.
  CHECK_THROWS_WITH(call({}, odd_one ? 1 : 2, odd_one ? 1 : 2),
                    "headwise: ring attention: the head split (n_heads, n_kv_heads) differs between ranks (entry 0)");
  CHECK(call({}).z.rows() == 6);  // no rank was left behind
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int failed = headwise_test::run_catch_session(argc, argv);
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any != 0 ? 1 : 0;
}
