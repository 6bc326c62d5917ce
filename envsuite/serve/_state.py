"""What the server holds: sessions, their training models and sampling sessions, over the local backend.

Ids follow the hosted service's scheme, which the SDK relies on: a session ``sess-<hex>``, its
training models ``<session>:train:<n>`` (the SDK derives this id itself when it creates a model from
a checkpoint), its sampling sessions ``<session>:sample:<n>``. Runs and checkpoints live on disk under
``<state_dir>/runs`` (the local backend's layout), so ``tinker://`` paths outlive the process; sessions,
models and samplers are in memory and end with it (a client resumes from its checkpoints). The sampling
records ``stable_reinforce`` trains on (``record_stability_info``) are kept per session in
``<state_dir>/sequences.sqlite``, so a restarted server still has them; each expires a day after its
last use.

Sampling clients are models in memory, so they are bounded: a training model keeps its last few
weight snapshots, and samplers for base models or checkpoints are shared by everyone asking for the
same weights and evicted least recently used.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsuite.backends.local import (
    LocalRestClient,
    LocalSamplingClient,
    LocalServiceClient,
    LocalTrainingClient,
    SequenceStore,
    resolve_checkpoint_path,
)
from envsuite.capture import CaptureSets
from envsuite.serve._config import ServeConfig
from envsuite.serve._errors import NotFound
from envsuite.serve._futures import FutureRegistry
from envsuite.serve._paths import PathScope
from envsuite.serve._vllm import VllmEngine

__all__ = ["Model", "NotFound", "Sampler", "ServerState", "Session"]

SEQUENCES_FILE = "sequences.sqlite"
"""The sampling records of every session, under the state dir."""
_SHARED_SAMPLERS = 8
"""Samplers for base models and checkpoints kept at once (each holds a model in memory)."""


@dataclass
class Session:
    session_id: str
    user_metadata: dict[str, Any]
    last_seen: float = field(default_factory=time.monotonic)
    models: set[str] = field(default_factory=set)
    samplers: set[str] = field(default_factory=set)
    finished: bool = False


@dataclass
class Model:
    model_id: str
    session_id: str
    client: LocalTrainingClient
    snapshots: deque[str] = field(default_factory=deque)
    """Sampler ids of in-memory weight snapshots, oldest first."""


@dataclass
class Sampler:
    sampler_id: str
    session_id: str
    client: LocalSamplingClient
    base_model: str
    model_path: str | None
    owned: bool
    """True for a snapshot this sampler alone holds (closed with it); False for a shared one."""
    vllm_model: str | None = None
    """``--sampling-engine vllm``: the name its weights are published under on the vLLM server."""


class ServerState:
    """Every live object of one server process, guarded by one lock (handlers and workers share it)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.runs_dir = Path(config.state_dir) / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.scope = PathScope.create(Path(config.state_dir), tuple(config.allowed_dirs))
        """What client-named checkpoint paths and model directories may be (inside the state dir or
        the operator's --allow-dir directories)."""
        self.service = LocalServiceClient(log_dir=self.runs_dir, device=config.device)
        self.rest = LocalRestClient(log_dir=self.runs_dir, tinker_paths=True)
        self.sequences = SequenceStore(Path(config.state_dir) / SEQUENCES_FILE)
        """Every session's sampling records (``record_stability_info``), on disk."""
        self.futures = FutureRegistry()
        self.captures = CaptureSets(Path(config.state_dir) / "captures")
        """Capture sets of the OpenAI routes (``<state-dir>/captures/<name>``)."""
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, Model] = {}
        self.samplers: dict[str, Sampler] = {}
        self._shared: OrderedDict[tuple[str, str], LocalSamplingClient] = OrderedDict()
        self.lock = threading.RLock()
        self._loading = threading.Lock()
        self.loader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="envsuite-serve-load")
        """Builds training models off the event loop (a model takes milliseconds to seconds to load)."""
        self.vllm = VllmEngine(config) if config.sampling_engine == "vllm" else None
        """The vLLM server the Tinker routes sample on (``--sampling-engine vllm``), else None."""

    # -- sessions ------------------------------------------------------------------------------

    def new_session(self, user_metadata: dict[str, Any]) -> Session:
        session = Session(f"sess-{uuid.uuid4().hex[:16]}", dict(user_metadata))
        with self.lock:
            self.sessions[session.session_id] = session
        return session

    def session(self, session_id: str) -> Session:
        with self.lock:
            session = self.sessions.get(session_id)
            if session is None or session.finished:
                raise NotFound(f"unknown or finished session {session_id!r}")
            session.last_seen = time.monotonic()
            return session

    def finish_session(self, session_id: str) -> None:
        """End a session: its models and samplers are released (queued work finishes first)."""
        with self.lock:
            session = self.sessions.get(session_id)
            if session is None or session.finished:
                return
            session.finished = True
            models = [self.models.pop(m) for m in session.models if m in self.models]
            samplers = [self.samplers.pop(s) for s in session.samplers if s in self.samplers]
        for sampler in samplers:
            if sampler.owned:
                self._release(sampler)
        for model in models:
            model.client.close()

    def reap_idle_sessions(self) -> list[str]:
        """Finish sessions silent for longer than ``session_timeout_s``; returns their ids."""
        cutoff = time.monotonic() - self.config.session_timeout_s
        with self.lock:
            idle = [s.session_id for s in self.sessions.values() if not s.finished and s.last_seen < cutoff]
        for session_id in idle:
            self.finish_session(session_id)
        self.sequences.purge()
        return idle

    # -- models --------------------------------------------------------------------------------

    def add_model(self, session_id: str, model_id: str, client: LocalTrainingClient) -> None:
        client.bind_sequence_records(self.sequences.scope(session_id))
        with self.lock:
            self.session(session_id).models.add(model_id)
            self.models[model_id] = Model(model_id, session_id, client)

    def model(self, model_id: str) -> Model:
        with self.lock:
            model = self.models.get(model_id)
            if model is None:
                raise NotFound(f"unknown model_id {model_id!r} (models live as long as their session)")
            self.session(model.session_id)
            return model

    def run_id_of(self, training_run_id: str) -> str:
        """The run directory name for a model id (live) or a run id (on disk)."""
        with self.lock:
            model = self.models.get(training_run_id)
        return model.client.model_id if model is not None else training_run_id

    # -- samplers ------------------------------------------------------------------------------

    def add_snapshot(
        self, model_id: str, sampler_id: str, client: LocalSamplingClient, vllm_model: str | None = None
    ) -> None:
        """Register a snapshot of a model's weights; the model's oldest snapshots beyond the limit go."""
        with self.lock:
            model = self.models[model_id]
            session = self.sessions[model.session_id]
            self.samplers[sampler_id] = Sampler(
                sampler_id,
                model.session_id,
                client,
                client.get_base_model(),
                client.model_path,
                True,
                vllm_model,
            )
            session.samplers.add(sampler_id)
            model.snapshots.append(sampler_id)
            evicted = []
            while len(model.snapshots) > self.config.snapshot_samplers_per_model:
                old = model.snapshots.popleft()
                session.samplers.discard(old)
                if (gone := self.samplers.pop(old, None)) is not None:
                    evicted.append(gone)
        for sampler in evicted:
            self._release(sampler)

    def _release(self, sampler: Sampler) -> None:
        """Close a snapshot sampler, and unload its adapter from vLLM."""
        sampler.client.close()
        if self.vllm is not None and sampler.vllm_model is not None:
            self.vllm.release(sampler.vllm_model)

    def shared_sampler(self, base_model: str | None, model_path: str | None) -> LocalSamplingClient:
        """A sampling client for a base model or a checkpoint, shared by every session asking for it."""
        key = ("path", model_path) if model_path is not None else ("base", str(base_model))
        with self._loading:  # concurrent requests for the same weights load them once
            with self.lock:
                if key in self._shared:
                    self._shared.move_to_end(key)
                    return self._shared[key]
            client = self.service.create_sampling_client(
                model_path=model_path, base_model=base_model
            ).result()
        with self.lock:
            self._shared[key] = client
            evicted = []
            while len(self._shared) > _SHARED_SAMPLERS:
                _, old = self._shared.popitem(last=False)
                evicted.append(old)
        for old in evicted:
            old.close()
        return client

    def scoped_sampler(self, base_model: str | None, model_path: str | None) -> LocalSamplingClient:
        """:meth:`shared_sampler` for the names a client sent, after :attr:`scope` has checked them."""
        if model_path is not None:
            return self.shared_sampler(None, self.scope.checkpoint(model_path))
        if base_model is None:
            raise ValueError("name a model_path or a base_model")
        return self.shared_sampler(self.scope.model(base_model), None)

    def vllm_name(self, base_model: str | None, model_path: str | None) -> str | None:
        """The vLLM name these weights sample under (a checkpoint is published first); None without
        vLLM. Blocking the first time a checkpoint is named: call it off the event loop."""
        if self.vllm is None:
            return None
        if model_path is not None:
            directory = resolve_checkpoint_path(self.scope.checkpoint(model_path), self.runs_dir)
            return self.vllm.publish_checkpoint(directory)
        if base_model is None:
            raise ValueError("name a model_path or a base_model")
        return self.vllm.base_model_name(self.scope.model(base_model))

    def add_sampler(
        self, session_id: str, sampler_id: str, client: LocalSamplingClient, vllm_model: str | None = None
    ) -> None:
        with self.lock:
            self.session(session_id).samplers.add(sampler_id)
            self.samplers[sampler_id] = Sampler(
                sampler_id, session_id, client, client.get_base_model(), client.model_path, False, vllm_model
            )

    def sampler(self, sampler_id: str) -> Sampler:
        with self.lock:
            sampler = self.samplers.get(sampler_id)
            if sampler is None:
                raise NotFound(
                    f"unknown sampling session {sampler_id!r} (ended with its session, or released: a "
                    f"model keeps its last {self.config.snapshot_samplers_per_model} weight snapshots)"
                )
            return sampler

    def close(self) -> None:
        """Release everything (server shutdown)."""
        self.loader.shutdown(wait=True, cancel_futures=True)
        with self.lock:
            sessions = list(self.sessions)
        for session_id in sessions:
            self.finish_session(session_id)
        with self.lock:
            shared = list(self._shared.values())
            self._shared.clear()
        for client in shared:
            client.close()
        self.sequences.close()
        if self.vllm is not None:
            self.vllm.close()
