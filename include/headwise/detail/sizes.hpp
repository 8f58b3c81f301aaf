// Internal: sizes computed from user-given numbers, checked before anything is allocated.
//
// A capacity, a tile size or a head count comes from the caller; multiplied together it becomes the
// length of a buffer. Every such product goes through checked_size, which refuses (with
// std::invalid_argument naming the numbers) a negative factor or a product that does not fit in a
// buffer of Scalar, instead of letting it wrap around to a small buffer that a later write overruns.
// A size that fits but that the machine cannot provide is refused the same way by allocate: a
// buffer larger than the machine's physical memory before anything is allocated (every buffer here
// is filled when made or as it is used, so it would have to be resident), and any other
// std::bad_alloc after.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "headwise/detail/errors.hpp"
#include "headwise/detail/platform.hpp"  // HEADWISE_POSIX (unistd.h), HEADWISE_HUGE_PAGES (sys/mman.h)
#include "headwise/types.hpp"

namespace headwise::detail {

/// The largest number of Scalars a buffer may hold (its bytes must fit in std::ptrdiff_t).
template <class Scalar>
constexpr Index max_elements() {
  return static_cast<Index>(std::numeric_limits<std::ptrdiff_t>::max() / static_cast<std::ptrdiff_t>(sizeof(Scalar)));
}

/// a * b, or -1 if either is negative or the product exceeds `limit`.
inline Index multiply_within(Index a, Index b, Index limit) {
  if (a < 0 || b < 0) return -1;
  if (a != 0 && b > limit / a) return -1;
  return a * b;
}

/// x rounded up to a multiple of `step` (> 0), or -1 if that exceeds `limit`.
inline Index round_up_within(Index x, Index step, Index limit) {
  if (x < 0 || x > limit - (step - 1)) return -1;
  return (x + step - 1) / step * step;
}

/// checked_size's refusal, one function for every list of factors.
[[noreturn]] inline void refuse_size(const char* where, const char* what, std::size_t element_bytes, Index limit,
                                     std::initializer_list<Index> factors) {
  std::ostringstream sizes;
  bool first = true;
  for (const Index f : factors) sizes << (first ? "" : " x ") << f, first = false;
  invalid(where, what, " needs ", sizes.str(), " elements of ", element_bytes,
          " bytes, which is negative or more than a buffer can hold (", limit, " elements)");
}

/// The product of `factors`, as the length of a buffer of Scalar holding `what`; throws
/// std::invalid_argument("headwise: <where>: <what> needs a x b x ... elements, ...") if a factor
/// is negative or the product does not fit.
template <class Scalar, class... Factors>
Index checked_size(const char* where, const char* what, Factors... factors) {
  constexpr Index limit = max_elements<Scalar>();
  Index product = 1;
  bool fits = true;
  for (const Index f : {static_cast<Index>(factors)...}) {
    product = fits ? multiply_within(product, f, limit) : product;
    fits = fits && product >= 0;
  }
  if (!fits) refuse_size(where, what, sizeof(Scalar), limit, {static_cast<Index>(factors)...});
  return product;
}

/// The machine's physical memory in bytes, or 0 where the system does not say.
inline double physical_memory_bytes() {
#if HEADWISE_POSIX && defined(_SC_PHYS_PAGES)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<double>(pages) * static_cast<double>(page);
#endif
  return 0;
}

/// A KV store's buffers of at least this many bytes are asked for in transparent huge pages
/// (Linux, where the system's setting is `madvise` or `always`): a decoding step streams them, and
/// with 4 KiB pages its reads of keys and values miss the TLB (bench/RESULTS.md, "Tuning constants"). The memory a store touches then
/// grows 2 MiB at a time.
constexpr std::size_t huge_page_threshold = std::size_t(32) << 20, huge_page_bytes = std::size_t(2) << 20;

/// `bytes` for std::free: aligned to 2 MiB and advised into huge pages where the system has them
/// (HEADWISE_HUGE_PAGES), else as malloc gives them. Throws std::bad_alloc.
inline void* allocate_huge_pages(std::size_t bytes) {
  void* p = nullptr;
#if HEADWISE_HUGE_PAGES
  if (posix_memalign(&p, huge_page_bytes, bytes) != 0) throw std::bad_alloc();
  static_cast<void>(madvise(p, bytes, MADV_HUGEPAGE));  // (a hint: refused, the pages stay small)
#else
  if ((p = std::malloc(bytes)) == nullptr) throw std::bad_alloc();
#endif
  return p;
}

/// An allocator that leaves new elements of a trivial type uninitialised (vector::resize does not
/// zero them): for a store that is filled as it is used, so that making it costs no pass over it.
/// Buffers of huge_page_threshold bytes or more are aligned to 2 MiB and advised into huge pages.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  T* allocate(std::size_t n) {
    if (HEADWISE_HUGE_PAGES && n >= huge_page_threshold / sizeof(T)) return static_cast<T*>(allocate_huge_pages(n * sizeof(T)));
    return std::allocator<T>::allocate(n);
  }
  void deallocate(T* p, std::size_t n) {
    if (HEADWISE_HUGE_PAGES && n >= huge_page_threshold / sizeof(T)) return std::free(p);
    std::allocator<T>::deallocate(p, n);
  }
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;  // default-, not value-initialised
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// buffer.resize(count), or buffer.assign(count, *value) when a value is given, refused with
/// std::invalid_argument naming the request ("headwise: <where>: cannot allocate <count> elements
/// ... for <what>") if it exceeds the machine's physical memory or the allocation fails.
template <class Vector, class T = typename Vector::value_type>
void allocate_checked(Vector& buffer, Index count, const T* value, const char* where, const char* what) {
  constexpr double gib = 1 << 30;
  const double bytes = static_cast<double>(count) * static_cast<double>(sizeof(T)), memory = physical_memory_bytes();
  if (memory > 0 && bytes > memory)
    invalid(where, "cannot allocate ", count, " elements of ", sizeof(T), " bytes (", bytes / gib, " GiB) for ", what,
            ": the machine has ", memory / gib, " GiB of memory");
  try {
    if (value) buffer.assign(static_cast<std::size_t>(count), *value);
    else buffer.resize(static_cast<std::size_t>(count));
  } catch (const std::bad_alloc&) {
    invalid(where, "cannot allocate ", count, " elements of ", sizeof(T), " bytes (", bytes / gib, " GiB) for ", what);
  } catch (const std::length_error&) {
    invalid(where, "cannot allocate ", count, " elements of ", sizeof(T), " bytes for ", what);
  }
}

/// buffer.assign(count, value), checked as above.
template <class T>
void allocate(std::vector<T>& buffer, Index count, const T& value, const char* where, const char* what) {
  allocate_checked(buffer, count, &value, where, what);
}

/// buffer.resize(count) with elements left uninitialised (UninitializedAllocator), checked as above.
template <class T>
void allocate_uninitialized(std::vector<T, UninitializedAllocator<T>>& buffer, Index count, const char* where,
                            const char* what) {
  allocate_checked(buffer, count, static_cast<const T*>(nullptr), where, what);
}

}  // namespace headwise::detail
