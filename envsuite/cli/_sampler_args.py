"""``--sampler vllm`` and ``--vllm-url`` for the commands that sample a named model (play, bench).

The model's replies then come from a vLLM server (docs/vllm.md): the one at ``--vllm-url``, or one
started from the vLLM venv for the command's lifetime. It reaches the sampling code as a ``vllm+``
base URL, which :func:`envsuite.backends.sampling_client_for` routes to vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from envsuite.errors import UsageError


def add_sampler_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sampler",
        choices=("backend", "vllm"),
        default="backend",
        help="who samples the model: backend (--backend's own) | vllm (a vLLM server: docs/vllm.md)",
    )
    p.add_argument(
        "--vllm-url",
        default=None,
        help="--sampler vllm: a running vLLM server (default: start one from .venv-vllm)",
    )


@contextlib.contextmanager
def sampler_url(args: argparse.Namespace, model: str) -> Iterator[str | None]:
    """The ``vllm+`` base URL to sample ``model`` on under ``--sampler vllm`` (None otherwise), with a
    server started for the block when no ``--vllm-url`` is given."""
    if args.sampler != "vllm":
        if args.vllm_url:
            raise UsageError("--vllm-url names the server of --sampler vllm: pass --sampler vllm too")
        yield None
        return
    if model in ("random", "human") or model.startswith("tinker://"):
        raise UsageError(f"--sampler vllm samples a model name or a LoRA checkpoint dir, not {model!r}")
    if args.base_url:
        raise UsageError("--sampler vllm takes its server from --vllm-url, not --base-url")
    from envsuite.backends.vllm import running_vllm

    with running_vllm(model, args.vllm_url) as url:
        yield url
