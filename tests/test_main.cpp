// The main of the unit-test binaries (Catch2's code: catch_session.cpp).
#include "support/catch.hpp"

int main(int argc, char** argv) { return headwise_test::run_catch_session(argc, argv); }
