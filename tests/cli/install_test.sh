#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then the installed binary run from another folder:
# a plan with a preset, the man page, the bash and zsh completions.
#   install_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1
work=$2
rm -rf "$work"
mkdir -p "$work/prefix" "$work/elsewhere"
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install"; }
p=$work/prefix
for f in bin/ptdp share/man/man1/ptdp.1 share/bash-completion/completions/ptdp \
  share/zsh/site-functions/_ptdp share/ptdp/models/gpt3-1.3b.yaml \
  share/ptdp/hwprofiles/dgx-a100-80gb.yaml; do
  [ -f "$p/$f" ] || fail "not installed: $f"
done

# From a folder with nothing of the source tree: the presets are in the binary.
cd "$work/elsewhere"
"$p/bin/ptdp" plan --model gpt3-1.3b --cluster dgx-a100-80gb --gpus 16 --global-batch 64 \
  --top 1 >plan.txt || { cat plan.txt; fail "installed ptdp plan"; }
grep -q "Best plan as Megatron-LM flags" plan.txt || fail "plan output"
# An installed preset file is a model file ptdp reads.
"$p/bin/ptdp" simulate --model "$p/share/ptdp/models/gpt3-1.3b.yaml" --cluster \
  "$p/share/ptdp/hwprofiles/dgx-a100-80gb.yaml" --gpus 8 --global-batch 64 --tp 2 --pp 1 \
  >sim.txt || { cat sim.txt; fail "simulate with the installed preset files"; }

# The man page renders and has every command.
if command -v groff >/dev/null; then
  groff -man -Tutf8 -ww -z "$p/share/man/man1/ptdp.1" 2>groff.err || fail "groff"
  [ ! -s groff.err ] || { cat groff.err; fail "groff warnings"; }
  groff -man -Tascii "$p/share/man/man1/ptdp.1" 2>/dev/null | col -b >man.txt
  for c in plan simulate check execute validate calibrate models profiles; do
    grep -q "ptdp $c" man.txt || fail "man page lacks ptdp $c"
  done
else
  echo "groff not installed: the man page is not rendered"
fi

# bash: the script parses and completes a command name and a flag.
bash -n "$p/share/bash-completion/completions/ptdp" || fail "bash -n"
out=$(bash -c '
  source "$1"
  COMP_WORDS=(ptdp sim); COMP_CWORD=1; _ptdp; echo "${COMPREPLY[*]}"
  COMP_WORDS=(ptdp simulate --memory-u); COMP_CWORD=2; _ptdp; echo "${COMPREPLY[*]}"
  COMP_WORDS=(ptdp plan --model llama3-4); COMP_CWORD=3; _ptdp; echo "${COMPREPLY[*]}"
  COMP_WORDS=(ptdp simulate --memory-unit G); COMP_CWORD=3; _ptdp; echo "${COMPREPLY[*]}"
  COMP_WORDS=(ptdp schedule --format ""); COMP_CWORD=3; _ptdp; echo "${COMPREPLY[*]}"
' _ "$p/share/bash-completion/completions/ptdp")
expected=$'simulate\n--memory-unit\nllama3-405b\nGiB GB\ntext json'
[ "$out" == "$expected" ] || fail "bash completion gave:
$out
expected:
$expected"

if command -v zsh >/dev/null; then
  zsh -n "$p/share/zsh/site-functions/_ptdp" || fail "zsh -n"
else
  echo "zsh not installed: the zsh completion is not parsed"
fi
echo "PASS: install"
