"""``envsuite train ENV_ID``: GRPO on a catalog env (the CLI face of ``envsuite.trainers.run_training``).

Rerunning the same command into the same ``--log-dir`` resumes from the last checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from envsuite.cli._args import parse_env_args

# (flag, TrainConfig field, type, help); defaults come from TrainConfig so they live in one place.
_OPTIONS: list[tuple[str, str, Any, str]] = [
    ("--model", "model", str, "base model: envsuite name, local HF dir or (tinker) hosted model"),
    ("--backend", "backend", str, "local (PyTorch here) or tinker (hosted; needs TINKER_API_KEY)"),
    ("--renderer", "renderer_name", str, "chat format (default: the model's own)"),
    ("--steps", "n_steps", int, "optimizer steps (step i trains on batch i)"),
    ("--batch-size", "batch_size", int, "groups (problems) per step"),
    ("--group-size", "group_size", int, "rollouts per group (>= 2)"),
    ("--lr", "learning_rate", float, "peak learning rate"),
    ("--lr-schedule", "lr_schedule", str, "constant | linear | cosine"),
    ("--warmup-steps", "warmup_steps", int, "linear warmup steps"),
    ("--lora-rank", "lora_rank", int, "LoRA rank; 0 trains every weight (full fine-tune, local only)"),
    ("--loss", "loss_fn", str, "importance_sampling | ppo"),
    ("--ppo-clip", "ppo_clip", float, "ppo clip epsilon"),
    ("--num-substeps", "num_substeps", int, "optimizer steps per batch (must divide --batch-size)"),
    ("--max-tokens", "max_tokens", int, "sampling budget per turn"),
    ("--temperature", "temperature", float, "sampling temperature (> 0)"),
    ("--max-turns", "max_turns", int, "policy turns per episode"),
    ("--rollout-timeout", "rollout_timeout_s", float, "seconds per episode before it is stopped"),
    ("--max-context-tokens", "max_context_tokens", int, "observation token budget"),
    ("--save-every", "save_every", int, "checkpoint every N steps"),
    ("--eval-every", "eval_every", int, "evaluate on the test split every N steps (0: never)"),
    ("--test-groups", "n_test_groups", int, "test problems per evaluation"),
    ("--transcripts", "n_transcripts", int, "episodes written to log_dir/transcripts"),
    ("--seed", "seed", int, "data order and LoRA init seed"),
    ("--weight-decay", "weight_decay", float, "AdamW weight decay"),
    ("--grad-clip", "grad_clip_norm", float, "gradient norm clip (0: off)"),
]


def add_train_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``envsuite train`` on the top-level parser's subcommands."""
    from envsuite.trainers import TrainConfig

    defaults = TrainConfig(env_id="x", log_dir="x")
    p = subparsers.add_parser(
        "train",
        help="GRPO-train a model on a catalog env (resumes when rerun into the same --log-dir)",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("env_id", metavar="ENV_ID")
    p.add_argument("--log-dir", default=None, help="output directory (default: runs/<ENV_ID>)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    for flag, name, kind, text in _OPTIONS:
        default = getattr(defaults, name)
        p.add_argument(flag, dest=name, type=kind, default=getattr(default, "value", default), help=text)
    p.add_argument(
        "--std-advantages",
        dest="scale_advantages_by_std",
        action="store_true",
        help="divide centred rewards by the group std (GRPO; default off, Dr. GRPO)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> Any:
    """The ``TrainConfig`` the parsed arguments describe."""
    from envsuite.trainers import TrainConfig

    values = {name: getattr(args, name) for _, name, _, _ in _OPTIONS}
    values["scale_advantages_by_std"] = args.scale_advantages_by_std
    log_dir = args.log_dir or f"runs/{args.env_id.replace('/', '_')}"
    return TrainConfig.from_dict(
        {"env_id": args.env_id, "log_dir": log_dir, "env_kwargs": parse_env_args(args.env_arg), **values}
    )


def run_train(args: argparse.Namespace) -> int:
    """Exit codes: 0 finished, 1 stopped on a NaN loss, 2 bad settings, 130 interrupted (saved)."""
    from envsuite.trainers import ConfigError, StopCause, run_training

    try:
        config = config_from_args(args)
        result = run_training(config, show_progress=not args.no_progress)
    except ConfigError as exc:
        print(f"envsuite train: error: {exc}", file=sys.stderr)
        return 2
    print(result.message)
    print(f"metrics: {result.log_dir / 'metrics.jsonl'}")
    if result.plot_path is not None:
        print(f"reward curve: {result.plot_path}")
    return {StopCause.COMPLETED: 0, StopCause.NON_FINITE: 1, StopCause.INTERRUPTED: 130}[result.cause]
