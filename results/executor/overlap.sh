#!/usr/bin/env bash
# Regenerates overlap.md: the executor's --overlap-grad-reduce / --overlap-param-gather on this
# machine's CPU. One small GPT at DP 2 with the distributed optimizer, run by `ptdp validate`
# (2 MPI ranks) without and with the overlap (buckets of 1,000,000 parameters, about 1.3 per
# layer), against the simulator with the measured CPU profile
# (results/validation/cpu-calibrated.yaml; no constant fitted to these runs). Prints the losses of
# both runs, where each rank's first gradient reduction started in the last step relative to its
# last backward, and the data-parallel time each stage waited for, measured and simulated.
# Usage (from the repository root): results/executor/overlap.sh BUILD_DIR [OUT]
#   OUT defaults to results/executor/overlap (plans/, json/, traces/); the last step of each run
#   is drawn to results/executor/overlap-blocking.svg and overlap-overlapped.svg.
set -euo pipefail
build=${1:?usage: overlap.sh BUILD_DIR [OUT_DIR]}
out=${2:-results/executor/overlap}
ptdp=$build/ptdp
tool=$build/tests/executor/executor_tool
profile=results/validation/cpu-calibrated.yaml
mkdir -p "$out/plans" "$out/json" "$out/traces"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
  OPENBLAS_NUM_THREADS=1

model="layers=8 hidden=256 heads=8 seq=128 gbs=16 dp=2 distopt=true"
declare -A layouts=(
  [blocking]=""
  [overlapped]="overlap=true gather=true bucket=1000000"
)
for name in blocking overlapped; do
  # shellcheck disable=SC2086
  "$tool" plan "$out/plans/$name.yaml" $model ${layouts[$name]}
  timeout 600 mpirun --oversubscribe --bind-to none -np 2 "$ptdp" validate \
    --plan "$out/plans/$name.yaml" --steps 8 --cluster "$profile" --format json \
    --results "$out/json/$name-results.json" --trace "$out/traces/$name.json" \
    >"$out/json/$name.json" 2>/dev/null </dev/null
done

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
runs = ["blocking", "overlapped"]
res = {n: json.loads((out / "json" / f"{n}-results.json").read_text()) for n in runs}
val = {n: json.loads((out / "json" / f"{n}.json").read_text()) for n in runs}
same = res["blocking"]["losses"] == res["overlapped"]["losses"]
print(f"Losses of the {len(res['blocking']['losses'])} steps bit for bit equal: {same} "
      f"(last {res['overlapped']['losses'][-1]:.6f}).")
print()
print("| run | step time measured | step time simulated | stage 0 dp exposed measured | "
      "simulated |")
print("|---|---:|---:|---:|---:|")
for n in runs:
    v = val[n]
    st, dp = v["step_time_s"], v["stages"][0]["dp_exposed_s"]
    print(f"| {n} | {1e3 * st['measured']:.1f} ms | {1e3 * st['simulated']:.1f} ms | "
          f"{1e3 * dp['measured']:.2f} ms | {1e3 * dp['simulated']:.2f} ms |")
print()
print("Last step, per rank: the last backward and the gradient reductions (ms from the step's "
      "start).")
print()
print("| run | rank | last backward | first reduction starts | last reduction ends | buckets |")
print("|---|---:|---|---:|---:|---:|")
for n in runs:
    t = json.loads((out / "traces" / f"{n}.json").read_text())
    events = t["traceEvents"] if isinstance(t, dict) else t
    by_track = {}
    for e in events:
        if e.get("ph") == "X":
            by_track.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for rank, key in enumerate(sorted(by_track)):
        es = by_track[key]
        step = max((e for e in es if e["name"].startswith("step ")), key=lambda e: e["ts"])
        t0, t1 = step["ts"], step["ts"] + step["dur"]
        inside = [e for e in es if t0 <= e["ts"] <= t1]
        back = max((e for e in inside if e.get("cat") == "backward"), key=lambda e: e["ts"])
        red = [e for e in inside if e.get("cat") == "dp-comm"
               and ("reduce-scatter" in e["name"] or "dp all-reduce" in e["name"])]
        first = min(e["ts"] for e in red)
        last = max(e["ts"] + e["dur"] for e in red)
        print(f"| {n} | {rank} | {(back['ts'] - t0) / 1e3:.1f} to "
              f"{(back['ts'] + back['dur'] - t0) / 1e3:.1f} | {(first - t0) / 1e3:.1f} | "
              f"{(last - t0) / 1e3:.1f} | {len(red)} |")
PY

here=$(dirname "$0")
python3 "$here/plot_trace.py" "$out/traces/blocking.json" "$here/overlap-blocking.svg" 8 \
  "blocking: DP 2, gradients reduced after the backward (step 8)"
python3 "$here/plot_trace.py" "$out/traces/overlapped.json" "$here/overlap-overlapped.svg" 8 \
  "overlapped: 7 buckets reduced as the last backward finishes its layers (step 8)"
