"""OpenEnv both ways: serve any catalog env over OpenEnv's protocol, and use any OpenEnv server as a
catalog env (``openenv:<server URL>``).

* :func:`create_app` / :func:`serve` (``envsuite serve-env ID``): an OpenEnv server for a catalog env;
  OpenEnv's own clients (``GenericEnvClient``, TRL, SkyRL, ART) reset and step it;
* :class:`OpenEnvEnv` / :func:`openenv_spec`: the ``openenv:`` catalog entry, usable by the trainer, the
  checker and the bench like any other id.

Needs the ``envsuite[openenv]`` extra (OpenEnv's ``openenv`` package; ``openenv-core`` is its
deprecated former name). ``docs/openenv.md`` has the details.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envsuite.adapters.openenv._client import OpenEnvEnv, openenv_spec
    from envsuite.adapters.openenv._models import EnvsuiteAction, EnvsuiteObservation, EnvsuiteState
    from envsuite.adapters.openenv._server import EnvsuiteEnvironment, ServeSettings, create_app, serve

__all__ = [
    # serving catalog envs
    "EnvsuiteAction",
    "EnvsuiteEnvironment",
    "EnvsuiteObservation",
    "EnvsuiteState",
    "ServeSettings",
    "create_app",
    "serve",
    # OpenEnv servers as catalog envs
    "OpenEnvEnv",
    "openenv_spec",
]

_HOMES = {
    "OpenEnvEnv": "_client",
    "openenv_spec": "_client",
    "EnvsuiteAction": "_models",
    "EnvsuiteObservation": "_models",
    "EnvsuiteState": "_models",
    "EnvsuiteEnvironment": "_server",
    "ServeSettings": "_server",
    "create_app": "_server",
    "serve": "_server",
}


def __getattr__(name: str) -> object:
    # The client side is light; the server side imports OpenEnv (FastAPI, pydantic) only when asked.
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"envsuite.adapters.openenv.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'envsuite.adapters.openenv' has no attribute {name!r}")
