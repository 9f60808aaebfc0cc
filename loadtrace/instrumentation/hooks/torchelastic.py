"""torchelastic (``torchrun``, ``accelerate launch``): the launcher witnesses its workers' deaths (``witness.py``).

``PContext.start``: before the workers start, give them the launch id and the witness directory.
``PContext.wait``: when it returns (every worker is done), one ``loadtrace.rank_exit`` span per dead worker that left a
state (``RunProcsResult.failures``: local rank → ``ProcessFailure``; the subprocess context also lists the siblings it
SIGTERMed after the first failure); then the pointers of every worker of that context go, and where rank 0 was among
them, its closing line is said (exporting/summary.py).
"""

from __future__ import annotations

from typing import Any

from .._log import warn_once
from ..beside import witness
from .registry import Hook

MODULE = "torch.distributed.elastic.multiprocessing.api"


def _start(instance: Any, args: tuple, kwargs: dict) -> None:
    try:
        witness.launcher().prepare_launch(instance.envs)
    except Exception as error:
        warn_once("witness-start", f"workers start unwitnessed ({type(error).__name__}: {error})")
    return None


class _Waited:
    __slots__ = ("instance",)

    def __init__(self, instance: Any):
        self.instance = instance

    def done(self, result: Any, error: BaseException | None) -> Any:
        if result is None or error is not None:
            return result  # still running (or the wait itself failed): nothing to witness
        try:
            envs, pids = self.instance.envs, self.instance.pids()
            rank0 = witness.launcher().rank0_state_path(pids, envs)  # before the pointers go
            failures = getattr(result, "failures", None) or {}
            deaths = [
                witness.Death(failure.pid, failure.exitcode, envs.get(local_rank, {}))
                for local_rank, failure in failures.items()
            ]
            if deaths:
                witness.launcher().witness(deaths)
            witness.launcher().forget(pids.values())
            if rank0 is not None:
                witness.launcher().say_closing_line(rank0)
        except Exception as error:
            warn_once("witness", f"cannot report the workers' exits ({type(error).__name__}: {error})")
        return result


def _wait(instance: Any, args: tuple, kwargs: dict) -> _Waited:
    return _Waited(instance)


HOOKS = [
    Hook(MODULE, "PContext.start", _start),
    Hook(MODULE, "PContext.wait", _wait),
]
