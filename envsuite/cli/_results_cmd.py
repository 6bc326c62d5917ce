"""``envsuite results``: rerun the documented learning results (``make results``), one preset per env family.

For each preset it trains (resuming a finished or interrupted run instead of redoing it), then reads
the run back: the held-out quantity of the preset before -> after with bootstrap CIs, for self-play
presets a match of the trained policy against the base model, the wall time and the machine's load
average while it ran. Each run's ``summary.json``/``summary.md`` goes in its log dir; with
``--img-dir`` the reward curves are copied there as ``results_<preset>.png`` (docs/img for the docs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from envsuite.cli._args import Subparsers

if TYPE_CHECKING:
    from envsuite.trainers import Estimate, HeldOutComparison, Preset, TrainConfig

RESULT_PRESETS = (
    "tictactoe-vs-random",
    "guess-the-number",
    "twenty-questions-easy",
    "tictactoe-selfplay",
    "math-easy",
    "code-easy",
    "tools-calculator-easy",
    "tools-search-easy",
    "tools-kv-store-easy",
    "workspace-shell-intro",
    "referential-two-policies",
    "chain-sum-curriculum",
    "chain-sum-fixed",
    "mix-three-families",
    "judged-instructions",
)
"""One preset per env family of docs/results.md, in its order."""


def add_parser(sub: Subparsers) -> None:
    """Add ``envsuite results`` to the command's sub-parsers."""
    p = sub.add_parser(
        "results",
        help="rerun the documented learning results (one preset per env family) and summarize them",
        description=__doc__,
    )
    p.add_argument("presets", nargs="*", metavar="PRESET", help=f"default: {' '.join(RESULT_PRESETS)}")
    p.add_argument("--out-dir", default="runs/results", help="one log dir per preset under here")
    p.add_argument("--img-dir", default=None, help="copy each reward curve here (e.g. docs/img)")
    p.add_argument("--model", default=None, help="train this model instead of the presets' own")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Train (or resume) each preset, summarize it, and write the summaries' index."""
    from envsuite.trainers import load_preset

    names = args.presets or list(RESULT_PRESETS)
    presets = [load_preset(name) for name in names]  # fail on a typo before any training
    summaries = []
    for preset in presets:
        overrides = {"model": args.model} if args.model else {}
        summary = run_one(preset, Path(args.out_dir), overrides, show_progress=not args.no_progress)
        if args.img_dir:
            target = Path(args.img_dir) / f"results_{preset.name}.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(summary["log_dir"]) / "reward_curve.png", target)
            summary["image"] = str(target)
        summaries.append(summary)
        print(summary_markdown(summary), flush=True)
    index = Path(args.out_dir) / "summary.md"
    index.write_text("\n\n".join(summary_markdown(s) for s in summaries) + "\n", encoding="utf-8")
    print(f"summaries: {index}")
    return 0


def run_one(
    preset: Preset, out_dir: Path, overrides: dict[str, str], *, show_progress: bool
) -> dict[str, Any]:
    """Train one preset (or resume it), then measure and write its summary."""
    from envsuite.trainers import (
        POLICY_CHECKPOINTS,
        CheckpointLog,
        RoleCheckpointLog,
        compare_held_out,
        run_training,
    )

    log_dir = out_dir / preset.name
    config = preset.config(str(log_dir), **overrides)
    summary_path = log_dir / "summary.json"
    previous = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    # A run with a policy per role records its saves (every policy's) in its own file.
    done_before = (
        RoleCheckpointLog(log_dir / POLICY_CHECKPOINTS).last()
        if config.roles.policies
        else CheckpointLog(log_dir / "checkpoints.jsonl").last()
    )
    load_start = os.getloadavg()
    started = time.perf_counter()
    result = run_training(config, show_progress=show_progress)
    train_seconds = time.perf_counter() - started
    if done_before is not None and done_before.step >= config.steps.n_steps and "train_seconds" in previous:
        train_seconds = previous["train_seconds"]  # nothing was trained now: keep the measured run's time
        load_start = tuple(previous["load_average_start"])
    summary: dict[str, Any] = {
        "preset": preset.name,
        "description": preset.info.description,
        "env_id": config.env_id,
        "model": config.policy.model,
        "command": _command(preset.name, config.env_id, log_dir, overrides),
        "log_dir": str(log_dir),
        "stop": result.cause.value,
        "steps": result.steps_completed,
        "train_seconds": round(train_seconds, 1),
        "load_average_start": list(load_start),
        "load_average_end": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
    }
    for quantity in dict.fromkeys([preset.info.quantity, "reward"]):
        comparison = compare_held_out(log_dir, quantity)
        summary.setdefault("held_out", {})[quantity] = _comparison_dict(comparison)
    by_env = _held_out_by_env(log_dir, preset.info.quantity)
    if by_env:
        summary["held_out_by_env"] = by_env
    if preset.info.match_games and result.last_checkpoint is not None:
        summary["match"] = previous.get("match") or _match(
            config, result.last_checkpoint.sampler_path, preset
        )
    summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (log_dir / "summary.md").write_text(summary_markdown(summary) + "\n", encoding="utf-8")
    return summary


def _match(config: TrainConfig, checkpoint: str, preset: Preset) -> dict[str, Any]:
    from envsuite.cli._match_cmd import match_summary

    started = time.perf_counter()
    summary = match_summary(
        config.env_id,
        checkpoint,
        config.policy.model,
        games=preset.info.match_games,
        max_tokens=config.sampling.max_tokens,
        temperature=config.sampling.temperature,
        seed=config.steps.seed,
        out=Path(config.log_dir) / "match_games.jsonl",
    )
    summary["seconds"] = round(time.perf_counter() - started, 1)
    summary["command"] = (
        f"envsuite match {config.env_id} --a {checkpoint} --b {config.policy.model} --games {preset.info.match_games} "
        f"--max-tokens {config.sampling.max_tokens} --temperature {config.sampling.temperature} --seed {config.steps.seed}"
    )
    return summary


class ComparisonJson(TypedDict):
    """A :class:`~envsuite.trainers.HeldOutComparison` as ``summary.json`` holds it."""

    before_step: int
    after_step: int
    before: dict[str, float]
    after: dict[str, float]
    change: dict[str, float]


SUCCESS_METRICS = ("correct", "success", "win")
"""The first of these an env's held-out episodes report is its success, in per-env summaries."""


def _held_out_by_env(log_dir: Path, quantity: str) -> dict[str, dict[str, ComparisonJson]]:
    """A multi-env run's (or one with per-rung held-out sets) before -> after for each env and rung; a
    run with a policy per role's for each policy (``policy:<name>``)."""
    from envsuite.trainers import compare_held_out, read_eval_rows

    sets: dict[tuple[str | None, int | None, str | None], set[str]] = {}
    for row in read_eval_rows(log_dir):
        if "env" in row or "policy" in row:
            rung, policy = row.get("rung"), row.get("policy")
            metrics = row.get("metrics")
            names = set(metrics) if isinstance(metrics, dict) else set()
            key = (
                str(row["env"]) if "env" in row else None,
                rung if isinstance(rung, int) else None,
                str(policy) if policy is not None else None,
            )
            sets.setdefault(key, set()).update(names)
    out: dict[str, dict[str, ComparisonJson]] = {}
    for (env, rung, policy), names in sorted(
        sets.items(), key=lambda i: (i[0][0] or "", i[0][1] or -1, i[0][2] or "")
    ):
        label = _set_label(env, rung, policy)
        success = next((m for m in SUCCESS_METRICS if m in names), None)
        wanted = [q for q in (quantity, "reward", success) if q is not None and (q == "reward" or q in names)]
        for name in dict.fromkeys(wanted):
            comparison = compare_held_out(log_dir, name, env=env, rung=rung, policy=policy)
            out.setdefault(label, {})[name] = _comparison_dict(comparison)
    return out


def _set_label(env: str | None, rung: int | None, policy: str | None) -> str:
    """``reasoning_gym/chain_sum@rung2``, ``policy:asker``: which held-out episodes a line compares."""
    parts = [] if env is None else [env + (f"@rung{rung}" if rung is not None else "")]
    return " ".join(parts + ([] if policy is None else [f"policy:{policy}"]))


def _comparison_dict(comparison: HeldOutComparison) -> ComparisonJson:
    def estimate(e: Estimate) -> dict[str, float]:
        return {"mean": e.mean, "low": e.low, "high": e.high, "n": e.n}

    return {
        "before_step": comparison.before_step,
        "after_step": comparison.after_step,
        "before": estimate(comparison.before),
        "after": estimate(comparison.after),
        "change": estimate(comparison.change),
    }


def _command(name: str, env_id: str, log_dir: Path, overrides: dict[str, str]) -> str:
    extra = "".join(f" --{k.replace('_', '-')} {v}" for k, v in overrides.items())
    return f"envsuite train {env_id} --preset {name} --log-dir {log_dir}{extra}"


def summary_markdown(summary: dict[str, Any]) -> str:
    """A short human-readable account of one run."""
    load = summary["load_average_start"]
    lines = [
        f"### {summary['preset']}: {summary['description']}",
        "",
        f"- command: `{summary['command']}`",
        f"- {summary['steps']} steps in {summary['train_seconds'] / 60:.1f} min (model load, evaluations and "
        f"checkpoints included); load average at start {load[0]:.1f} on {summary['cpu_count']} CPUs, "
        f"{summary['load_average_end'][2]:.1f} over the last 15 min at the end",
    ]
    for quantity, c in summary["held_out"].items():
        b, a, d = c["before"], c["after"], c["change"]
        lines.append(
            f"- held-out {quantity} (n={b['n']}): {b['mean']:.2f} [{b['low']:.2f}, {b['high']:.2f}] at step "
            f"{c['before_step']} -> {a['mean']:.2f} [{a['low']:.2f}, {a['high']:.2f}] at step {c['after_step']}; "
            f"paired change {d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] (95% bootstrap CIs)"
        )
    for label, quantities in summary.get("held_out_by_env", {}).items():
        parts = [
            f"{name} {c['before']['mean']:.2f} -> {c['after']['mean']:.2f} "
            f"(change {c['change']['mean']:+.2f} [{c['change']['low']:+.2f}, {c['change']['high']:+.2f}])"
            for name, c in quantities.items()
        ]
        n = next(iter(quantities.values()))["before"]["n"]
        lines.append(f"  - {label} (n={n}): " + "; ".join(parts))
    match = summary.get("match")
    if match:
        low, high = match["ci95"]
        lines.append(
            f"- trained vs base model, {match['games']} games: score {match['score_a']:.2f} [{low:.2f}, {high:.2f}] "
            f"(W {match['wins']} / D {match['draws']} / L {match['losses']}; forfeits: trained "
            f"{match['a_forfeits']}, base {match['b_forfeits']})"
        )
    return "\n".join(lines)
