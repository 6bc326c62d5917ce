"""Which executor runs rollout and benchmark work: a small picklable config, and what it builds.

The seam is ``concurrent.futures.Executor``, as in tinker-cookbook's ``set_rollout_executor``: any
executor can carry the workers (see :mod:`envsuite.executors._pool`). :class:`ExecutorConfig` names one
of the three envsuite ships and builds it; it holds no live objects, so it travels in configs, JSON and
command lines (``--executor inprocess|process|ray [--ray-address ADDR] [--workers N]``).
"""

from __future__ import annotations

import enum
import multiprocessing
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, ParamSpec, TypeVar

from envsuite.errors import UsageError

P = ParamSpec("P")
T = TypeVar("T")

LOOPBACK = "127.0.0.1"


class ExecutorKind(enum.StrEnum):
    """Where env work (stepping, grading, partners, game engines) runs."""

    INPROCESS = "inprocess"
    """In the driver's own event loop: no workers, no pickling (the default)."""
    PROCESS = "process"
    """A spawn-started process pool on this machine (fork would break the Tinker client's threads)."""
    RAY = "ray"
    """Ray tasks: a local Ray started for the run, or the cluster at ``ray_address``."""


class ExecutorConfigError(UsageError):
    """An executor setting that cannot work; the message says what to change."""


@dataclass(frozen=True)
class ExecutorConfig:
    """An executor by name. Plain data: it pickles and round-trips through JSON."""

    kind: ExecutorKind = ExecutorKind.INPROCESS
    workers: int = 2
    """Worker processes (process pool) or concurrent worker tasks (Ray); ignored in process."""
    ray_address: str | None = None
    """``ray://host:10001`` or ``host:6379`` of a running cluster; None starts a local Ray."""
    callback_host: str | None = None
    """Address the driver listens on for workers' sampling calls; None: loopback, or this node's IP
    when ``ray_address`` names a cluster (workers on other machines must reach it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ExecutorKind(self.kind))  # JSON gives the plain string
        if self.workers < 1:
            raise ExecutorConfigError(f"workers must be >= 1, got {self.workers}")
        if self.ray_address is not None and self.kind is not ExecutorKind.RAY:
            raise ExecutorConfigError("ray_address is only used with the ray executor (--executor ray)")

    @classmethod
    def create(
        cls, kind: str | ExecutorKind, workers: int = 2, ray_address: str | None = None
    ) -> ExecutorConfig:
        """From a command line's strings; a bad name fails listing the choices."""
        try:
            kind = ExecutorKind(kind)
        except ValueError:
            choices = ", ".join(k.value for k in ExecutorKind)
            raise ExecutorConfigError(f"executor {kind!r} is not one of: {choices}") from None
        return cls(kind, workers, ray_address)

    @property
    def in_process(self) -> bool:
        return self.kind is ExecutorKind.INPROCESS

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutorConfig:
        return cls(**data)

    def resolved_callback_host(self) -> str:
        if self.callback_host is not None:
            return self.callback_host
        if self.kind is ExecutorKind.RAY and self.ray_address is not None:
            import ray.util

            return str(ray.util.get_node_ip_address())
        return LOOPBACK

    def build(self) -> Executor:
        """A fresh executor; the caller owns it and calls ``shutdown()``."""
        if self.kind is ExecutorKind.PROCESS:
            return ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")
            )
        if self.kind is ExecutorKind.RAY:
            from envsuite.executors._ray import RayExecutor

            return RayExecutor(self.workers, self.ray_address)
        return InProcessExecutor()


class InProcessExecutor(Executor):
    """Runs each submitted call at once in the calling thread (a completed future comes back).

    Rollout and bench code recognises it and runs its coroutines on the driver's own event loop
    instead, so the default path has no workers, no pickling and no sockets.
    """

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future
