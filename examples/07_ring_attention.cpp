// Example 7: one attention layer over a sequence split across processes (ring attention, MPI).
//
//   mpirun -np 3 07_ring_attention [checkpoint folder] [tokens]
//
// Every rank loads the layer (layer 0 of a Llama-family checkpoint, by default the tiny Llama of
// the tests) and holds a contiguous block of the sequence's rows; the keys and values travel around
// the ring of ranks and each rank ends with its rows of the layer's output
// (headwise/distributed/ring_attention.hpp). Checked twice: on the recorded 33-token input against
// PyTorch's output, and on `tokens` random rows (default 8192) against the single-process forward
// on rank 0 (up to 32768 tokens; each rank makes only its own rows). On several machines, list
// them in a host file and start the same command there:
//   mpirun -np 8 --hostfile hosts 07_ring_attention /shared/model 1000000
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <headwise/distributed/ring_attention.hpp>
#include <headwise/headwise.hpp>
#include <headwise/io/llama.hpp>

using headwise::Index;
using headwise::Matrix;
namespace distributed = headwise::distributed;

namespace {

/// This rank's rows of n: contiguous blocks as even as they can be.
std::pair<Index, Index> my_rows(Index n, int rank, int ranks) {
  return {n * rank / ranks, n * (rank + 1) / ranks - n * rank / ranks};
}

/// The whole output on rank 0, gathered from every rank's block (empty elsewhere).
Matrix<float> gather_rows(const Matrix<float>& mine, Index n, int rank, int ranks) {
  std::vector<int> counts(static_cast<std::size_t>(ranks)), starts(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const auto [first, rows] = my_rows(n, r, ranks);
    counts[static_cast<std::size_t>(r)] = static_cast<int>(rows * mine.cols());
    starts[static_cast<std::size_t>(r)] = static_cast<int>(first * mine.cols());
  }
  Matrix<float> all(rank == 0 ? n : 0, mine.cols());
  MPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(), counts.data(), starts.data(), MPI_FLOAT,
              0, MPI_COMM_WORLD);
  return all;
}

/// Rows [first, first + rows) of a random sequence of width d: row t drawn from its own seed, so
/// that each rank makes only its own rows and every rank agrees on them.
Matrix<float> random_rows(Index first, Index rows, Index d) {
  Matrix<float> x(rows, d);
  for (Index t = 0; t < rows; ++t) {
    std::mt19937 rng(static_cast<unsigned>(first + t));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (Index c = 0; c < d; ++c) x(t, c) = normal(rng);
  }
  return x;
}

/// max |a - b| / max |b|.
double relative_difference(const Matrix<double>& a, const Matrix<double>& b) {
  return (a - b).cwiseAbs().maxCoeff() / std::max(b.cwiseAbs().maxCoeff(), 1e-300);
}

/// The recorded input against PyTorch: each rank's worst relative error, the largest reported.
bool check_recorded(const headwise::MultiHeadAttention<float>& layer, const std::string& folder, int rank, int ranks) {
  const std::string reference = folder + "/attention-reference.safetensors";
  if (!std::ifstream(reference).good()) return true;
  const auto file = headwise::io::SafetensorsFile::open(reference);
  const Matrix<float> x = file.matrix<float>("layers.0.attn.input");
  const Matrix<double> expected = file.matrix<double>("layers.0.attn.output.f64");
  const auto [first, rows] = my_rows(x.rows(), rank, ranks);
  const Matrix<float> mine = distributed::ring_forward<float>(MPI_COMM_WORLD, layer, x.middleRows(first, rows));
  double error = rows ? (mine.cast<double>() - expected.middleRows(first, rows)).cwiseAbs().maxCoeff() : 0.0, worst = 0;
  MPI_Reduce(&error, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  const bool ok = worst <= 1e-5 * expected.cwiseAbs().maxCoeff();
  if (rank == 0)
    std::printf("recorded input, %ld tokens: max |ring - PyTorch| / max |PyTorch| = %.2e: %s\n", long(x.rows()),
                worst / expected.cwiseAbs().maxCoeff(), ok ? "matches" : "DIFFERS");
  return ok;
}

/// `n` random tokens: the ring's time, what each step sends, and (up to 32768 tokens, which one
/// process can check) the gathered output against the single-process forward on rank 0.
bool check_long(const headwise::MultiHeadAttention<float>& layer, Index n, int rank, int ranks) {
  const auto [first, rows] = my_rows(n, rank, ranks);
  const Matrix<float> x_mine = random_rows(first, rows, layer.d_model());  // this rank's rows only
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  const Matrix<float> mine = distributed::ring_forward<float>(MPI_COMM_WORLD, layer, x_mine);
  const double seconds = MPI_Wtime() - start;
  double slowest = 0;
  MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  const bool checked = n <= 32768;
  const Matrix<float> all = checked ? gather_rows(mine, n, rank, ranks) : Matrix<float>();
  if (rank != 0) return true;
  const double block_mb = double(n) / ranks * 2.0 * double(layer.n_kv_heads() * layer.d_head()) * sizeof(float) / 1e6;
  std::printf("random input, %ld tokens: %.1f ms on the slowest rank; blocks of keys and values move %d time(s) "
              "around the ring, ~%ld tokens (%.2f MB) each\n",
              long(n), 1e3 * slowest, ranks - 1, long(n / ranks), block_mb);
  if (!checked) {
    std::printf("(not checked against a single process: %ld tokens are too many for one)\n", long(n));
    return true;
  }
  const Matrix<float> single = layer.forward(random_rows(0, n, layer.d_model()));
  const double difference = relative_difference(all.cast<double>(), single.cast<double>());
  const bool ok = difference <= 1e-6;
  std::printf("max |ring - single process| / max |single process| = %.2e: %s\n", difference, ok ? "matches" : "DIFFERS");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::string folder = argc > 1 ? argv[1] : HEADWISE_EXAMPLE_DATA_DIR "/llama-tiny";
  const Index tokens = argc > 2 ? std::stol(argv[2]) : 8192;
  int failed = 0;
  try {
    const auto layer = headwise::io::load_llama_attention<float>(folder, 0);
    if (rank == 0)
      std::printf("ring attention over %d ranks: %s, layer 0: %ld query heads, %ld key/value heads of %ld\n", ranks,
                  folder.c_str(), long(layer.n_heads()), long(layer.n_kv_heads()), long(layer.d_head()));
    for (int r = 0; r < ranks; ++r) {  // in rank order
      if (r == rank) {
        const auto [first, rows] = my_rows(tokens, rank, ranks);
        std::printf("  rank %d holds tokens [%ld, %ld)\n", rank, long(first), long(first + rows));
        std::fflush(stdout);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    const bool recorded = check_recorded(layer, folder, rank, ranks);
    failed = !(check_long(layer, tokens, rank, ranks) && recorded);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    failed = 1;
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
