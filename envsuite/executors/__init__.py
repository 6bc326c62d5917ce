"""Executors: where rollout and benchmark work runs (in process, a spawn process pool, or Ray).

The seam is a ``concurrent.futures.Executor``, shaped like tinker-cookbook's ``set_rollout_executor``:
:class:`ExecutorConfig` names one (``--executor inprocess|process|ray``) and builds it, and
:func:`open_pool` turns any executor into a :class:`WorkerPool` of async env hosts. Env work (stepping,
grading, partners, game engines) runs in the workers; sampling calls come back over a
:class:`Callback` channel to the one SamplingClient in the driver. ``docs/scaling.md`` has the picture.
"""

from __future__ import annotations

from envsuite.executors._channel import Callback, CallbackServer, ChannelClosedError, RemoteCallError
from envsuite.executors._config import ExecutorConfig, ExecutorConfigError, ExecutorKind, InProcessExecutor
from envsuite.executors._group_jobs import RemoteTokenCompleter, group_rollout_job, rollout_groups
from envsuite.executors._pool import JobError, WorkerLostError, WorkerPool, open_pool

__all__ = [
    # choosing an executor
    "ExecutorConfig",
    "ExecutorConfigError",
    "ExecutorKind",
    "InProcessExecutor",
    # running work on it
    "JobError",
    "WorkerLostError",
    "WorkerPool",
    "open_pool",
    # rollouts
    "RemoteTokenCompleter",
    "group_rollout_job",
    "rollout_groups",
    # the driver <- worker channel
    "Callback",
    "CallbackServer",
    "ChannelClosedError",
    "RemoteCallError",
]
