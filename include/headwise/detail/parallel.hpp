// Internal: the OpenMP loops' helpers: how many threads, which thread, and carrying an exception
// out of a parallel region.
//
// An exception may not leave an OpenMP parallel region (the runtime calls std::terminate). Each
// loop body runs inside ExceptionCarrier::run, which keeps the first exception thrown by any
// thread; the loop's other iterations are skipped and the exception is rethrown after the region,
// on the calling thread, as if the loop had been sequential.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "headwise/detail/errors.hpp"
#include "headwise/types.hpp"

/// An OpenMP pragma, or nothing when OpenMP is off (so that a build without it has no unknown
/// pragmas to warn about): HEADWISE_OMP(omp parallel for num_threads(t) if (t > 1)).
#ifdef _OPENMP
#define HEADWISE_OMP(...) _Pragma(#__VA_ARGS__)
#else
#define HEADWISE_OMP(...)
#endif

namespace headwise::detail {

/// The most threads a call may ask for. More is refused by name: libgomp exits or crashes when
/// asked for tens of thousands, and no machine headwise runs on has a use for them.
inline constexpr int max_threads = 1024;

/// The threads a call runs on when it asks for `requested`: that many, or OpenMP's default
/// (at most max_threads) when it is 0; 1 without OpenMP. Throws std::invalid_argument naming
/// `where` unless 0 <= requested <= max_threads.
inline int thread_count(int requested, const char* where) {
  if (requested < 0 || requested > max_threads)
    invalid(where, "threads must be in [0, ", max_threads, "] (0: OpenMP's default), got ", requested);
#ifdef _OPENMP
  return requested > 0 ? requested : std::min(omp_get_max_threads(), max_threads);
#else
  return 1;
#endif
}

/// Multiply-adds below which a call runs on the calling thread (about 0.1 ms on one core): waking
/// another thread costs more than it saves there, and OpenMP's threads, once woken, spin while
/// they wait for the next region (libgomp's default policy), taking the cores from whatever else
/// runs: a 20-token model run under load took 6-10 times as long. Results do not depend on it
/// (every kernel gives the same bits on any thread count).
inline constexpr double serial_work = 1 << 20;

/// The threads for `work` multiply-adds: `threads`, or 1 below serial_work.
inline int threads_for(double work, int threads) { return work < serial_work ? 1 : threads; }

/// The calling thread's number inside a parallel region (0 outside one, or without OpenMP).
inline int this_thread() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/// all_finite(m) (errors.hpp) with the rows split over `threads` threads: for the checks that
/// would otherwise be the serial part of a parallel call.
template <class Derived>
bool all_finite(const Derived& m, [[maybe_unused]] int threads) {  // unused without OpenMP
  bool finite = true;
  HEADWISE_OMP(omp parallel for num_threads(threads) reduction(&& : finite) if (threads > 1 && m.rows() >= 64))
  for (Eigen::Index i = 0; i < m.rows(); ++i) finite = finite && row_is_finite(m, i);
  return finite;
}

/// Keeps the first exception thrown inside a parallel loop and rethrows it after the loop:
///   detail::ExceptionCarrier carrier;
///   HEADWISE_OMP(omp parallel for)
///   for (Index i = 0; i < n; ++i) carrier.run([&] { work(i); });
///   carrier.rethrow();
class ExceptionCarrier {
 public:
  /// Runs body() unless an exception was already caught (then the rest of the loop is skipped).
  template <class Body>
  void run(Body&& body) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      std::forward<Body>(body)();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  /// Rethrows the first exception caught, if any. Call after the parallel region.
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::exception_ptr first_;
};

/// `units` units of work (key/value heads, say) of `jobs_per_unit` jobs each, in `parts` runs of
/// whole units: run p holds units [units p / parts, units (p + 1) / parts), the part that
/// PackedKeysValues::append packs on thread p. Thread p takes the jobs of run p in
/// order, then helps with the other runs (each run's next job, until none is left). So a thread
/// works on the data of the units it prepared itself (packed, say) and reaches for the others'
/// only at the end, where it balances the load as a dynamic schedule would. Each job runs once.
class JobRuns {
 public:
  JobRuns(Index units, Index jobs_per_unit, int parts)
      : units_(units), per_unit_(jobs_per_unit), parts_(parts),
        next_(new std::atomic<Index>[static_cast<std::size_t>(parts)]) {
    for (int p = 0; p < parts; ++p) next_[static_cast<std::size_t>(p)].store(first_job(p), std::memory_order_relaxed);
  }
  /// The first job of run p (and the end of run p - 1).
  Index first_job(int p) const { return units_ * p / parts_ * per_unit_; }
  /// Runs body(job) for thread `thread`'s jobs: its own run's, then the others'.
  template <class Body>
  void run(int thread, Body&& body) {
    for (int k = 0; k < parts_; ++k) {
      const int p = (thread + k) % parts_;
      std::atomic<Index>& next = next_[static_cast<std::size_t>(p)];
      for (Index job = next.fetch_add(1, std::memory_order_relaxed); job < first_job(p + 1);
           job = next.fetch_add(1, std::memory_order_relaxed))
        body(job);
    }
  }

 private:
  Index units_, per_unit_;
  int parts_;
  std::unique_ptr<std::atomic<Index>[]> next_;
};

}  // namespace headwise::detail
