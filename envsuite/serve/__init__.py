"""``envsuite serve``: the Tinker service's HTTP API on local compute.

The real ``tinker`` SDK, unchanged, talks to this server by ``base_url`` (``tinker.ServiceClient(
base_url="http://127.0.0.1:8000", api_key="tml-...")``): sessions, training (LoRA or full), sampling,
checkpoints with ``tinker://`` paths that survive restarts, and the REST listing of runs. Compute is
the local backend (``envsuite.backends.local``) on CPU or a GPU. The same server speaks OpenAI's
``/completions`` and ``/chat/completions`` (under ``/oai/api/v1`` and ``/v1``) for any checkpoint, and
captures those calls as training data (``envsuite.capture``). docs/serve.md has the details.
"""

from envsuite.serve._app import create_app
from envsuite.serve._config import (
    API_KEY_VAR,
    ServeConfig,
    ServeConfigError,
    api_key_from_env,
    read_capture_keys,
)
from envsuite.serve._run import serve

__all__ = [
    "API_KEY_VAR",
    "ServeConfig",
    "ServeConfigError",
    "api_key_from_env",
    "create_app",
    "read_capture_keys",
    "serve",
]
