#!/usr/bin/env bash
# Compile cost, a user-facing figure: CPU seconds and peak memory of g++ -O2 -march=native on the
# three files of bench/compile_cost/, header-only and against headwise::compiled (-DHEADWISE_COMPILED
# and -DHEADWISE_COMPILED_TEXT: the instantiations declared extern and the readers' and tokenizer's
# code declared only, as linking the target does), beside one Eigen float matrix
# product compiled in the same run. Prints one line per file and mode, and each one's ratio to the
# product's CPU time.   bash bench/compile_cost.sh [runs, default 3: the least of them is kept]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
flags=(-std=c++17 -O2 -march=native -fopenmp -Iinclude -isystem /usr/include/eigen3 -c -o /dev/null)
measure() {  # least CPU seconds (user + sys) of $runs compiles, and that run's peak KB
  local best=""
  for _ in $(seq "$runs"); do
    local line
    /usr/bin/time -o /tmp/headwise_compile_cost.time -f "%U %S %M" g++ "${flags[@]}" "$@" > /dev/null 2>&1
    line=$(tail -1 /tmp/headwise_compile_cost.time)
    read -r user sys kb <<< "$line"
    local cpu
    cpu=$(echo "$user + $sys" | bc)
    if [[ -z "$best" ]] || (( $(echo "$cpu < ${best%% *}" | bc) )); then best="$cpu $kb"; fi
  done
  echo "$best"
}
read -r base base_kb <<< "$(measure bench/compile_cost/eigen_product.cpp)"
printf "%-34s %8s s %6s MB  %s\n" "eigen_product.cpp" "$base" "$((base_kb / 1024))" "1.00"
for file in calls_attend tokenizer_and_model; do
  for mode in header-only compiled; do
    extra=()
    [[ $mode == compiled ]] && extra=(-DHEADWISE_COMPILED -DHEADWISE_COMPILED_TEXT)  # what linking headwise::compiled (built with PCRE2) defines
    read -r cpu kb <<< "$(measure "${extra[@]}" bench/compile_cost/$file.cpp)"
    printf "%-34s %8s s %6s MB  %.2f\n" "$file.cpp ($mode)" "$cpu" "$((kb / 1024))" "$(echo "$cpu / $base" | bc -l)"
  done
done
