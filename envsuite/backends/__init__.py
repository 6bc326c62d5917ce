"""Compute backends behind the Tinker client interface (hosted Tinker service or local PyTorch).

Importing this package loads neither torch nor the tinker SDK; the chosen backend does, when built.
"""

from __future__ import annotations

from envsuite.backends._choice import (
    Backend,
    SamplingClient,
    ServiceClient,
    TrainingClient,
    local_sampling_client,
    make_service_client,
    sampling_client_for,
)
from envsuite.backends._hosted import API_KEY_VAR, HostedBackendUnavailable

__all__ = [
    # choice
    "Backend",
    "SamplingClient",
    "ServiceClient",
    "TrainingClient",
    "local_sampling_client",
    "make_service_client",
    "sampling_client_for",
    # hosted
    "API_KEY_VAR",
    "HostedBackendUnavailable",
]
