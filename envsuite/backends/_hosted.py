"""The Tinker API through the real SDK client: the hosted service, or a server of your own by ``base_url``.

``tinker.ServiceClient`` constructed with a missing or fake key for the hosted service either fails on
its first call or blocks forever, so the key is checked here before the SDK is touched. With a
``base_url`` (an ``envsuite serve``) the key is the server's (``ENVSUITE_SERVE_API_KEY``); a server on
loopback needs none, so a placeholder satisfies the SDK's ``tml-`` prefix check.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tinker

API_KEY_VAR = "TINKER_API_KEY"
SERVE_KEY_VAR = "ENVSUITE_SERVE_API_KEY"
LOOPBACK_SERVER_KEY = "tml-envsuite-serve"
"""Sent to a ``base_url`` server when no key is set: a loopback ``envsuite serve`` accepts any key."""


class HostedBackendUnavailable(RuntimeError):
    """The hosted Tinker backend was asked for but cannot be used (no API key)."""


def hosted_service_client(**kwargs: Any) -> tinker.ServiceClient:
    """``tinker.ServiceClient(**kwargs)``, once a key is known: ``api_key=``, ``TINKER_API_KEY``, or, for a
    ``base_url`` server, ``ENVSUITE_SERVE_API_KEY`` or the loopback placeholder."""
    if kwargs.get("base_url") and not (kwargs.get("api_key") or os.environ.get(API_KEY_VAR)):
        kwargs["api_key"] = os.environ.get(SERVE_KEY_VAR) or LOOPBACK_SERVER_KEY
    if not (kwargs.get("api_key") or os.environ.get(API_KEY_VAR)):
        raise HostedBackendUnavailable(
            f"backend 'tinker' needs a Tinker API key: set {API_KEY_VAR} (or pass api_key=). "
            "Without one, use backend='local' (the default), which runs the same interface on PyTorch."
        )
    import tinker

    return tinker.ServiceClient(**kwargs)
