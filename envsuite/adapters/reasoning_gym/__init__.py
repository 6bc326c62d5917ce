"""reasoning-gym's procedural datasets as ``reasoning_gym/<name>-v0`` envs (optional extra).

``pip install 'envsuite[reasoning-gym]'`` makes :func:`register_reasoning_gym` (an ``envsuite.envs``
entry point) add :data:`DEFAULT_DATASETS` to the catalog; without reasoning-gym it registers nothing.
Registration is plain data: reasoning-gym is imported only when an env is made. Each env is one
problem drawn from the episode seed and graded by the dataset's own ``score_answer``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

from envsuite import registration
from envsuite.registration import EnvKind, register

NAMESPACE = "reasoning_gym"
DEFAULT_DATASETS: tuple[str, ...] = (
    "basic_arithmetic",
    "chain_sum",
    "leg_counting",
    "spell_backward",
    "word_sorting",
    "letter_counting",
    "gcd",
    "caesar_cipher",
)
"""Fast, offline datasets with exact scorers (checked by the conformance suite)."""


def available() -> bool:
    """Whether reasoning-gym can be imported here (checked without importing it)."""
    return importlib.util.find_spec("reasoning_gym") is not None


def register_reasoning_gym(names: Iterable[str] = DEFAULT_DATASETS) -> list[str]:
    """Register ``reasoning_gym/<name>-v0`` for each dataset name; returns the ids added.

    Idempotent. Any reasoning-gym dataset name works (``reasoning_gym.factory.DATASETS`` lists them);
    names that are not datasets fail when the env is made, naming the dataset.
    """
    if not available():
        return []
    added: list[str] = []
    for name in names:
        env_id = f"{NAMESPACE}/{name}-v0"
        if env_id in registration.registry:
            continue
        register(
            env_id,
            entry_point="envsuite.adapters.reasoning_gym._env:ReasoningGymEnv",
            kwargs={"dataset": name},
            kind=EnvKind.SINGLE_TURN,
            description=f"reasoning-gym {name}: one procedural problem, scored by reasoning-gym.",
            reward_range=(-1.0, 1.0),
            tags=("reasoning", "reasoning-gym"),
        )
        added.append(env_id)
    return added
