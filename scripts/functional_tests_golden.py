#!/usr/bin/env python3
"""Extracts the measured memory and iteration time of Megatron-LM's functional tests.

Megatron-LM's CI runs each test case of tests/functional_tests/test_cases/<model>/<case>/ on a
DGX (H100 or A100) and keeps what the last rank (rank world_size - 1, the one that holds the
TensorBoard writer: megatron/training/global_vars.py _set_tensorboard_writer) logged per step in
golden_values_dev_dgx_<gpu>.json:

  mem-allocated-bytes      torch.cuda.memory_stats()["allocated_bytes.all.current"] when the
                           step is logged (after the optimizer step)
  mem-max-allocated-bytes  torch.cuda.memory_stats()["allocated_bytes.all.peak"] (since the
                           process started: the peak of the whole run so far)
  iteration-time           seconds per step (training.py training_log)

(megatron/training/training.py training_log, `if args.log_memory_to_tensorboard`.)

For every case that tests/fixtures/megatron_corpus keeps (a pretrain_gpt/mamba/hybrid command)
and that has golden values for a GPU, writes one row:

  case  model_dir  gpu  gpus  allocated_bytes  max_allocated_bytes  iteration_time_s  steps
  gpus_from  half

allocated_bytes: the median of the logged values; max_allocated_bytes: the largest; the
iteration time: the median of the values from step 3 on (steps 1 and 2 warm up), empty when none
was logged; steps: how many steps logged memory. gpus: the corpus's GPU count for the case; gpus_from: where that count comes from
(h100-recipe, gb200-recipe, or default: no recipe runs the case, the harness's 1 x 8).

half: "fit" or "test", by a rule fixed before any error was looked at (2026-12-04): a case is in
the test half when the SHA-256 of its name, read as a number, is odd. The split is by case, so a
case is in the same half on every GPU.

Usage: scripts/functional_tests_golden.py --megatron /tmp/megatron > \
           results/validation/megatron-functional-tests/golden.tsv
"""

import argparse
import hashlib
import json
import pathlib
import re
import statistics
import sys

GPUS = {"h100": "golden_values_dev_dgx_h100.json", "a100": "golden_values_dev_dgx_a100.json"}


def half_of(case):
    return "test" if int(hashlib.sha256(case.encode()).hexdigest(), 16) % 2 == 1 else "fit"


def numbers(metric):
    if not isinstance(metric, dict) or "values" not in metric:
        return {}
    return {int(k): float(v) for k, v in metric["values"].items() if v != "nan"}


def gpu_count(launch):
    # "pretrain_gpt.py 8x1 GPUs (...)": GPUs per node x nodes; None for a case of several runs.
    m = re.fullmatch(r"\S+ (\d+)x(\d+) GPUs \(.*", launch)
    return int(m[1]) * int(m[2]) if m else None


def gpus_from(launch):
    # Where the corpus's GPU count comes from: an H100 recipe, a GB200 one, or the harness's
    # defaults (1 node x 8). Only an H100 recipe says how CI ran the case on a DGX.
    where = launch.split("(", 1)[1]
    return "h100-recipe" if where.startswith("tests/test_utils/recipes/h100") else \
        "gb200-recipe" if where.startswith("tests/test_utils/recipes/gb200") else "default"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", required=True, help="a Megatron-LM checkout")
    ap.add_argument("--corpus", default="tests/fixtures/megatron_corpus")
    args = ap.parse_args()
    cases = pathlib.Path(args.megatron) / "tests/functional_tests/test_cases"
    if not cases.is_dir():
        sys.exit(f"{cases}: not a directory (is --megatron a Megatron-LM checkout?)")
    tsv = pathlib.Path(args.corpus) / "functional-tests.tsv"
    print("case\tmodel_dir\tgpu\tgpus\tallocated_bytes\tmax_allocated_bytes\titeration_time_s"
          "\tsteps\tgpus_from\thalf")
    for line in tsv.read_text().splitlines()[1:]:
        case, model_dir, status, launch = line.split("\t")
        if status != "kept":
            continue
        if gpu_count(launch) is None:
            print(f"{case}: skipped, several runs on different GPU counts: {launch}",
                  file=sys.stderr)
            continue
        for gpu, name in GPUS.items():
            path = cases / model_dir / case / name
            if not path.exists():
                continue
            golden = json.loads(path.read_text())
            alloc = numbers(golden.get("mem-allocated-bytes"))
            peak = numbers(golden.get("mem-max-allocated-bytes"))
            if not alloc or not peak:
                continue
            times = [v for k, v in numbers(golden.get("iteration-time")).items() if k >= 3]
            time = f"{statistics.median(times):.5f}" if times else ""
            print(f"{case}\t{model_dir}\t{gpu}\t{gpu_count(launch)}\t"
                  f"{statistics.median(alloc.values()):.0f}\t{max(peak.values()):.0f}\t{time}\t"
                  f"{len(alloc)}\t{gpus_from(launch)}\t{half_of(case)}")


if __name__ == "__main__":
    main()
