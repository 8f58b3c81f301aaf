// Internal: headwise's threads: how many a call runs on (thread_count, at most max_threads; one
// below serial_work), parallel regions, and what runs on them (parallel_for with a Schedule,
// ExceptionCarrier, JobRuns, a parallel all_finite). Each thread that calls into headwise has a
// team of its own workers (made on first use, as OpenMP's runtime keeps one per thread that starts
// a region): a parallel region runs body(t) for t = 0 .. threads - 1, t = 0 on the calling thread,
// and returns when every part has returned, rethrowing the first exception any threw. Between
// regions a worker spins for at most spin_before_sleep, then sleeps on a condition variable: no
// thread busy-waits for the next call (libgomp's default spins about a hundred times as long,
// taking the cores from whatever else runs). A region inside a region runs on its own thread alone.
// A child forked after a team was made gets a new one (a pthread_atfork handler counts forks).
// Without threads (WebAssembly without pthreads) every region runs on the calling thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/platform.hpp"  // HEADWISE_THREADS, HEADWISE_OPENMP (omp.h), HEADWISE_POSIX (pthread.h), HEADWISE_NOINLINE
#include "headwise/types.hpp"

namespace headwise::detail {

/// The most threads a call may ask for. More is refused by name: no machine headwise runs on has
/// a use for them, and each is a thread the calling thread's team keeps.
inline constexpr int max_threads = 1024;

/// The threads a call runs on when it asks for `requested`: that many, or the default (OpenMP's,
/// which OMP_NUM_THREADS sets, where OpenMP is on; else the machine's cores; at most max_threads)
/// when it is 0; 1 without threads. Throws std::invalid_argument naming `where` unless
/// 0 <= requested <= max_threads.
inline int thread_count(int requested, const char* where) {
  if (requested < 0 || requested > max_threads)
    invalid(where, "threads must be in [0, ", max_threads, "] (0: the default), got ", requested);
#if !HEADWISE_THREADS
  return 1;
#elif HEADWISE_OPENMP
  return requested > 0 ? requested : std::min(omp_get_max_threads(), max_threads);
#else
  return requested > 0 ? requested : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, max_threads);
#endif
}

/// Multiply-adds below which a call runs on the calling thread: waking another thread costs more
/// than it saves there. Results do not depend on it (every kernel gives
/// the same bits on any thread count).
inline constexpr double serial_work = 1 << 20;

/// The threads for `work` multiply-adds: `threads`, or 1 below serial_work.
inline int threads_for(double work, int threads) { return work < serial_work ? 1 : threads; }

/// How long a worker spins for the next region before it sleeps: long enough that the regions of
/// one call (a decoding step's, say) find it awake, short enough that it takes no core from
/// anything else between calls.
inline constexpr std::chrono::microseconds spin_before_sleep{50};

/// The part of the region the calling thread runs (0 outside a region) and whether it is in one.
struct RegionPlace {
  int part = 0;
  bool inside = false;
};
inline RegionPlace& region_place() {
  thread_local RegionPlace place;
  return place;
}

/// The calling thread's part inside a parallel region: t of body(t) (0 outside one).
inline int this_thread() { return region_place().part; }

/// Keeps the first exception thrown inside a parallel loop and rethrows it after the loop:
///   detail::ExceptionCarrier carrier;
///   detail::parallel_for<Schedule::by_part>(threads, n, [&](Index i) { carrier.run([&] { work(i); }); });
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

/// One region's work, type-erased: call(context, t) runs part t.
struct RegionWork {
  void (*call)(void*, int) = nullptr;
  void* context = nullptr;
};

/// Forks of this process that the calling code has seen (a child process counts its parent's fork):
/// a team made before a fork has no threads in the child (fork copies the calling thread alone),
/// so the child's first region makes a new one, as LLVM's OpenMP runtime does. Counted by a
/// pthread_atfork handler, registered when the program starts (fork_counter, below). The handler
/// also sets Eigen's own products to one thread in the child: GCC's OpenMP runtime (libgomp) keeps
/// its pool across a fork and waits for it forever at the child's first parallel product.
inline std::atomic<unsigned>& forks_seen() {
  static std::atomic<unsigned> forks{0};
  return forks;
}
inline int count_forks() {
#if HEADWISE_THREADS && HEADWISE_POSIX
  return pthread_atfork(nullptr, nullptr, [] {
    forks_seen().fetch_add(1, std::memory_order_relaxed);
    if (HEADWISE_OPENMP) Eigen::setNbThreads(1);
  });
#else
  return 0;
#endif
}
/// Registers the handler once per program, at its start: a parent that used Eigen's OpenMP
/// products before any team of headwise's is counted too.
inline const int fork_counter = count_forks();

/// The workers of one calling thread (WorkerTeam::of_this_thread()).
class WorkerTeam {
 public:
  // (out of line, as run() is: the start of a region is one call; inlined, the team's code made
  // every file that calls attend() slower to compile)
  HEADWISE_NOINLINE static WorkerTeam& of_this_thread() {
    thread_local WorkerTeam team;
    return team;
  }
  WorkerTeam() = default;
  WorkerTeam(const WorkerTeam&) = delete;
  WorkerTeam& operator=(const WorkerTeam&) = delete;
  ~WorkerTeam() {
    if (forked()) abandon(std::move(crew_));  // (see run)
    else crew_->stop();
  }

  /// Runs work(t) for t = 0 .. parts - 1: part 0 here, the others on workers 1 .. parts - 1. If the
  /// system refuses a new thread, the parts it would have run run here, after part 0.
  HEADWISE_NOINLINE void run(int parts, RegionWork work) {
    // In a child forked after this team was made, its workers do not exist and its lock may be
    // held by one of them: the crew is left as it is (abandon) and a new one hired.
    if (forked()) {
      std::unique_ptr<Crew> fresh = std::make_unique<Crew>();  // (first: if it throws, the team keeps a crew)
      abandon(std::exchange(crew_, std::move(fresh)));
    }
    crew_->run(parts, work);
  }

 private:
  /// Whether this process was forked after the crew was hired.
  bool forked() const { return crew_->born != forks_seen().load(std::memory_order_relaxed); }

  /// The workers and what they share: heap-allocated, so that a child process can abandon it.
  struct Crew {
    const unsigned born = forks_seen().load(std::memory_order_relaxed);
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    std::atomic<unsigned> generation_{0};
    std::atomic<int> pending_{0};
    RegionWork work_;
    int parts_ = 0;
    bool stop_ = false;

    void stop() {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
        generation_.fetch_add(1, std::memory_order_release);
      }
      wake_.notify_all();
      for (std::thread& worker : workers_) worker.join();
    }
    void run(int parts, RegionWork work) {
      int hired = parts;
      try {
        while (static_cast<int>(workers_.size()) < parts - 1) {
          const int index = static_cast<int>(workers_.size()) + 1;
          workers_.emplace_back([this, index] { serve(index); });
        }
      } catch (...) {  // std::system_error (no more threads) or std::bad_alloc: fewer workers
        hired = static_cast<int>(workers_.size()) + 1;
      }
      if (hired > 1) {
        std::lock_guard<std::mutex> lock(mutex_);
        work_ = work, parts_ = hired;
        pending_.store(hired - 1, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
      }
      if (hired > 1) wake_.notify_all();
      work.call(work.context, 0);
      for (int t = hired; t < parts; ++t) work.call(work.context, t);
      if (spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) return;
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    }

    /// Spins until ready() or spin_before_sleep has passed; returns ready().
    template <class Ready>
    static bool spin_until(Ready ready) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0;; ++i) {
        if (ready()) return true;
        HEADWISE_SPIN_PAUSE();
        if (i % 64 == 63 && std::chrono::steady_clock::now() - start > spin_before_sleep) return ready();
      }
    }
    /// Worker `index`'s loop: each new region, its part if it has one, until the team ends.
    void serve(int index) {
      unsigned seen = 0;
      for (;;) {
        spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
        RegionWork work;
        int parts = 0;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
          if (stop_) return;
          seen = generation_.load(std::memory_order_relaxed), work = work_, parts = parts_;
        }
        if (index >= parts) continue;  // a region of fewer parts than the team has workers
        work.call(work.context, index);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          std::lock_guard<std::mutex> lock(mutex_);  // (the caller may be about to wait)
          done_.notify_one();
        }
      }
    }
  };
  std::unique_ptr<Crew> crew_ = std::make_unique<Crew>();

  /// Keeps a crew of the parent process, never destroyed (its threads cannot be joined, its lock
  /// may be held), reachable from a global (no leak for a leak checker).
  static void abandon(std::unique_ptr<Crew> crew) {
    struct Abandoned {
      std::mutex mutex;
      std::vector<std::unique_ptr<Crew>> crews;
    };
    static Abandoned* const abandoned = new Abandoned;
    std::lock_guard<std::mutex> lock(abandoned->mutex);
    abandoned->crews.push_back(std::move(crew));
  }
};

/// Runs body(t) for t = 0 .. parts - 1 on `parts` threads (the calling thread and its team's
/// workers), each with this_thread() = t, and returns when all have; the first exception thrown
/// is rethrown here. parts <= 1, a region inside a region, or no threads: on the calling thread,
/// part by part.
template <class Body>
void parallel_region(int parts, Body&& body) {
  ExceptionCarrier carrier;
  struct Context {
    Body& body;
    ExceptionCarrier& carrier;
  } context{body, carrier};
  const auto part = [](void* c, int t) {
    Context& ctx = *static_cast<Context*>(c);
    RegionPlace& place = region_place();
    const RegionPlace outer = place;
    place = {t, true};
    ctx.carrier.run([&] { ctx.body(t); });
    place = outer;
  };
  bool inline_parts = parts <= 1 || region_place().inside;
  if constexpr (HEADWISE_THREADS) {
    if (!inline_parts) WorkerTeam::of_this_thread().run(parts, {part, &context});
  } else {
    inline_parts = true;
  }
  if (inline_parts)
    for (int t = 0; t < std::max(parts, 1); ++t) part(&context, t);
  carrier.rethrow();
}

/// How a parallel loop hands out its iterations.
enum class Schedule {
  by_part,     ///< thread t takes iterations [n t / threads, n (t + 1) / threads) (OpenMP's static)
  next_free,   ///< each thread takes the next iteration left (dynamic)
  shrinking,   ///< each takes the next run of iterations, runs shorter as fewer are left (guided)
};

/// Runs body(i) for i = 0 .. n - 1 on `threads` threads, handed out as `schedule` says (a
/// template argument: a call compiles the one it uses); returns when all have run (the first
/// exception thrown is rethrown; the iterations not yet started are then skipped).
///   detail::parallel_for<Schedule::next_free>(threads, n_jobs, [&](Index job) { ... });
template <Schedule schedule, class Body>
void parallel_for(int threads, Index n, Body&& body) {
  if (n <= 0) return;
  threads = static_cast<int>(std::clamp<Index>(n, 1, std::max(threads, 1)));
  std::atomic<Index> next{0};
  std::atomic<bool> failed{false};
  parallel_region(threads, [&](int t) {
    try {
      if constexpr (schedule == Schedule::by_part) {
        for (Index i = n * t / threads; i < n * (t + 1) / threads && !failed.load(std::memory_order_relaxed); ++i) body(i);
      } else {
        for (;;) {
          const Index left = n - next.load(std::memory_order_relaxed);
          const Index run = schedule == Schedule::shrinking ? std::max<Index>(1, left / (2 * threads)) : 1;
          const Index first = next.fetch_add(run, std::memory_order_relaxed);
          if (first >= n || failed.load(std::memory_order_relaxed)) return;
          for (Index i = first; i < std::min(n, first + run); ++i) body(i);
        }
      }
    } catch (...) {
      failed.store(true, std::memory_order_relaxed);
      throw;
    }
  });
}

/// all_finite(m) (errors.hpp) with the rows split over `threads` threads: for the checks that
/// would otherwise be the serial part of a parallel call.
template <class Derived>
bool all_finite(const Derived& m, int threads) {
  std::atomic<bool> finite{true};
  parallel_for<Schedule::by_part>(m.rows() >= 64 ? threads : 1, m.rows(), [&](Index i) {
    if (finite.load(std::memory_order_relaxed) && !row_is_finite(m, i)) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

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
