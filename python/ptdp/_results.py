"""Typed results, built from the commands' JSON. Every object keeps the JSON it came from
(``to_dict()``); fields the command adds in a later version land in ``extra``."""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ._errors import NoPlanError
from ._invoke import Invocation

GIB = 1024**3


def _from_dict(cls, d: dict):
    """`cls` from the JSON object `d`: its fields by name (nested typed fields converted), the
    rest in `extra`, the object itself kept for to_dict()."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}
    kwargs: dict[str, Any] = {}
    for name in names & d.keys():
        kwargs[name] = _convert(hints[name], d[name])
    extra = {k: v for k, v in d.items() if k not in names}
    obj = cls(**kwargs)
    object.__setattr__(obj, "extra", extra)
    object.__setattr__(obj, "_raw", d)
    return obj


def _convert(hint, value):
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union and value is not None:
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return _from_dict(hint, value)
    if origin is list and args and isinstance(value, list):
        return [_convert(args[0], v) for v in value]
    return value


class _Result:
    extra: dict
    _raw: dict

    def to_dict(self) -> dict:
        """The command's JSON for this object, as Python data."""
        return copy.deepcopy(self._raw)


@dataclass(frozen=True, repr=False)
class Stage(_Result):
    """One pipeline stage of a simulated step: times per micro-batch, memory by category."""

    stage: int = 0
    forward_s: float = 0.0  # one micro-batch's forward, all model chunks of the stage
    backward_s: float = 0.0
    busy_s: float = 0.0  # per step
    idle_s: float = 0.0
    bubble_fraction: float = 0.0
    parameters: int = 0
    weights_bytes: float = 0.0
    gradients_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    activations_bytes: float = 0.0
    in_flight: int = 0  # micro-batches whose activations are held at the peak
    workspace_bytes: float = 0.0  # cuBLAS workspaces
    allocated_bytes: float = 0.0  # what torch.cuda.max_memory_allocated would count
    reserved_bytes: float = 0.0
    fragmentation_bytes: float = 0.0
    peak_bytes: float = 0.0
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    def __repr__(self) -> str:
        return (
            f"Stage({self.stage}: forward {self.forward_s * 1e3:.2f} ms, backward "
            f"{self.backward_s * 1e3:.2f} ms, peak {self.peak_gib:.1f} GiB)"
        )


@dataclass(frozen=True)
class Breakdown(_Result):
    """Where a step's time goes (seconds; `_hidden_s` / `_exposed_s`: overlapped / not)."""

    compute_s: float = 0.0
    tp_comm_s: float = 0.0
    tp_comm_hidden_s: float = 0.0
    cp_comm_s: float = 0.0
    cp_comm_hidden_s: float = 0.0
    ep_comm_s: float = 0.0
    pp_comm_s: float = 0.0
    dp_comm_s: float = 0.0
    dp_exposed_s: float = 0.0
    optimizer_s: float = 0.0
    bubble_s: float = 0.0
    extra: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, repr=False)
class _Step(_Result):
    step_time_s: float = 0.0
    tokens_per_s: float = 0.0
    model_tflops_per_gpu: float = 0.0
    hardware_tflops_per_gpu: float = 0.0
    mfu: float = 0.0  # model FLOPs over the GPU's peak
    bubble_fraction: float = 0.0
    peak_memory_bytes: float = 0.0  # the fullest stage
    fits: bool = True
    memory_problem: str = ""
    microbatches: int = 0
    stages: list[Stage] = field(default_factory=list)
    breakdown: Optional[Breakdown] = None

    @property
    def peak_memory_gib(self) -> float:
        return self.peak_memory_bytes / GIB


@dataclass(frozen=True, repr=False)
class Plan(_Step):
    """One ranked plan of `ptdp.plan()`: the layout, its simulated step, its Megatron-LM flags.
    ``simulate()`` replays it operation by operation; ``save(path)`` writes its plan file."""

    rank: int = 0
    tp: int = 1
    cp: int = 1
    cp_comm: str = "p2p"
    ep: int = 1
    etp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    distributed_optimizer: bool = False
    fsdp: str = "none"
    first_stage_layers: int = 0  # 0: the even share
    last_stage_layers: int = 0
    account_for_embedding: bool = False
    account_for_loss: bool = False
    megatron_args: str = ""
    in_megatron: bool = True  # False: a zero-bubble schedule Megatron-LM cannot run
    plan_file: str = field(default="", compare=False)  # the plan file's YAML text
    invocation: Optional[Invocation] = field(default=None, compare=False)  # the search's
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def command(self) -> str:
        """The `ptdp plan` command line whose search ranked this plan (``PlanList.command``);
        ``simulate().command`` replays this plan alone."""
        return self.invocation.command_line() if self.invocation else ""

    @property
    def parallel(self) -> str:
        """The parallel sizes: "tp 2 x cp 2 x pp 4 x dp 4" (cp and ep when above 1)."""
        parts = [f"tp {self.tp}"]
        parts += [f"{k} {v}" for k, v in (("cp", self.cp), ("ep", self.ep)) if v > 1]
        parts += [f"pp {self.pp}", f"dp {self.dp}"]
        return " x ".join(parts)

    @property
    def layout(self) -> str:
        """The sizes and the rest: "tp 2 x pp 4 x dp 1, mbs 4, 1f1b, sp, dist-opt"."""
        text = f"{self.parallel}, mbs {self.micro_batch}, {self.schedule}"
        if self.virtual_stages > 1:
            text += f" v={self.virtual_stages}"
        if self.sequence_parallel:
            text += ", sp"
        if self.recompute != "none":
            text += f", {self.recompute} recompute"
        if self.fsdp != "none":
            text += f", fsdp {self.fsdp}"
        elif self.distributed_optimizer:
            text += ", dist-opt"
        return text

    def simulate(self, **options) -> "Simulation":
        """This plan, simulated operation by operation (keyword arguments override its layout
        as `ptdp simulate --plan FILE --tp 4` does; they are `ptdp.simulate()`'s options, whose
        help lists them)."""
        from ._api import simulate

        return simulate(self, **options)

    def save(self, path) -> None:
        """Writes the plan file (`ptdp simulate|execute --plan FILE`)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.plan_file)

    def __repr__(self) -> str:
        star = "" if self.in_megatron else " (not in Megatron-LM)"
        return (
            f"<Plan #{self.rank}: {self.layout}; {self.step_time_s:.3f} s/step, MFU "
            f"{self.mfu:.1%}, peak {self.peak_memory_gib:.1f} GiB{star}>"
        )


_DATAFRAME_COLUMNS = (
    "rank parallel micro_batch schedule virtual_stages sequence_parallel recompute "
    "distributed_optimizer fsdp in_megatron step_time_s tokens_per_s mfu bubble_fraction "
    "peak_memory_gib fits tp cp ep etp pp dp megatron_args"
).split()


class PlanList(Sequence):
    """The plans of one search, best first, with what the search saw: ``evaluated``, ``valid``,
    ``fits``, ``rejected`` (count per Megatron-LM rule), ``rejected_examples`` and, when nothing
    is valid, ``hints``. ``best`` raises NoPlanError when the list is empty."""

    def __init__(self, data: dict, plans: list[Plan], invocation: Invocation):
        self._data = data
        self._plans = plans
        self.invocation = invocation
        self.evaluated: int = data.get("evaluated", 0)
        self.valid: int = data.get("valid", 0)
        self.fits: int = data.get("fits", 0)
        self.simulated: int = data.get("simulated", 0)
        self.rejected: dict[str, int] = data.get("rejected", {})
        self.rejected_examples: dict[str, str] = data.get("rejected_examples", {})
        self.hints: list[str] = data.get("hints", [])
        self.groups: list[dict] = data.get("groups", [])
        self.reference: Optional[dict] = data.get("reference")

    def __getitem__(self, i):
        return self._plans[i]

    def __len__(self) -> int:
        return len(self._plans)

    @property
    def command(self) -> str:
        """The equivalent `ptdp plan` command line."""
        return self.invocation.command_line()

    @property
    def best(self) -> Plan:
        if not self._plans:
            raise NoPlanError(
                "no valid plan" + "".join(f"\n  - {h}" for h in self.hints),
                hints=self.hints,
                command=self.command,
            )
        return self._plans[0]

    @property
    def best_in_megatron(self) -> Plan:
        """The best plan Megatron-LM can run (zero-bubble schedules skipped)."""
        for p in self._plans:
            if p.in_megatron:
                return p
        return self.best

    def to_dict(self) -> dict:
        return copy.deepcopy(self._data)

    def to_dataframe(self):
        """The plans as a pandas DataFrame, one row per plan, indexed by rank."""
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - pandas is optional
            raise ImportError("PlanList.to_dataframe() needs pandas: pip install pandas") from e
        rows = [
            {c: (p.peak_memory_gib if c == "peak_memory_gib" else getattr(p, c)) for c in _DATAFRAME_COLUMNS}
            for p in self._plans
        ]
        return pd.DataFrame(rows, columns=list(_DATAFRAME_COLUMNS)).set_index("rank")

    def _repr_html_(self) -> Optional[str]:
        """Jupyter shows the plans as a table (with pandas)."""
        try:
            return self.to_dataframe()._repr_html_()
        except ImportError:
            return None

    def __repr__(self) -> str:
        if not self._plans:
            return f"<PlanList: no valid plan of {self.evaluated:,} examined>"
        return (
            f"<PlanList: {len(self)} best of {self.fits:,} that fit ({self.valid:,} valid, "
            f"{self.evaluated:,} examined); best {self.best.layout}, {self.best.step_time_s:.3f} s>"
        )


@dataclass(frozen=True, repr=False)
class Simulation(_Step):
    """One configuration simulated operation by operation. ``svg()`` draws its timeline (shown
    by Jupyter), ``trace()`` gives it as a Chrome trace."""

    groups: list[dict] = field(default_factory=list)  # with explain=True
    invocation: Optional[Invocation] = field(default=None, compare=False)
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def command(self) -> str:
        """The equivalent `ptdp simulate` command line, runnable as shown (a plan's file in it
        as a here-document)."""
        return self.invocation.command_line() if self.invocation else ""

    def _output(self, flag: str, options: dict) -> str:
        from ._invoke import flags

        # "-": the file on standard output, the report on standard error.
        _, out, _ = self.invocation.with_flags(flag, "-", *flags(options)).run()
        return out

    def svg(self, *, svg_from: Optional[float] = None, svg_until: Optional[float] = None) -> str:
        """The timeline as SVG text (`ptdp simulate --svg`).

        svg_from: draw from this many seconds into the step (with svg_until: a window to zoom
        into). svg_until: draw to this many seconds: before the step's end the picture ends
        there; after it the time axis goes on, so that timelines drawn with the same svg_until
        share one scale. None: the whole step.
        """
        return self._output("--svg", {"svg_from": svg_from, "svg_until": svg_until})

    def trace(self) -> str:
        """The timeline as a Chrome trace (JSON text for Perfetto or chrome://tracing)."""
        return self._output("--trace", {})

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        fit = "fits" if self.fits else f"does not fit: {self.memory_problem}"
        return (
            f"<Simulation: {self.step_time_s:.3f} s/step, {self.tokens_per_s:,.0f} tokens/s, MFU "
            f"{self.mfu:.1%}, bubble {self.bubble_fraction:.1%}, peak "
            f"{self.peak_memory_gib:.1f} GiB, {fit}>"
        )


@dataclass(frozen=True)
class Finding(_Result):
    """One thing `check` found: severity error (Megatron-LM refuses) or warning."""

    severity: str = ""
    line: int = 0  # in the script; 0 for a pasted command
    file: str = ""  # the file `line` is in, when not the script itself (a file it sources)
    flag: str = ""
    message: str = ""
    fix: str = ""
    rule: str = ""  # a layout rule Megatron-LM enforces at start-up ("heads-divisible-by-tp")
    extra: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, repr=False)
class CheckResult(_Result):
    """`ptdp check` of a Megatron-LM command or launch script. ``accepted``: Megatron-LM would
    run it; ``errors``: why not (the flags it refuses and the layout rules the command breaks,
    also in ``rules_broken``); ``yours`` and ``best``: its simulated step against the best
    plan's; ``cannot_judge``: why there is no verdict (the configuration is in a --yaml-cfg
    file, or files the script sources could not be read), else None; ``command``: the
    equivalent `ptdp check` command line."""

    script: str = ""
    source: str = ""
    megatron: str = ""  # which Megatron-LM option table judged it
    gpus: int = 0
    gpus_assumed: bool = False
    cluster: str = ""
    accepted: bool = False
    cannot_judge: Optional[str] = None
    findings: list[Finding] = field(default_factory=list)
    simulated_flags: list[str] = field(default_factory=list)
    layout: dict = field(default_factory=dict)
    model_complete: bool = False
    rules_broken: list = field(default_factory=list)
    not_simulated: str = ""
    yours: Optional[dict] = None
    best: Optional[dict] = None
    valid_plans: int = 0
    invocation: Optional[Invocation] = field(default=None, compare=False)
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def command(self) -> str:
        """The equivalent `ptdp check` command line, runnable as shown (the command text in it
        as a here-document)."""
        return self.invocation.command_line() if self.invocation else ""

    @property
    def errors(self) -> list[Finding]:
        """Why Megatron-LM would refuse the command: the flags it refuses, then the layout
        rules broken (``rule`` names those)."""
        broken = [
            _from_dict(Finding, {"severity": "error", "message": "", "fix": "", **r})
            for r in self.rules_broken
        ]
        return [f for f in self.findings if f.severity == "error"] + broken

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def __repr__(self) -> str:
        errors, warnings = self.errors, self.warnings
        verdict = "accepted" if self.accepted else "refused"
        text = (
            f"<CheckResult: {verdict} by Megatron-LM, {_count(errors, 'error')}, "
            f"{_count(warnings, 'warning')}"
        )
        if self.cannot_judge:
            text = (
                f"<CheckResult: cannot judge: {self.cannot_judge}; as read, "
                f"{_count(errors, 'error')}, {_count(warnings, 'warning')}"
            )
        if errors:  # why, in Megatron-LM's words: the first reason, where the flag is
            first = errors[0]
            text += f"; {first.flag + ': ' if first.flag else ''}{first.message}"
            if len(errors) > 1:
                text += f" (and {_count(errors[1:], 'more error')} in .errors)"
        if self.yours and self.best:
            text += f"; {self.yours['step_time_s']:.3f} s/step against the best plan's {self.best['step_time_s']:.3f} s"
        return text + ">"


def _count(items: list, noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


@dataclass(frozen=True, repr=False)
class ScheduleOp(_Result):
    op: str = ""  # F (forward), B (backward), W (weight gradient, zero-bubble)
    microbatch: int = 0
    chunk: int = 0  # model chunk (interleaved)
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __str__(self) -> str:
        """"F3" (micro-batch 3), or "F3.1" (its model chunk 1) in an interleaved schedule."""
        chunked = getattr(self, "_chunked", self.chunk != 0)
        return f"{self.op}{self.microbatch}" + (f".{self.chunk}" if chunked else "")

    __repr__ = __str__


@dataclass(frozen=True, repr=False)
class Schedule(_Result):
    """A pipeline schedule: for each stage, its operations in order, as the simulator times
    them and the executor runs them. Shown by Jupyter as its unit-time timeline."""

    schedule: str = ""
    pp: int = 0
    microbatches: int = 0
    virtual_stages: int = 1
    stages: list[list[ScheduleOp]] = field(default_factory=list)
    invocation: Optional[Invocation] = field(default=None, compare=False)
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def command(self) -> str:
        """The equivalent `ptdp schedule` command line."""
        return self.invocation.command_line() if self.invocation else ""

    def text(self) -> str:
        """The text timeline `ptdp schedule` prints."""
        return self.invocation.with_flags("--format", "text").run()[1]

    def svg(self) -> str:
        return self.invocation.with_flags("--svg", "-").run()[1]

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        return (
            f"<Schedule {self.schedule}: pp {self.pp}, {self.microbatches} micro-batches"
            + (f", v={self.virtual_stages}" if self.virtual_stages > 1 else "")
            + ">"
        )
