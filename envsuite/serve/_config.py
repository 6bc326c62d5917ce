"""What ``envsuite serve`` runs with: a small picklable config, and the rules it must satisfy.

The API key is deliberately not part of it: a config may be printed, pickled or logged, a key never
is. The key travels separately (flag or :data:`API_KEY_VAR`) into :func:`envsuite.serve.create_app`,
which keeps only its SHA-256 digest.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envsuite.errors import UsageError

API_KEY_VAR = "ENVSUITE_SERVE_API_KEY"
"""Environment variable holding the key clients must send (``X-API-Key``, the SDK's ``api_key``)."""

Device = Literal["cpu", "cuda"]


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

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect."""
        if self.host in ("localhost",):
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check(self, api_key: str | None) -> None:
        """Refuse to start unsafely: any non-loopback bind needs a key; ``cuda`` needs a GPU."""
        if not self.loopback and not api_key:
            raise ServeConfigError(
                f"binding {self.host} exposes training and sampling to the network: set an API key "
                f"(--api-key or {API_KEY_VAR}); every request without it is then refused"
            )
        if not 0 < self.port < 65536:
            raise ServeConfigError(f"port must be in 1..65535, got {self.port}")
        if self.max_body_bytes < 1024:
            raise ServeConfigError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
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
