"""``envsuite train ENV_ID``: GRPO on a catalog env (the CLI face of ``envsuite.trainers.run_training``).

Several ids (or ``family:NAME``, ``tag:NAME``, globs) train one policy on a weighted mix of envs
(``--env-weight ID=W``, ``--env-arg ID:KEY=VALUE``); ``--curriculum`` moves each env's difficulty rung
from its running success. ``--preset NAME`` (``envsuite train --list-presets``) or ``--config FILE``
starts from a written-down config; flags given on the command line override it. Rerunning the same
command into the same ``--log-dir`` resumes from the last checkpoint.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.cli._args import Subparsers, field_defaults, parse_env_args
from envsuite.errors import UsageError

if TYPE_CHECKING:
    from envsuite.trainers import TrainConfig

# (flag, TrainConfig field, type, help); defaults come from TrainConfig so they live in one place.
_OPTIONS: list[tuple[str, str, Callable[[str], object], str]] = [
    ("--model", "model", str, "base model: envsuite name, local HF dir or (tinker) hosted model"),
    ("--backend", "backend", str, "local (PyTorch here) or tinker (the Tinker API through the real SDK)"),
    (
        "--base-url",
        "base_url",
        str,
        "tinker backend: service URL, e.g. an `envsuite serve` (default: hosted)",
    ),
    ("--renderer", "renderer_name", str, "chat format (default: the model's own)"),
    ("--steps", "n_steps", int, "optimizer steps (step i trains on batch i)"),
    ("--batch-size", "batch_size", int, "groups (problems) per step"),
    ("--group-size", "group_size", int, "rollouts per group (>= 2)"),
    ("--lr", "learning_rate", float, "peak learning rate"),
    ("--lr-schedule", "lr_schedule", str, "constant | linear | cosine"),
    ("--warmup-steps", "warmup_steps", int, "linear warmup steps"),
    (
        "--warm-start-steps",
        "warm_start_steps",
        int,
        "supervised steps on each train env's reference reply before the first GRPO step (fresh runs)",
    ),
    ("--lora-rank", "lora_rank", int, "LoRA rank; 0 trains every weight (full fine-tune, local only)"),
    ("--loss", "loss_fn", str, "the loss sent to forward_backward (docs/backend.md)"),
    ("--ppo-clip", "ppo_clip", float, "clip epsilon of ppo, cispo and gspo"),
    ("--dro-beta", "dro_beta", float, "dro's quadratic penalty weight"),
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
    ("--executor", "executor", str, "where env work and --samplers replicas run: inprocess | process | ray"),
    ("--workers", "workers", int, "worker processes (process) or worker tasks (ray)"),
    ("--ray-address", "ray_address", str, "a running Ray cluster (default: start a local Ray)"),
    (
        "--wandb-project",
        "wandb_project",
        str,
        "also log metrics to this W&B project (WANDB_MODE=offline works)",
    ),
    ("--wandb-name", "wandb_name", str, "tracker run name (W&B and Trackio; default: the log dir's name)"),
    ("--trackio-project", "trackio_project", str, "also log metrics to this Trackio project (local SQLite)"),
    (
        "--captured",
        "captured_dir",
        str,
        "train on the scored episodes `envsuite serve` captured (a capture set dir) instead of rollouts",
    ),
    (
        "--async-max-steps-off-policy",
        "async_max_steps_off_policy",
        int,
        "async off-policy: sample while training, drop groups more than K steps stale",
    ),
    ("--stream-minibatches", "stream_minibatches", int, "train each of M minibatches per substep once full"),
    ("--kl-penalty", "kl_penalty_coef", float, "KL penalty coefficient against the reference (0: off)"),
    ("--kl-discount", "kl_discount_factor", float, "discount of the KL penalty over later tokens"),
    ("--kl-reference", "kl_reference_checkpoint", str, "KL reference: a sampler checkpoint (default: base)"),
    (
        "--samplers",
        "samplers",
        int,
        "sampler replicas of the executor's kind, env work with them (0: here); --sampler vllm: vLLM servers",
    ),
    (
        "--sampler",
        "sampler",
        str,
        "who samples rollouts: backend (its own) | vllm (a vLLM server: docs/vllm.md)",
    ),
    (
        "--vllm-url",
        "vllm_url",
        str,
        "--sampler vllm: a running vLLM server, or several URLs comma-separated (default: start them)",
    ),
]

# (flag, TrainConfig field, the value the flag sets, help): flags that take no argument.
_SWITCHES: list[tuple[str, str, bool, str]] = [
    (
        "--std-advantages",
        "scale_advantages_by_std",
        True,
        "divide centred rewards by the group std (GRPO; default off, Dr. GRPO)",
    ),
    (
        "--no-unembed-lora",
        "train_unembed",
        False,
        "LoRA on the attention and MLP projections only, not the LM head (as peft/TRL)",
    ),
    (
        "--constrain-actions",
        "constrain_actions",
        True,
        "sample each action under its env's action constraint (legal moves, well-formed tool calls; local)",
    ),
]


# (flag, Curriculum field, type, help): any of them turns the curriculum on; defaults from Curriculum.
_CURRICULUM: list[tuple[str, str, Callable[[str], object], str]] = [
    ("--curriculum-promote", "promote_at", float, "running success that moves an env one rung up"),
    ("--curriculum-demote", "demote_below", float, "running success under which it moves one rung down"),
    ("--curriculum-window", "window", int, "groups in the running success (a move needs this many)"),
    ("--curriculum-start", "start_rung", int, "the rung every env starts at"),
    ("--curriculum-max", "max_rung", int, "the highest rung an env may reach (default: its last)"),
]


def _add_mix_and_curriculum(p: argparse.ArgumentParser) -> None:
    from envsuite.trainers import Curriculum

    p.add_argument(
        "--env-weight",
        action="append",
        default=[],
        metavar="ID=W",
        help="several envs: an env's share of each batch's groups (default 1 each)",
    )
    p.add_argument(
        "--curriculum",
        action="store_true",
        default=argparse.SUPPRESS,
        help="move each env with difficulty rungs up and down them from its groups' running success",
    )
    defaults = field_defaults(Curriculum)
    for flag, name, kind, text in _CURRICULUM:
        p.add_argument(
            flag,
            dest=f"curriculum_{name}",
            type=kind,
            default=argparse.SUPPRESS,
            help=f"{text} (default {defaults[name]})",
        )
    p.add_argument(
        "--eval-rungs",
        type=int,
        nargs="+",
        default=argparse.SUPPRESS,
        metavar="RUNG",
        help="also evaluate held-out on these difficulty rungs of each env that has them",
    )


def _add_rubric(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rubric",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="also reward each episode's final reply by this rubric (TOML/JSON; the config keeps its content)",
    )
    p.add_argument(
        "--judge",
        dest="rubric_judge",
        default=argparse.SUPPRESS,
        help="the rubric's judge model, a local model (default smollm2-135m-instruct)",
    )
    p.add_argument(
        "--judge-cache",
        dest="rubric_judge_cache",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="SQLite cache of the judge's verdicts (a rerun asks nothing twice)",
    )


def _rubric(args: argparse.Namespace) -> dict[str, object]:
    """The config fields the rubric flags set (only those given): the rubric file's content itself."""
    from envsuite.rubrics import load_rubric

    given: dict[str, object] = {}
    if hasattr(args, "rubric"):
        given["rubric"] = load_rubric(args.rubric).to_dict()
    for name in ("rubric_judge", "rubric_judge_cache"):
        if hasattr(args, name):
            given[name] = getattr(args, name)
    return given


def add_parser(sub: Subparsers) -> None:
    """Register ``envsuite train`` on the top-level parser's subcommands."""
    from envsuite.trainers import PolicyLoss, TrainConfig

    defaults = TrainConfig(env_id="x", log_dir="x")
    choices: dict[str, list[str]] = {"loss_fn": [loss.value for loss in PolicyLoss]}
    p = sub.add_parser(
        "train",
        help="GRPO-train a model on a catalog env (resumes when rerun into the same --log-dir)",
        description=__doc__,
    )
    p.add_argument(
        "env_ids",
        metavar="ENV_ID",
        nargs="*",
        help="catalog id, or several (ids, family:NAME, tag:NAME, globs) for a multi-env run "
        "(optional with --preset/--config/--captured)",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--preset", default=None, help="start from a shipped preset (see --list-presets)")
    source.add_argument("--config", default=None, help="start from a config file (.toml or .json)")
    p.add_argument("--list-presets", action="store_true", help="list the shipped presets and exit")
    p.add_argument("--log-dir", default=None, help="output directory (default: runs/<preset or ENV_ID>)")
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env keyword argument (several envs: ID:KEY=VALUE); rung=N picks a difficulty rung",
    )
    _add_mix_and_curriculum(p)
    _add_rubric(p)
    # No argparse defaults: a flag counts only when given, so it can override a preset's value.
    for flag, name, kind, text in _OPTIONS:
        default = getattr(defaults, name)
        shown = getattr(default, "value", default)
        p.add_argument(
            flag,
            dest=name,
            type=kind,
            default=argparse.SUPPRESS,
            choices=choices.get(name),
            help=f"{text} (default {shown})",
        )
    for flag, name, value, text in _SWITCHES:
        p.add_argument(
            flag, dest=name, action="store_const", const=value, default=argparse.SUPPRESS, help=text
        )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The ``TrainConfig`` the parsed arguments describe: preset or file values, then the flags given."""
    from envsuite.trainers import ConfigError, TrainConfig, load_config_file, load_preset

    named = [name for _, name, _, _ in _OPTIONS] + [name for _, name, _, _ in _SWITCHES]
    given = {name: getattr(args, name) for name in named if hasattr(args, name)}
    env_kwargs = _env_kwargs(args.env_arg)
    given |= _mix_and_curriculum(args) | _rubric(args)
    env_id = ",".join(args.env_ids) or None
    preset = None
    if args.preset is not None:
        preset = load_preset(args.preset)
    elif args.config is not None:
        preset = load_config_file(args.config)
    if preset is None:
        captured = given.get("captured_dir")
        if env_id is None and captured is None:
            raise ConfigError(
                "name an ENV_ID, or start from --preset NAME or --config FILE, or --captured DIR"
            )
        name = _slug(env_id) if env_id else f"captured-{Path(str(captured)).name}"
        log_dir = args.log_dir or f"runs/{name}"
        env_id = env_id or ""
        return TrainConfig.from_dict(
            {"env_id": env_id, "log_dir": log_dir, "env_kwargs": env_kwargs, **given}
        )
    if env_id is not None:
        _check_same_env(env_id, str(preset.values.get("env_id", "")), preset.name)
    if env_kwargs:
        given["env_kwargs"] = _merged(preset.values.get("env_kwargs", {}), env_kwargs)
    ours, theirs = given.get("curriculum"), preset.values.get("curriculum")
    if isinstance(ours, dict) and isinstance(theirs, dict):
        given["curriculum"] = {**theirs, **ours}
    return preset.config(args.log_dir, **given)


def _slug(env_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in env_id)[:80]


def _env_kwargs(pairs: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` pairs, and ``ID:KEY=VALUE`` pairs as a table per env (a multi-env run's)."""
    plain = [p for p in pairs if ":" not in p.partition("=")[0]]
    kwargs: dict[str, object] = parse_env_args(plain)
    for pair in pairs:
        key = pair.partition("=")[0]
        if ":" in key:
            env, _, name = key.partition(":")
            table = kwargs.setdefault(env, {})
            if not isinstance(table, dict):
                raise UsageError(f"--env-arg gives {env} a value and per-env keys ({pair!r}): choose one")
            table.update(parse_env_args([f"{name}={pair.partition('=')[2]}"]))
    return kwargs


def _merged(base: dict[str, object], extra: dict[str, object]) -> dict[str, object]:
    """``extra`` over ``base``, per-env tables merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        old = out.get(key)
        out[key] = {**old, **value} if isinstance(value, dict) and isinstance(old, dict) else value
    return out


def _mix_and_curriculum(args: argparse.Namespace) -> dict[str, object]:
    """The config fields the mix and curriculum flags set (only those given)."""
    from envsuite.trainers import ConfigError

    given: dict[str, object] = {}
    if args.env_weight:
        weights: dict[str, float] = {}
        for pair in args.env_weight:
            name, sep, raw = pair.partition("=")
            try:
                weights[name] = float(raw)
            except ValueError:
                sep = ""
            if not sep or not name:
                raise ConfigError(f"--env-weight expects ID=WEIGHT, got {pair!r}")
        given["env_weights"] = weights
    curriculum = {
        name: getattr(args, f"curriculum_{name}")
        for _, name, _, _ in _CURRICULUM
        if hasattr(args, f"curriculum_{name}")
    }
    if curriculum or getattr(args, "curriculum", False):
        given["curriculum"] = curriculum
    if hasattr(args, "eval_rungs"):
        given["eval_rungs"] = list(args.eval_rungs)
    return given


def _check_same_env(asked: str, preset_env: str, preset_name: str) -> None:
    """``envsuite train X --preset P`` must name P's env (any version spelling of it)."""
    from envsuite.registration import RegistryError, spec
    from envsuite.trainers import ConfigError

    try:
        same = asked == preset_env or spec(asked).id == spec(preset_env).id
    except (RegistryError, ValueError) as exc:
        raise ConfigError(f"env_id: {exc}") from None
    if not same:
        raise ConfigError(
            f"preset {preset_name!r} trains {preset_env}, not {asked}: run "
            f"`envsuite train {preset_env} --preset {preset_name}` (or leave out ENV_ID)"
        )


def _print_presets() -> None:
    from envsuite.trainers import list_presets, load_preset

    for name in list_presets():
        preset = load_preset(name)
        print(f"{name:28s} {preset.values.get('env_id', '?'):28s} {preset.info.description}")


def run(args: argparse.Namespace) -> int:
    """Exit codes: 0 finished, 1 stopped on a NaN loss, 2 bad settings, 3 every sampler replica died (saved),
    130 interrupted (saved)."""
    from envsuite.trainers import StopCause, run_training

    if args.list_presets:
        _print_presets()
        return 0
    config = config_from_args(args)  # a ConfigError is a UsageError: envsuite's main says it (exit 2)
    result = run_training(config, show_progress=not args.no_progress)
    print(result.message)
    print(f"metrics: {result.log_dir / 'metrics.jsonl'}")
    if result.plot_path is not None:
        print(f"reward curve: {result.plot_path}")
    codes = {
        StopCause.COMPLETED: 0,
        StopCause.NON_FINITE: 1,
        StopCause.SAMPLERS_LOST: 3,
        StopCause.INTERRUPTED: 130,
    }
    return codes[result.cause]
