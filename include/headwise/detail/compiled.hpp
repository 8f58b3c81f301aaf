// The compiled mode, as fmt has one: the headers stay usable alone (every template is defined in
// them), and a consumer that links headwise::compiled (src/, a static library) gets
// HEADWISE_COMPILED defined, under which each heavy header declares its float and double
// instantiations `extern template`: the kernel, the layers, the caches and the loaders are then
// compiled once, in the library, not in every file that calls them.
//
// Each header lists its instantiations once, in a macro taking the prefix (extern, or nothing in
// the library's own source that defines them) and the scalar, and hands it to
// HEADWISE_EXTERN_INSTANTIATIONS, which declares both scalars' extern in compiled mode and
// nothing header-only:
//   #define HEADWISE_ATTEND_INSTANTIATIONS(PREFIX, S) PREFIX template class Thing<S>;
//   HEADWISE_EXTERN_INSTANTIATIONS(HEADWISE_ATTEND_INSTANTIATIONS)
// (src/kernel_float.cpp: HEADWISE_ATTEND_INSTANTIATIONS(, float)). A function template the
// library compiles is declared there too even where it is a detail: otherwise a file that calls it
// compiles its own copy, and at link time a copy from a file built without optimisation (a test,
// a user's debug build) can stand in for the library's everywhere.
//
// The readers' and the tokenizer's own code, which is not templated on a scalar, is kept out of a
// compiled-mode file the way fmt keeps its own (FMT_HEADER_ONLY): each header declares what a
// program calls, and its definitions, with nlohmann/json.hpp and PCRE2 that only they need, are a
// file of their own (io/definitions/, text/definitions/) that the header includes at its end
// through HEADWISE_IO_DEFINITIONS_OF (HEADWISE_TEXT_DEFINITIONS_OF): header-only, and in the one
// library source that compiles them (src/io.cpp, src/text.cpp); in compiled mode it includes
// detail/no_definitions.hpp instead. HEADWISE_IO_INLINE (HEADWISE_TEXT_INLINE) marks each such
// definition: `inline` header-only, nothing in the library.
//
// The kernel's packed layout (panels of W keys) follows the instruction set a file is compiled
// for. HEADWISE_ISA_TAG marks the compiled entry points with that instruction set in their linker
// names (GCC's and clang's abi_tag), so that a consumer compiled for another one than the library
// fails to link, naming the symbol (`...[abi:avx]...` for an AVX2 build), instead of reading a store of another
// layout.
#pragma once

#include <Eigen/Core>

#include "headwise/detail/platform.hpp"  // HEADWISE_ISA_TAG, HEADWISE_SIMD_ARGUMENTS_BEGIN / _END

#ifdef HEADWISE_COMPILED
#define HEADWISE_EXTERN_INSTANTIATIONS(INSTANTIATIONS) INSTANTIATIONS(extern, float) INSTANTIATIONS(extern, double)
#else
#define HEADWISE_EXTERN_INSTANTIATIONS(INSTANTIATIONS)
#endif

// The readers' definitions: in the library's own source (not inline), absent where a library
// holds them (headwise::compiled), else inline in the headers.
#if defined(HEADWISE_COMPILING_IO)
#define HEADWISE_IO_DEFINITIONS_OF(path) path
#define HEADWISE_IO_INLINE
#elif defined(HEADWISE_COMPILED)
#define HEADWISE_IO_DEFINITIONS_OF(path) "headwise/detail/no_definitions.hpp"
#define HEADWISE_IO_INLINE inline
#else
#define HEADWISE_IO_DEFINITIONS_OF(path) path
#define HEADWISE_IO_INLINE inline
#endif
// The same for the tokenizer's, which headwise::compiled holds where PCRE2 was found when it was
// built (HEADWISE_COMPILED_TEXT).
#if defined(HEADWISE_COMPILING_TEXT)
#define HEADWISE_TEXT_DEFINITIONS_OF(path) path
#define HEADWISE_TEXT_INLINE
#elif defined(HEADWISE_COMPILED_TEXT)
#define HEADWISE_TEXT_DEFINITIONS_OF(path) "headwise/detail/no_definitions.hpp"
#define HEADWISE_TEXT_INLINE inline
#else
#define HEADWISE_TEXT_DEFINITIONS_OF(path) path
#define HEADWISE_TEXT_INLINE inline
#endif

#if defined(EIGEN_VECTORIZE_AVX512)
#define HEADWISE_ISA_NAME "avx512"
#elif defined(EIGEN_VECTORIZE_AVX)
#define HEADWISE_ISA_NAME "avx"
#elif defined(EIGEN_VECTORIZE_SSE2)
#define HEADWISE_ISA_NAME "sse2"
#elif defined(EIGEN_VECTORIZE_NEON)
#define HEADWISE_ISA_NAME "neon"
#elif defined(EIGEN_VECTORIZE)
#define HEADWISE_ISA_NAME "simd"
#else
#define HEADWISE_ISA_NAME "scalar"
#endif
