#!/usr/bin/env bash
# Runs shellcheck over the scripts users run as they are: results/cluster's Slurm batch script.
# Exit 77 (ctest: skipped, with the reason printed) where shellcheck is not installed
# (scripts/setup installs it).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v shellcheck >/dev/null; then
  echo "SKIPPED: shellcheck is not installed (scripts/setup installs it)"
  exit 77
fi
shellcheck --version | sed -n 2p
scripts=("$root"/results/cluster/*.sbatch)
shellcheck --shell=bash "${scripts[@]}"
echo "PASS: shellcheck of ${#scripts[@]} script(s): ${scripts[*]#"$root"/}"
