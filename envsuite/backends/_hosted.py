"""The hosted Tinker service: the real SDK client, built only when a key is present.

``tinker.ServiceClient`` constructed with a missing or fake key either fails on its first call or
blocks forever, so the key is checked here before the SDK is touched.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tinker

API_KEY_VAR = "TINKER_API_KEY"


class HostedBackendUnavailable(RuntimeError):
    """The hosted Tinker backend was asked for but cannot be used (no API key)."""


def hosted_service_client(**kwargs: Any) -> tinker.ServiceClient:
    """``tinker.ServiceClient(**kwargs)``, once ``TINKER_API_KEY`` (or ``api_key=``) is known to be set."""
    if not (kwargs.get("api_key") or os.environ.get(API_KEY_VAR)):
        raise HostedBackendUnavailable(
            f"backend 'tinker' needs a Tinker API key: set {API_KEY_VAR} (or pass api_key=). "
            "Without one, use backend='local' (the default), which runs the same interface on PyTorch."
        )
    import tinker

    return tinker.ServiceClient(**kwargs)
