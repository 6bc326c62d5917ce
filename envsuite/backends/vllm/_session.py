"""vLLM for the commands that sample a named model (``envsuite play``, ``envsuite bench``).

``vllm+http://HOST:PORT`` names a vLLM server wherever a sampling base URL is taken
(:func:`~envsuite.backends.sampling_client_for`, so the bench's model provider too). The model is an
envsuite model name or a LoRA checkpoint directory: a checkpoint is loaded into the server as an
adapter (peft format) on top of its base model, which the server must be serving.

:func:`running_vllm` gives a command that URL for its lifetime: the user's server, or one started
from the vLLM venv for the model's base (stopped, its whole process tree, on the way out).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

from envsuite.backends.vllm._adapters import write_peft_adapter
from envsuite.backends.vllm._client import VllmConnectionError, VllmRequestError, VllmSamplingClient
from envsuite.backends.vllm._server import VllmServer, VllmServerSettings
from envsuite.errors import UsageError

SCHEME = "vllm+"
"""The prefix that turns an ``http://`` URL into a vLLM server's for :func:`sampling_client_for`."""


def is_vllm_url(url: str | None) -> bool:
    return url is not None and url.startswith(SCHEME)


def _get_json(url: str) -> dict[str, object]:
    import httpx

    try:
        response = httpx.get(url, timeout=30.0)
    except httpx.TransportError as exc:
        raise VllmConnectionError(f"no vLLM server answers at {url}: {exc}") from exc
    response.raise_for_status()
    data: dict[str, object] = response.json()
    return data


def served_base(url: str) -> str:
    """The name the server samples its base model under (the first model that is no adapter)."""
    models = _get_json(f"{url}/v1/models").get("data")
    listed = models if isinstance(models, list) else []
    bases = [str(m["id"]) for m in listed if isinstance(m, dict) and m.get("parent") is None]
    if not bases:
        raise UsageError(f"the vLLM server at {url} serves no base model")
    return bases[0]


def _load_checkpoint(url: str, checkpoint: str) -> str:
    """Load the LoRA sampler checkpoint ``checkpoint`` into the server; the name it samples under."""
    import httpx

    from envsuite.models import base_model_name, resolve_model

    directory = Path(checkpoint).expanduser()
    files = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}
    name = "ckpt-" + hashlib.blake2b(str(directory.resolve()).encode(), digest_size=6).hexdigest()
    dest = Path(tempfile.mkdtemp(prefix="envsuite-vllm-adapter-")) / name
    base_path = str(resolve_model(base_model_name(checkpoint)).path)
    write_peft_adapter(files, dest, base_path)
    body = {"lora_name": name, "lora_path": str(dest), "load_inplace": True}
    response = httpx.post(f"{url}/v1/load_lora_adapter", json=body, timeout=120.0)
    if response.status_code >= 400:
        raise VllmRequestError(f"vLLM refused the adapter of {checkpoint}: {response.text[:300]}")
    return name


def vllm_sampling_client(name: str, url: str) -> VllmSamplingClient:
    """A sampling client for ``name`` (a model, or a LoRA checkpoint dir) on the vLLM server at ``url``."""
    from envsuite.models import base_model_name, is_checkpoint_dir

    url = url.removeprefix(SCHEME).rstrip("/")
    if is_checkpoint_dir(name):
        return VllmSamplingClient(url, _load_checkpoint(url, name), base_model_name(name))
    return VllmSamplingClient(url, served_base(url), name)


@contextlib.contextmanager
def running_vllm(name: str, url: str | None = None) -> Iterator[str]:
    """The ``vllm+`` URL of a server for ``name``: ``url``'s, or one started here for its base model."""
    from envsuite.models import base_model_name, is_checkpoint_dir

    if url is not None:
        yield SCHEME + url.removeprefix(SCHEME)
        return
    base = base_model_name(name)
    rank = 32
    if is_checkpoint_dir(name):
        meta = json.loads((Path(name).expanduser() / "envsuite_checkpoint.json").read_text())
        rank = int((meta.get("lora") or {}).get("rank", rank))
    ranks = [r for r in (8, 16, 32, 64, 128, 256, 320, 512) if r >= rank]
    with VllmServer(VllmServerSettings(base, max_lora_rank=ranks[0] if ranks else 512)) as server:
        yield SCHEME + server.url
