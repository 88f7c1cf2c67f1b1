#!/usr/bin/env bash
# Absurd but well-formed input, swept: every case must end with the expected answer (a result,
# exit 0; or a refusal, exit 2, naming the flag or key) within LIMIT_S seconds and LIMIT_MB of
# resident memory, never a crash, an internal error or a hang.
#   limits_sweep.sh PTDP WORKDIR [MARKDOWN_OUT]
# With MARKDOWN_OUT, the table (case, answer, seconds, peak memory) is written there too
# (results/reliability/limits.md is made so). Prints "PASS: limits" when every case holds.
set -uo pipefail
ptdp=$1 work=$2 markdown=${3:+$(realpath -m "$3")}
root=$(cd "$(dirname "$0")/../.." && pwd)
limit_s=${PTDP_LIMIT_S:-30}
limit_mb=${PTDP_LIMIT_MB:-2048}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

# model KEY VALUE: gpt3-1.3b's file with KEY's value replaced; profile KEY VALUE likewise for
# dgx-a100-80gb (a key it has); plan KEY VALUE for a plan of gpt3-1.3b on 16 GPUs (likewise).
model() {  # the key is added when the preset does not give it
  { grep -q "^$1:" "$root/models/gpt3-1.3b.yaml" && sed -E "s/^($1):.*/\1: $2/" "$root/models/gpt3-1.3b.yaml" \
    || { cat "$root/models/gpt3-1.3b.yaml"; echo "$1: $2"; }; } >"m-$1-$2.yaml"
  echo "m-$1-$2.yaml"
}
profile() { sed -E "s/^(  $1):.*/\1: $2/" "$root/hwprofiles/dgx-a100-80gb.yaml" >"c-$1-$2.yaml"; echo "c-$1-$2.yaml"; }
"$ptdp" plan --model gpt3-1.3b --cluster dgx-a100-80gb --gpus 16 --global-batch 64 --out base-plan.yaml >/dev/null \
  || { echo "FAIL: the base plan"; exit 1; }
plan() { sed -E "s/^(  $1):.*/\1: $2/" base-plan.yaml >"p-$1-$2.yaml"; echo "p-$1-$2.yaml"; }
big=9223372036854775808  # 2^63
sim=(simulate --model gpt3-1.3b --cluster dgx-a100-80gb --gpus 16 --global-batch 64)  # + --tp, --pp
pln=(plan --model gpt3-1.3b --cluster dgx-a100-80gb)  # + --gpus, --global-batch

failures=0
rows=()
# expect CASE WANT ARGS...: WANT is "ok" (a result, exit 0), "none" (the answer that no plan fits,
# exit 1) or the text the refusal (exit 2) must hold.
expect() {
  local name=$1 want=$2
  shift 2
  local start end rc mb seconds first
  start=$(date +%s%N)
  local case_limit=${LIMIT:-$limit_s}  # LIMIT=S expect ...: a longer bound for one case
  /usr/bin/time -f "%M" -o rss.txt timeout "$case_limit" "$ptdp" "$@" >out.txt 2>err.txt </dev/null
  rc=$?
  end=$(date +%s%N)
  mb=$(( $(tail -n 1 rss.txt | tr -dc 0-9) / 1024 ))
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
  first=$(head -n 1 err.txt)
  [ "$want" = ok ] && first=$(head -n 1 out.txt)
  [ "$want" = none ] && first=$(grep -m1 "No valid plan" out.txt)
  local verdict=ok
  if [ "$rc" = 124 ]; then verdict="hung (killed after $case_limit s)"
  elif [ "$mb" -gt "$limit_mb" ]; then verdict="used $mb MB"
  elif [ "$want" = ok ] && [ "$rc" != 0 ]; then verdict="exit $rc, expected a result"
  elif [ "$want" = none ] && { [ "$rc" != 1 ] || [ -z "$first" ]; }; then
    verdict="exit $rc, expected \"No valid plan\" and exit 1"
  elif [ "$want" != ok ] && [ "$want" != none ]; then
    if [ "$rc" != 2 ]; then verdict="exit $rc, expected 2"
    elif ! grep -qF -- "$want" err.txt; then verdict="no \"$want\""
    fi
  fi
  if [ "$verdict" != ok ]; then
    failures=$((failures + 1))
    echo "FAIL: $name: $verdict"
    cat err.txt
  fi
  printf '%-44s exit %-3s %6s s %6s MB  %s\n' "$name" "$rc" "$seconds" "$mb" "$first"
  rows+=("| $name | \`ptdp $*\` | $rc | ${first//|/\\|} | $seconds | $mb |")
}

# Flags: sizes, counts and fractions.
expect "0 GPUs" "--gpus: must be positive" "${pln[@]}" --global-batch 64 --gpus 0
expect "10^7 GPUs" "--gpus: at most 1048576" "${pln[@]}" --global-batch 64 --gpus 10000000
expect "2^63 GPUs" "--gpus" "${pln[@]}" --global-batch 64 --gpus $big
expect "2^20 GPUs, 175B, batch 2^20" ok plan --model gpt3-175b --cluster dgx-a100-80gb --gpus 1048576 --global-batch 1048576
expect "global batch 1e18" "--global-batch" "${pln[@]}" --gpus 16 --global-batch 1e18
expect "tp NaN" "--tp" "${sim[@]}" --pp 1 --tp nan
expect "tp infinity" "--tp" "${sim[@]}" --pp 1 --tp inf
expect "tp 1e308" "--tp" "${sim[@]}" --pp 1 --tp 1e308
expect "tp 2^63" "--tp" "${sim[@]}" --pp 1 --tp $big
expect "tp -0" "--tp" "${sim[@]}" --pp 1 --tp -0
expect "micro-batch 2^63" "--micro-batch" "${sim[@]}" --tp 1 --pp 1 --micro-batch $big
expect "memory headroom NaN" "--memory-headroom" "${pln[@]}" --global-batch 64 --gpus 16 --memory-headroom nan
expect "memory headroom infinity" "--memory-headroom" "${pln[@]}" --global-batch 64 --gpus 16 --memory-headroom inf
expect "memory headroom 1e308" "--memory-headroom" "${pln[@]}" --global-batch 64 --gpus 16 --memory-headroom 1e308
expect "MoE load imbalance NaN" "--moe-load-imbalance" simulate --model mixtral-8x7b --cluster dgx-h100 --gpus 64 --global-batch 256 --tp 1 --pp 1 --ep 8 --moe-load-imbalance nan
expect "MoE load imbalance 1e308" "--moe-load-imbalance" simulate --model mixtral-8x7b --cluster dgx-h100 --gpus 64 --global-batch 256 --tp 1 --pp 1 --ep 8 --moe-load-imbalance 1e308
expect "SVG until NaN" "--svg-until" "${sim[@]}" --tp 1 --pp 2 --svg t.svg --svg-until nan
expect "SVG until 1e308" ok "${sim[@]}" --tp 1 --pp 2 --svg t.svg --svg-until 1e308
expect "sequence 1" ok "${pln[@]}" --global-batch 64 --gpus 16 --seq-length 1
expect "sequence 10^7 beyond the positions" "max_position_embeddings" "${pln[@]}" --global-batch 64 --gpus 16 --seq-length 10000000
expect "sequence 10^7" none plan --model "$(model max_position_embeddings 16777216)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64 --seq-length 10000000
expect "sequence 2^24 + 1" "--seq-length" "${pln[@]}" --global-batch 64 --gpus 16 --seq-length 16777217
# Model files.
expect "hidden NaN" "hidden_size" plan --model "$(model hidden_size .nan)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64
expect "hidden infinity" "hidden_size" plan --model "$(model hidden_size .inf)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64
expect "hidden 1e308" "hidden_size" plan --model "$(model hidden_size 1e308)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64
expect "hidden 2^63" "hidden_size" plan --model "$(model hidden_size $big)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64
expect "hidden 10^9" "hidden_size" plan --model "$(model hidden_size 1000000000)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64
expect "layers 10^6" "num_layers" plan --model "$(model num_layers 1000000)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64
expect "vocabulary 0" "vocab_size" plan --model "$(model vocab_size 0)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64
expect "dropout NaN" "hidden_dropout" plan --model "$(model hidden_dropout .nan)" --cluster dgx-a100-80gb --gpus 16 --global-batch 64
sed -E -e "s/^(num_layers):.*/\1: 16384/" -e "s/^(hidden_size):.*/\1: 16777216/" \
  -e "s/^(num_attention_heads):.*/\1: 131072/" -e "s/^(ffn_hidden_size):.*/\1: 16777216/" \
  "$root/models/gpt3-1.3b.yaml" >huge.yaml
# The largest search there is: 16 million candidates, half a minute.
LIMIT=$((limit_s * 6)) expect "10^19 parameters (every size at its limit)" none plan --model huge.yaml --cluster dgx-a100-80gb --gpus 1048576 --global-batch 1048576
sed -E -e "s/^(num_layers):.*/\1: 128/" -e "s/^(hidden_size):.*/\1: 81920/" \
  -e "s/^(num_attention_heads):.*/\1: 640/" -e "s/^(ffn_hidden_size):.*/\1: 327680/" \
  "$root/models/gpt3-1.3b.yaml" >ten-trillion.yaml
expect "10^13 parameters on 10^4 GPUs" ok plan --model ten-trillion.yaml --cluster dgx-h100 --gpus 16384 --global-batch 4096
# Hardware profiles.
sed -E -e "s/^(  hbm_bytes):.*/\1: 1048576/" -e "s/^(  reserved_bytes):.*/\1: 0/" \
  "$root/hwprofiles/dgx-a100-80gb.yaml" >one-megabyte.yaml
expect "a GPU with 1 MB" none plan --model gpt3-1.3b --cluster one-megabyte.yaml --gpus 16 --global-batch 64
expect "reserved memory above a 1 MB GPU's" "gpu.reserved_bytes" plan --model gpt3-1.3b --cluster "$(profile hbm_bytes 1048576)" --gpus 16 --global-batch 64
expect "peak TFLOPS NaN" "peak_bf16_tflops" plan --model gpt3-1.3b --cluster "$(profile peak_bf16_tflops .nan)" --gpus 16 --global-batch 64
expect "peak TFLOPS infinity" "peak_bf16_tflops" plan --model gpt3-1.3b --cluster "$(profile peak_bf16_tflops .inf)" --gpus 16 --global-batch 64
expect "peak TFLOPS 1e308" "peak_bf16_tflops: expected a rate between" plan --model gpt3-1.3b --cluster "$(profile peak_bf16_tflops 1e308)" --gpus 16 --global-batch 64
expect "HBM bandwidth 1e-320 (subnormal)" "hbm_bandwidth_gb_per_s" plan --model gpt3-1.3b --cluster "$(profile hbm_bandwidth_gb_per_s 1e-320)" --gpus 16 --global-batch 64
expect "NVLink bandwidth 0" "nvlink_gb_per_s" plan --model gpt3-1.3b --cluster "$(profile nvlink_gb_per_s 0)" --gpus 16 --global-batch 64
expect "HBM bytes 2^63" "hbm_bytes" plan --model gpt3-1.3b --cluster "$(profile hbm_bytes $big)" --gpus 16 --global-batch 64
# Plan files.
expect "plan tp 2^63" "parallel.tp" simulate --plan "$(plan tp $big)"
expect "plan tp NaN" "parallel.tp" simulate --plan "$(plan tp .nan)"
expect "plan micro-batch 10^9" "parallel" simulate --plan "$(plan micro_batch_size 1000000000)"

# issue 35: what check reads. --file is a regular file of at most 1 MiB (never a device or a
# FIFO, which would block); a script sources files only in its own folder (else --allow-source);
# a megabyte-long word is quoted by its start and size.
mkdir -p reads/project reads/outside && rm -f reads/fifo.sh && mkfifo reads/fifo.sh
echo "SECRET=issue35-marker-3f9a" >reads/outside/secret.env
complete_command="torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 --bf16"
printf 'source /proc/self/environ\n%s\n' "$complete_command" >reads/project/proc.sh
printf 'source ../outside/secret.env\n%s\n' "$complete_command" >reads/project/outside.sh
{ printf '%s --' "$complete_command"; head -c 1000000 /dev/zero | tr '\0' x; echo; } >reads/big-flag.sh
# said: the output holds TEXT and not NOT (after the case just run).
said() {
  if ! grep -qF -- "$1" out.txt || { [ -n "${2:-}" ] && grep -qF -- "$2" out.txt err.txt; }; then
    failures=$((failures + 1))
    echo "FAIL: expected \"$1\"${2:+ and no \"$2\"} in the output"
  fi
}
expect "check --file /dev/zero" "--file: /dev/zero is not a regular file" check --file /dev/zero
expect "check --file a FIFO" "--file: reads/fifo.sh is not a regular file" check --file reads/fifo.sh
expect "source /proc/self/environ" ok check --file reads/project/proc.sh
said "/proc/self/environ was not read: ptdp never reads /proc, /sys or /dev"
expect "source ../outside" ok check --file reads/project/outside.sh
said "../outside/secret.env was not read: it lies outside the script's folder" issue35-marker-3f9a
expect "a 1 MB flag in a launch script" "unrecognized arguments: --xxxxxxxx" simulate --cluster dgx-h100 --file reads/big-flag.sh
[ "$(wc -c <err.txt)" -lt 2000 ] && grep -qF "... (1000002 bytes)" err.txt \
  || { failures=$((failures + 1)); echo "FAIL: the 1 MB flag is not quoted short ($(wc -c <err.txt) bytes)"; }

# issue 35: bounds. Every size a Hugging Face config gives has its model-YAML bound; vTrain CSV
# rows are bounded as model files and their times are normal numbers; efficiencies have a floor;
# a schedule is at most 2^19 forward passes (schedule, simulate, plan); a YAML map is read in
# linear time; CR-only line ends are line breaks.
mkdir -p bounds/deep-gpt2
echo '{"model_type": "gpt2", "n_layer": 100000, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}' \
  >bounds/deep-gpt2/config.json
expect "HF GPT-2 n_layer 100000" "n_layer: at most 16384, got 100000" plan --model bounds/deep-gpt2/config.json --cluster dgx-a100-80gb --gpus 16 --global-batch 64
vtrain_header=$(head -n 1 "$root/results/validation/vtrain/ground_truth_single.csv")
printf '%s\n2,16,8,1000000000,16,24,1024,1,1,2,372.160408\n' "$vtrain_header" >bounds/vtrain-hidden.csv
expect "vTrain hidden 10^9" "vtrain-hidden.csv:2: column 4 (hidden size): at most 16777216" replay --dataset bounds/vtrain-hidden.csv
printf '%s\n2,16,8,1024,16,24,1024,1,1,2,1e-320\n' "$vtrain_header" >bounds/vtrain-time.csv
expect "vTrain time 1e-320 ms" "vtrain-time.csv:2: column 11 (iteration time (ms)): expected a time between" replay --dataset bounds/vtrain-time.csv
awk '!done && /efficiency: [0-9.]+\}/ { sub(/efficiency: [0-9.]+\}/, "efficiency: 1e-320}"); done = 1 } { print }' \
  "$root/hwprofiles/dgx-a100-80gb.yaml" >bounds/gemm-1e-320.yaml
expect "GEMM efficiency 1e-320" "gpu.gemm_efficiency[0].efficiency: expected an efficiency between 0.0001 and 1, got 1e-320" plan --model gpt3-1.3b --cluster bounds/gemm-1e-320.yaml --gpus 16 --global-batch 64
expect "memory efficiency 1e-320" "gpu.memory_efficiency: expected an efficiency between" plan --model gpt3-1.3b --cluster "$(profile memory_efficiency 1e-320)" --gpus 16 --global-batch 64
expect "schedule pp 256 x 10^5 micro-batches" "--microbatches: 256 pipeline stages x 100000 micro-batches" schedule --pp 256 --microbatches 100000
expect "schedule at the bound (2^19)" ok schedule --pp 512 --microbatches 1024 --format json
expect "simulate pp 32 x 2^19 micro-batches" "--global-batch: 32 pipeline stages x 524288 micro-batches" simulate --model gpt3-175b --cluster dgx-a100-80gb --gpus 64 --tp 1 --pp 32 --micro-batch 1 --global-batch 1048576
expect "175B on 64 GPUs, batch 2^20" ok plan --model gpt3-175b --cluster dgx-a100-80gb --gpus 64 --global-batch 1048576
{ cat "$root/models/gpt3-1.3b.yaml"; seq 0 199999 | sed 's/^/k/; s/$/: 1/'; } >bounds/200k-keys.yaml
expect "model YAML with 200,000 keys" "k0: unknown key" plan --model bounds/200k-keys.yaml --cluster dgx-a100-80gb --gpus 16 --global-batch 64
{ cat "$root/models/gpt3-1.3b.yaml"; echo "k1: 1"; seq 2 199999 | sed 's/^/k/; s/$/: 1/'; echo "k1: 2"; } >bounds/200k-keys-duplicate.yaml
expect "model YAML with 200,000 keys, one twice" "k1: duplicate key (first at line" plan --model bounds/200k-keys-duplicate.yaml --cluster dgx-a100-80gb --gpus 16 --global-batch 64
tr '\n' '\r' <"$root/models/gpt3-1.3b.yaml" >bounds/cr-only.yaml
expect "model YAML with CR-only line ends" ok plan --model bounds/cr-only.yaml --cluster dgx-a100-80gb --gpus 16 --global-batch 64
sed 's/^hidden_size: .*/hidden_size: 0/' "$root/models/gpt3-1.3b.yaml" | tr '\n' '\r' >bounds/cr-only-bad.yaml
expect "CR-only YAML, an error's line" "cr-only-bad.yaml:$(grep -n '^hidden_size:' "$root/models/gpt3-1.3b.yaml" | cut -d: -f1): hidden_size: must be positive" plan --model bounds/cr-only-bad.yaml --cluster dgx-a100-80gb --gpus 16 --global-batch 64

if [ -n "$markdown" ]; then
  {
    echo "| case | command | exit | answer (first line) | seconds | peak MB |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
  } >"$markdown"
fi
[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "PASS: limits"
