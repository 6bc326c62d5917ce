"""What ``envsuite serve`` runs with: a small picklable config, and the rules it must satisfy.

The API key is deliberately not part of it: a config may be printed, pickled or logged, a key never
is. The key travels separately (flag or :data:`API_KEY_VAR`) into :func:`envsuite.serve.create_app`,
which keeps only its SHA-256 digest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envsuite.errors import UsageError
from envsuite.http_guard import check_exposure, is_loopback

API_KEY_VAR = "ENVSUITE_SERVE_API_KEY"
"""Environment variable holding the key clients must send (``X-API-Key``, the SDK's ``api_key``)."""

Device = Literal["cpu", "cuda"]
SamplingEngine = Literal["local", "vllm"]
DEFAULT_MAX_TOKENS = 4096
"""The most tokens one sample may generate unless the operator says otherwise (half the 8,192-token
context of the default model)."""
ENGINE_DEFAULT_MAX_TOKENS = 1024
"""A request that names no ``max_tokens`` gets this many (the sampling engine's default budget)."""


class ServeConfigError(UsageError):
    """A server configuration that must not start (an open address without a key, a missing GPU)."""


@dataclass(frozen=True)
class ServeConfig:
    """Where and how the server listens, and where its state lives."""

    host: str = "127.0.0.1"
    """The address to bind. Anything but loopback requires an API key."""
    port: int = 8000
    device: Device = "cpu"
    """Where models run (``cuda`` needs a visible GPU)."""
    state_dir: Path = Path("serve-state")
    """Training runs and checkpoints (``tinker://`` paths resolve here); survives restarts."""
    allowed_dirs: tuple[Path, ...] = ()
    """Directories besides ``state_dir`` whose checkpoints and model directories clients may name by
    path; any other path is answered as not found (``envsuite.serve._paths``)."""
    max_body_bytes: int = 64 * 1024 * 1024
    """Larger request bodies are refused with 413."""
    poll_wait_s: float = 20.0
    """How long ``retrieve_future`` holds a request open waiting for a result (the SDK waits 45 s)."""
    session_timeout_s: float = 600.0
    """A session silent (no heartbeat, no request) this long is ended and its models released."""
    snapshot_samplers_per_model: int = 4
    """In-memory sampling clients kept per training model (older snapshots are released)."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    """The most tokens one sample may generate, on every route. A request asking for more gets this
    many (its choices then finish with ``length``), as vLLM clamps to its operator's
    ``max_new_tokens``; the model's context still bounds prompt plus reply."""
    max_samples: int = 256
    """The most samples one Tinker ``asample`` may ask for (``num_samples``); more is a 400 naming it.
    The sampling engine admits one request's samples together, so an unbounded count is unbounded
    memory (the OpenAI routes' ``n`` stops at 64)."""
    grader_openenv_urls: tuple[str, ...] = ()
    """OpenEnv servers (``http://host:port``) the capture grader may connect to (``openenv:<url>``
    env ids); any other URL is refused without being contacted."""
    sampling_engine: SamplingEngine = "local"
    """Who samples on the Tinker and OpenAI routes: the local backend, or a vLLM server
    (``envsuite.serve._vllm``: training stays local, each sampler's LoRA version is published to vLLM)."""
    vllm_url: str | None = None
    """``sampling_engine="vllm"``: a running vLLM server; None starts one from the vLLM venv."""
    vllm_model: str = "smollm2-135m-instruct"
    """The base model the vLLM server serves (one per server); samplers on other bases are refused."""
    vllm_max_lora_rank: int = 32
    """The largest LoRA rank vLLM takes (``--max-lora-rank``; 1, 8, 16, 32, 64, ...)."""
    vllm_max_model_len: int = 8192
    """Prompt plus reply, in tokens, on a vLLM server started here."""
    vllm_max_restarts: int = 3
    """A vLLM server started here that dies is restarted, at most this many times within
    :attr:`vllm_restart_window_s`; once more and it is left down (``envsuite.serve._vllm_watch``)."""
    vllm_restart_window_s: float = 600.0
    vllm_dtype: str = "float32"
    """The vLLM server's ``--dtype`` (started here): fp32 as the learner trains; ``bfloat16`` where
    vLLM's CUDA attention has no fp32 kernel (its logprobs then differ from the learner's by ~1e-2)."""
    vllm_gpu_memory_utilization: float = 0.4
    """``--device cuda``: the share of the GPU a vLLM server started here takes (the learner trains on
    the rest of the same GPU)."""

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect."""
        return is_loopback(self.host)

    def tokens_for(self, asked: int | None) -> int | None:
        """The token budget of a sample that asked for ``asked`` (None: the engine's default) under
        :attr:`max_tokens`."""
        if asked is None:
            return None if self.max_tokens >= ENGINE_DEFAULT_MAX_TOKENS else self.max_tokens
        return min(asked, self.max_tokens)

    def check(self, api_key: str | None) -> None:
        """Refuse to start unsafely: any non-loopback bind needs a key; ``cuda`` needs a GPU."""
        check_exposure(
            self.host,
            api_key,
            what="training and sampling",
            key_hint=f"--api-key or {API_KEY_VAR}",
            error=ServeConfigError,
        )
        if self.max_tokens < 1 or self.max_samples < 1:
            raise ServeConfigError(
                f"max_tokens and max_samples must be at least 1, got {self.max_tokens}, {self.max_samples}"
            )
        if not 0 < self.port < 65536:
            raise ServeConfigError(f"port must be in 1..65535, got {self.port}")
        if self.max_body_bytes < 1024:
            raise ServeConfigError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        if self.vllm_max_restarts < 0 or self.vllm_restart_window_s <= 0:
            raise ServeConfigError("vllm_max_restarts must be at least 0 and vllm_restart_window_s positive")
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            raise ServeConfigError(
                f"vllm_gpu_memory_utilization must be in (0, 1), got {self.vllm_gpu_memory_utilization}"
            )
        if self.vllm_url is not None and self.sampling_engine != "vllm":
            raise ServeConfigError("--vllm-url names the server of --sampling-engine vllm: pass that too")
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ServeConfigError("--device cuda: no CUDA device is visible to PyTorch")


def api_key_from_env() -> str | None:
    """The key from :data:`API_KEY_VAR`, if set."""
    return os.environ.get(API_KEY_VAR) or None


def read_capture_keys(path: str | os.PathLike[str]) -> dict[str, str]:
    """Capture keys from a file of ``NAME KEY`` lines (blank lines and ``#`` comments skipped): each
    request carrying a KEY is accepted and captured into set NAME. A file, not flags: flags show in
    process listings."""
    keys: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or parts[0] in keys:
            raise ServeConfigError(f"{path}:{number}: expected 'NAME KEY' with a name used once")
        keys[parts[0]] = parts[1]
    return keys
