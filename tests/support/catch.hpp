// The Catch2 include for the tests, v2 (Debian 12's 2.13) or v3, and the matcher base of each.
#pragma once

#define CATCH_CONFIG_ENABLE_OPTIONAL_STRINGMAKER  // (FusedTiles::keys, in CAPTURE)
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
namespace headwise_test {
template <class T>
using MatcherBase = Catch::Matchers::MatcherBase<T>;
}
#else
#include <catch2/catch.hpp>
namespace headwise_test {
template <class T>
using MatcherBase = Catch::MatcherBase<T>;
}
#endif

namespace headwise_test {
/// Runs the tests of the binary (Catch2's session, compiled once in catch_session.cpp).
int run_catch_session(int argc, char** argv);
}  // namespace headwise_test

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;
