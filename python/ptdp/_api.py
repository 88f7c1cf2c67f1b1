"""plan, simulate, check, schedule: the ptdp commands as Python functions."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Optional, Union

from ._invoke import Invocation, Source, Word, flags, run_json, source
from ._results import CheckResult, Plan, PlanList, Schedule, Simulation, _from_dict

_RESERVED = {"format", "out", "out_dir", "svg", "trace", "html", "plan"}


def _options(options: dict[str, Any], command: str) -> list[str]:
    taken = _RESERVED & options.keys()
    if taken:
        raise TypeError(
            f"{command}() got the argument {sorted(taken)[0]!r}, which the Python API sets itself "
            "(results come back as objects; use their save(), svg() and trace())"
        )
    return flags(options)


def _workload(model, cluster, gpus, global_batch) -> list[Word]:
    words: list[Word] = []
    if model is not None:
        words += ["--model", source(model, "model")]
    if cluster is not None:
        words += ["--cluster", source(cluster, "cluster")]
    if gpus is not None:
        words += ["--gpus", str(gpus)]
    if global_batch is not None:
        words += ["--global-batch", str(global_batch)]
    return words


def plan(
    model: Optional[Source] = None,
    cluster: Optional[Source] = None,
    gpus: Optional[int] = None,
    global_batch: Optional[int] = None,
    *,
    top: int = 10,
    **options: Any,
) -> PlanList:
    """Searches every configuration Megatron-LM accepts and ranks those that fit by simulated
    step time (`ptdp plan`).

    model: a preset name (`ptdp.models()`), a model YAML, a Hugging Face config.json or its
    folder, or a dict (model keys, or a Hugging Face config). cluster: a profile name
    (`ptdp.profiles()`), a YAML file or a dict. Other keyword arguments are `ptdp plan`'s flags
    with `_` for `-`: ``fix={"tp": 8}``, ``max_pp=8``, ``memory_headroom="10%"``,
    ``precision="fp8"``, ``no_recompute=True``, ``explain=True`` (adds ``groups``).
    Without model, cluster, gpus and batch it plans the founding document's example.

    Returns the ``top`` best plans, best first; an empty list (with ``hints``) when none is
    valid. Bad input raises InputError with the command line's message.
    """
    words = ["plan", *_workload(model, cluster, gpus, global_batch), "--top", str(top)]
    words += _options(options, "plan")
    inv = Invocation.of(words)
    with tempfile.TemporaryDirectory(prefix="ptdp-plans-") as folder:
        _, data = run_json(inv.with_flags("--format", "json", "--out-dir", folder), ok=(0, 1))
        plans = []
        for rank, entry in enumerate(data.get("plans", []), start=1):
            p = _from_dict(Plan, entry)
            with open(os.path.join(folder, f"plan-{rank}.yaml"), encoding="utf-8") as f:
                object.__setattr__(p, "plan_file", f.read())
            object.__setattr__(p, "rank", rank)
            plans.append(p)
    return PlanList(data, plans, inv)


def simulate(
    plan: Union[Plan, str, "os.PathLike[str]", None] = None,
    *,
    model: Optional[Source] = None,
    cluster: Optional[Source] = None,
    gpus: Optional[int] = None,
    global_batch: Optional[int] = None,
    **options: Any,
) -> Simulation:
    """Simulates one configuration operation by operation (`ptdp simulate`).

    Either a plan (a Plan from `ptdp.plan()`, or a plan file's path), whose layout keyword
    arguments override (``tp=4``); or model, cluster, gpus, global_batch and the layout:
    ``tp``, ``pp``, ``micro_batch``, ``virtual_stages``, ``schedule``, ``sequence_parallel``,
    ``recompute``, ``distributed_optimizer``... (Megatron-LM's names work too:
    ``tensor_model_parallel_size=2``). Or a Megatron-LM launch as written, with the cluster:
    ``megatron="torchrun ... pretrain_gpt.py --num-layers 24 ..."`` or ``file="train.sh"``.
    ``explain=True`` fills ``groups``. A configuration that
    does not fit in memory is an answer: ``fits`` is False and ``memory_problem`` says where.
    """
    words: list[Word] = ["simulate"]
    stdin = None
    label = ""
    if isinstance(plan, Plan):
        if not plan.plan_file:
            raise ValueError("this Plan has no plan file (it was not made by ptdp.plan())")
        words += ["--plan", "-"]
        stdin, label = plan.plan_file, f"<plan #{plan.rank}>"
    elif plan is not None:
        words += ["--plan", os.fspath(plan)]
    words += _workload(model, cluster, gpus, global_batch)
    words += _options(options, "simulate")
    inv = Invocation.of(words, stdin, label)
    # Exit 1: a stage does not fit, an answer (fits False, memory_problem says where).
    _, data = run_json(inv.with_flags("--format", "json"), ok=(0, 1))
    sim = _from_dict(Simulation, data)
    object.__setattr__(sim, "invocation", inv)
    return sim


def check(
    command: str,
    *,
    cluster: Optional[Source] = None,
    gpus: Optional[int] = None,
    **options: Any,
) -> CheckResult:
    """Reads a Megatron-LM launch as written (a pasted command line or a whole launch script)
    and says what Megatron-LM would refuse and how far the layout is from the best plan
    (`ptdp check`). Options: ``vocab_size``, ``script_args``, ``require_fit``.

    A command Megatron-LM would refuse is an answer (``accepted`` False, the reasons in
    ``errors``), not an exception.
    """
    if not isinstance(command, str):
        raise TypeError(f"check: expected the command or script as text, got {type(command).__name__}")
    words: list[Word] = ["check"]
    if cluster is not None:
        words += ["--cluster", source(cluster, "cluster")]
    if gpus is not None:
        words += ["--gpus", str(gpus)]
    if "file" in options:
        raise TypeError("check() reads the command or script from its first argument, not file=")
    words += _options(options, "check")
    inv = Invocation.of(words + ["--file", "-"], command, "<command text>")
    _, data = run_json(inv.with_flags("--format", "json"), ok=(0, 1, 4))
    return _from_dict(CheckResult, data)


def schedule(
    schedule: str = "1f1b",
    pp: int = 4,
    microbatches: int = 8,
    virtual_stages: Optional[int] = None,
) -> Schedule:
    """A pipeline schedule's operation order per stage (`ptdp schedule`): gpipe, 1f1b,
    interleaved (with virtual_stages) or zb-h1."""
    words = ["schedule", "--schedule", schedule, "--pp", str(pp), "--microbatches", str(microbatches)]
    if virtual_stages is not None:
        words += ["--virtual-stages", str(virtual_stages)]
    inv = Invocation.of(words)
    _, data = run_json(inv.with_flags("--format", "json"))
    result = _from_dict(Schedule, data)
    object.__setattr__(result, "invocation", inv)
    for ops in result.stages:
        for op in ops:  # printed as the command prints them: F3.1 when interleaved
            object.__setattr__(op, "_chunked", result.virtual_stages > 1)
    return result


def models() -> list[dict]:
    """The built-in model presets (`ptdp models`), with their parameter counts."""
    return run_json(Invocation.of(["models", "--format", "json"]))[1]["models"]


def profiles() -> list[dict]:
    """The built-in hardware profiles (`ptdp profiles`)."""
    return run_json(Invocation.of(["profiles", "--format", "json"]))[1]["profiles"]
