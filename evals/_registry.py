"""Inspect entry point (``[project.entry-points.inspect_ai]``): registers the provider, the task and the
``envsuite`` sandbox environment.

Inspect imports this module when it meets ``--model envsuite/...`` or ``envsuite/envsuite_env``, which
is how the command line finds a provider defined in a package.
"""

from __future__ import annotations

from inspect_ai.model import ModelAPI, modelapi

from envsuite.evals._sandbox import EnvsuiteSandboxEnvironment
from envsuite.evals._task import envsuite_env


@modelapi(name="envsuite")
def envsuite_provider() -> type[ModelAPI]:
    from envsuite.evals._provider import EnvsuiteModelAPI

    return EnvsuiteModelAPI


__all__ = ["EnvsuiteSandboxEnvironment", "envsuite_env", "envsuite_provider"]
