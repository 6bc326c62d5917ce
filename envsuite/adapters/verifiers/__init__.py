"""verifiers (0.4) both ways (``envsuite.adapters.verifiers``).

* catalog envs as verifiers environments: :class:`EnvsuiteTaskset` (seeded episodes of a catalog env,
  graded by replaying the trace's assistant turns through the env) and :class:`EnvsuiteHarness` (the
  episode loop, single- and multi-turn, with every model call through verifiers' interception);
  :func:`write_environment_package` writes the package ``vf-eval`` and prime-rl load;
* installed verifiers environments as catalog envs: ``verifiers:<taskset id>`` (:class:`VerifiersEnv`,
  :func:`verifiers_spec`), single-turn, graded by the taskset's own rewards that run offline.

Needs the ``envsuite[verifiers]`` extra; verifiers 0.4.0 itself goes in with ``--no-deps`` (it pins
``openai<3`` and ``mcp==2.0.0``; this project has openai 3 and mcp 2.3): docs/interop.md ("verifiers").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envsuite.adapters.verifiers._env import VerifiersEnv, verifiers_spec
    from envsuite.adapters.verifiers._taskset import (
        EnvsuiteData,
        EnvsuiteHarness,
        EnvsuiteTask,
        EnvsuiteTaskset,
        EnvsuiteTasksetConfig,
        replay_return,
        write_environment_package,
    )

__all__ = [
    # catalog envs as verifiers environments
    "EnvsuiteData",
    "EnvsuiteHarness",
    "EnvsuiteTask",
    "EnvsuiteTaskset",
    "EnvsuiteTasksetConfig",
    "replay_return",
    "write_environment_package",
    # verifiers environments as catalog envs
    "VerifiersEnv",
    "verifiers_spec",
]

_HOMES = {"VerifiersEnv": "_env", "verifiers_spec": "_env"}


def __getattr__(name: str) -> object:
    # verifiers (and its pydantic configs) load only when the bridge is used.
    if name in __all__:
        import importlib

        module = importlib.import_module(f"envsuite.adapters.verifiers.{_HOMES.get(name, '_taskset')}")
        return getattr(module, name)
    raise AttributeError(f"module 'envsuite.adapters.verifiers' has no attribute {name!r}")
