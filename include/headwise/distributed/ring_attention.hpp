// Sequence-parallel attention across processes with MPI (ring attention). Each of P ranks holds a
// contiguous block of the sequence's rows of Q, K and V (rank r the rows after rank r - 1's). The
// K/V blocks travel around the ring, rank r sending to r + 1 and receiving from r - 1; every rank
// attends its queries to each block it holds (partial_attention.hpp, at the block's absolute
// positions, so the causal mask, windows, packed sequences and ALiBi see the whole sequence) and
// merges the partials by logsumexp. After P - 1 transfers each rank holds its rows of the attention
// over the whole sequence, and no rank ever held more than two K/V blocks. The next block's
// transfer (MPI_Isend / MPI_Irecv) runs while the current one is attended.
//
// Optional: this header needs MPI (CMake: find_package(MPI COMPONENTS CXX), link MPI::MPI_CXX);
// nothing else in headwise includes it. Calls are collective: every rank of `comm` calls with its
// own block. An input one rank refuses makes every rank throw the same std::invalid_argument (no
// rank is left waiting); an MPI failure throws std::runtime_error. The communicator is duplicated
// for the call, so its messages never meet the caller's.
#pragma once

// The C API only: Open MPI's and MPICH's C++ bindings (removed from MPI 3) are not wanted.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/multi_head_attention.hpp"
#include "headwise/partial_attention.hpp"

namespace headwise::distributed {

/// Which rows of the sequence each rank holds: rank r rows [first_row[r], first_row[r + 1]).
struct RingLayout {
  int rank = 0, ranks = 1;
  std::vector<Index> first_row;  // ranks + 1 entries
  Index rows(int r) const { return first_row[static_cast<std::size_t>(r) + 1] - first_row[static_cast<std::size_t>(r)]; }
  Index first() const { return first_row[static_cast<std::size_t>(rank)]; }
  Index total() const { return first_row.back(); }
};

namespace detail {

/// Throws std::runtime_error naming the MPI call unless it succeeded.
inline void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string("headwise: ring attention: ") + call +
                           " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

/// A duplicate of the caller's communicator that returns errors instead of aborting; freed at
/// the end of the call.
class Communicator {
 public:
  explicit Communicator(MPI_Comm comm) {
    check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~Communicator() { MPI_Comm_free(&comm_); }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

/// Runs `body` on every rank; if it throws on any, every rank throws std::invalid_argument with
/// the message of the lowest rank that failed, followed by that rank.
template <class Body>
void agree(const Communicator& comm, Body&& body) {
  std::string message;
  try {
    std::forward<Body>(body)();
  } catch (const std::exception& e) {
    message = e.what();
    if (message.empty()) message = "an exception without a message";
  }
  int failed = message.empty() ? comm.size() : comm.rank(), first_failed = comm.size();
  check_mpi(MPI_Allreduce(&failed, &first_failed, 1, MPI_INT, MPI_MIN, comm.get()), "MPI_Allreduce");
  if (first_failed == comm.size()) return;
  int length = static_cast<int>(message.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT, first_failed, comm.get()), "MPI_Bcast");
  message.resize(static_cast<std::size_t>(length));
  check_mpi(MPI_Bcast(message.data(), length, MPI_CHAR, first_failed, comm.get()), "MPI_Bcast");
  throw std::invalid_argument(message + " (on rank " + std::to_string(first_failed) + ")");
}

/// Every rank's number of rows, gathered into a layout.
inline RingLayout gather_layout(const Communicator& comm, Index rows) {
  RingLayout layout;
  layout.rank = comm.rank(), layout.ranks = comm.size();
  std::vector<long long> all(static_cast<std::size_t>(comm.size()));
  long long mine = rows;
  check_mpi(MPI_Allgather(&mine, 1, MPI_LONG_LONG, all.data(), 1, MPI_LONG_LONG, comm.get()), "MPI_Allgather");
  layout.first_row.assign(1, 0);
  for (long long r : all) layout.first_row.push_back(layout.first_row.back() + static_cast<Index>(r));
  return layout;
}

/// The same value on every rank, or an error naming what differs.
inline void require_same(const Communicator& comm, long long value, const char* what) {
  long long low = 0, high = 0;
  check_mpi(MPI_Allreduce(&value, &low, 1, MPI_LONG_LONG, MPI_MIN, comm.get()), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&value, &high, 1, MPI_LONG_LONG, MPI_MAX, comm.get()), "MPI_Allreduce");
  if (low != high)
    throw std::invalid_argument("headwise: ring attention: " + std::string(what) + " differs between ranks (from " +
                                std::to_string(low) + " to " + std::to_string(high) + ")");
}

/// The same values on every rank (as many, and equal entry by entry), or an error naming what
/// differs. Doubles are compared by their bits.
inline void require_same(const Communicator& comm, const std::vector<long long>& values, const char* what) {
  require_same(comm, static_cast<long long>(values.size()), what);
  std::vector<long long> low(values.size()), high(values.size());
  const int count = static_cast<int>(values.size());
  check_mpi(MPI_Allreduce(values.data(), low.data(), count, MPI_LONG_LONG, MPI_MIN, comm.get()), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(values.data(), high.data(), count, MPI_LONG_LONG, MPI_MAX, comm.get()), "MPI_Allreduce");
  for (std::size_t i = 0; i < values.size(); ++i)
    if (low[i] != high[i])
      throw std::invalid_argument("headwise: ring attention: " + std::string(what) + " differs between ranks (entry " +
                                  std::to_string(i) + ")");
}

inline long long bits_of(double x) {
  long long bits = 0;
  static_assert(sizeof bits == sizeof x, "64-bit long long");
  std::memcpy(&bits, &x, sizeof x);
  return bits;
}
inline std::vector<long long> bits_of(const Vector<double>& values) {
  std::vector<long long> bits;
  for (Index i = 0; i < values.size(); ++i) bits.push_back(bits_of(values(i)));
  return bits;
}

/// Every rank must make the same call: the head split and every option that decides which keys a
/// query sees or what its scores become. (Only the rows differ between ranks.)
inline void require_same_call(const Communicator& comm, Index n_heads, Index n_kv_heads, const AttentionOptions& o) {
  require_same(comm, {static_cast<long long>(n_heads), static_cast<long long>(n_kv_heads)}, "the head split (n_heads, n_kv_heads)");
  require_same(comm, {o.causal ? 1LL : 0LL}, "causal");
  require_same(comm, {o.window ? static_cast<long long>(*o.window) : -1LL}, "window");
  require_same(comm, {o.divisor ? bits_of(*o.divisor) : -1LL}, "divisor");
  require_same(comm, {o.softcap ? bits_of(*o.softcap) : -1LL}, "softcap");
  require_same(comm, std::vector<long long>(o.cu_seqlens.begin(), o.cu_seqlens.end()), "cu_seqlens");
  require_same(comm, bits_of(o.sinks), "sinks");
  require_same(comm, bits_of(o.alibi_slopes), "alibi_slopes");
}

template <class Scalar>
MPI_Datatype mpi_scalar() {
  static_assert(std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value, "float or double");
  return std::is_same<Scalar, float>::value ? MPI_FLOAT : MPI_DOUBLE;
}

/// One matrix row as an MPI datatype (messages count rows, so a block may exceed 2^31 entries).
class RowType {
 public:
  RowType(Index cols, MPI_Datatype scalar) {
    check_mpi(MPI_Type_contiguous(static_cast<int>(cols), scalar, &type_), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&type_), "MPI_Type_commit");
  }
  ~RowType() { MPI_Type_free(&type_); }
  RowType(const RowType&) = delete;
  RowType& operator=(const RowType&) = delete;
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

/// A block of keys and values in flight, and whose rows they are.
template <class Scalar>
struct KeyValueBlock {
  Matrix<Scalar> k, v;
  int owner = 0;
};

/// Checks one rank's part of a ring call (shapes, options the ring cannot split, finite values).
template <class Scalar>
void check_ring_block(const Eigen::Ref<const Matrix<Scalar>>& q, const Eigen::Ref<const Matrix<Scalar>>& k,
                      const Eigen::Ref<const Matrix<Scalar>>& v, Index n_heads, Index n_kv_heads,
                      const AttentionOptions& options) {
  constexpr const char* where = "ring_attention";
  if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    headwise::detail::invalid(where, "n_heads = ", n_heads, " must be a positive multiple of n_kv_heads = ", n_kv_heads);
  if (k.rows() != q.rows() || v.rows() != q.rows())
    headwise::detail::invalid(where, "q, k and v hold ", q.rows(), ", ", k.rows(), " and ", v.rows(),
                              " rows: a rank holds the same tokens' queries, keys and values");
  if (q.cols() % n_heads != 0 || k.cols() != n_kv_heads * (q.cols() / n_heads) || v.cols() % n_kv_heads != 0)
    headwise::detail::invalid(where, "q, k, v have ", q.cols(), ", ", k.cols(), " and ", v.cols(), " columns: not ",
                              n_heads, " query heads and ", n_kv_heads, " key/value heads");
  if (options.mask.size() != 0 || options.bias.size() != 0 || options.key_valid.size() != 0)
    headwise::detail::invalid(where, "a per-element mask, bias or key_valid cannot be split across ranks; use causal, "
                                     "window or cu_seqlens");
  if (options.first_query_position || options.first_key_position != 0)
    headwise::detail::invalid(where, "first_query_position and first_key_position come from the ranks' blocks; leave "
                                     "them unset");
  if (q.rows() > INT_MAX || k.cols() > INT_MAX || v.cols() > INT_MAX)
    headwise::detail::invalid(where, "a block of ", q.rows(), " rows of ", k.cols(), " and ", v.cols(),
                              " columns is more than an MPI message counts (2^31 - 1): use more ranks");
  for (const auto* m : {&q, &k, &v})
    if (!m->allFinite()) headwise::detail::invalid(where, "q, k and v must be finite");
}

/// The partial attention of this rank's queries to one block (sinks with the rank's own block
/// only: a sink joins one denominator), or nothing if the block lies wholly in their future.
template <class Scalar>
void attend_block(const RingLayout& layout, const Eigen::Ref<const Matrix<Scalar>>& q, const KeyValueBlock<Scalar>& block,
                  const AttentionCall& call, const AttentionOptions& options, PartialAttention<Scalar>& result) {
  const Index key_first = layout.first_row[static_cast<std::size_t>(block.owner)];
  if (options.causal && key_first >= layout.first() + q.rows()) return;
  AttentionOptions at = options;  // at this block's positions
  at.first_query_position = layout.first(), at.first_key_position = key_first;
  if (block.owner != layout.rank) at.sinks.resize(0);
  AttentionCall shard = call;
  shard.options = &at;
  merge_into(result, partial_attention<Scalar>(q, block.k, block.v, shard));
}

}  // namespace detail

/// Rows of the sequence per rank: rank r holds [first_row[r], first_row[r + 1]). Collective.
inline RingLayout ring_layout(MPI_Comm comm, Index local_rows) {
  const detail::Communicator c(comm);
  return detail::gather_layout(c, local_rows);
}

/// The attention of this rank's queries over the keys of every rank. q: (n_r, n_heads d),
/// k: (n_r, n_kv_heads d), v: (n_r, n_kv_heads d_v): rows [first_row[r], first_row[r] + n_r) of the
/// whole sequence (ring_layout). Returns this rank's Z (n_r, n_heads d_v) and logsumexp
/// (n_heads, n_r): the rows of the single-process call, up to the rounding of the merges. The
/// call's heads, options and tiles: every option partial_attention takes except per-element masks
/// and biases (mask, bias, key_valid) and the first positions. Collective over comm.
template <class Scalar>
PartialAttention<Scalar> ring_attention(MPI_Comm comm, const Eigen::Ref<const Matrix<Scalar>>& q,
                                        const Eigen::Ref<const Matrix<Scalar>>& k, const Eigen::Ref<const Matrix<Scalar>>& v,
                                        const AttentionCall& call = {}) {
  const AttentionOptions defaults;
  const AttentionOptions& options = call.options ? *call.options : defaults;
  const Index n_heads = call.heads.query, n_kv_heads = call.heads.key_value;
  const detail::Communicator c(comm);
  detail::agree(c, [&] { detail::check_ring_block<Scalar>(q, k, v, n_heads, n_kv_heads, options); });
  detail::require_same(c, q.cols(), "the width of q");
  detail::require_same(c, k.cols(), "the width of k");
  detail::require_same(c, v.cols(), "the width of v");
  detail::require_same_call(c, n_heads, n_kv_heads, options);
  const RingLayout layout = detail::gather_layout(c, q.rows());
  detail::agree(c, [&] {
    if (!options.cu_seqlens.empty() && options.cu_seqlens.back() != layout.total())
      headwise::detail::invalid("ring_attention", "cu_seqlens must end at the sequence's length, ", layout.total(),
                                " rows over all ranks, got ", options.cu_seqlens.back());
  });
  const detail::RowType key_row(k.cols(), detail::mpi_scalar<Scalar>()), value_row(v.cols(), detail::mpi_scalar<Scalar>());
  const int right = (c.rank() + 1) % c.size(), left = (c.rank() + c.size() - 1) % c.size();

  PartialAttention<Scalar> result;  // nothing seen yet: Z = 0, logsumexp = -inf
  result.z = Matrix<Scalar>::Zero(q.rows(), n_heads * (v.cols() / n_kv_heads));
  result.logsumexp = Matrix<Scalar>::Constant(n_heads, q.rows(), -std::numeric_limits<Scalar>::infinity());
  detail::KeyValueBlock<Scalar> current{k, v, c.rank()}, next;
  for (int step = 0; step < c.size(); ++step) {
    MPI_Request requests[4];
    int pending = 0;
    if (step + 1 < c.size()) {  // the next block, while this one is attended
      next.owner = (current.owner + c.size() - 1) % c.size();
      next.k.resize(layout.rows(next.owner), k.cols());
      next.v.resize(layout.rows(next.owner), v.cols());
      const int in = static_cast<int>(next.k.rows()), out = static_cast<int>(current.k.rows());  // rows < 2^31
      detail::check_mpi(MPI_Irecv(next.k.data(), in, key_row.get(), left, 0, c.get(), &requests[pending++]), "MPI_Irecv");
      detail::check_mpi(MPI_Irecv(next.v.data(), in, value_row.get(), left, 1, c.get(), &requests[pending++]), "MPI_Irecv");
      detail::check_mpi(MPI_Isend(current.k.data(), out, key_row.get(), right, 0, c.get(), &requests[pending++]), "MPI_Isend");
      detail::check_mpi(MPI_Isend(current.v.data(), out, value_row.get(), right, 1, c.get(), &requests[pending++]), "MPI_Isend");
    }
    std::exception_ptr failure;
    try {
      detail::attend_block<Scalar>(layout, q, current, call, options, result);
    } catch (...) {
      failure = std::current_exception();  // the transfers still complete, then every rank hears of it
    }
    detail::check_mpi(MPI_Waitall(pending, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
    detail::agree(c, [&] { if (failure) std::rethrow_exception(failure); });
    std::swap(current, next);
  }
  return result;
}

/// A layer's output rows for this rank's block of the sequence: x (n_r, d_model) holds rows
/// [first_row[r], first_row[r] + n_r). Q, K, V and the output projection are computed locally (rows
/// are independent), rotary positions are the rows' absolute positions, and attention runs around
/// the ring. Equal to the matching rows of layer.forward on the whole sequence up to the rounding of
/// the merges. Collective over comm.
template <class Scalar>
Matrix<Scalar> ring_forward(MPI_Comm comm, const MultiHeadAttention<Scalar>& layer, const Eigen::Ref<const Matrix<Scalar>>& x,
                            const AttentionOptions& options = {}) {
  const AttentionOptions at = layer.options_for(options);
  const Index H = layer.n_heads(), G = layer.n_kv_heads();
  Matrix<Scalar> q, k, v;
  {
    const detail::Communicator c(comm);
    const RingLayout layout = detail::gather_layout(c, x.rows());
    detail::agree(c, [&] {
      const LayerConfig& config = layer.config();
      if (config.transforms_projections() || layer.gated() || config.shares_keys_values_of)
        headwise::detail::invalid("ring_forward", "the layer has ", layer.gated() ? "an output gate" : config.shares_keys_values_of ? "no keys of its own (KV sharing)" : "a QK-norm, value norm or query scale",
                                  ", which ring attention does not compute: run forward on one process");
      const Matrix<Scalar> qkv = layer.project_qkv(x);
      const QkvLayout l = layer.layout();
      q = l.part(qkv, QkvPart::query), k = l.part(qkv, QkvPart::key), v = l.part(qkv, QkvPart::value);
      if (layer.rope()) {  // at the rows' absolute positions; LongRoPE chooses by the whole sequence's length
        const int threads = headwise::detail::thread_count(at.threads, "ring_forward");
        layer.rope()->template rotate<Scalar>(q, layout.first(), threads, layout.total());
        layer.rope()->template rotate<Scalar>(k, layout.first(), threads, layout.total());
      }
    });
  }
  AttentionCall call;
  call.heads = {H, G}, call.options = &at;
  return layer.project_heads(ring_attention<Scalar>(comm, q, k, v, call).z);
}

}  // namespace headwise::distributed
