#!/usr/bin/env bash
# Regenerates profile-rank.md: `ptdp validate --profile-rank R` on five layouts of one small GPT,
# each rank run alone on this machine's CPU with its exchanges stand-in local copies
# (executor/comm/standin.h), compared with the simulator (the measured CPU profile
# results/validation/cpu-calibrated.yaml). The exchanges' bytes per step need no profile: they
# are counted, not timed.
# Usage (from the repository root): results/executor/profile-rank.sh BUILD_DIR [OUT]
#   OUT defaults to results/executor/profile-rank (plans/, json/).
set -euo pipefail
build=${1:?usage: profile-rank.sh BUILD_DIR [OUT_DIR]}
out=${2:-results/executor/profile-rank}
ptdp=$build/ptdp
tool=$build/tests/executor/executor_tool
profile=results/validation/cpu-calibrated.yaml
mkdir -p "$out/plans" "$out/json"

model="layers=8 hidden=128 heads=4 seq=64 gbs=16"
# name -> "plan keys|rank"
declare -A layouts=(
  [tp2-pp2-dp2]="tp=2 pp=2 dp=2|5"
  [tp2-pp2-dp2-sp-distopt]="tp=2 pp=2 dp=2 sp=true distopt=true|0"
  [tp2-cp2-pp2-ring]="tp=2 cp=2 pp=2 sp=true attention=flash|3"
  [llama-gqa-pp4-interleaved]="pp=4 v=2 schedule=interleaved llama=true groups=2 recompute=full|3"
  [moe-tp2-ep2-dp2]="tp=2 dp=2 ep=2 sp=true llama=true groups=2 experts=4 topk=2 expertffn=128|2"
)
for name in "${!layouts[@]}"; do
  keys=${layouts[$name]%|*}
  rank=${layouts[$name]#*|}
  # shellcheck disable=SC2086
  "$tool" plan "$out/plans/$name.yaml" $model $keys
  "$ptdp" validate --plan "$out/plans/$name.yaml" --profile-rank "$rank" --steps 4 \
    --cluster "$profile" --format json >"$out/json/$name.json" 2>/dev/null
done

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def mb(b):
    return "-" if b is None else f"{b / 1e6:.3f}"
def err(c):
    return "-" if c["error"] is None else f"{100 * c['error']:+.1f}%"
print("| layout (rank) | group | measured MB/step | simulated MB/step | error |")
print("|---|---|---:|---:|---:|")
for p in sorted((out / "json").glob("*.json")):
    v = json.loads(p.read_text())
    for g in v["stand_in"]:
        print(f"| {p.stem} ({v['profile_rank']}) | {g['group']} | {mb(g['bytes']['measured'])} "
              f"| {mb(g['bytes']['simulated'])} | {err(g['bytes'])} |")
print()
print("| layout (rank) | stage | forward ms: measured / simulated | backward ms: measured / simulated |")
print("|---|---:|---:|---:|")
for p in sorted((out / "json").glob("*.json")):
    v = json.loads(p.read_text())
    s = v["stages"][0]
    f, b = s["forward_s"], s["backward_s"]
    print(f"| {p.stem} ({v['profile_rank']}) | {s['stage']} | {1e3 * f['measured']:.2f} / "
          f"{1e3 * f['simulated']:.2f} ({err(f)}) | {1e3 * b['measured']:.2f} / "
          f"{1e3 * b['simulated']:.2f} ({err(b)}) |")
PY
