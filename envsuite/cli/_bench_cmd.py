"""``envsuite bench --model M``: a model across catalog envs, as Inspect logs, into the leaderboard.

The flags are :class:`~envsuite.evals.BenchConfig`'s fields (and the executor's), with its defaults; the
bench itself is :func:`envsuite.evals.run_bench`. Exit 0 when every env finished, 1 when some did not
(a rerun plays what is missing), 2 for a bad setting.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from envsuite.backends.vllm import is_vllm_url
from envsuite.cli._args import Subparsers, field_defaults
from envsuite.cli._rubric_args import add_rubric_args
from envsuite.cli._sampler_args import add_sampler_args, sampler_url
from envsuite.errors import UsageError

MODEL_HELP = (
    "an envsuite model (smollm2-135m-instruct, tiny-random), a model or checkpoint dir, or an "
    "Inspect model written provider/name (e.g. openai/gpt-4o-mini)"
)
RUNNER_HELP = (
    "direct: envsuite plays the episodes and writes Inspect logs (envsuite models; 1.05x a bare "
    "rollout loop with the tiny model, against 4.3x for inspect); inspect: an Inspect eval set, one "
    "sample per episode; auto (default): direct for envsuite models, inspect for the rest"
)

# (flag, BenchConfig field, type, help); the defaults are BenchConfig's.
_OPTIONS: list[tuple[str, str, Any, str | None]] = [
    ("--episodes", "episodes", int, None),
    (
        "--samples",
        "samples",
        int,
        "plays of each episode, each with its own sampling seed; above 1 the tables report pass@k "
        "(k = 1, powers of 2, K) with CIs",
    ),
    ("--seed", "seed", int, None),
    ("--max-tokens", "max_tokens", int, None),
    ("--temperature", "temperature", float, None),
    ("--partner", "partner", str, "Inspect model to use as partner/opponent"),
    ("--log-dir", "log_root", str, "root of the Inspect log directories"),
    ("--db", "db", str, "leaderboard store (path or URL)"),
    ("--label", "label", str, "name on the leaderboard (default: the model)"),
    (
        "--episode-timeout",
        "episode_timeout_s",
        float,
        "seconds one episode may take; past it, it is scored as rollout_timeout (0: no bound)",
    ),
    (
        "--budget",
        "budget",
        str,
        "full (every env as it is) or small: multi-turn envs capped in turns, reply tokens and episode "
        "time to what a small model finishes (recorded in each shortened env's result key)",
    ),
]


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite bench`` to the command's sub-parsers."""
    from envsuite.evals import RUNNERS, BenchConfig
    from envsuite.executors import ExecutorConfig

    defaults = field_defaults(BenchConfig)
    executor = ExecutorConfig()
    p = sub.add_parser("bench", help="benchmark a model across the catalog (Inspect logs -> leaderboard)")
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument(
        "--envs",
        nargs="*",
        default=list(defaults["env_ids"]),
        metavar="ENV",
        help="ids, family:NAME, tag:NAME, globs (textarena/*), all; !PATTERN leaves out "
        "(default: every available env; `envsuite list --families` names them)",
    )
    for flag, name, kind, text in _OPTIONS:
        # The metavar the flag alone would give (the dest is the config's field name).
        metavar = flag.removeprefix("--").upper().replace("-", "_")
        p.add_argument(flag, dest=name, type=kind, default=defaults[name], metavar=metavar, help=text)
    p.add_argument(
        "--executor",
        default=executor.kind.value,
        help="where envs play: inprocess | process | ray (the model stays here)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=executor.workers,
        help="worker processes (process) or worker tasks (ray)",
    )
    p.add_argument(
        "--ray-address",
        default=executor.ray_address,
        help="a running Ray cluster (default: start a local Ray)",
    )
    p.add_argument("--backend", default="local", help="local (PyTorch here) or tinker (the Tinker API)")
    p.add_argument("--base-url", default=None, help="tinker backend: service URL, e.g. an `envsuite serve`")
    add_sampler_args(p)
    p.add_argument("--runner", choices=RUNNERS, default=defaults["runner"], help=RUNNER_HELP)
    add_rubric_args(p)
    p.add_argument(
        "--contamination",
        metavar="FILE",
        default=None,
        help="play nothing: report each env's prompts sharing a 13-gram with FILE (JSONL or text)",
    )
    p.add_argument(
        "--rescore",
        action="store_true",
        help="play nothing: re-grade the stored episodes of --model on --envs with today's grader and "
        "list the rows whose score changed",
    )


def _base_url(backend: str, base_url: str | None) -> str | None:
    if is_vllm_url(base_url):
        return base_url  # --sampler vllm (envsuite.cli._sampler_args)
    if backend not in ("local", "tinker"):
        raise UsageError(f"unknown backend {backend!r}; choose 'local' or 'tinker'")
    if backend == "local" and base_url:
        raise UsageError("--base-url is for --backend tinker (the Tinker API over HTTP)")
    if backend == "tinker" and not base_url:
        raise UsageError("--backend tinker needs --base-url (an envsuite serve, or the Tinker API's URL)")
    return base_url or None


def _rubric(args: argparse.Namespace) -> dict[str, Any]:
    """The config's rubric settings from ``--rubric FILE --judge MODEL --judge-cache FILE``: the file's
    content itself, so the bench records exactly which rubric scored it (none without ``--rubric``)."""
    if not args.rubric:
        return {}
    from envsuite.rubrics import load_rubric

    return {
        "rubric": load_rubric(args.rubric).to_dict(),
        "judge": args.judge,
        "judge_cache": args.judge_cache,
    }


def run(args: argparse.Namespace) -> int:
    """Run the bench, then print where its logs are and the leaderboard of its envs."""
    with sampler_url(args, args.model) as vllm_url:
        if vllm_url is not None:
            args.base_url = vllm_url
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from envsuite import catalog_reward_ranges
    from envsuite.display import printable
    from envsuite.evals import BenchConfig, run_bench
    from envsuite.executors import ExecutorConfig
    from envsuite.leaderboard import ResultStore, build_leaderboard, render_terminal

    settings = {name: getattr(args, name) for _, name, _, _ in _OPTIONS}
    settings["episode_timeout_s"] = args.episode_timeout_s or None  # 0: no bound
    config = BenchConfig(
        model=args.model,
        env_ids=tuple(args.envs),
        base_url=_base_url(args.backend, args.base_url),
        executor=ExecutorConfig.create(args.executor, args.workers, args.ray_address),
        runner=args.runner,
        **settings,
        **_rubric(args),
    )
    if args.contamination:
        from envsuite.cli._bench_checks import print_contamination

        return print_contamination(config, args.contamination)
    if args.rescore:
        from envsuite.cli._bench_checks import print_rescore

        return print_rescore(config)
    os.environ.setdefault("INSPECT_LOG_DIR", str(config.log_dir()))
    report = run_bench(config)
    console = Console()
    console.print(
        f"logs: {report.log_dir}  ({len(report.log_paths)} task(s), "
        f"{report.episodes_added} new episode(s) stored; view with `inspect view --log-dir {report.log_dir}`)"
    )
    for env_id, why in report.failed_envs.items():
        console.print(f"[red]not finished[/]: {escape(printable(env_id))}: {escape(printable(why))}")
    if report.failed_envs:
        console.print(f"{len(report.failed_envs)} env(s) did not finish; rerun the same command to play them")
    store = ResultStore(config.db)
    try:
        env_ids = config.resolved_env_ids()
        ranges = catalog_reward_ranges(key.versioned_env_id for key in store.keys(env_ids))
        console.print(render_terminal(build_leaderboard(store, env_ids=env_ids, catalog_ranges=ranges)))
    finally:
        store.close()
    return 0 if report.completed else 1
