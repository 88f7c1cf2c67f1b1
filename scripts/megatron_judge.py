#!/usr/bin/env python3
"""Asks Megatron-LM itself whether it accepts each command of tests/fixtures/megatron_corpus/.

    /path/to/venv/bin/python scripts/megatron_judge.py --megatron /tmp/megatron

Needs a Megatron-LM checkout (its `megatron` package is imported from there, nothing is
installed) and a Python >= 3.12 with torch (CPU build is enough), PyYAML, numpy and packaging.
Writes, in tests/fixtures/megatron_corpus/:

  verdicts.tsv    file, world_size, positional_args, verdict (accept/refuse), message, origin
  launch_env.tsv  the environment variables Megatron's validate_args reads, as set at launch
  argv/<corpus path without .sh>.argv   the exact argv bash hands to the training script

and prints a summary (counts, and the refusal messages grouped).

Step 1, the argv as bash passes it. Each corpus file runs under `bash FILE ARGS...` in an empty
scratch directory with a clean, fixed environment (`env -i`, HOME in the scratch directory,
LANG=C.UTF-8) and a PATH whose first directory holds stub executables:

  torchrun, ft_launcher, deepspeed   record their argv, environment and cwd; run nothing
  python, python3                    `-m torch.distributed.run|launch ...` or `SCRIPT.py ...`:
                                     recorded like torchrun; `-c ...` and other modules: no-op
  srun, mpirun                       record their argv as a launcher stage, export the SLURM_*/
                                     OMPI_* counts a task would see, then run their command
  sbatch                             reads #SBATCH lines of the script (a file or stdin),
                                     applies --export=, runs the script at once with bash
  uv (`uv run ...`), nsys (`nsys profile ...`)   run the wrapped command
  nvidia-smi                         lists 8 H100s; git (`rev-parse` prints a fixed hash);
                                     scontrol (`show hostnames` prints node names)
  mkdir                              creates relative paths and paths inside the scratch
                                     directory only; rm, touch, cp, mv, ln, chmod, pip, pip3,
                                     wget, curl, huggingface-cli, hf, sleep: no-ops; tee copies
                                     stdin to stdout and writes nothing
and BASH_ENV defines `cd` as a function that never fails (a script that cds into a directory of
the training cluster keeps going in the scratch directory). Each recorded launch of
pretrain_gpt.py / pretrain_mamba.py / pretrain_hybrid.py is one row (file#1, file#2 when a file
launches several). Per-file inputs (positional arguments such as `/ckpt` for
train_gpt3_175b_distributed.sh, environment the example's README says to set, values for the
fill-in-the-blank markers of the sc21 CONFIG.sh and of the #SBATCH lines of
sbatch_mfsdp_deepseek_v3.sh, support files copied into the scratch directory) are in INPUTS
below and in the README.

World size: torchrun-style launchers: --nproc-per-node (gpu/auto = 8) x --nnodes (the upper
bound of MIN:MAX); srun: -n/--ntasks, else nodes x --ntasks-per-node (from its options or the
enclosing sbatch); mpirun: -np/-n; a bare `python script.py`: 1.

Step 2, Megatron's verdict. One process imports megatron from the checkout once, then forks a
child per command. The child sets os.environ to the environment recorded at launch plus
WORLD_SIZE, RANK=0, LOCAL_RANK=0, LOCAL_WORLD_SIZE (what torchrun gives rank 0), sets sys.argv to
[script, args...], and does what the script's parse_and_validate_args does up to (not including)
set_global_variables (which builds the tokenizer from files): parse_args(extra_args_provider),
load_args_from_checkpoint when --use-checkpoint-args (not possible here: reported as an error),
then validate_yaml or validate_args(args, args_defaults). extra_args_provider and args_defaults
are read from the training script's source with `ast` (nothing of it is executed):
pretrain_gpt.py and pretrain_hybrid.py pass `add_modelopt_args if has_nvidia_modelopt else None`
and {'tokenizer_type': 'GPT2BPETokenizer'}; has_nvidia_modelopt is taken as true (NVIDIA's
training container ships nvidia-modelopt, and the functional tests use its options);
pretrain_mamba.py runs pretrain_hybrid.py. An argparse SystemExit is a refusal with argparse's
message (from stderr); an exception from validate_args (AssertionError, ValueError,
RuntimeError, ...) is a refusal with its text. A failure that only a CPU-only machine would
have is an `error` row, not a refusal, and the run exits non-zero.

Stubs, so that the verdict is the one of a Megatron-LM install on an H100 cluster with the
current Transformer Engine (applied in the worker before megatron is imported):
  * torch.cuda.is_available() -> True, torch.cuda.device_count() -> 8,
    torch.cuda.get_device_capability() -> (9, 0), torch.cuda.get_device_properties() -> an H100
    (major 9, minor 0, 80 GiB, 132 SMs): validate_args asks for the compute capability
    (--moe-grouped-gemm) and the architecture (get_device_arch_version: TP/CP and
    CUDA_DEVICE_MAX_CONNECTIONS rules, FSDP rules).
  * megatron.core.utils._te_version = 2.17.1 (the Transformer Engine that uv.lock pins), so
    is_te_min_version()/get_te_version() answer as with TE installed (there is no TE here).
  * nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager.LocalCheckpointManager:
    an empty module, imported by validate_args for --non-persistent-ckpt-type local (the package
    is in NVIDIA's container; it has no CPU wheel role here).
  * add_modelopt_args as the extra_args_provider (see above), without importing modelopt.
Nothing else is stubbed: flashinfer, torch_memory_saver, kitchen and multistorageclient are
taken as not installed, as on a plain cluster install.
"""

from __future__ import annotations

import argparse
import ast
import collections
import io
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

REPO = pathlib.Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "megatron_corpus"
TRAINING_SCRIPTS = ("pretrain_gpt.py", "pretrain_mamba.py", "pretrain_hybrid.py")
TE_VERSION = "2.17.1"
FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"
FIXED_TIME = "1787356800"  # what the `date` stub prints: 2026-08-22 00:00:00 UTC

# Environment variables Megatron-LM's parse_args/validate_args read at this commit (besides
# RANK, WORLD_SIZE, LOCAL_RANK, which the judge sets): megatron/training/arguments.py, and
# megatron/training/determinism.py under --deterministic-mode. In launch_env.tsv, followed by every
# NVTE_* variable. (validate_args also calls torch.distributed.is_initialized(), through
# print_rank_0/warn_rank_0; it is False at that point on a cluster too.)
ENV_READ = [
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_GRAPHS_USE_NODE_PRIORITY",
    "NCCL_PROTO",
    "NCCL_GRAPH_REGISTER",
    "PYTORCH_CUDA_ALLOC_CONF",
    "NVTE_CPU_OFFLOAD_V1",
    "NCCL_ALGO",
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO",
    "CUBLAS_WORKSPACE_CONFIG",
    "MAMBA_DETERMINISTIC",
    "CAUSAL_CONV1D_DETERMINISTIC",
]

# Inputs a user gives each example: positional arguments, environment, fill-ins for
# placeholders in submitted job scripts, support files copied into the scratch directory, and
# directories that must exist there.
INPUTS = {
    "examples/gpt3-train_gpt3_175b_distributed.sh": dict(
        args=["/ckpt", "/tb", "/vocab.json", "/merges.txt", "/data/my-gpt3_00_text_document"],
    ),
    "examples/llama-train_llama3_8b_h100_fp8.sh": dict(),  # all positional args default (MOCK)
    "examples/mixtral-train_mixtral_8x7b_distributed.sh": dict(
        args=["/ckpt", "/tokenizer.model", "/data/my-mixtral_00_text_document"],
    ),
    "examples/megatron_fsdp-train_llama3_8b_fsdp_h100_fp8.sh": dict(),  # defaults (MOCK)
    "examples/megatron_fsdp-sbatch_mfsdp_deepseek_v3.sh": dict(
        # examples/megatron_fsdp/README.md: MEGATRON_PATH, CONTAINER_IMAGE, OUTPUT_PATH and
        # DATA_PATH are required; "update the #SBATCH directives ... to match your cluster".
        env={
            "MEGATRON_PATH": "/opt/megatron-lm",
            "CONTAINER_IMAGE": "/images/megatron.sqsh",
            "OUTPUT_PATH": "/output",
            "DATA_PATH": "/data/my-dsv3_00_text_document",
        },
        fill_ins={
            "your_own_num_nodes": "32",
            "your_own_tasks_per_node": "8",
            "your_own_gpu_per_node": "8",
        },
    ),
    "examples/mamba-train.sh": dict(
        args=["/data/my-mamba_00_text_document", "/tokenizer.model"],
    ),
    "examples/gptoss-02_train.sh": dict(
        args=["--checkpoint-path", "checkpoints/gpt-oss"],  # must be an existing directory
        dirs=["checkpoints/gpt-oss"],
    ),
}
SC21_FILL_INS = {
    "<slurm partition, used to feed -p option in slurm>": "batch",
    "<slurm account, used to feed -A option in slurm>": "megatron",
    "<megatron source code directory>": "/opt/megatron-lm",
    "<megatron dataset and bpe tokenizer vocab path>": "/data",
    "<path to megatron processed data>": "/data/my-gpt2_text_document",
    "<path to bpe vocab file>": "/data/gpt2-vocab.json",
    "<path to bpe merges file>": "/data/gpt2-merges.txt",
}
for _fig in ["11", "12", "13", "14", "15", "16", "17", "18"]:
    INPUTS[f"examples/academic_paper_scripts-sc21-run_figure_{_fig}.sh"] = dict(
        support={"CONFIG.sh": "academic_paper_scripts/sc21/CONFIG.sh",
                 "SBATCH.sh": "academic_paper_scripts/sc21/SBATCH.sh",
                 "SRUN.sh": "academic_paper_scripts/sc21/SRUN.sh"},
        support_fill_ins=SC21_FILL_INS,
    )
INPUTS["examples/academic_paper_scripts-sc21-run_table_1.sh"] = INPUTS[
    "examples/academic_paper_scripts-sc21-run_figure_11.sh"]

# ------------------------------------------------------------------------------------------
# stubs (step 1)

STUB_NAMES = [
    "torchrun", "ft_launcher", "deepspeed", "python", "python3", "srun", "mpirun", "sbatch",
    "uv", "nsys", "nvidia-smi", "git", "scontrol", "mkdir", "rm", "touch", "cp", "mv", "ln",
    "chmod", "pip", "pip3", "wget", "curl", "huggingface-cli", "hf", "sleep", "tee", "date",
]

STUB_PY = r'''
import json, os, sys

name = sys.argv[1]
argv = sys.argv[2:]
OUT = os.environ["JUDGE_OUT"]
SCRATCH = os.environ["JUDGE_SCRATCH"]


def next_id():
    p = os.path.join(OUT, "counter")
    n = int(open(p).read()) + 1 if os.path.exists(p) else 1
    open(p, "w").write(str(n))
    return n


def chain():
    c = os.environ.get("JUDGE_CHAIN", "")
    return json.loads(c) if c else []


def record(kind, words):
    n = next_id()
    with open(os.path.join(OUT, "launch.%d.json" % n), "w") as f:
        json.dump(dict(kind=kind, argv=words, env=dict(os.environ), cwd=os.getcwd(),
                       chain=chain()), f)


def run(cmd, extra_env, stage):
    env = dict(os.environ)
    env.update(extra_env)
    env["JUDGE_CHAIN"] = json.dumps(chain() + [stage])
    if not cmd:
        sys.exit(0)
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)


def split_opts(words, flags, long_flags, stop_at_first_positional=True):
    """Options of a launcher (values as separate words or attached) and the command."""
    i = 0
    opts = []
    while i < len(words):
        w = words[i]
        if w == "--":
            return opts, words[i + 1:]
        if not w.startswith("-") or w == "-":
            break
        if w.startswith("--"):
            if "=" in w or w in long_flags:
                opts.append(w); i += 1
            else:
                opts.extend(words[i:i + 2]); i += 2
        else:
            if w in flags or len(w) > 2:
                opts.append(w); i += 1
            else:
                opts.extend(words[i:i + 2]); i += 2
    return opts, words[i:]


def opt_value(opts, shorts, longs):
    val = None
    i = 0
    while i < len(opts):
        w = opts[i]
        for l in longs:
            if w == l and i + 1 < len(opts):
                val = opts[i + 1]
            elif w.startswith(l + "="):
                val = w[len(l) + 1:]
        for s in shorts:
            if w == s and i + 1 < len(opts):
                val = opts[i + 1]
            elif w.startswith(s) and len(w) > len(s) and not w.startswith("--"):
                val = w[len(s):]
        i += 1
    return val


def as_int(v):
    try:
        return int(str(v).split("-")[-1].split(":")[-1])
    except (TypeError, ValueError):
        return None


if name in ("torchrun", "ft_launcher", "deepspeed"):
    record(name, [name] + argv)
    sys.exit(0)

if name in ("python", "python3"):
    i = 0
    while i < len(argv):
        w = argv[i]
        if w in ("-W", "-X"):
            i += 2
        elif w == "-m":
            mod = argv[i + 1] if i + 1 < len(argv) else ""
            if mod in ("torch.distributed.run", "torch.distributed.launch"):
                record("python-m-" + mod, [name] + argv)
            sys.exit(0)
        elif w == "-c" or w.startswith("-c"):
            sys.exit(0)
        elif w.startswith("-") and w != "-":
            i += 1
        else:
            record("python", [name] + argv)
            sys.exit(0)
    sys.exit(0)

if name == "srun":
    flags = {"-l", "-u", "-v", "-Q", "-E", "-h", "-k", "-K", "-O", "-s", "-X", "-Z", "-H", "-I"}
    long_flags = {"--exclusive", "--overcommit", "--label", "--unbuffered", "--pty", "--verbose",
                  "--quiet", "--no-kill", "--kill-on-bad-exit", "--oversubscribe", "--overlap",
                  "--exact", "--disable-status", "--multi-prog", "--container-remap-root",
                  "--no-container-remap-root", "--container-mount-home",
                  "--no-container-mount-home", "--container-writable", "--container-readonly",
                  "--no-container-entrypoint", "--container-entrypoint", "--test-only",
                  "--spread-job", "--use-min-nodes", "--whole", "--preserve-env", "--nice"}
    opts, cmd = split_opts(argv, flags, long_flags)
    nodes = as_int(opt_value(opts, ["-N"], ["--nodes"])) or as_int(os.environ.get("SLURM_NNODES")) or 1
    ntasks = as_int(opt_value(opts, ["-n"], ["--ntasks"]))
    tpn = as_int(opt_value(opts, [], ["--ntasks-per-node"])) or as_int(
        os.environ.get("SLURM_NTASKS_PER_NODE")) or 1
    if ntasks is None:
        ntasks = nodes * tpn
    extra = {"SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
             "SLURM_NTASKS": str(ntasks), "SLURM_NPROCS": str(ntasks),
             "SLURM_NTASKS_PER_NODE": str(tpn), "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
             "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": str(ntasks)}
    run(cmd, extra, dict(name="srun", argv=["srun"] + opts, world_size=ntasks))

if name == "mpirun":
    flags = {"--allow-run-as-root", "--oversubscribe", "--tag-output", "--bind-to-core",
             "--report-bindings", "-q", "-v", "--display-map"}
    i = 0
    opts = []
    np_ = None
    while i < len(argv) and argv[i].startswith("-"):
        w = argv[i]
        if w in ("-np", "-n", "--np", "-c"):
            np_ = as_int(argv[i + 1]); opts += argv[i:i + 2]; i += 2
        elif w in flags or "=" in w:
            opts.append(w); i += 1
        elif w in ("-x",):
            opts += argv[i:i + 2]; i += 2
        else:
            opts += argv[i:i + 2]; i += 2
    cmd = argv[i:]
    np_ = np_ or 1
    run(cmd, {"OMPI_COMM_WORLD_SIZE": str(np_), "OMPI_COMM_WORLD_RANK": "0",
              "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
        dict(name="mpirun", argv=["mpirun"] + opts, world_size=np_))

if name == "sbatch":
    flags = {"--exclusive", "--overcommit", "-H", "--hold", "-Q", "--quiet", "--parsable",
             "--wait", "-W", "--requeue", "--no-requeue", "-v", "--verbose", "-O",
             "--get-user-env", "--ignore-pbs", "--test-only", "--use-min-nodes", "-h"}
    opts, rest = split_opts(argv, flags, flags)
    if rest:
        script_path, script_args = rest[0], rest[1:]
        text = open(script_path).read()
    else:
        script_path, script_args = None, []
        text = sys.stdin.read()
    fill = json.loads(os.environ.get("JUDGE_FILL_INS", "{}"))
    for k, v in fill.items():
        text = text.replace(k, v)
    directives = []
    for line in text.splitlines()[1:]:
        s = line.strip()
        if s.startswith("#SBATCH"):
            directives.extend(s[len("#SBATCH"):].split())
        elif s and not s.startswith("#"):
            break
    dopts, _ = split_opts(directives, flags, flags)
    allopts = dopts + opts  # command line wins
    nodes = as_int(opt_value(allopts, ["-N"], ["--nodes"])) or 1
    tpn = as_int(opt_value(allopts, [], ["--ntasks-per-node"])) or 1
    ntasks = as_int(opt_value(allopts, ["-n"], ["--ntasks"]))
    export = opt_value(allopts, [], ["--export"])
    env = dict(os.environ)
    if export and export.upper() not in ("ALL",):
        names = [n for n in export.split(",") if n and n.upper() not in ("ALL", "NIL", "NONE")]
        keep = {k: v for k, v in os.environ.items()
                if k.startswith(("SLURM_", "JUDGE_")) or k in ("PATH", "HOME", "BASH_ENV", "LANG")}
        if "ALL" in [n.upper() for n in export.split(",")]:
            keep = dict(os.environ)
        for n in names:
            if "=" in n:
                k, v = n.split("=", 1)
                keep[k] = v
            elif n in os.environ:
                keep[n] = os.environ[n]
        env = keep
    env.update({"SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
                "SLURM_NTASKS_PER_NODE": str(tpn), "SLURM_JOB_ID": "1",
                "SLURM_JOB_NODELIST": "node[001-%03d]" % nodes, "SLURM_NODEID": "0",
                "SLURM_SUBMIT_DIR": os.getcwd()})
    if ntasks:
        env["SLURM_NTASKS"] = str(ntasks)
    env["JUDGE_CHAIN"] = json.dumps(chain() + [dict(name="sbatch", argv=["sbatch"] + opts)])
    tmp = os.path.join(OUT, "sbatch.%d.sh" % next_id())
    open(tmp, "w").write(text)
    import subprocess
    subprocess.run(["bash", tmp] + script_args, env=env)
    print("Submitted batch job 1")
    sys.exit(0)

if name == "uv":
    if argv and argv[0] == "run":
        with_val = {"--with", "--python", "-p", "--extra", "--group", "--env-file", "--project",
                    "--directory", "--package", "--index", "--with-requirements", "--only-group"}
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            i += 2 if argv[i] in with_val else 1
        os.execvp(argv[i], argv[i:]) if i < len(argv) else sys.exit(0)
    sys.exit(0)

if name == "nsys":
    for i, w in enumerate(argv):
        if os.path.basename(w) in ("python", "python3", "torchrun", "ft_launcher"):
            os.execvp(w, argv[i:])
    sys.exit(0)

if name == "nvidia-smi":
    gpus = ["NVIDIA H100 80GB HBM3"] * 8
    if any(a in ("-L", "--list-gpus") for a in argv):
        for i, g in enumerate(gpus):
            print("GPU %d: %s (UUID: GPU-00000000-0000-0000-0000-00000000000%d)" % (i, g, i))
    elif any(a.startswith("--query-gpu") for a in argv):
        for g in gpus:
            print(g)
    sys.exit(0)

if name == "git":
    if "rev-parse" in argv:
        print("''' + FAKE_COMMIT + r'''")
    sys.exit(0)

if name == "scontrol":
    if argv[:2] == ["show", "hostnames"]:
        n = as_int(os.environ.get("SLURM_NNODES")) or 1
        for i in range(n):
            print("node%03d" % (i + 1))
    sys.exit(0)

if name == "mkdir":
    paths = [a for a in argv if not a.startswith("-")]
    for p in paths:
        full = os.path.abspath(p)
        if os.path.isabs(p) and not full.startswith(SCRATCH + os.sep):
            continue
        os.makedirs(full, exist_ok=True)
    sys.exit(0)

if name == "date":
    import time
    fixed = time.gmtime(''' + FIXED_TIME + r''')
    fmt = next((a[1:] for a in argv if a.startswith("+")), "%a %b %d %H:%M:%S UTC %Y")
    print(time.strftime(fmt, fixed))
    sys.exit(0)

if name == "tee":
    data = sys.stdin.buffer.read()
    sys.stdout.buffer.write(data)
    sys.exit(0)

sys.exit(0)  # rm, touch, cp, mv, ln, chmod, pip, pip3, wget, curl, huggingface-cli, hf, sleep
'''

BASH_ENV_TEXT = 'cd() { builtin cd "$@" 2>/dev/null || true; }\n'


def make_stubs(root: pathlib.Path) -> pathlib.Path:
    d = root / "stubs"
    d.mkdir(parents=True, exist_ok=True)
    (root / "stub.py").write_text(STUB_PY)
    for n in STUB_NAMES:
        p = d / n
        p.write_text(f'#!/bin/bash\nexec /usr/bin/env -u PYTHONPATH {sys.executable} -S -I '
                     f'{root / "stub.py"} {n} "$@"\n')
        p.chmod(0o755)
    (root / "bash_env.sh").write_text(BASH_ENV_TEXT)
    return d


def capture(rel: str, root: pathlib.Path, stubs: pathlib.Path, index: int) -> tuple[list, dict]:
    """Runs one corpus file under bash; returns (launch records, inputs)."""
    inputs = INPUTS.get(rel, {})
    scratch = root / "run"
    if scratch.exists():
        shutil.rmtree(scratch)
    work = scratch / "megatron-lm"
    out = scratch / "out"
    home = scratch / "home"
    for p in (work, out, home):
        p.mkdir(parents=True)
    # what the examples expect to find in the directory they are started from
    for s in TRAINING_SCRIPTS:
        (work / s).write_text("")
    for d in inputs.get("dirs", []):
        (work / d).mkdir(parents=True, exist_ok=True)
    for dst, src in inputs.get("support", {}).items():
        text = (CORPUS / "sourced" / src).read_text()
        for k, v in inputs.get("support_fill_ins", {}).items():
            text = text.replace(k, v)
        (work / dst).write_text(text)
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "USER": "user",
        "LOGNAME": "user",
        "SHELL": "/bin/bash",
        "TERM": "dumb",
        "BASH_ENV": str(root / "bash_env.sh"),
        "JUDGE_OUT": str(out),
        "JUDGE_SCRATCH": str(scratch),
        "JUDGE_FILL_INS": json.dumps(inputs.get("fill_ins", {})),
    }
    env.update(inputs.get("env", {}))
    cmd = ["bash", str(CORPUS / rel)] + inputs.get("args", [])
    r = subprocess.run(cmd, env=env, cwd=work, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=120)
    records = []
    for p in sorted(out.glob("launch.*.json"), key=lambda p: int(p.name.split(".")[1])):
        records.append(json.loads(p.read_text()))
    return records, dict(inputs, rc=r.returncode, stderr=r.stderr.decode(errors="replace"))


TORCHRUN_VALUE_OPTS = {
    "--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_backend",
    "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--rdzv-conf", "--rdzv_conf",
    "--max-restarts", "--max_restarts", "--monitor-interval", "--monitor_interval",
    "--start-method", "--start_method", "--role", "--log-dir", "--log_dir", "-r", "--redirects",
    "-t", "--tee", "--local-ranks-filter", "--local_ranks_filter", "--node-rank", "--node_rank",
    "--master-addr", "--master_addr", "--master-port", "--master_port", "--local-addr",
    "--local_addr", "--logs-specs", "--logs_specs", "--numa-binding", "--numa_binding",
    "--signals-to-handle", "--signals_to_handle", "--ft-param-rank_section_timeouts",
    "--max-restarts=3",
}
TORCHRUN_FLAGS = {"--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path",
                  "--run_path", "--use-env", "--use_env", "--virtual-local-rank",
                  "--virtual_local_rank"}


def split_launch(rec: dict) -> dict | None:
    """Launcher stages, script, script args and world size of one recorded launch."""
    argv = rec["argv"]
    kind = rec["kind"]
    if kind == "python":
        i = 1
        while argv[i].startswith("-"):
            i += 2 if argv[i] in ("-W", "-X") else 1
        launcher, script, args = argv[:i], argv[i], argv[i + 1:]
        nproc = None
    else:
        if kind.startswith("python-m-"):
            j = argv.index("-m") + 2
        else:
            j = 1
        opts = {}
        i = j
        while i < len(argv) and argv[i].startswith("-"):
            w = argv[i]
            if "=" in w and w.startswith("--"):
                k, v = w.split("=", 1)
                opts[k.replace("_", "-")] = v
                i += 1
            elif w in TORCHRUN_FLAGS:
                opts[w] = True
                i += 1
            elif w in TORCHRUN_VALUE_OPTS:
                opts[w.replace("_", "-")] = argv[i + 1]
                i += 2
            else:
                raise SystemExit(f"unknown launcher option {w!r} in {argv}")
        launcher, script, args = argv[:i], argv[i], argv[i + 1:]
        npn = str(opts.get("--nproc-per-node", "1"))
        npn = 8 if npn in ("gpu", "auto") else int(npn)
        nn = str(opts.get("--nnodes", "1")).split(":")[-1]
        nproc = npn
        world = npn * int(nn)
    if os.path.basename(script) not in TRAINING_SCRIPTS:
        return None
    stages = [s["argv"] for s in rec["chain"]]
    if kind == "python":
        sized = [s for s in rec["chain"] if "world_size" in s]
        world = sized[-1]["world_size"] if sized else 1
        nproc = 1
    return dict(stages=stages + [launcher], script=script, args=args, world=world,
                local_world=nproc, env=rec["env"])


# ------------------------------------------------------------------------------------------
# Megatron (step 2)


def training_entry(megatron: pathlib.Path, script: str):
    """(module path of the script that really runs, extra_args_provider, args_defaults), read
    from the source with ast."""
    path = megatron / script
    tree = ast.parse(path.read_text())
    # pretrain_mamba.py: runpy.run_path(..."pretrain_hybrid.py"...)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "run_path":
            for c in ast.walk(node):
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.endswith(".py"):
                    return training_entry(megatron, c.value)
    imports = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                imports[a.asname or a.name] = (node.module, a.name)
    call = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "parse_and_validate_args":
            call = node
    if call is None:
        raise SystemExit(f"{script}: no parse_and_validate_args call found")
    kw = {k.arg: k.value for k in call.keywords}
    defaults = ast.literal_eval(kw["args_defaults"]) if "args_defaults" in kw else {}
    provider = kw.get("extra_args_provider")
    provider_desc = None
    if isinstance(provider, ast.IfExp):
        # `add_modelopt_args if has_nvidia_modelopt else None`: modelopt taken as installed
        provider = provider.body
    if isinstance(provider, ast.Name):
        provider_desc = imports[provider.id]
    elif provider is not None and not (isinstance(provider, ast.Constant) and provider.value is None):
        raise SystemExit(f"{script}: extra_args_provider {ast.dump(provider)} not understood")
    return script, provider_desc, defaults


DEVICE_CAPABILITY = (9, 0)  # H100; --device-capability changes it


def install_stubs() -> None:
    import types

    import torch
    from packaging.version import Version

    class _Props:
        name = "NVIDIA H100 80GB HBM3" if DEVICE_CAPABILITY == (9, 0) else "NVIDIA GPU"
        major, minor = DEVICE_CAPABILITY
        total_memory = 80 * 1024 ** 3
        multi_processor_count = 132

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 8
    torch.cuda.get_device_capability = lambda device=None: DEVICE_CAPABILITY
    torch.cuda.get_device_properties = lambda device=None: _Props()
    torch.cuda.get_device_name = lambda device=None: _Props.name

    import megatron.core.utils as mcu
    mcu._te_version = Version(TE_VERSION)

    names = ["nvidia_resiliency_ext", "nvidia_resiliency_ext.checkpointing",
             "nvidia_resiliency_ext.checkpointing.local",
             "nvidia_resiliency_ext.checkpointing.local.ckpt_managers",
             "nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager"]
    try:
        __import__(names[-1])
    except ImportError:
        for n in names:
            m = types.ModuleType(n)
            m.__path__ = []
            sys.modules[n] = m
        sys.modules[names[-1]].LocalCheckpointManager = type("LocalCheckpointManager", (), {})


def judge_one(launch: dict, entry, A, providers) -> dict:
    """Runs in a forked child."""
    script, provider_desc, defaults = entry
    env = {k: v for k, v in launch["env"].items()
           if not k.startswith("JUDGE_") and k != "BASH_ENV"}
    env.update(WORLD_SIZE=str(launch["world"]), RANK="0", LOCAL_RANK="0",
               LOCAL_WORLD_SIZE=str(launch["local_world"]), GROUP_RANK="0",
               MASTER_ADDR=env.get("MASTER_ADDR", "localhost"),
               MASTER_PORT=env.get("MASTER_PORT", "29500"))
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [launch["script"]] + launch["args"]
    provider = providers.get(provider_desc)
    err = tempfile.TemporaryFile(mode="w+")
    saved = os.dup(2)
    os.dup2(err.fileno(), 2)
    sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), "wb"), write_through=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    stage = "parse_args"
    try:
        args = A.parse_args(provider, False)
        if args.use_checkpoint_args or defaults.get("use_checkpoint_args", False):
            return dict(verdict="error", message="--use-checkpoint-args needs the checkpoint",
                        origin="not judged")
        stage = "validate_args"
        if args.yaml_cfg is not None:
            from megatron.training.yaml_arguments import validate_yaml
            validate_yaml(args, defaults)
        else:
            A.validate_args(args, defaults)
        return dict(verdict="accept", message="", origin="")
    except SystemExit as e:
        sys.stderr.flush()
        os.dup2(saved, 2)
        err.seek(0)
        text = err.read()
        m = re.findall(r"^[^\n]*: error: (.*)$", text, re.M)
        if m and e.code == 2:
            return dict(verdict="refuse", message=m[-1], origin="argparse")
        return dict(verdict="error", message=f"SystemExit({e.code}) in {stage}: {text[-300:]}",
                    origin="SystemExit")
    except BaseException as e:  # noqa: BLE001
        tb = traceback.extract_tb(e.__traceback__)
        where = tb[-1]
        try:
            rel = str(pathlib.Path(where.filename).resolve().relative_to(A._MEGATRON_ROOT))
        except ValueError:
            rel = where.filename
        msg = str(e)
        if not msg:
            msg = (where.line or "").strip()
        origin = f"{type(e).__name__} {rel}:{where.lineno}"
        gpu_like = isinstance(e, (ImportError, ModuleNotFoundError)) or "CUDA" in msg and (
            "driver" in msg or "Torch not compiled" in msg)
        verdict = "error" if gpu_like or stage == "parse_args" else "refuse"
        if stage == "parse_args" and isinstance(e, (ValueError, AssertionError, RuntimeError)):
            verdict = "refuse"  # checks parse_args itself makes (e.g. --enable-msc)
        return dict(verdict=verdict, message=msg, origin=origin,
                    traceback="".join(traceback.format_exception(e))[-2000:])
    finally:
        try:
            os.dup2(saved, 2)
        except OSError:
            pass


def run_judges(launches: list[dict], megatron_root: pathlib.Path) -> list[dict]:
    sys.path.insert(0, str(megatron_root))
    os.environ.setdefault("WORLD_SIZE", "1")
    import warnings
    warnings.filterwarnings("ignore")
    import torch  # noqa: F401
    import megatron.core.utils  # noqa: F401  (first, so the stubs below are in before the rest)
    install_stubs()
    import megatron.training.arguments as A
    A._MEGATRON_ROOT = megatron_root.resolve()
    install_stubs()
    entries = {}
    providers = {None: None}
    results = []
    for launch in launches:
        name = os.path.basename(launch["script"])
        if name not in entries:
            entries[name] = training_entry(megatron_root, name)
            desc = entries[name][1]
            if desc and desc not in providers:
                mod = __import__(desc[0], fromlist=[desc[1]])
                providers[desc] = getattr(mod, desc[1])
        r_fd, w_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r_fd)
            try:
                res = judge_one(launch, entries[name], A, providers)
            except BaseException as e:  # noqa: BLE001
                res = dict(verdict="error", message=f"judge failure: {e!r}", origin="judge")
            with os.fdopen(w_fd, "w") as f:
                json.dump(res, f)
            os._exit(0)
        os.close(w_fd)
        with os.fdopen(r_fd) as f:
            data = f.read()
        os.waitpid(pid, 0)
        results.append(json.loads(data) if data else dict(verdict="error", message="child died",
                                                           origin="judge"))
    return results


# ------------------------------------------------------------------------------------------
# output


def one_line(s: str) -> str:
    return re.sub(r"\s+", " ", s.replace("\t", " ").replace("\n", " ")).strip()


def write_argv_file(path: pathlib.Path, rel: str, inputs: dict, launches: list[dict]) -> None:
    lines = [
        f"# argv of tests/fixtures/megatron_corpus/{rel} as bash passes it (scripts/megatron_judge.py).",
        "# Format (README.md): header lines `key: value`; per launch `launch: K`, one `launcher:` line",
        "# per launcher stage (outermost first, shell-quoted argv), `world_size:`, `script:`,",
        "# `args: N`, then exactly N lines, one argument each.",
    ]
    if inputs.get("args"):
        lines.append("input-args: " + shlex.join(inputs["args"]))
    if inputs.get("env"):
        lines.append("input-env: " + shlex.join(f"{k}={v}" for k, v in inputs["env"].items()))
    fills = dict(inputs.get("fill_ins", {}))
    fills.update(inputs.get("support_fill_ins", {}))
    for k, v in fills.items():
        lines.append(f"fill-in: {shlex.join([k, v])}")
    for k, launch in enumerate(launches, 1):
        lines.append(f"launch: {k}")
        for st in launch["stages"]:
            lines.append("launcher: " + shlex.join(st))
        lines.append(f"world_size: {launch['world']}")
        lines.append(f"script: {launch['script']}")
        lines.append(f"args: {len(launch['args'])}")
        for a in launch["args"]:
            if "\n" in a:
                raise SystemExit(f"{rel}: argument with a newline: {a!r}")
            lines.append(a)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def env_cell(env: dict, k: str) -> str:
    return "(unset)" if k not in env else one_line(env[k]) or "''"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron", required=True, type=pathlib.Path,
                    help="Megatron-LM checkout (its megatron/ package and pretrain_*.py)")
    ap.add_argument("--only", help="judge only corpus files whose path contains this; prints "
                    "the rows instead of writing verdicts.tsv and launch_env.tsv")
    ap.add_argument("--device-capability", default="9.0",
                    help="compute capability the stubbed GPU reports (default 9.0, H100; "
                    "10.0 for a Blackwell GB200); only 9.0 writes the files")
    a = ap.parse_args()
    global DEVICE_CAPABILITY
    DEVICE_CAPABILITY = tuple(int(x) for x in a.device_capability.split("."))
    megatron = a.megatron.resolve()
    t0 = time.time()

    files = sorted(p.relative_to(CORPUS).as_posix()
                   for sub in ("functional-tests", "examples")
                   for p in (CORPUS / sub).glob("*.sh"))
    if a.only:
        files = [f for f in files if a.only in f]

    rows = []  # (rowname, rel, inputs, launch)
    problems = []
    # A fixed place, so that paths a script derives from `pwd` are the same on every run.
    root = pathlib.Path(tempfile.gettempdir()) / "megatron_judge"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    try:
        stubs = make_stubs(root)
        argv_dir = CORPUS / "argv"
        write_files = not a.only and DEVICE_CAPABILITY == (9, 0)
        if write_files and argv_dir.exists():
            shutil.rmtree(argv_dir)
        for i, rel in enumerate(files):
            records, inputs = capture(rel, root, stubs, i)
            launches = [l for l in (split_launch(r) for r in records) if l]
            if not launches:
                problems.append(f"{rel}: no training launch recorded (rc {inputs['rc']}): "
                                f"{one_line(inputs['stderr'])[-300:]}")
                continue
            if write_files:
                write_argv_file(argv_dir / (rel[:-3] + ".argv"), rel, inputs, launches)
            for k, l in enumerate(launches, 1):
                name = rel if len(launches) == 1 else f"{rel}#{k}"
                rows.append((name, rel, inputs, l))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    t1 = time.time()

    results = run_judges([r[3] for r in rows], megatron)
    t2 = time.time()

    out = ["file\tworld_size\tpositional_args\tverdict\tmessage\torigin"]
    envs = ["file\t" + "\t".join(ENV_READ) + "\tNVTE_*"]
    for (name, rel, inputs, l), res in zip(rows, results):
        out.append("\t".join([name, str(l["world"]), one_line(shlex.join(inputs.get("args", []))),
                              res["verdict"], one_line(res["message"]), res["origin"]]))
        nvte = " ".join(f"{k}={l['env'][k]}" for k in sorted(l["env"]) if k.startswith("NVTE_"))
        envs.append("\t".join([name] + [env_cell(l["env"], k) for k in ENV_READ]
                              + [one_line(nvte) or "(none)"]))
    if not a.only and DEVICE_CAPABILITY == (9, 0):
        (CORPUS / "verdicts.tsv").write_text("\n".join(out) + "\n")
        (CORPUS / "launch_env.tsv").write_text("\n".join(envs) + "\n")
    else:
        print("\n".join(out))

    # summary
    by_origin = collections.Counter(r[0].split("/")[0] for r in rows)
    verdicts = collections.Counter(r["verdict"] for r in results)
    print(f"corpus files: {len(files)}; commands judged: {len(rows)} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(by_origin.items()))})")
    print(f"accept {verdicts['accept']}, refuse {verdicts['refuse']}, error {verdicts['error']}")
    groups = collections.defaultdict(list)
    for (name, *_), res in zip(rows, results):
        if res["verdict"] != "accept":
            groups[(res["verdict"], res["origin"].split(" ")[0], one_line(res["message"]))].append(name)
    for (verdict, origin, msg), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n[{verdict}] {len(names)} x {origin}: {msg}")
        for n in names:
            print(f"    {n}")
    for (name, *_), res in zip(rows, results):
        if res["verdict"] == "error" and res.get("traceback"):
            print(f"\n--- {name}\n{res['traceback']}")
    for p in problems:
        print("PROBLEM:", p)
    print(f"\ntime: bash capture {t1 - t0:.1f}s, Megatron import + judging {t2 - t1:.1f}s, "
          f"total {t2 - t0:.1f}s")
    if problems or verdicts["error"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
