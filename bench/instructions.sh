#!/bin/bash
# Instructions per evaluation of one cost-model benchmark case, under callgrind (repeatable to
# the instruction, unlike wall time on a shared machine): everything inside the benchmark's loop,
# divided by the number of EstimateStep (or EstimateMemory) calls it made.
#   bench/instructions.sh BENCH_BINARY FILTER      e.g. build/bench/ptdp_cost_model_bench Planner/Megatron
# Build with -g (cmake -DCMAKE_CXX_FLAGS=-g) so that the call counts carry names.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BENCH_BINARY FILTER" >&2
  exit 2
fi
bench=$1 filter=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out" \
  --toggle-collect='ptdp::(anonymous namespace)::Evaluate(*' \
  "$bench" --benchmark_filter="$filter" --benchmark_min_time=0.3 >/dev/null 2>&1
total=$(callgrind_annotate "$out" | grep "PROGRAM TOTALS" | awk '{gsub(",", "", $1); print $1}')
calls=$(callgrind_annotate --tree=calling "$out" | grep -E "=> .*(EstimateStep|EstimateMemory|EstimatePeakMemory|EstimateStepLowerBound)\(" |
  grep -v lambda | sed -E 's/.*\(([0-9,]+)x\)$/\1/' | tr -d , | sort -n | tail -1)
if [[ -z "$calls" || "$calls" -eq 0 ]]; then
  echo "$0: no EstimateStep or EstimateMemory calls found for '$filter' (built with -g?)" >&2
  exit 1
fi
echo "$filter: $((total / calls)) instructions per evaluation ($calls evaluations)"
