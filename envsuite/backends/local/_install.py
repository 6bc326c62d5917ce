"""One line that turns a script's ``tinker.ServiceClient(...)`` into the local backend.

Code that builds its own client (tinker-cookbook's ``rl.train.main``, ``supervised.train.main``, the
recipes) calls ``tinker.ServiceClient(...)`` and ``tinker.RestClient(...)`` by attribute at run time.
:func:`install` swaps those two names on the ``tinker`` module for the local clients (bound to one
``log_dir``), so such code trains and samples on this machine unchanged. :func:`uninstall` puts the
SDK's classes back; :func:`installed` does both around a ``with`` block. Names imported before the swap
(``from tinker import ServiceClient``) keep the SDK's class.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tinker

from envsuite.backends.local._rest import LocalRestClient
from envsuite.backends.local._service import LocalServiceClient

_ORIGINALS: dict[str, Any] = {}


def install(log_dir: str | os.PathLike[str] | None = None) -> None:
    """Make ``tinker.ServiceClient`` and ``tinker.RestClient`` the local clients, runs under ``log_dir``.

    ``log_dir`` defaults to ``<envsuite cache>/checkpoints``; an explicit ``log_dir=`` given to the
    client still wins. Calling it again rebinds the log dir.
    """
    root = None if log_dir is None else Path(log_dir)

    class ServiceClient(LocalServiceClient):
        __doc__ = LocalServiceClient.__doc__

        def __init__(self, *args: Any, log_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
            super().__init__(*args, log_dir=log_dir if log_dir is not None else root, **kwargs)

    class RestClient(LocalRestClient):
        __doc__ = LocalRestClient.__doc__

        def __init__(self, *args: Any, log_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
            super().__init__(*args, log_dir=log_dir if log_dir is not None else root, **kwargs)

    for name, replacement in (("ServiceClient", ServiceClient), ("RestClient", RestClient)):
        _ORIGINALS.setdefault(name, getattr(tinker, name))
        setattr(tinker, name, replacement)


def uninstall() -> None:
    """Put the SDK's ``ServiceClient`` and ``RestClient`` back (a no-op when nothing is installed)."""
    for name, original in _ORIGINALS.items():
        setattr(tinker, name, original)
    _ORIGINALS.clear()


def is_installed() -> bool:
    """True while :func:`install` is in effect."""
    return bool(_ORIGINALS)


@contextmanager
def installed(log_dir: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """``with installed(log_dir): ...`` runs the block with the local clients as ``tinker``'s."""
    was_installed = is_installed()
    previous = {name: getattr(tinker, name) for name in ("ServiceClient", "RestClient")}
    install(log_dir)
    try:
        yield
    finally:
        if was_installed:
            for name, cls in previous.items():
                setattr(tinker, name, cls)
        else:
            uninstall()
