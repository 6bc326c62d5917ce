"""Any Inspect task as a catalog env (``envsuite.adapters.inspect_tasks``): ``inspect:MODULE/TASK``.

Also ``inspect:path/to/file.py@TASK`` and, where the ``inspect_evals`` package is installed, Inspect
Evals' tasks as ``inspect:inspect_evals/NAME``. Single-turn: the sample's input is the prompt, the
task's scorer the reward; tool-using or multi-turn solvers are refused, saying which (docs/evals.md,
"Inspect tasks as envs").
"""

from __future__ import annotations

from envsuite.adapters.inspect_tasks._env import InspectTaskEnv, inspect_spec
from envsuite.adapters.inspect_tasks._load import LoadedTask, UnsupportedInspectTask, load_task

__all__ = [
    # the env and its catalog resolver
    "InspectTaskEnv",
    "inspect_spec",
    # the loaded task
    "LoadedTask",
    "UnsupportedInspectTask",
    "load_task",
]
