"""Argument parsing and dispatch for the ``envsuite`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

Handler = Callable[[argparse.Namespace], int]

DESCRIPTION = """\
A catalog of token-level environments for RL on language models (math,
twenty questions, games), with a GRPO trainer, Inspect AI benchmarks and a
leaderboard. Everything runs offline on the embedded SmolLM2-135M model.

first steps:
  envsuite list               what is in the catalog
  envsuite play tictactoe     watch one episode (--policy human: play it)
  envsuite demo               train, benchmark base vs trained, rank them

`envsuite COMMAND --help` describes each command."""


def _add_list(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("list", help="list the catalog (unavailable envs are shown with the reason)")
    p.add_argument("--namespace", help="only envs in this namespace (e.g. textarena)")
    p.add_argument("--available", action="store_true", help="hide unavailable and deprecated envs")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON (for scripts)")


def _add_show(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("show", help="show one env's spec, keyword arguments and a sample prompt")
    p.add_argument("env_id")
    p.add_argument("--seed", type=int, default=0)


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("check", help="run the conformance checker on envs")
    p.add_argument("env_ids", nargs="*", metavar="ENV_ID")
    p.add_argument("--all", action="store_true", help="check every available env")
    p.add_argument("--strict", action="store_true", help="treat warnings as failures")
    p.add_argument("--model", default="tiny-random", help="model whose tokenizer renders prompts")


def _add_play(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("play", help="play one episode in the terminal")
    p.add_argument("env_id")
    p.add_argument(
        "--policy",
        default="random",
        help="random (random legal moves in games, random tokens elsewhere) | human | a model name or "
        "checkpoint dir (e.g. smollm2-135m-instruct)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--model", default=None, help="tokenizer/renderer model for random and human policies")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    p.add_argument("--raw", action="store_true", help="show the decoded tokens (chat template and all)")
    p.add_argument("--backend", default="local", help="local (PyTorch here) or tinker (the Tinker API)")
    p.add_argument("--base-url", default=None, help="tinker backend: service URL, e.g. an `envsuite serve`")


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job: train the embedded model briefly, bench base vs trained, write the leaderboard",
    )
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--out-dir", default="runs/demo", help="where training runs, logs and the page go")
    p.add_argument("--train-steps", type=int, default=12)
    p.add_argument("--bench-episodes", type=int, default=12, help="episodes per env per model")
    p.add_argument("--quick", action="store_true", help="only run the model on the math envs and summarize")
    p.add_argument("--episodes", type=int, default=24, help="--quick: episodes per env")
    p.add_argument("--envs", nargs="*", default=["arithmetic", "math"], help="--quick: envs to run")
    p.add_argument("--max-tokens", type=int, default=96, help="--quick: reply token limit")
    p.add_argument("--temperature", type=float, default=0.7, help="--quick: sampling temperature")
    p.add_argument("--seed", type=int, default=0)


def _add_train(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from envsuite.cli._train_cmd import add_train_parser

    add_train_parser(sub)


def _add_match(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from envsuite.cli._match_cmd import add_match_parser

    add_match_parser(sub)


def _add_results(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from envsuite.cli._results_cmd import add_results_parser

    add_results_parser(sub)


def _add_new(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from envsuite.cli._new_cmd import add_new_parser

    add_new_parser(sub)


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from envsuite.cli._serve_cmd import add_serve_parser

    add_serve_parser(sub)


def _add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="benchmark a model across the catalog (Inspect logs -> leaderboard)")
    p.add_argument(
        "--model",
        required=True,
        help="an envsuite model (smollm2-135m-instruct, tiny-random), a model or checkpoint dir, or an "
        "Inspect model written provider/name (e.g. openai/gpt-4o-mini)",
    )
    p.add_argument("--envs", nargs="*", default=[], help="env ids, or 'all' (default: all available)")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--partner", default=None, help="Inspect model to use as partner/opponent")
    p.add_argument("--log-dir", default="runs/bench", help="root of the Inspect log directories")
    p.add_argument("--db", default=None, help="leaderboard store (path or URL)")
    p.add_argument("--label", default=None, help="name on the leaderboard (default: the model)")
    p.add_argument(
        "--episode-timeout",
        type=float,
        default=600.0,
        help="seconds one episode may take; past it, it is scored as rollout_timeout (0: no bound)",
    )
    p.add_argument(
        "--executor",
        default="inprocess",
        help="where envs play: inprocess | process | ray (the model stays here)",
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes (process) or worker tasks (ray)")
    p.add_argument("--ray-address", default=None, help="a running Ray cluster (default: start a local Ray)")
    p.add_argument("--backend", default="local", help="local (PyTorch here) or tinker (the Tinker API)")
    p.add_argument("--base-url", default=None, help="tinker backend: service URL, e.g. an `envsuite serve`")
    p.add_argument(
        "--runner",
        choices=("auto", "inspect", "direct"),
        default="auto",
        help="direct: envsuite plays the episodes and writes Inspect logs (envsuite models; 1.05x a bare "
        "rollout loop with the tiny model, against 4.3x for inspect); inspect: an Inspect eval set, one "
        "sample per episode; auto (default): direct for envsuite models, inspect for the rest",
    )


def _add_serve_env(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from envsuite.cli._serve_env_cmd import add_serve_env_parser

    add_serve_env_parser(sub)


def _add_leaderboard(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    import envsuite.leaderboard

    p = sub.add_parser("leaderboard", help="show the leaderboard (terminal table, or --html DIR for a page)")
    envsuite.leaderboard.add_arguments(p)


def _add_serve_sandbox(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from envsuite.cli import _serve_sandbox_cmd

    _serve_sandbox_cmd.add_parser(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envsuite", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_list,
        _add_show,
        _add_check,
        _add_play,
        _add_demo,
        _add_train,
        _add_match,
        _add_results,
        _add_bench,
        _add_leaderboard,
        _add_new,
        _add_serve_env,
        _add_serve,
        _add_serve_sandbox,
    ):
        add(sub)
    return parser


def _handler(command: str) -> Handler:
    # Imported per command so `envsuite list` never pays for torch.
    if command in ("list", "show"):
        from envsuite.cli import _catalog_cmds

        return _catalog_cmds.run_list if command == "list" else _catalog_cmds.run_show
    if command == "check":
        from envsuite.cli import _check_cmd

        return _check_cmd.run_check
    if command == "play":
        from envsuite.cli import _play_cmd

        return _play_cmd.run_play
    if command == "train":
        from envsuite.cli._train_cmd import run_train

        return run_train
    if command == "match":
        from envsuite.cli._match_cmd import run_match

        return run_match
    if command == "results":
        from envsuite.cli._results_cmd import run_results

        return run_results
    if command == "serve":
        from envsuite.cli._serve_cmd import run_serve

        return run_serve
    if command == "new":
        from envsuite.cli._new_cmd import run_new

        return run_new
    if command == "bench":
        from envsuite.evals._bench import bench_main

        return bench_main
    if command == "serve-sandbox":
        from envsuite.cli import _serve_sandbox_cmd

        return _serve_sandbox_cmd.run
    if command == "serve-env":
        from envsuite.cli._serve_env_cmd import run_serve_env

        return run_serve_env
    if command == "leaderboard":
        import envsuite.leaderboard

        return envsuite.leaderboard.run
    if command == "demo":
        from envsuite.cli import _demo_cmd, _pipeline_cmd

        return lambda args: _demo_cmd.run_demo(args) if args.quick else _pipeline_cmd.run_pipeline(args)
    raise ValueError(f"unknown command {command!r}")


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and Path(sys.argv[0]).name == "envsuite":
        # The envsuite command runs under jemalloc where it is installed: training steps ~25% faster
        # at the same peak memory (envsuite.engine._memory). Only the command itself, never a caller.
        from envsuite.engine import reexec_under_jemalloc

        reexec_under_jemalloc(sys.orig_argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return _handler(args.command)(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (LookupError, ValueError, TypeError) as exc:
        print(f"envsuite {args.command}: error: {exc}", file=sys.stderr)
        return 2
