// Catch2's own code, compiled once for every test binary: the unit tests (with test_main.cpp's
// main) and the ring-attention test (with its own main, inside MPI_Init and MPI_Finalize), which
// run it by headwise_test::run_catch_session (Catch2 v2 declares its Session only here).
#define CATCH_CONFIG_RUNNER
#include "support/catch.hpp"

int headwise_test::run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
