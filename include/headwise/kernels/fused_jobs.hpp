// The fused kernel's jobs (kernels/fused_attention.hpp is the loop they run): one call's (head,
// query tile) jobs on headwise's threads (detail/parallel.hpp), head by head; a call of one query tile split by key
// (split-key decoding: (key/value head, shard) jobs, then each head's shards merged in key
// order); a batch of calls as one job list with a shared prefix attended once (cascade); and the
// dispatcher, run_fused, which picks the kernel's stored type once per call. Every job
// list gives each call the bits it gets alone, on any thread count.
#pragma once

#include <algorithm>
#include <optional>
#include <type_traits>
#include <vector>

#include "headwise/detail/parallel.hpp"
#include "headwise/kernels/fused_attention.hpp"
#include "headwise/kernels/kv_blocks.hpp"
#include "headwise/kernels/online_softmax_state.hpp"
#include "headwise/kv_storage.hpp"
#include "headwise/score_rule.hpp"
#include "headwise/types.hpp"

namespace headwise {
namespace detail {

/// Several calls run as one job list (batched decoding: a sequence a call, each at its own length),
/// optionally with a shared prefix: a call over the prefix's keys whose query rows are the sharing
/// calls' rows stacked (call c's from prefix_rows[c], or -1 where it does not share; it then
/// attends its keys from first_key = the prefix's end). Every call gets the bits it gets alone.
template <class Scalar>
struct FusedBatch {
  std::vector<const FusedCall<Scalar>*> calls;
  const FusedCall<Scalar>* prefix = nullptr;
  std::vector<Index> prefix_rows;
  bool split_keys = true;
};

/// The most memory split-key decoding may hold for one call's shards' states (a decoding step at
/// 1M tokens of context, 12 heads: 3 MiB; a 128-token chunk there would need 400 MiB and runs its
/// shards in turn instead, with the same bits).
constexpr double split_key_budget_bytes = 64.0 * (1 << 20);

/// True if `call` runs split by key: one query tile over several shards whose states fit the budget.
template <class Scalar>
ShardSpan split_shards(const FusedCall<Scalar>& call, bool split_keys) {
  if (!split_keys || call.n_q() > call.tq) return {};
  const ShardSpan shards = shards_of(call, call.seen(0, call.n_q()));
  const double partial_bytes = double(call.n_heads) * double(shards.count) * double(call.n_q()) *
                               double(call.dv_padded() + (call.statistics ? 7 : 2)) * sizeof(Scalar);
  return shards.count > 1 && partial_bytes <= split_key_budget_bytes ? shards : ShardSpan{};
}

/// A job of run_fused_batch: a (head, query tile) of a call run through its shards in turn
/// (shards.count == 0), or a (key/value head, shard) of a call split by key; call -1 is the prefix.
struct BatchJob {
  Index call, head, first_row, shard;
};

/// What run_fused_batch does, planned and allocated before its parallel loops: each call split by
/// key or not, the split calls' shards' states, the prefix's states, the jobs of each phase.
template <class Scalar>
struct BatchPlan {
  std::vector<ShardSpan> split;                     // per call: its shards if split by key, else none
  std::vector<RowStateStore<Scalar>> partial;       // per split call: head h, shard s at h shards + s
  RowStateStore<Scalar> prefix_states;              // the prefix's rows, head h
  std::vector<BatchJob> prefix_jobs, jobs, merges;  // merges: (call, head) of the split calls
  const FusedCall<Scalar>* widest = nullptr;        // the call of the largest key tile (scratch is sized by it)
  Index rows = 0;                                   // the most rows of a query tile

  explicit BatchPlan(const FusedBatch<Scalar>& batch) {
    constexpr const char* where = "attend";
    const std::size_t n_calls = batch.calls.size();
    split.resize(n_calls), partial.resize(n_calls);
    for (std::size_t c = 0; c < n_calls; ++c) {
      const FusedCall<Scalar>& call = *batch.calls[c];
      if (call.logsumexp) call.logsumexp->resize(call.n_heads, call.n_q());
      if (call.statistics) call.statistics->resize(call.n_heads, call.n_q());
      note_tiles(call);
      const ShardSpan shards = split[c] = split_shards(call, batch.split_keys);
      const Index id = static_cast<Index>(c);
      if (shards.count == 0) {
        for (const Index i0 : query_tiles_by_cost(call.n_q(), call.tq))
          for (Index h = 0; h < call.n_heads; ++h) jobs.push_back({id, h, i0, -1});
        continue;
      }
      partial[c].allocate(call.n_heads * shards.count, call.n_q(), call.dv_padded(), call.statistics != nullptr, where);
      for (Index g = 0; g < call.kv.n_kv_heads(); ++g)
        for (Index s = 0; s < shards.count; ++s) jobs.push_back({id, g, 0, s});
      for (Index h = 0; h < call.n_heads; ++h) merges.push_back({id, h, 0, -1});
    }
    if (!batch.prefix) return;
    const FusedCall<Scalar>& prefix = *batch.prefix;
    note_tiles(prefix);
    prefix_states.allocate(prefix.n_heads, prefix.n_q(), prefix.dv_padded(), false, where);
    for (Index g = 0; g < prefix.kv.n_kv_heads(); ++g)
      for (Index i0 = 0; i0 < prefix.n_q(); i0 += prefix.tq) prefix_jobs.push_back({-1, g, i0, -1});
  }
  void note_tiles(const FusedCall<Scalar>& call) {
    if (!widest || call.tk > widest->tk) widest = &call;
    rows = std::max(rows, std::min(call.tq, call.n_q()));
  }
  /// The state over the prefix of call c's rows from `row` on, head h; none where c does not share it.
  std::optional<RowState<Scalar>> start_of(const FusedBatch<Scalar>& batch, Index c, Index h, Index row) {
    if (!batch.prefix || batch.prefix_rows[static_cast<std::size_t>(c)] < 0) return std::nullopt;
    return rows_from(prefix_states[h], batch.prefix_rows[static_cast<std::size_t>(c)] + row, batch.prefix->dv_padded());
  }
};

/// A job of the batch's second phase: a (head, query tile) through its shards in turn (from the
/// prefix's state where the call shares it), or a (key/value head, shard) of a split call.
template <class Stored, class Scalar, class Clock>
void run_batch_job(const FusedBatch<Scalar>& batch, BatchPlan<Scalar>& plan, const BatchJob& job, FusedScratch<Scalar, Stored>& w,
                   Clock& clock) {
  const FusedCall<Scalar>& call = *batch.calls[static_cast<std::size_t>(job.call)];
  const ShardSpan shards = plan.split[static_cast<std::size_t>(job.call)];
  if (shards.count == 0) {
    const std::optional<RowState<Scalar>> start = plan.start_of(batch, job.call, job.head, job.first_row);
    return attend_query_tile<Stored>(call, w, job.first_row, job.head, clock, start ? &*start : nullptr);
  }
  const KeyRange seen = call.seen(0, call.n_q());
  for (Index h = job.head * call.group; h < (job.head + 1) * call.group; ++h) {
    load_query_tile<Stored>(call, w, 0, call.n_q(), h, clock);
    attend_key_shard<Stored>(call, w, plan.partial[static_cast<std::size_t>(job.call)][h * shards.count + job.shard], 0, call.n_q(),
                             h, shard_keys(call, seen, shards.first + job.shard), clock);
  }
}

/// The third phase for head h of split call c: its shards' states merged in key order (into the
/// prefix's state where it shares one), then normalised.
template <class Scalar>
void merge_split_head(const FusedBatch<Scalar>& batch, BatchPlan<Scalar>& plan, Index c, Index h) {
  const FusedCall<Scalar>& call = *batch.calls[static_cast<std::size_t>(c)];
  const Index count = plan.split[static_cast<std::size_t>(c)].count;
  auto& states = plan.partial[static_cast<std::size_t>(c)];
  const std::optional<RowState<Scalar>> start = plan.start_of(batch, c, h, 0);
  const RowState<Scalar> merged = start ? *start : states[h * count];
  for (Index s = start ? 0 : 1; s < count; ++s) merge_states(merged, states[h * count + s], call.n_q(), call.dv_padded());
  normalise_rows(call, merged, 0, call.n_q(), h);
}

/// Runs a batch in three phases, each one parallel loop: the shared prefix's (key/value head,
/// query tile) jobs, each through the prefix's shards in turn into the prefix's states; then every
/// call's jobs (run_batch_job); then each split call's heads merge and normalise. The same states
/// meet in the same merges as in each call alone. Returns each thread's clock.
template <class Stored, class Scalar, class Clock>
std::vector<Clock> run_fused_batch(const FusedBatch<Scalar>& batch, int threads) {
  constexpr Index R = TileShape<Scalar>::rows;
  BatchPlan<Scalar> plan(batch);
  const Index n_jobs = static_cast<Index>(plan.jobs.size()), n_prefix = static_cast<Index>(plan.prefix_jobs.size());
  double work = batch.prefix ? batch.prefix->work() : 0.0;
  for (const FusedCall<Scalar>* call : batch.calls) work += call->work();
  threads = static_cast<int>(std::clamp<Index>(std::max(n_jobs, n_prefix), 1, threads_for(work, threads)));
  std::vector<FusedScratch<Scalar, Stored>> scratch(static_cast<std::size_t>(threads));
  if (plan.widest) for (auto& w : scratch) w.allocate(*plan.widest, (plan.rows + R - 1) / R * R);
  std::vector<Clock> clocks(static_cast<std::size_t>(threads));
  parallel_for<Schedule::next_free>(threads, n_prefix, [&](Index j) {
    const auto t = static_cast<std::size_t>(this_thread());
    const FusedCall<Scalar>& prefix = *batch.prefix;
    const BatchJob job = plan.prefix_jobs[static_cast<std::size_t>(j)];
    const Index n = std::min(prefix.tq, prefix.n_q() - job.first_row);
    for (Index h = job.head * prefix.group; h < (job.head + 1) * prefix.group; ++h) {
      load_query_tile<Stored>(prefix, scratch[t], job.first_row, n, h, clocks[t]);
      const RowState<Scalar> into = rows_from(plan.prefix_states[h], job.first_row, prefix.dv_padded());
      attend_shards<Stored>(prefix, scratch[t], into, /*continues=*/false, job.first_row, n, h, clocks[t]);
    }
  });
  // Shrinking runs of consecutive jobs, each thread streaming consecutive shards of a head (handing
  // out single jobs shard-major was slower), shorter towards the end so that no thread is left
  // with a long run while the other waits (fixed runs leave a batch of long sequences slower on
  // two threads than its calls one by one) (bench/RESULTS.md, "Tuning constants").
  parallel_for<Schedule::shrinking>(threads, n_jobs, [&](Index j) {
    const auto t = static_cast<std::size_t>(this_thread());
    run_batch_job<Stored>(batch, plan, plan.jobs[static_cast<std::size_t>(j)], scratch[t], clocks[t]);
  });
  parallel_for<Schedule::by_part>(threads, static_cast<Index>(plan.merges.size()), [&](Index m) {
    clocks[static_cast<std::size_t>(this_thread())].enter(FusedPhase::normalise);
    merge_split_head(batch, plan, plan.merges[static_cast<std::size_t>(m)].call, plan.merges[static_cast<std::size_t>(m)].head);
  });
  return clocks;
}

/// Runs every job of `call` on `threads` threads; returns each thread's clock. A call of one query
/// tile over several shards runs split by key (a batch of one call: run_fused_batch, unless the tiles say not to or
/// the shards' states would exceed split_key_budget_bytes); others run (head, query tile) jobs,
/// head by head, each head's longest first. Scratch is allocated before the loop; an
/// exception in a job reaches the caller.
template <class Stored, class Scalar, class Clock>
std::vector<Clock> run_fused_jobs(const FusedCall<Scalar>& call, int threads, bool split_keys = true) {
  constexpr Index R = TileShape<Scalar>::rows;
  if (call.logsumexp) call.logsumexp->resize(call.n_heads, call.n_q());
  if (call.statistics) call.statistics->resize(call.n_heads, call.n_q());
  if (split_shards(call, split_keys).count) {  // split-key decoding
    FusedBatch<Scalar> one;
    one.calls = {&call};
    return run_fused_batch<Stored, Scalar, Clock>(one, threads);
  }
  const std::vector<Index> tile_starts = query_tiles_by_cost(call.n_q(), call.tq);
  const Index n_jobs = static_cast<Index>(tile_starts.size()) * call.n_heads;
  threads = static_cast<int>(std::clamp<Index>(n_jobs, 1, threads_for(call.work(), threads)));
  std::vector<FusedScratch<Scalar, Stored>> scratch(static_cast<std::size_t>(threads));
  for (auto& w : scratch) w.allocate(call, (call.tq + R - 1) / R * R);
  std::vector<Clock> clocks(static_cast<std::size_t>(threads));

  // Job j: head j / n_tiles, tile j % n_tiles (most expensive first). Head by head, a thread's
  // next job mostly reads the keys and values its last one read (from its own cache); and thread
  // t starts on the key/value heads that PackedKeysValues::append gave thread t to pack (the same
  // split), so the packed keys and values it reads are in its own cache, not the other core's.
  // Faster than one queue of jobs in tile-major order (bench/RESULTS.md, "Tuning constants").
  const Index n_tiles = static_cast<Index>(tile_starts.size());
  JobRuns runs(call.kv.n_kv_heads(), call.group * n_tiles, threads);
  parallel_region(threads, [&](int t) {
    runs.run(t, [&](Index job) {
      attend_query_tile<Stored>(call, scratch[static_cast<std::size_t>(t)], tile_starts[static_cast<std::size_t>(job % n_tiles)],
                                job / n_tiles, clocks[static_cast<std::size_t>(t)]);
    });
  });
  return clocks;
}

/// Runs `call` with the stored type of its keys and values (among Reach's) chosen here, once: the
/// kernel's one compile-time choice. Returns each thread's observer.
template <class Scalar, class Observer = NoPhaseObserver, class Reach = AnyStorage>
std::vector<Observer> run_fused(const FusedCall<Scalar>& call, int threads, bool split_keys) {
  return with_kernel_type<Scalar, Reach>(call.kv.storage(), call.kv.format().arithmetic, [&](auto tag) {
    using Stored = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    return run_fused_jobs<Stored, Scalar, Observer>(call, threads, split_keys);
  });
}

}  // namespace detail
}  // namespace headwise
