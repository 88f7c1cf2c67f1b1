"""plan, simulate, check, schedule: the ptdp commands as Python functions."""

from __future__ import annotations

import inspect
import os
import tempfile
from typing import Any, Optional, Union

from . import _flags
from ._errors import InputError
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


def _run(inv: Invocation, function, options: dict[str, Any], ok: tuple[int, ...]) -> Any:
    """Runs the command; a keyword the command does not know as a flag is Python's TypeError
    (with the closest keyword the function takes), not the command's "unknown flag"."""
    try:
        return run_json(inv, ok)[1]
    except InputError as e:
        name = _flags.unknown_keyword(e.message, options)
        if name is None:
            raise
        raise _flags.unexpected_keyword(
            function.__name__, name, _flags.keywords(function)
        ) from None


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
    valid. Bad input raises InputError with the command line's message; a keyword that is no
    flag of `ptdp plan`, TypeError.
    """
    words = ["plan", *_workload(model, cluster, gpus, global_batch), "--top", str(top)]
    words += _options(options, "plan")
    inv = Invocation.of(words)
    with tempfile.TemporaryDirectory(prefix="ptdp-plans-") as folder:
        out = inv.with_flags("--format", "json", "--out-dir", folder)
        data = _run(out, plan, options, ok=(0, 1))
        plans = []
        for rank, entry in enumerate(data.get("plans", []), start=1):
            p = _from_dict(Plan, entry)
            with open(os.path.join(folder, f"plan-{rank}.yaml"), encoding="utf-8") as f:
                object.__setattr__(p, "plan_file", f.read())
            object.__setattr__(p, "rank", rank)
            object.__setattr__(p, "invocation", inv)
            plans.append(p)
    return PlanList(data, plans, inv)


def _listed(value: Any) -> str:
    """A list flag's value: "a,b" from a list or tuple, the text as given otherwise."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def sweep(
    model: Source,
    clusters: Union[Source, list, tuple],
    gpus: Union[str, int, list, tuple, range],
    global_batch: Union[int, str, list, tuple],
    *,
    tokens: Union[int, float, str, None] = None,
    price: Optional[dict] = None,
    precision: Union[str, list, tuple, None] = None,
    cluster_set: Union[dict, list, None] = None,
    **options: Any,
):
    """The exact search at every point of a grid (`ptdp sweep`); a pandas DataFrame, one row per
    point.

    clusters: one profile (name, YAML file or dict) or a list of them. gpus: a list of counts or
    a range "512:16384:x2" (or "S:E:+N"). global_batch: a size, a list of sizes, or "B@G" (B
    sequences at G GPUs, scaled with the GPU count). tokens: the budget to train ("15T", 1.5e13)
    for the time, GPU-hours and cost columns. price: {cluster name: USD per GPU-hour}. precision:
    "bf16", "fp8" or a list. cluster_set: what-if hardware, {"nic_gb_per_s": "x2"} or a list of
    "[CLUSTER:]KEY=VALUE". Other keyword arguments are `ptdp sweep`'s flags with `_` for `-`
    (``threads=4``, ``fix={"pp": 1}``, ``memory_headroom="10%"``).

    Columns: cluster, precision, gpus, global_batch, the best plan's layout (tp, cp, pp, dp, ep,
    etp, micro_batch, schedule, ...), step_time_s, tokens_per_s, tokens_per_s_per_gpu, mfu,
    peak_memory_bytes, headroom, time_to_train_s, gpu_hours, cost_usd, scaling_efficiency,
    pareto, megatron_args, problem (why a point has no plan) and batch_note. ``df.attrs`` holds
    the model, tokens, clusters and the command. The search runs without the GIL: sweeps on
    several Python threads run at once.
    """
    import pandas as pd

    words: list[Word] = ["sweep", "--model", source(model, "model")]
    listed = clusters if isinstance(clusters, (list, tuple)) else [clusters]
    named = [source(c, "cluster") for c in listed]
    if any(not isinstance(n, str) for n in named):
        # A dict is a file the command reads: one flag per cluster is not how sweep takes them.
        raise TypeError("sweep(): clusters must be names or YAML file paths (a dict: save it "
                        "to a file first)")
    words += ["--cluster", ",".join(named)]
    words += ["--gpus", _listed(list(gpus) if isinstance(gpus, range) else gpus)]
    words += ["--global-batch", _listed(global_batch)]
    if tokens is not None:
        words += ["--tokens", str(tokens) if isinstance(tokens, str) else f"{tokens:g}"]
    for cluster, usd in (price or {}).items():
        words += ["--price", f"{cluster}={usd}"]
    if precision is not None:
        words += ["--precision", _listed(precision)]
    if isinstance(cluster_set, dict):
        cluster_set = [f"{k}={v}" for k, v in cluster_set.items()]
    for assignment in cluster_set or []:
        words += ["--cluster-set", str(assignment)]
    words += _options(options, "sweep")
    inv = Invocation.of(words)
    data = _run(inv.with_flags("--format", "json"), sweep, options, ok=(0, 1))
    rows = []
    for point in data["points"]:
        row = {k: v for k, v in point.items() if k != "plan"}
        plan_fields = point.get("plan") or {}
        for key, value in plan_fields.items():
            row[key] = value
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs.update({k: v for k, v in data.items() if k != "points"})
    frame.attrs["command"] = inv.command_line()
    return frame


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
    ``command`` is the equivalent command line; a Plan's file travels in it as a here-document.
    """
    words: list[Word] = ["simulate"]
    stdin = None
    if isinstance(plan, Plan):
        if not plan.plan_file:
            raise ValueError("this Plan has no plan file (it was not made by ptdp.plan())")
        words += ["--plan", "-"]
        stdin = plan.plan_file
    elif plan is not None:
        words += ["--plan", os.fspath(plan)]
    words += _workload(model, cluster, gpus, global_batch)
    words += _options(options, "simulate")
    inv = Invocation.of(words, stdin, "PLAN")
    # Exit 1: a stage does not fit, an answer (fits False, memory_problem says where).
    data = _run(inv.with_flags("--format", "json"), simulate, options, ok=(0, 1))
    sim = _from_dict(Simulation, data)
    object.__setattr__(sim, "invocation", inv)
    return sim


def check(
    command: Optional[str] = None,
    *,
    file: Union[str, "os.PathLike[str]", None] = None,
    cluster: Optional[Source] = None,
    gpus: Optional[int] = None,
    **options: Any,
) -> CheckResult:
    """Reads a Megatron-LM launch as written and says what Megatron-LM would refuse and how far
    the layout is from the best plan (`ptdp check`): ``command`` is the text of a pasted
    command line or of a whole launch script; or ``file="train.sh"`` reads a script's file, as
    `ptdp check --file train.sh` does (messages name its lines). The files a script sources or
    submits are read only in its own folder (and below) or in the folders ``allow_source``
    names (``allow_source=["/shared/env"]``: `--allow-source`); a command given as text has no
    folder, so only those.

    A command Megatron-LM would refuse is an answer (``accepted`` False, the reasons in
    ``errors``: its flag errors and the layout rules it breaks), not an exception.
    """
    if command is None and file is None:
        raise TypeError("check() missing 1 required argument: 'command' (its text), or file=")
    if command is not None and file is not None:
        raise TypeError("check() takes the command's text or file=, not both")
    if command is not None and not isinstance(command, str):
        raise TypeError(f"check: expected the command or script as text, got {type(command).__name__}")
    words: list[Word] = ["check"]
    if cluster is not None:
        words += ["--cluster", source(cluster, "cluster")]
    if gpus is not None:
        words += ["--gpus", str(gpus)]
    words += _options(options, "check")
    if file is not None:
        inv = Invocation.of(words + ["--file", os.fspath(file)])
    else:
        inv = Invocation.of(words + ["--file", "-"], command, "SCRIPT")
    data = _run(inv.with_flags("--format", "json"), check, options, ok=(0, 1, 4, 5))
    result = _from_dict(CheckResult, data)
    object.__setattr__(result, "invocation", inv)
    return result


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


# The signatures and help of plan(), simulate() and check(): their commands' flags.
_flags.document(plan, "plan", skip=_RESERVED)
_flags.document(simulate, "simulate", skip=_RESERVED)
_flags.document(check, "check", skip=_RESERVED | {"file", "version"})
# A plan's simulate() takes the overrides: not what the plan file fixes (the model, the
# cluster, the GPUs, the batch), nor a launch to read instead of it.
_NOT_WITH_A_PLAN = {
    "model", "cluster", "gpus", "global_batch", "megatron", "file", "script_args", "vocab_size"
}
_self = inspect.signature(Plan.simulate).parameters["self"]
Plan.simulate.__signature__ = inspect.Signature(
    [_self]
    + [
        p
        for p in inspect.signature(simulate).parameters.values()
        if p.kind >= p.KEYWORD_ONLY and p.name not in _NOT_WITH_A_PLAN
    ],
    return_annotation="Simulation",
)
