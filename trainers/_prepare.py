"""Checks that run before any model loads, and the run directory's ``config.json``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.errors import UsageError
from envsuite.trainers._config import ConfigError, TrainConfig
from envsuite.trainers._trackers import check_trackers

if TYPE_CHECKING:
    from envsuite.trainers._run_envs import RunEnv

RESUME_MAY_CHANGE = frozenset(
    {
        "n_steps",
        "save_every",
        "eval_every",
        "n_transcripts",
        "rollout_timeout_s",
        "backend",
        # where env work runs does not change what a run computes
        "executor",
        "workers",
        "ray_address",
        # nor does how many sampler replicas play the groups (identical samples at staleness 0)
        "samplers",
        # nor do where its metrics are also logged
        "wandb_project",
        "wandb_name",
        "trackio_project",
    }
)
"""Fields a resumed run may change; any other difference means a different experiment."""


def preflight(config: TrainConfig) -> list[RunEnv]:
    """Validate settings, the envs and their kwargs, and (local backend) the model name; raise
    ConfigError. Returns the run's envs: the run's one lookup of its ids (datasets and builders carry
    their specs from here); none for a run on captured episodes alone (no ``env_id``).

    Cheap checks go first: each env (and its test split, when the run evaluates) is built before the
    embedded model is materialized (about 20 s the first time), so a bad dataset fails in seconds.
    """
    config.validate()
    check_trackers(config)
    from envsuite.backends import Backend
    from envsuite.trainers._curriculum import CurriculumState
    from envsuite.trainers._run_envs import check_eval_rungs, resolve_run_envs

    try:
        Backend(config.policy.backend)
    except ValueError:
        raise ConfigError(
            f"unknown backend {config.policy.backend!r}: use 'local' or 'tinker' (needs TINKER_API_KEY)"
        ) from None
    envs = resolve_run_envs(config) if config.env_id else []
    check_eval_rungs(config, envs)
    if config.envs.curriculum is not None:
        try:
            CurriculumState(config.envs.curriculum, [e.spec for e in envs])
        except UsageError as exc:
            raise ConfigError(str(exc)) from None
    local = config.policy.backend == "local"
    from envsuite.models import KNOWN_MODELS

    if local and config.policy.model not in KNOWN_MODELS:
        _check_model(config.policy.model)  # a directory or hub name: cheap to check, and the env needs it
    for env in envs:
        _check_env_builds(config, env)
    if local and config.policy.model in KNOWN_MODELS:
        _check_model(config.policy.model)
    if local and config.loss.kl_reference_checkpoint is not None:
        _check_kl_reference(config.loss.kl_reference_checkpoint)
    return envs


def _check_kl_reference(path: str) -> None:
    from envsuite.backends.local import CheckpointError, check_sampler_checkpoint

    try:
        check_sampler_checkpoint(path)
    except CheckpointError as exc:
        raise ConfigError(
            f"kl_reference_checkpoint: {exc} (pass a sampler_path from checkpoints.jsonl)"
        ) from None


def _check_model(name: str) -> None:
    from envsuite.models import UnknownModelError, resolve_model

    try:
        resolve_model(name)
    except UnknownModelError as exc:
        raise ConfigError(f"model: {exc}") from None


def _check_env_builds(config: TrainConfig, env: RunEnv) -> None:
    from envsuite import make_env

    splits = (
        ["train", "test"] if config.evaluation.eval_every and config.evaluation.n_test_groups else ["train"]
    )
    for split in splits:
        try:
            make_env(
                env.spec,
                seed=config.steps.seed,
                split=split,  # type: ignore[arg-type]
                model=config.policy.model,
                renderer=config.policy.renderer_name,
                max_context_tokens=config.sampling.max_context_tokens,
                **env.kwargs,
            )
        except UsageError as exc:  # a setting the env refuses; any other error is a fault of the env
            hint = " (or pass --eval-every 0 to train without evaluations)" if split == "test" else ""
            raise ConfigError(
                f"env {env.spec.id!r} with env_kwargs {env.kwargs} cannot build its {split} "
                f"split: {exc}{hint}"
            ) from exc


def check_and_record_config(config: TrainConfig, log_dir: Path) -> None:
    """Write ``config.json``; if the directory holds another run's config, refuse to mix the two."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / "config.json"
    if path.exists():
        try:
            previous = TrainConfig.from_json(path.read_text(encoding="utf-8"))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{path} is not a readable trainer config ({exc}); use a new log_dir") from None
        changed = [name for name in config.differs_from(previous) if name not in RESUME_MAY_CHANGE]
        if changed:
            raise ConfigError(
                f"{log_dir} holds a run with different settings ({', '.join(changed)}); resume with the same "
                "settings or pass a new log_dir"
            )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(config.to_json() + "\n", encoding="utf-8")
    tmp.replace(path)
