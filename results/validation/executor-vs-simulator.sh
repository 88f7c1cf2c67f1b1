#!/usr/bin/env bash
# Regenerates executor-vs-simulator.md's figures: measures this machine with `ptdp calibrate`
# (results/validation/cpu-calibrated.yaml), writes the plans, runs `ptdp validate` on each with
# the measured profile (JSON and the executor's log per plan), and prints the markdown tables.
# Usage (from the repository root): results/validation/executor-vs-simulator.sh BUILD_DIR [OUT]
#   OUT defaults to results/validation/executor-vs-simulator (plans/, json/, logs/).
#   PROFILE=FILE validates with an existing profile instead of calibrating.
#   ATTENTION=flash runs (and simulates) flash-style attention; the tables were measured with
#   the default, unfused (the softmax kept), which the executor ran before it had both.
set -euo pipefail
build=${1:?usage: executor-vs-simulator.sh BUILD_DIR [OUT_DIR]}
out=${2:-results/validation/executor-vs-simulator}
ptdp=$build/ptdp
tool=$build/tests/executor/executor_tool
mkdir -p "$out/plans" "$out/json" "$out/logs"

profile=${PROFILE:-results/validation/cpu-calibrated.yaml}
if [ -z "${PROFILE:-}" ]; then
  "$ptdp" calibrate --backend cpu --out "$profile" 2>"$out/logs/calibrate.log"
fi

# One model for every plan: the 4-layer GPT of results/executor (hidden 128, 4 heads, sequence
# 128, byte vocabulary), global batch 32 in micro-batches of 4, trained on GPL-3. (No
# interleaved plan: Megatron's rules want pp >= 3 for it, 3 or more ranks on 2 cores.)
model="layers=4 hidden=128 heads=4 seq=128 gbs=32 mbs=4 lr=6e-4"
declare -A plans=(
  [single]="name=gpl3-small"
  [tp2]="name=gpl3-small tp=2"
  [dp2]="name=gpl3-small dp=2"
  [pp2-1f1b]="name=gpl3-small pp=2"
  [pp2-gpipe]="name=gpl3-small pp=2 schedule=gpipe"
  [pp2-zb-h1]="name=gpl3-small pp=2 schedule=zb-h1"
)
for name in "${!plans[@]}"; do
  # shellcheck disable=SC2086
  "$tool" plan "$out/plans/$name.yaml" $model ${plans[$name]}
done
cp results/executor/trace-pp4-1f1b.yaml "$out/plans/pp4-1f1b.yaml"

for name in single tp2 dp2 pp2-1f1b pp2-gpipe pp2-zb-h1 pp4-1f1b; do
  echo "validate $name" >&2
  timeout 300 "$ptdp" validate --plan "$out/plans/$name.yaml" --launch --steps 10 \
    --attention-backend "${ATTENTION:-unfused}" --cluster "$profile" --format json \
    >"$out/json/$name.json" 2>"$out/logs/$name.log"
done
python3 results/validation/executor_vs_simulator_table.py "$out"/json/{single,tp2,dp2,pp2-1f1b,pp2-gpipe,pp2-zb-h1,pp4-1f1b}.json
