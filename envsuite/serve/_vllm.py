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

A watchdog (``envsuite.serve._vllm_watch``) restarts a server started here that dies mid-serve (and
waits for a user's), loading every published adapter again before requests sample on it; meanwhile
requests are answered with :class:`~envsuite.serve._errors.SamplerDown` (503, ``Retry-After``).
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
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from tinker import types

from envsuite.backends.vllm import (
    VllmConnectionError,
    VllmEndpoint,
    VllmRequestError,
    VllmSamplingClient,
    VllmServer,
    VllmServerSettings,
    served_base,
    write_peft_adapter,
)
from envsuite.errors import UsageError
from envsuite.serve._config import ENGINE_DEFAULT_MAX_TOKENS, ServeConfig
from envsuite.serve._vllm_watch import Phase, ServerProbe, VllmWatchdog, WatchSettings

logger = logging.getLogger("envsuite.serve")
T = TypeVar("T")
ADAPTERS_DIR = "vllm_adapters"
"""Where published adapters live, under the state dir (vLLM reloads an evicted one from there)."""
BASE_NAME = "base"
"""The base model's name on a server started here."""
PUBLISH_WAIT_S = 600.0
"""How long a publish waits for a server being restarted (a start takes 30-150 s on 2 cores)."""
LOSS_NOTICE_S = 10.0
"""How long a request the server lost waits for the watchdog to mark it down before it is sent again
(a server that only dropped one request stays up, and the request goes again after this)."""
EXTERNAL_RETRY_S = 10.0
"""The ``Retry-After`` while a user's server (``--vllm-url``) is away: its return time is unknown."""


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
                    device=config.device,
                    dtype=config.vllm_dtype,
                    gpu_memory_utilization=config.vllm_gpu_memory_utilization,
                )
            )
        self.url = (config.vllm_url or "").rstrip("/")
        self.base_name = BASE_NAME
        self._published: dict[str, Path] = {}
        """Adapters loaded (or being loaded) into the server: a restart loads them all again."""
        self._lock = threading.Lock()
        self._publishing = threading.Lock()
        """One publish at a time: a second asking for the same name must not see it before it is loaded."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="envsuite-serve-vllm", daemon=True
        )
        self.watchdog = VllmWatchdog(
            ServerProbe(
                exited=self._exited,
                healthy=self._healthy,
                recover=self._recover,
                expected_start_s=self._expected_start_s,
                restartable=self._server is not None,
            ),
            WatchSettings(max_restarts=config.vllm_max_restarts, window_s=config.vllm_restart_window_s),
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
        self.watchdog.start()

    def close(self) -> None:
        """Stop the watchdog, the sampling loop and a server started here (its whole process tree)."""
        self.watchdog.stop(timeout_s=0)
        if self._server is not None:
            self._server.stop()  # a restart in progress sees its server gone and gives up
        self.watchdog.stop()
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
        if self._server is not None:
            self._server.stop()  # what a restart racing the first stop may have started

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
        returns ``name``. Blocking: call it from a worker thread, never the sampling loop's. A server
        being restarted is waited for (up to :data:`PUBLISH_WAIT_S`)."""
        with self._publishing:
            with self._lock:
                if name in self._published:
                    return name
            started = time.perf_counter()
            dest = self._write_adapter(name, checkpoint)
            if remove_source:
                shutil.rmtree(checkpoint, ignore_errors=True)
            with self._lock:  # before loading: a restart from here on loads it again
                self._published[name] = dest
            try:
                self._load(name, dest)
            except BaseException:
                with self._lock:
                    self._published.pop(name, None)
                raise
        logger.info("published %s to vLLM in %.2f s", name, time.perf_counter() - started)
        return name

    def _write_adapter(self, name: str, checkpoint: Path) -> Path:
        """``checkpoint`` as a peft adapter under the adapter root, checked against what vLLM serves."""
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
        return dest

    def _load(self, name: str, dest: Path) -> None:
        """Load ``dest`` as ``name``; a server lost on the way is waited for and loaded again."""
        for attempt in range(2):
            self.watchdog.wait_up(PUBLISH_WAIT_S)
            try:
                self._run(VllmEndpoint(self.url).load_adapter(name, str(dest))).result()
                return
            except VllmConnectionError as exc:
                lost = self.watchdog.suspect(str(exc))
                if attempt:
                    raise lost from exc

    def publish_checkpoint(self, checkpoint: Path) -> str:
        return self.publish(checkpoint_adapter_name(checkpoint), checkpoint)

    def release(self, name: str) -> None:
        """Unload adapter ``name`` and delete its files (a released snapshot); unknown names pass."""
        with self._lock:
            dest = self._published.pop(name, None)
        if dest is None or not self._thread.is_alive():
            return
        try:
            self.watchdog.check_up()  # a server being restarted will not load it again
            self._run(VllmEndpoint(self.url).unload_adapter(name)).result(timeout=60)
        except Exception as exc:  # a server gone holds nothing to unload
            logger.warning("could not unload %s from vLLM: %s", name, exc)
        shutil.rmtree(dest, ignore_errors=True)

    # -- sampling --------------------------------------------------------------------------------

    def check_up(self) -> None:
        """Raise :class:`SamplerDown` (a 503 with ``Retry-After``) while the server is down."""
        self.watchdog.check_up()

    def sample(
        self,
        model: str,
        base_model: str,
        prompt: types.ModelInput,
        num_samples: int,
        params: types.SamplingParams,
        topk_sample_logprobs: int = 0,
        *,
        replay: bool = False,
    ) -> concurrent.futures.Future[types.SampleResponse]:
        """Sample ``model`` (a published name) on vLLM; cancelling the future cancels the requests. A
        request that names no ``max_tokens`` gets the local engine's default budget; ``top_k``, ``top_p``
        and the temperature go to vLLM as they are, and ``topk_sample_logprobs`` asks vLLM for each
        position's alternatives. A server that is down fails the future with :class:`SamplerDown`; one
        lost while answering does too, unless ``replay``: then the request is sent again once the server
        is back with its adapters (a Tinker future, which the SDK waits on, rather than an OpenAI reply,
        whose client is told to retry)."""
        self.watchdog.check_up()
        if params.max_tokens is None:
            budget = min(ENGINE_DEFAULT_MAX_TOKENS, self.config.max_tokens)
            params = params.model_copy(update={"max_tokens": budget})

        async def once() -> types.SampleResponse:
            client = VllmSamplingClient(self.url, model, base_model)  # a restart moves the URL
            return await client.sample(prompt, num_samples, params, topk_sample_logprobs=topk_sample_logprobs)

        return self._run(self._sample(once, replay))

    async def _sample(
        self, once: Callable[[], Awaitable[types.SampleResponse]], replay: bool
    ) -> types.SampleResponse:
        try:
            return await once()
        except VllmConnectionError as exc:
            down = self.watchdog.suspect(str(exc))
            if not replay:
                raise down from exc
        await self._back_up()
        try:
            return await once()
        except VllmConnectionError as exc:
            raise self.watchdog.suspect(str(exc)) from exc

    async def _back_up(self) -> None:
        """Return once a server that lost a request is back (adapters loaded again); raise
        :class:`SamplerDown` when it will not be. The watchdog is given a moment to see the loss first
        (it looks every second): a server still marked up may be one not yet found dead."""
        noticed_by = time.monotonic() + LOSS_NOTICE_S
        while self.watchdog.phase is Phase.UP and time.monotonic() < noticed_by:
            await asyncio.sleep(0.25)
        await asyncio.to_thread(self.watchdog.wait_up, PUBLISH_WAIT_S)

    # -- the watchdog's side ---------------------------------------------------------------------

    def _exited(self) -> str | None:
        if self._server is None or self.watchdog.stopping or self._server.alive():
            return None
        return f"its process exited; log: {self._server.log_path}"

    def _healthy(self) -> bool:
        return bool(self._run(VllmEndpoint(self.url).healthy()).result(timeout=60))

    def _expected_start_s(self) -> float:
        if self._server is None:
            return EXTERNAL_RETRY_S
        return self._server.start_seconds or 60.0

    def _recover(self) -> None:
        """Bring the server back (a restart here; the user's is waited for), then load every published
        adapter again: only then does the watchdog mark it up."""
        if self._server is not None:
            if self.watchdog.stopping:
                raise RuntimeError("envsuite serve is stopping")
            url = self._server.restart()
            with self._lock:
                self.url = url
            logger.warning("vLLM server restarted at %s in %.1f s", url, self._server.start_seconds)
        else:
            while not self._healthy():
                if self.watchdog.stopping:
                    raise RuntimeError("envsuite serve is stopping")
                time.sleep(2.0)
        self._reload_adapters()

    def _reload_adapters(self) -> None:
        with self._lock:
            published = dict(self._published)
        for name, dest in published.items():
            with self._lock:
                if name not in self._published:  # released meanwhile
                    continue
            try:
                self._run(VllmEndpoint(self.url).load_adapter(name, str(dest))).result(timeout=300)
            except VllmRequestError as exc:  # its files went with a release racing this: skip it
                logger.warning("could not load %s into the restarted vLLM server: %s", name, exc)
        logger.info("%d adapter(s) loaded again into vLLM", len(published))
