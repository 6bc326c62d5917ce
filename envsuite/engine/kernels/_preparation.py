"""The background half of first use (``_first_use``): the native build and a model's calibration on a
thread of their own, for the engines made after the one that started it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from envsuite.engine._background import BackgroundStopped
from envsuite.engine.kernels._calibration import Shape, calibrated_timings
from envsuite.engine.kernels._native import building_in_background, native_kernels
from envsuite.engine.kernels._products import usable_paths

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PathOptions:
    """Which paths the engine's configuration allows (``EngineConfig``'s knobs)."""

    onednn: bool = True
    relayout: bool = True
    native: bool = True


@dataclass
class Preparation:
    """The native build and one model's calibration, running on a thread of their own."""

    shapes: tuple[Shape, ...]
    directory: Path
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None
    error: str = ""
    """Why it stopped short (empty: it has not, or it completed)."""
    thread: threading.Thread | None = field(default=None, repr=False)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for it to end; whether it has."""
        if self.thread is not None:
            self.thread.join(timeout)
        return self.finished is not None

    def describe(self) -> str:
        if self.finished is None:
            return (
                f"sampling through F.linear while the native kernels are built and {len(self.shapes)} "
                f"product shapes measured in the background (into {self.directory}); engines made "
                "after that use the measured plan"
            )
        outcome = f"failed: {self.error}" if self.error else "done; engines made from now on use it"
        return f"background build and calibration {outcome} ({self.finished - self.started:.1f} s)"

    def run(
        self,
        weights_of: Callable[[Shape], Sequence[torch.Tensor]],
        sample: torch.Tensor,
        options: PathOptions,
    ) -> None:
        """Build, then measure (on this thread); records an error instead of raising one."""
        try:
            with building_in_background():
                status = native_kernels() if options.native else None
            paths = usable_paths(
                sample,
                onednn=options.onednn,
                relayout=options.relayout,
                native=status is not None and status.available,
            )
            if len(paths) > 1:
                with torch.inference_mode():
                    calibrated_timings(self.shapes, weights_of, paths, self.directory)
        except BackgroundStopped:  # the process is exiting; the next one prepares again
            self.error = "stopped: the process exited first"
            return
        except Exception as exc:  # the engine keeps its first-use plan whatever failed here
            self.error = f"{type(exc).__name__}: {exc}"
            logger.warning("envsuite's background kernel preparation failed: %s", self.error)
        finally:
            self.finished = time.perf_counter()
        if not self.error:
            logger.warning("envsuite's kernels are built and measured (%s)", self.directory)
