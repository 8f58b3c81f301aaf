#!/bin/sh
# A compiler launcher for the benchmarks the test preset only checks (bench/CMakeLists.txt): runs
# the compiler command it is given with -fsyntax-only, which writes no object file, then writes
# an empty one where the command asked for it, so that the build tool sees the step done and does
# not run it again until a source changes. The depfile the command asks for is written as usual.
"$@" -fsyntax-only || exit
while [ $# -gt 1 ]; do
  if [ "$1" = -o ]; then : > "$2"; exit 0; fi
  shift
done
