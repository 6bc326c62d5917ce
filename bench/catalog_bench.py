"""The whole-catalog bench as a user runs it: ``envsuite bench --model M`` over every available env.

    HF_HUB_OFFLINE=1 .venv/bin/python -P bench/catalog_bench.py [--model smollm2-135m-instruct]
        [--episodes 4] [--envs all] [--budget small] [--kill-after SECONDS] [--out artifacts/catalog_bench]

Runs the ``envsuite`` command as a child process in a scratch directory (its own logs and leaderboard)
and measures: wall time in total, episodes per second, the peak resident memory of the command and its
children (sampled), and from the Inspect log of each env its time (first episode started to last
ended: envs play side by side, so these overlap), episodes, mean reward, env errors, and where the time
goes: the model's turns and reply tokens per episode and how many episodes were cut (at the turn cap or
the episode limit). ``--budget`` (default ``small``: ``evals.bench._budget``) caps the multi-turn envs
to what a small model finishes; ``--budget full`` plays every env as it is. With
``--kill-after S`` it kills the bench (SIGKILL) after ``S`` seconds and starts the same command again,
which must not play any env the first run finished (its plan line says how many it found finished).

Writes ``<out>/catalog_bench.json`` (every number, per env too), ``<out>/catalog_bench.md`` (the table
for docs/benchmarks.md) and ``<out>/catalog_bench.png`` (each env's time, slowest first, by family).
Goal (issues 36, 51): the whole catalog at 4 episodes per env in <= 30 min and <= 2 GB on the 2-core box
with SmolLM2.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -P` leaves bench/ off the path
from _host import cpu_name, offline_env, tree_rss

GOAL_S = 30 * 60


@dataclass
class Attempt:
    """One start of the bench command."""

    seconds: float
    exit_code: int
    peak_tree_gb: float
    killed: bool
    plan: str
    """Its first line: envs and episodes to play, and what an earlier run finished."""
    tail: list[str] = field(default_factory=list)
    load_mean: float = 0.0
    """The 1-minute load average, sampled every 10 s while it ran, on average (other work on the box)."""


@dataclass(frozen=True)
class EnvTime:
    env_id: str
    family: str
    episodes: int
    seconds: float
    """First episode's start to last episode's end (1 s resolution)."""
    episode_seconds: float
    """Mean time of one episode (wall time, while others ran beside it)."""
    mean_reward: float
    env_errors: int
    status: str
    turns: float = 0.0
    """Mean turns of the model per episode."""
    output_tokens: float = 0.0
    """Mean tokens the model sampled per episode."""
    cut: int = 0
    """Episodes that ended at the turn cap or the episode time limit."""


def run_once(command: list[str], cwd: Path, kill_after: float | None) -> Attempt:
    env = offline_env()
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc = psutil.Process(child.pid)
    peak = [0]
    loads: list[float] = []
    done = threading.Event()
    killed = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with contextlib.suppress(psutil.Error):
                peak[0] = max(peak[0], tree_rss(proc))
            if len(loads) * 10 <= time.perf_counter() - started:
                loads.append(os.getloadavg()[0])
            if kill_after is not None and time.perf_counter() - started > kill_after and not killed.is_set():
                killed.set()
                for victim in [*proc.children(recursive=True), proc]:
                    with contextlib.suppress(psutil.Error):
                        victim.send_signal(signal.SIGKILL)
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert child.stdout is not None
    tail: collections.deque[str] = collections.deque(maxlen=40)
    plan = ""
    for raw in child.stdout:
        line = raw.decode(errors="replace").rstrip()
        plan = plan or (line if "to play" in line else "")
        if " finished in " in line or "skipped" in line or "ended with status" in line:
            print(line[:160], flush=True)
        tail.append(line)
    code = child.wait()
    done.set()
    sampler.join()
    return Attempt(
        round(time.perf_counter() - started, 1),
        code,
        round(peak[0] / 1e9, 3),
        killed.is_set(),
        plan,
        list(tail),
        round(sum(loads) / len(loads), 2) if loads else 0.0,
    )


def env_times(log_dir: Path) -> list[EnvTime]:
    """Each env's numbers from its Inspect log (the direct runner's JSON logs)."""
    from inspect_ai.log import read_eval_log

    from envsuite import catalog_env_families

    rows = []
    for path in sorted(log_dir.glob("*.json")):
        log = read_eval_log(str(path))
        env_id = str((log.eval.task_args or {}).get("env_id", path.stem))
        samples = log.samples or []
        begun = [_sample_time(s, "started") for s in samples]
        ended = [_sample_time(s, "completed") for s in samples]
        times = [b for b in begun if b is not None], [e for e in ended if e is not None]
        span = (max(times[1]) - min(times[0])) if times[0] and times[1] else 0.0
        played = [_played(sample) for sample in samples]
        rewards = [p.reward for p in played if p.reward is not None]
        totals = [float(s.total_time or 0.0) for s in samples]
        rows.append(
            EnvTime(
                env_id=env_id,
                family=catalog_env_families([env_id])[env_id],
                episodes=len(samples),
                seconds=round(span, 1),
                episode_seconds=_mean(totals, 2),
                mean_reward=_mean(rewards, 3),
                env_errors=sum(p.stop_reason == "env_error" for p in played),
                status=str(log.status),
                turns=_mean([float(p.turns) for p in played], 2),
                output_tokens=_mean([float(p.output_tokens) for p in played], 1),
                cut=sum(p.stop_reason in ("max_turns", "rollout_timeout") for p in played),
            )
        )
    return rows


@dataclass(frozen=True)
class _Played:
    reward: float | None
    stop_reason: str | None
    turns: int
    output_tokens: int


def _played(sample: Any) -> _Played:
    """What one logged episode says of itself: reward, stop reason, turns (from its score's explanation,
    ``stop/<reason> after N turn(s)``) and the tokens the model sampled."""
    score = next(iter((sample.scores or {}).values()), None)
    value = score.value if score is not None else None
    reward = float(value.get("reward", 0.0)) if isinstance(value, dict) else None
    stop = (score.metadata or {}).get("stop_reason") if score is not None else None
    found = re.search(r"after (\d+) turn", str(score.explanation or "")) if score is not None else None
    tokens = sum(int(usage.output_tokens or 0) for usage in (sample.model_usage or {}).values())
    return _Played(reward, None if stop is None else str(stop), int(found.group(1)) if found else 0, tokens)


def _mean(values: list[float], digits: int) -> float:
    return round(sum(values) / len(values), digits) if values else 0.0


def _sample_time(sample: object, which: str) -> float | None:
    text = getattr(sample, f"{which}_at", None)
    if not text:
        return None
    return datetime.fromisoformat(str(text)).timestamp()


def write_figure(rows: list[EnvTime], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(rows, key=lambda r: r.seconds, reverse=True)
    families = sorted({r.family for r in ordered})
    colours = {f: plt.get_cmap("tab10")(i % 10) for i, f in enumerate(families)}
    fig, ax = plt.subplots(figsize=(12, 4.5), dpi=110)
    ax.bar(
        range(len(ordered)),
        [r.seconds for r in ordered],
        color=[colours[r.family] for r in ordered],
        width=1.0,
    )
    from matplotlib.patches import Patch

    # Legend handles of their own: empty bars would carry the default colour, not the family's.
    handles = [Patch(color=colours[family], label=family) for family in families]
    for index, row in enumerate(ordered[:8]):
        ax.annotate(row.env_id, (index, row.seconds), rotation=60, fontsize=7, ha="left", va="bottom")
    ax.set_xlabel(f"env (all {len(ordered)}, slowest first)")
    ax.set_ylabel("seconds (first episode start to last episode end)")
    ax.set_title(title)
    ax.legend(handles=handles, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def markdown(summary: dict[str, object], rows: list[EnvTime], slowest: int = 12) -> str:
    lines = [
        f"CPU: {summary['cpu']}; load average before: {summary['load_before']}, after: "
        f"{summary.get('load_after')}",
        "",
        "| | value |",
        "|---|---:|",
        f"| envs (finished / asked) | {summary['envs_finished']} / {summary['envs']} |",
        f"| episodes | {summary['episodes']} |",
        f"| wall time, all starts | {summary['wall_s']:.0f} s ({float(summary['wall_s']) / 60:.1f} min) |",  # type: ignore[arg-type]
        f"| episodes/s | {summary['episodes_per_s']:.2f} |",
        f"| peak RSS (command and children) | {summary['peak_rss_gb']:.2f} GB |",
        f"| load average while it ran (1 min, mean) | {summary.get('load_mean', 0.0)} |",
        f"| env errors (episodes) | {summary['env_errors']} |",
        "",
        f"The {slowest} slowest envs:",
        "",
        "| env | family | episodes | seconds | s/episode | turns/episode | tokens/episode | cut | mean reward |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in sorted(rows, key=lambda r: r.seconds, reverse=True)[:slowest]:
        lines.append(
            f"| {row.env_id} | {row.family} | {row.episodes} | {row.seconds:.0f} | {row.episode_seconds:.1f} | "
            f"{row.turns:.1f} | {row.output_tokens:.0f} | {row.cut} | {row.mean_reward:+.2f} |"
        )
    by_family: dict[str, list[EnvTime]] = collections.defaultdict(list)
    for row in rows:
        by_family[row.family].append(row)
    lines += [
        "",
        "| family | envs | episodes | mean s/episode | turns/episode | tokens/episode | share of tokens | cut |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    all_tokens = sum(r.output_tokens * r.episodes for r in rows) or 1.0
    for family, members in sorted(by_family.items()):
        mean = sum(r.episode_seconds for r in members) / len(members)
        turns = sum(r.turns for r in members) / len(members)
        tokens = sum(r.output_tokens for r in members) / len(members)
        share = sum(r.output_tokens * r.episodes for r in members) / all_tokens
        lines.append(
            f"| {family} | {len(members)} | {sum(r.episodes for r in members)} | {mean:.1f} | {turns:.1f} | "
            f"{tokens:.0f} | {share:.0%} | {sum(r.cut for r in members)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--envs", nargs="*", default=["all"])
    parser.add_argument("--max-tokens", type=int, default=None, help="default: the bench's own")
    parser.add_argument("--budget", default="small", help="the bench budget (full: every env as it is)")
    parser.add_argument("--kill-after", type=float, default=None, help="kill the first run after S seconds")
    parser.add_argument("--out", default="artifacts/catalog_bench")
    parser.add_argument("--scratch", default=None, help="scratch dir (default: a fresh temporary one)")
    args = parser.parse_args()

    envsuite = str(Path(sys.executable).with_name("envsuite"))
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="catalog_bench_"))
    scratch.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = [
        envsuite,
        "bench",
        "--model",
        args.model,
        "--episodes",
        str(args.episodes),
        "--envs",
        *args.envs,
    ]
    command += ["--log-dir", str(scratch / "logs"), "--db", str(scratch / "board.sqlite")]
    command += ["--budget", args.budget]
    if args.max_tokens is not None:
        command += ["--max-tokens", str(args.max_tokens)]
    load = tuple(round(x, 2) for x in os.getloadavg())
    print("command:", " ".join(command), flush=True)
    attempts = [run_once(command, scratch, args.kill_after)]
    if attempts[0].killed:
        print(f"killed after {attempts[0].seconds} s; starting the same command again", flush=True)
        attempts.append(run_once(command, scratch, None))
    last = attempts[-1]
    if last.exit_code not in (0, 1):
        print("\n".join(last.tail), file=sys.stderr)
    log_dirs = [p for p in (scratch / "logs").iterdir() if p.is_dir()]
    rows = env_times(log_dirs[0]) if len(log_dirs) == 1 else []
    episodes = sum(r.episodes for r in rows)
    wall = sum(a.seconds for a in attempts)
    summary: dict[str, object] = {
        "command": " ".join(command),
        "cpu": cpu_name(),
        "load_before": load,
        "load_after": tuple(round(x, 2) for x in os.getloadavg()),
        "envs": _planned_envs(attempts[0].plan),
        "envs_finished": sum(r.status == "success" for r in rows),
        "episodes": episodes,
        "wall_s": wall,
        "episodes_per_s": episodes / wall if wall else 0.0,
        "peak_rss_gb": max(a.peak_tree_gb for a in attempts),
        "load_mean": round(sum(a.load_mean * a.seconds for a in attempts) / max(wall, 1e-9), 2),
        "env_errors": sum(r.env_errors for r in rows),
        "goal_s": GOAL_S,
        "attempts": [asdict(a) | {"tail": a.tail[-5:]} for a in attempts],
    }
    (out / "catalog_bench.json").write_text(
        json.dumps({"summary": summary, "envs": [asdict(r) for r in rows]}, indent=1), encoding="utf-8"
    )
    (out / "catalog_bench.md").write_text(markdown(summary, rows), encoding="utf-8")
    if rows:
        title = f"envsuite bench --model {args.model}: {len(rows)} envs x {args.episodes} episodes, {wall / 60:.1f} min"
        write_figure(rows, out / "catalog_bench.png", title)
    print(markdown(summary, rows))
    for attempt in attempts:
        print(
            f"start: {attempt.plan}  ({attempt.seconds} s, exit {attempt.exit_code}{', killed' if attempt.killed else ''})"
        )
    return 0 if last.exit_code == 0 else 1


def _planned_envs(plan: str) -> int:
    found = re.search(r": (\d+) env\(s\)", plan)
    return int(found.group(1)) if found else 0


if __name__ == "__main__":
    sys.exit(main())
