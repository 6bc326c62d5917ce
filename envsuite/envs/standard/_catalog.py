"""The ``standard/<name>`` catalog entries: plain data; no file or network is read to register them."""

from __future__ import annotations

from envsuite.catalog.registration import EnvKind, register
from envsuite.envs.standard._sets import STANDARD_SETS, Scoring

NAMESPACE = "standard"
ENTRY_POINT = "envsuite.envs.standard:StandardSetEnv"
CODE_ENTRY_POINT = "envsuite.envs.standard:StandardCodeEnv"

_TOPIC = {Scoring.MATH_VERIFY: "math", Scoring.CHOICE_LETTER: "knowledge", Scoring.SANDBOX_TESTS: "code"}


def env_id(name: str) -> str:
    """The catalog id of standard set ``name``."""
    return f"{NAMESPACE}/{name}-v0"


def register_standard_sets(no_sandbox: str | None = None) -> list[str]:
    """Register ``standard/<name>-v0`` for every set (once: the core catalog calls it); returns the ids.
    ``no_sandbox``: why the sandbox cannot run here (the sets whose tests run in it are then unavailable)."""
    added = []
    for standard in STANDARD_SETS:
        code = standard.scoring is Scoring.SANDBOX_TESTS
        pinned = standard.pinned_revision()
        where = f"{standard.hf_repo}@{pinned}" if pinned else f"{standard.hf_repo} (revision not pinned)"
        register(
            env_id(standard.name),
            entry_point=CODE_ENTRY_POINT if code else ENTRY_POINT,
            kwargs={"name": standard.name},
            kind=EnvKind.SINGLE_TURN,
            description=(
                f"{standard.title} ({standard.n_items} items, {where}), scored by {standard.scoring.value} "
                "as its reference implementation does."
            ),
            reward_range=(-0.1, 1.0),
            tags=(
                "standard",
                "eval-only",
                "math" if standard.scoring.value == "math_verify" else "knowledge",
            ),
            family="standard",
            unavailable=(no_sandbox if code else None) or standard.unavailable(),
        )
        added.append(env_id(standard.name))
    return added
