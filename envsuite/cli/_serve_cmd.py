"""``envsuite serve``: the Tinker service's HTTP API on this machine's compute (docs/serve.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.cli._args import Subparsers
from envsuite.errors import UsageError

if TYPE_CHECKING:
    from envsuite.serve import ServeConfig


def add_parser(sub: Subparsers) -> None:
    """Register ``envsuite serve`` on the top-level parser's subcommands."""
    from envsuite.serve import API_KEY_VAR, ServeConfig

    defaults = ServeConfig()
    p = sub.add_parser(
        "serve",
        help="serve the Tinker API on local compute (the real tinker SDK connects by base_url)",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--host", default=defaults.host, help="address to bind (anything but loopback needs a key)"
    )
    p.add_argument("--port", type=int, default=defaults.port)
    p.add_argument("--device", choices=["cpu", "cuda"], default=defaults.device, help="where models run")
    p.add_argument(
        "--state-dir", default=str(defaults.state_dir), help="runs and checkpoints (kept across restarts)"
    )
    p.add_argument(
        "--allow-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory (besides --state-dir) whose checkpoints and models clients may name by path; "
        "repeat for more. Any other path is answered as not found",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help=f"key every request must carry (X-API-Key; the SDK's api_key); default: ${API_KEY_VAR}",
    )
    p.add_argument(
        "--capture-keys",
        default=None,
        metavar="FILE",
        help="a file of 'NAME KEY' lines: requests carrying KEY are accepted and captured into set NAME",
    )
    p.add_argument(
        "--max-body-mb", type=float, default=defaults.max_body_bytes / 2**20, help="request body limit"
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=defaults.max_tokens,
        help="most tokens one sample may generate; a request asking more gets this many (as vLLM clamps)",
    )
    p.add_argument(
        "--max-samples",
        type=int,
        default=defaults.max_samples,
        help="most samples one Tinker sample request may ask for (num_samples); more is refused",
    )
    p.add_argument(
        "--grader-openenv",
        action="append",
        default=[],
        metavar="URL",
        help="an OpenEnv server (http://host:port) the capture grader may use as env_id openenv:URL; "
        "repeat for more. Any other URL is refused without being contacted",
    )
    p.add_argument(
        "--sampling-engine",
        choices=["local", "vllm"],
        default=defaults.sampling_engine,
        help="who samples on the Tinker and OpenAI routes: local (this backend) | vllm (a vLLM server; training "
        "stays local, each sampler's LoRA is published to it: docs/vllm.md)",
    )
    p.add_argument(
        "--vllm-url",
        default=None,
        help="--sampling-engine vllm: a running vLLM server (default: start one from .venv-vllm)",
    )
    p.add_argument(
        "--vllm-model", default=defaults.vllm_model, help="--sampling-engine vllm: the base model vLLM serves"
    )
    p.add_argument(
        "--vllm-max-lora-rank",
        type=int,
        default=defaults.vllm_max_lora_rank,
        help="--sampling-engine vllm: the largest LoRA rank clients may train (1, 8, 16, 32, 64, ...)",
    )
    p.add_argument(
        "--vllm-max-model-len",
        type=int,
        default=defaults.vllm_max_model_len,
        help="--sampling-engine vllm: prompt plus reply, in tokens, on a server started here",
    )
    p.add_argument(
        "--vllm-max-restarts",
        type=int,
        default=defaults.vllm_max_restarts,
        help="--sampling-engine vllm: a server started here that dies is restarted at most this many times "
        "within --vllm-restart-window, then left down (sampling answers 503); 0 never restarts it",
    )
    p.add_argument(
        "--vllm-restart-window",
        type=float,
        default=defaults.vllm_restart_window_s,
        metavar="SECONDS",
        help="--sampling-engine vllm: the window --vllm-max-restarts counts losses in",
    )
    p.add_argument(
        "--vllm-dtype",
        choices=["float32", "bfloat16", "float16"],
        default=defaults.vllm_dtype,
        help="--sampling-engine vllm: the dtype of a vLLM server started here (float32 as the learner "
        "trains; a lower one moves its logprobs by about 1e-2 against the learner's)",
    )
    p.add_argument(
        "--vllm-gpu-memory-utilization",
        type=float,
        default=defaults.vllm_gpu_memory_utilization,
        help="--sampling-engine vllm --device cuda: the share of the GPU a vLLM server started here takes "
        "(the learner trains on the rest)",
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        default=defaults.session_timeout_s,
        help="seconds before a silent session ends",
    )


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    """The server's config from ``envsuite serve``'s parsed flags (checked when the server starts)."""
    from envsuite.serve import ServeConfig

    return ServeConfig(
        host=args.host,
        port=args.port,
        device=args.device,
        state_dir=Path(args.state_dir),
        allowed_dirs=tuple(Path(d) for d in args.allow_dir),
        max_body_bytes=int(args.max_body_mb * 2**20),
        session_timeout_s=args.session_timeout,
        max_tokens=args.max_tokens,
        max_samples=args.max_samples,
        grader_openenv_urls=tuple(args.grader_openenv),
        sampling_engine=args.sampling_engine,
        vllm_url=args.vllm_url,
        vllm_model=args.vllm_model,
        vllm_max_lora_rank=args.vllm_max_lora_rank,
        vllm_max_model_len=args.vllm_max_model_len,
        vllm_max_restarts=args.vllm_max_restarts,
        vllm_restart_window_s=args.vllm_restart_window,
        vllm_dtype=args.vllm_dtype,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; a ServeConfigError (a UsageError) is one line, exit 2."""
    from envsuite.serve import api_key_from_env, read_capture_keys, serve

    config = config_from_args(args)
    try:
        capture_keys = read_capture_keys(args.capture_keys) if args.capture_keys else None
    except OSError as exc:
        raise UsageError(f"--capture-keys: {exc}") from exc
    serve(config, api_key=args.api_key or api_key_from_env(), capture_keys=capture_keys)
    return 0
