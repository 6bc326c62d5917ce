"""``envsuite serve --sampling-engine vllm``: the Tinker routes sample on a vLLM server.

Training stays on the local backend; sampling goes to one vLLM server, started here from the vLLM venv
(its whole process tree stopped with the server) or the user's (``--vllm-url``). Prompt token ids go
in and sampled token ids with their logprobs come back (:class:`~envsuite.backends.vllm.VllmSamplingClient`),
so nothing is re-tokenized.

Every sampler a client can name is a LoRA version published to vLLM before its id is handed out:

* a base model samples under the server's base name (only the model vLLM serves);
* a snapshot (``save_weights_and_get_sampling_client``) is saved, written as a peft adapter under
  ``<state-dir>/vllm_adapters/<name>`` and loaded as ``<name>`` (its sampling session id, ``:`` made
  ``-``); it is unloaded when the snapshot is released (the model's oldest beyond its last few, or
  its session's end);
* a checkpoint (``create_sampling_client(path)``) is loaded once as ``ckpt-<hash of its directory>``.

Each reply's ``model`` is checked against the name asked for, so a sample comes from exactly the
weights its sampler names; the name is the sampler's ``vllm_model`` (``GET /api/v1/samplers/{id}``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
import logging
import shutil
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from tinker import types

from envsuite.backends.vllm import (
    VllmEndpoint,
    VllmSamplingClient,
    VllmServer,
    VllmServerSettings,
    served_base,
    write_peft_adapter,
)
from envsuite.errors import UsageError
from envsuite.serve._config import ENGINE_DEFAULT_MAX_TOKENS, ServeConfig

logger = logging.getLogger("envsuite.serve")
T = TypeVar("T")
ADAPTERS_DIR = "vllm_adapters"
"""Where published adapters live, under the state dir (vLLM reloads an evicted one from there)."""
BASE_NAME = "base"
"""The base model's name on a server started here."""


def adapter_name(sampler_id: str) -> str:
    """The vLLM name of a snapshot sampler (``sess-…:sample:3`` -> ``sess-…-sample-3``)."""
    return sampler_id.replace(":", "-")


def checkpoint_adapter_name(directory: Path) -> str:
    """The vLLM name of a checkpoint: one per directory, whoever asks."""
    return "ckpt-" + hashlib.blake2b(str(directory.resolve()).encode(), digest_size=6).hexdigest()


class VllmEngine:
    """The server's vLLM side: the server (started here or at ``config.vllm_url``), published
    adapters, and sampling on a loop thread of its own (callers get ``concurrent.futures.Future``)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.adapter_root = Path(config.state_dir) / ADAPTERS_DIR
        self._server: VllmServer | None = None
        if config.vllm_url is None:
            self._server = VllmServer(
                VllmServerSettings(
                    model=config.vllm_model,
                    served_name=BASE_NAME,
                    max_model_len=config.vllm_max_model_len,
                    max_lora_rank=config.vllm_max_lora_rank,
                )
            )
        self.url = (config.vllm_url or "").rstrip("/")
        self.base_name = BASE_NAME
        self._published: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="envsuite-serve-vllm", daemon=True
        )

    # -- lifetime --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the server (or check the user's) and the sampling loop; blocks until it answers."""
        if self._server is not None:
            self.url = self._server.start()
            logger.info("vLLM server at %s up in %.1f s", self.url, self._server.start_seconds)
        else:
            self.base_name = served_base(self.url)
        self.adapter_root.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the sampling loop and a server started here (its whole process tree)."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
        if self._server is not None:
            self._server.stop()

    @functools.cached_property
    def _base_path(self) -> str:
        """The directory of the model vLLM serves (what adapters name as their base)."""
        from envsuite.models import resolve_model

        return str(resolve_model(self.config.vllm_model).path)

    def _run(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # -- names -----------------------------------------------------------------------------------

    def check_base(self, base_model: str) -> None:
        """Refuse a base model vLLM does not serve (a 400 naming the one it does)."""
        from envsuite.models import resolve_model

        try:
            same = str(resolve_model(base_model).path) == self._base_path
        except Exception:  # an unresolvable name is no match either
            same = False
        if not same:
            raise UsageError(
                f"this server samples on vLLM, which serves {self.config.vllm_model!r}, not {base_model!r} "
                "(envsuite serve --vllm-model)"
            )

    def base_model_name(self, base_model: str) -> str:
        """The vLLM name to sample ``base_model``'s own weights under."""
        self.check_base(base_model)
        return self.base_name

    def training_lora(self, lora: types.LoraConfig | None, base_model: str) -> types.LoraConfig:
        """The LoRA a training model on this server gets: vLLM samples LoRA versions of its own base
        model only, and applies no LoRA to ``lm_head``, so ``train_unembed`` is taken as False (the
        SDK's default is True; the weights sampled are then exactly the weights trained)."""
        self.check_base(base_model)
        if lora is None:
            raise UsageError(
                "this server samples on vLLM, which takes LoRA policies only: create a LoRA client"
            )
        if lora.rank > self.config.vllm_max_lora_rank:
            raise UsageError(
                f"LoRA rank {lora.rank} is over the vLLM server's --max-lora-rank "
                f"{self.config.vllm_max_lora_rank} (envsuite serve --vllm-max-lora-rank)"
            )
        if not (lora.train_mlp or lora.train_attn):
            raise UsageError("vLLM applies no LoRA to lm_head: train the MLP or attention (or both)")
        if lora.train_unembed:
            logger.info("train_unembed taken as False: vLLM applies no LoRA to lm_head")
        return lora.model_copy(update={"train_unembed": False})

    # -- publishing ------------------------------------------------------------------------------

    def publish(self, name: str, checkpoint: Path, *, remove_source: bool = False) -> str:
        """Load the LoRA sampler checkpoint directory ``checkpoint`` into vLLM as ``name`` (once);
        returns ``name``. Blocking: call it from a worker thread, never the sampling loop's."""
        with self._lock:
            if name in self._published:
                return name
        started = time.perf_counter()
        files = {p.name: p.read_bytes() for p in checkpoint.iterdir() if p.is_file()}
        dest = self.adapter_root / name
        adapter = write_peft_adapter(files, dest, self._base_path)
        try:
            self.check_base(adapter.base_model)
            if adapter.rank > self.config.vllm_max_lora_rank:
                raise UsageError(
                    f"LoRA rank {adapter.rank} is over the vLLM server's --max-lora-rank "
                    f"{self.config.vllm_max_lora_rank} (envsuite serve --vllm-max-lora-rank)"
                )
        except UsageError:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        if remove_source:
            shutil.rmtree(checkpoint, ignore_errors=True)
        self._run(VllmEndpoint(self.url).load_adapter(name, str(dest))).result()
        with self._lock:
            self._published[name] = dest
        logger.info("published %s to vLLM in %.2f s", name, time.perf_counter() - started)
        return name

    def publish_checkpoint(self, checkpoint: Path) -> str:
        return self.publish(checkpoint_adapter_name(checkpoint), checkpoint)

    def release(self, name: str) -> None:
        """Unload adapter ``name`` and delete its files (a released snapshot); unknown names pass."""
        with self._lock:
            dest = self._published.pop(name, None)
        if dest is None or not self._thread.is_alive():
            return
        try:
            self._run(VllmEndpoint(self.url).unload_adapter(name)).result(timeout=60)
        except Exception as exc:  # a server already gone holds nothing to unload
            logger.warning("could not unload %s from vLLM: %s", name, exc)
        shutil.rmtree(dest, ignore_errors=True)

    # -- sampling --------------------------------------------------------------------------------

    def sample(
        self,
        model: str,
        base_model: str,
        prompt: types.ModelInput,
        num_samples: int,
        params: types.SamplingParams,
    ) -> concurrent.futures.Future[types.SampleResponse]:
        """Sample ``model`` (a published name) on vLLM; cancelling the future cancels the requests. A
        request that names no ``max_tokens`` gets the local engine's default budget."""
        if params.max_tokens is None:
            budget = min(ENGINE_DEFAULT_MAX_TOKENS, self.config.max_tokens)
            params = params.model_copy(update={"max_tokens": budget})
        client = VllmSamplingClient(self.url, model, base_model)
        return self._run(client.sample(prompt, num_samples, params))
