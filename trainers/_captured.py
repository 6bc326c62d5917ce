"""Captured episodes as the trainer's batches: ``envsuite train --captured DIR``.

``DIR`` is a capture set of ``envsuite serve`` (``<state-dir>/captures/<name>``). Its scored episodes
become trajectory groups (``envsuite.capture.captured_groups``: the exact prompt and sampled tokens and
logprobs, one group per client group id or shared opening prompt), and step ``i`` trains on batch ``i``
of them, cycling when they run out. Everything after that is the trainer's usual path: group-centred
advantages, datums that merge turns whose prompts extend each other, the policy loss with the captured
logprobs as the sampler's.
"""

from __future__ import annotations

from pathlib import Path

from envsuite.capture import CapturedGroups, CaptureStore, captured_groups
from envsuite.trainers._batches import BatchRollouts
from envsuite.trainers._config import ConfigError, TrainConfig


def _canonical(model: str) -> str:
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


class CapturedBatches:
    """Batches of captured groups, in a fixed order."""

    def __init__(self, groups: CapturedGroups, batch_size: int) -> None:
        self.groups = groups
        self.batch_size = min(batch_size, len(groups.groups_P))

    @classmethod
    def load(cls, config: TrainConfig) -> CapturedBatches:
        """The capture set ``config.captured_dir`` names; ConfigError when it cannot be trained on."""
        assert config.envs.captured_dir is not None
        root = Path(config.envs.captured_dir)
        if not (root / "episodes").is_dir():
            raise ConfigError(f"captured_dir {root} holds no captured episodes (expected {root}/episodes/)")
        try:
            groups = captured_groups(CaptureStore(root).episodes())
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"captured_dir {root}: {exc}") from None
        if not groups.groups_P:
            raise ConfigError(
                f"captured_dir {root} has no scored episodes ({groups.n_unscored} unscored): post a reward "
                "or grade them (docs/serve.md, Capture)"
            )
        if [_canonical(m) for m in groups.base_models] != [_canonical(config.policy.model)]:
            raise ConfigError(
                f"captured_dir {root} was sampled from {', '.join(groups.base_models)}; train it with "
                f"--model {groups.base_models[0]} (the tokens are that model's), not {config.policy.model}"
            )
        return cls(groups, config.steps.batch_size)

    def batch(self, step: int) -> BatchRollouts:
        """Batch ``step``: the next ``batch_size`` groups, wrapping around."""
        n = len(self.groups.groups_P)
        indices = [(step * self.batch_size + j) % n for j in range(self.batch_size)]
        return BatchRollouts([self.groups.groups_P[i] for i in indices], [], 0.0, indices)
