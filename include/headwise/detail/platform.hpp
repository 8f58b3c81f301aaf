// Internal: what the compiler and the system give headwise, asked in one place. The compiler's
// extensions (GCC's and clang's attributes, builtins and pragmas) are macros here with a plain
// fallback; the system's headers (POSIX, Linux's huge pages, OpenMP) are included here, each
// with a flag saying whether it is there. The code that needs a system call tests the flag once,
// around the one function that makes it.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
/// The instruction set in a compiled entry point's linker name (detail/compiled.hpp).
#define HEADWISE_ISA_TAG __attribute__((abi_tag(HEADWISE_ISA_NAME)))
/// Around templates that take a SIMD type (its alignment attribute) as a template argument, as
/// Eigen's do: GCC's -Wignored-attributes is off.
#define HEADWISE_SIMD_ARGUMENTS_BEGIN _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wignored-attributes\"")
#define HEADWISE_SIMD_ARGUMENTS_END _Pragma("GCC diagnostic pop")
/// Keeps a function out of line.
#define HEADWISE_NOINLINE __attribute__((noinline))
/// Inlines a lambda that touches a product's accumulators: out of line, their address is taken and
/// they live in memory (the compiler's own choice depends on the size of the loop around it).
#define HEADWISE_ALWAYS_INLINE __attribute__((always_inline))
/// A hint that the line at address p is read soon: into L1 (locality 3) or L2 (2).
#define HEADWISE_PREFETCH(p, locality) __builtin_prefetch((p), 0, (locality))
/// Keeps a vector register's value where it is: the compiler may not fold its load into a later use.
#define HEADWISE_HOLD_IN_REGISTER(x) asm("" : "+v"(x))
/// True on an AMD processor (x86 builds only: the lanes of AVX2 and AVX-512 ask it).
#define HEADWISE_CPU_IS_AMD() (__builtin_cpu_init(), __builtin_cpu_is("amd"))
#if defined(__x86_64__) || defined(__i386__)
/// A spin-wait hint: the other hardware thread of the core runs meanwhile.
#define HEADWISE_SPIN_PAUSE() __builtin_ia32_pause()
#else
#define HEADWISE_SPIN_PAUSE() static_cast<void>(0)
#endif
#else
#define HEADWISE_ISA_TAG
#define HEADWISE_SIMD_ARGUMENTS_BEGIN
#define HEADWISE_SIMD_ARGUMENTS_END
#define HEADWISE_NOINLINE
#define HEADWISE_ALWAYS_INLINE
#define HEADWISE_PREFETCH(p, locality) static_cast<void>(p)
#define HEADWISE_HOLD_IN_REGISTER(x) static_cast<void>(x)
#define HEADWISE_CPU_IS_AMD() false
#define HEADWISE_SPIN_PAUSE() static_cast<void>(0)
#endif

#if defined(__unix__) || defined(__APPLE__)
/// POSIX: files opened, checked and mapped by descriptor; the physical memory's size; fork hooks.
#define HEADWISE_POSIX 1
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#else
#define HEADWISE_POSIX 0
#endif

#if defined(__linux__) && !defined(__EMSCRIPTEN__) && defined(MADV_HUGEPAGE)
/// Linux's transparent huge pages, asked for with madvise (detail/sizes.hpp).
#define HEADWISE_HUGE_PAGES 1
#else
#define HEADWISE_HUGE_PAGES 0
#endif

#ifdef _OPENMP
#define HEADWISE_OPENMP 1
#include <omp.h>
#else
#define HEADWISE_OPENMP 0
#endif

#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
/// Without threads (WebAssembly without pthreads): every call runs on the calling thread.
#define HEADWISE_THREADS 0
#else
#define HEADWISE_THREADS 1
#endif
