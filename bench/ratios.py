#!/usr/bin/env python3
"""Reads Google Benchmark JSON output of bench_attention and prints each result as a ratio to
BM_GemmCeiling from the same run, with the targets of the fused kernel.

    build/bench/bench/bench_attention --benchmark_format=json > run.json
    python3 bench/ratios.py run.json
"""
import json
import re
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    results = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        results[name] = b
    return data.get("context", {}), results


def gflops(results, name):
    b = results.get(name)
    return b["GFLOPs"] if b and "GFLOPs" in b else None  # the counter is already in GFLOP/s


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    context, results = load(sys.argv[1])
    ceiling = {t: gflops(results, f"BM_GemmCeiling/threads:{t}") for t in (1, 2)}
    if ceiling[1] is None:
        sys.exit("no BM_GemmCeiling/threads:1 in this run")
    print(f"machine: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs at "
          f"{context.get('mhz_per_cpu', '?')} MHz, {context.get('date', '?')}")
    print(f"BM_GemmCeiling: {fmt(ceiling[1], 1)} GFLOP/s on 1 thread, {fmt(ceiling[2], 1)} on 2\n")

    sizes = sorted({int(m.group(2)) for name in results
                    if (m := re.match(r"BM_(Core|Layer)\w+/(\d+)", name))})
    checks = []
    for kind in ("Core", "Layer"):
        print(f"{kind:5} {'n':>5} | {'naive':>6} {'fused1':>6} {'fused2':>6} GFLOP/s | "
              f"{'naive/C1':>8} {'fused1/C1':>9} {'fused2/C2':>9} {'2T/1T':>6}")
        for n in sizes:
            naive = gflops(results, f"BM_{kind}Naive/{n}")
            f1 = gflops(results, f"BM_{kind}Fused/{n}/1")
            f2 = gflops(results, f"BM_{kind}Fused/{n}/2")
            r1 = f1 / ceiling[1] if f1 else None
            r2 = f2 / ceiling[2] if f2 and ceiling[2] else None
            speedup = f2 / f1 if f1 and f2 else None
            print(f"{'':5} {n:>5} | {fmt(naive, 1):>6} {fmt(f1, 1):>6} {fmt(f2, 1):>6}         | "
                  f"{fmt(naive / ceiling[1] if naive else None):>8} {fmt(r1):>9} {fmt(r2):>9} {fmt(speedup):>6}")
            if kind == "Core" and n >= 1024 and r1 is not None:
                checks.append((f"core, 1 thread, n={n}: fused/ceiling >= 0.6", r1, r1 >= 0.6))
            if kind == "Core" and speedup is not None and n >= 512:
                checks.append((f"core, n={n}: 2 threads / 1 thread >= 1.8", speedup, speedup >= 1.8))
            if kind == "Layer" and n <= 512 and r1 is not None:
                checks.append((f"layer, 1 thread, n={n}: fused/ceiling >= 0.75", r1, r1 >= 0.75))
            if kind == "Layer" and n == 4096 and r1 is not None:
                checks.append((f"layer, 1 thread, n={n}: fused/ceiling >= 0.6", r1, r1 >= 0.6))
        print()
    print("targets:")
    for what, value, ok in checks:
        print(f"  {'met ' if ok else 'MISS'} {what}: {value:.2f}")


if __name__ == "__main__":
    main()
