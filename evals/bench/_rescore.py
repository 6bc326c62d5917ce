"""``envsuite bench --rescore``: re-grade stored episodes with today's grader, sampling nothing.

As NeMo-Gym's ``reverify``: each stored episode of the model on the selected envs is read back from its
Inspect log (the leaderboard keeps ``log#sample`` references), its assistant turns are replayed through
a fresh episode of the env with the same seed, and the return today's env pays is compared with the
stored reward. What changed is listed (old -> new); the store is not rewritten, so a changed grader
shows up as a new env version benched afresh, never as silently edited history. Replay is faithful for
envs whose only randomness is the seed (a partner model's turns are not replayed). Rows a rubric scored
(their key names it: ``envsuite bench --rubric``) are left out, as their reward is not the env's alone;
re-judging them is refused (:data:`RUBRIC_REFUSAL`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from envsuite import RendererConfig, make_env
from envsuite.core import StepResult
from envsuite.errors import UsageError
from envsuite.evals.bench._config import BenchConfig
from envsuite.leaderboard import ResultStore, StoredEpisode
from envsuite.renderers import reply_to_tokens

_RENDERING_MODEL = "tiny-random"
_TOLERANCE = 1e-9
RUBRIC_REFUSAL = "--rescore does not re-judge rubric-scored rows yet; rescore without --rubric"


@dataclass(frozen=True)
class ScoreChange:
    """A stored episode today's grader scores differently."""

    env_id: str
    seed: int
    epoch: int
    old: float
    new: float
    run_id: str


def _log_path(stored: StoredEpisode, db: str | None) -> tuple[Path, str] | None:
    ref = stored.episode.transcript_ref
    if not ref or "#" not in ref:
        return None
    path, sample = ref.rsplit("#", 1)
    candidates = [Path(path)] + ([Path(db).expanduser().parent / path] if db else [])
    found = next((c for c in candidates if c.is_file()), None)
    return (found, sample) if found else None


async def _replies(log: Path, sample: str, epoch: int) -> list[str]:
    from inspect_ai.log import read_eval_log_sample_async

    record = await read_eval_log_sample_async(str(log), sample, epoch)
    return [m.text for m in record.messages if m.role == "assistant"]


async def replayed_return(env_id: str, seed: int, replies: list[str], model: str) -> float:
    """The return a fresh episode of ``env_id`` (seed ``seed``) pays for ``replies``, in order."""
    env = make_env(env_id, seed=seed, model=model)
    start = await env.initial_observation()
    if not isinstance(start, tuple):  # the prompt overflowed: the env's defined reward for that
        return float(start.reward)
    stop = start[1]
    renderer = RendererConfig(model).build()
    total = 0.0
    for reply in replies:
        result: StepResult = await env.step(reply_to_tokens(renderer, reply, stop))
        total += float(result.reward)
        if result.episode_done:
            break
        stop = result.next_stop_condition
    return total


async def _rescore(config: BenchConfig, episodes: list[StoredEpisode]) -> list[ScoreChange]:
    model = config.local_model() or _RENDERING_MODEL
    changes = []
    for stored in episodes:
        located = _log_path(stored, config.db)
        if located is None:
            continue  # no transcript kept: nothing to re-grade
        replies = await _replies(located[0], located[1], stored.episode.epoch)
        env_id = stored.key.versioned_env_id
        new = await replayed_return(env_id, stored.episode.seed, replies, model)
        if abs(new - stored.episode.reward) > _TOLERANCE:
            changes.append(
                ScoreChange(
                    stored.key.env_id,
                    stored.episode.seed,
                    stored.episode.epoch,
                    stored.episode.reward,
                    new,
                    stored.run_id,
                )
            )
    return changes


def rescore(config: BenchConfig) -> list[ScoreChange]:
    """The stored episodes of ``config``'s model on its envs whose score today's grader changes."""
    if config.rubric is not None:
        raise UsageError(RUBRIC_REFUSAL)
    name = config.label or config.model
    store = ResultStore(config.db)
    try:
        episodes = [
            e
            for e in store.episodes(config.resolved_env_ids())
            if e.key.model == name and "rubric" not in json.loads(e.key.sampling)
        ]
    finally:
        store.close()
    return asyncio.run(_rescore(config, episodes))
