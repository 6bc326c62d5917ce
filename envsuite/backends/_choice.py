"""The one place that picks a compute backend."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeAlias

from envsuite.errors import UsageError

if TYPE_CHECKING:
    import tinker

    from envsuite.backends.local import LocalSamplingClient, LocalServiceClient, LocalTrainingClient
    from envsuite.backends.vllm import VllmSamplingClient

# The two backends' clients are call-compatible, not related by class: code that takes either names the
# union (strings, so neither torch nor the tinker SDK loads with this module).
ServiceClient: TypeAlias = "LocalServiceClient | tinker.ServiceClient"
"""A service client of either backend (what :func:`make_service_client` returns)."""
TrainingClient: TypeAlias = "LocalTrainingClient | tinker.TrainingClient"
"""A training client of either backend."""
SamplingClient: TypeAlias = "LocalSamplingClient | tinker.SamplingClient"
"""A sampling client of either backend."""


class Backend(StrEnum):
    """Where training and sampling run."""

    LOCAL = "local"
    """PyTorch in this process (CPU or GPU); no key, no network."""
    TINKER = "tinker"
    """The hosted Tinker service; needs ``TINKER_API_KEY``."""


def _backend(name: Backend | str) -> Backend:
    try:
        return Backend(name)
    except ValueError:
        known = ", ".join(repr(b.value) for b in Backend)
        raise UsageError(f"unknown backend {name!r}; choose one of {known}") from None


def make_service_client(backend: Backend | str = Backend.LOCAL, **kwargs: Any) -> ServiceClient:
    """A service client for ``backend``; ``kwargs`` go to its constructor.

    ``local`` takes ``log_dir`` (where checkpoints go); ``tinker`` takes the SDK's arguments and is
    used only when asked for and a key is set (:class:`HostedBackendUnavailable` otherwise).
    """
    if _backend(backend) is Backend.TINKER:
        from envsuite.backends._hosted import hosted_service_client

        return hosted_service_client(**kwargs)
    from envsuite.backends.local import LocalServiceClient

    return LocalServiceClient(**kwargs)


def local_sampling_client(name: str) -> LocalSamplingClient:
    """A local sampling client for a model name, an HF model dir, or a local-backend checkpoint dir."""
    from envsuite.backends.local import LocalServiceClient
    from envsuite.models import is_checkpoint_dir

    service = LocalServiceClient()
    if is_checkpoint_dir(name):
        return service.create_sampling_client(model_path=str(name)).result()
    return service.create_sampling_client(base_model=name).result()


def sampling_client_for(
    name: str, backend: Backend | str = Backend.LOCAL, base_url: str | None = None
) -> SamplingClient | VllmSamplingClient:
    """A sampling client for ``name``: in this process (``local``), or through the Tinker API (``tinker``).

    ``name`` is a model name, an HF model dir, a checkpoint dir (local), or a ``tinker://`` path.
    ``base_url`` (``tinker`` only) names the service, e.g. an ``envsuite serve``; None: the hosted one.
    A ``vllm+http://...`` base URL samples on that vLLM server whatever the backend (docs/vllm.md).
    """
    from envsuite.backends.vllm import is_vllm_url

    if base_url is not None and is_vllm_url(base_url):
        from envsuite.backends.vllm import vllm_sampling_client

        return vllm_sampling_client(name, base_url)
    if _backend(backend) is Backend.LOCAL:
        if base_url is not None:
            raise UsageError("base_url is for backend 'tinker' (the Tinker API over HTTP), not 'local'")
        return local_sampling_client(name)
    service = make_service_client(backend, **({"base_url": base_url} if base_url else {}))
    if name.startswith("tinker://"):
        return service.create_sampling_client(model_path=name).result()
    return service.create_sampling_client(base_model=name).result()
