"""ptdp: plan, simulate and check PTD-P (Megatron-LM) training layouts from Python.

    >>> import ptdp
    >>> plans = ptdp.plan("llama3-70b", "dgx-h100", gpus=64, global_batch=512)
    >>> plans.best, plans.to_dataframe()
    >>> sim = plans.best.simulate()      # in Jupyter, `sim` shows its timeline
    >>> ptdp.check(open("train.sh").read()).errors

Every function runs the `ptdp` command of the same name in-process (the extension module
links ptdp's C++ libraries), so the rules, figures and error messages are the command line's;
each result's ``command`` is the equivalent command line.
"""

from ._api import check, models, plan, profiles, schedule, simulate, sweep
from ._errors import InputError, NoPlanError, PtdpError, PtdpWarning
from ._ptdp import __version__
from ._results import (
    Breakdown,
    CheckResult,
    Finding,
    Plan,
    PlanList,
    Schedule,
    ScheduleOp,
    Simulation,
    Stage,
)

__all__ = [
    "plan",
    "sweep",
    "simulate",
    "check",
    "schedule",
    "models",
    "profiles",
    "Plan",
    "PlanList",
    "Simulation",
    "Stage",
    "Breakdown",
    "CheckResult",
    "Finding",
    "Schedule",
    "ScheduleOp",
    "PtdpError",
    "PtdpWarning",
    "InputError",
    "NoPlanError",
    "__version__",
]
