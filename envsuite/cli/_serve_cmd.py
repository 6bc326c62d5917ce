"""``envsuite serve``: the Tinker service's HTTP API on this machine's compute (docs/serve.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from envsuite.cli._args import Subparsers


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
        "--api-key",
        default=None,
        help=f"key every request must carry (X-API-Key; the SDK's api_key); default: ${API_KEY_VAR}",
    )
    p.add_argument(
        "--max-body-mb", type=float, default=defaults.max_body_bytes / 2**20, help="request body limit"
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        default=defaults.session_timeout_s,
        help="seconds before a silent session ends",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; a ServeConfigError (a UsageError) is one line, exit 2."""
    from envsuite.serve import ServeConfig, api_key_from_env, serve

    config = ServeConfig(
        host=args.host,
        port=args.port,
        device=args.device,
        state_dir=Path(args.state_dir),
        max_body_bytes=int(args.max_body_mb * 2**20),
        session_timeout_s=args.session_timeout,
    )
    serve(config, api_key=args.api_key or api_key_from_env())
    return 0
