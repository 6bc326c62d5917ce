"""The ``standard/<name>`` catalog entries: plain data; no file or network is read to register them."""

from __future__ import annotations

from envsuite.catalog.registration import EnvKind, register
from envsuite.envs.standard._ifeval import checkers_unavailable
from envsuite.envs.standard._sets import STANDARD_SETS, Scoring, StandardSet

NAMESPACE = "standard"
ENTRY_POINT = "envsuite.envs.standard:StandardSetEnv"
CODE_ENTRY_POINT = "envsuite.envs.standard:StandardCodeEnv"
LCB_ENTRY_POINT = "envsuite.envs.standard:LiveCodeBenchEnv"
INSTRUCTIONS_ENTRY_POINT = "envsuite.envs.standard:InstructionsEnv"


_TOPIC = {
    Scoring.MATH_VERIFY: "math",
    Scoring.CHOICE_LETTER: "knowledge",
    Scoring.SANDBOX_TESTS: "code",
    Scoring.INSTRUCTIONS: "instruction-following",
}


def _entry_point(standard: StandardSet) -> str:
    if standard.scoring is Scoring.INSTRUCTIONS:
        return INSTRUCTIONS_ENTRY_POINT
    if standard.scoring is Scoring.SANDBOX_TESTS:
        return LCB_ENTRY_POINT if standard.name == "livecodebench" else CODE_ENTRY_POINT
    return ENTRY_POINT


def env_id(name: str) -> str:
    """The catalog id of standard set ``name``."""
    return f"{NAMESPACE}/{name}-v0"


def register_standard_sets(no_sandbox: str | None = None) -> list[str]:
    """Register ``standard/<name>-v0`` for every set (once: the core catalog calls it); returns the ids.
    ``no_sandbox``: why the sandbox cannot run here (the sets whose tests run in it are then unavailable)."""
    added = []
    for standard in STANDARD_SETS:
        code = standard.scoring is Scoring.SANDBOX_TESTS
        instructions = standard.scoring is Scoring.INSTRUCTIONS
        pinned = standard.pinned_revision()
        where = f"{standard.hf_repo}@{pinned}" if pinned else f"{standard.hf_repo} (revision not pinned)"
        grader = no_sandbox if code else checkers_unavailable() if instructions else None
        register(
            env_id(standard.name),
            entry_point=_entry_point(standard),
            kwargs={"name": standard.name},
            kind=EnvKind.SINGLE_TURN,
            description=(
                f"{standard.title} ({standard.n_items} items, {where}), scored by {standard.scoring.value} "
                "as its reference implementation does."
            ),
            reward_range=(0.0, 1.0) if instructions else (-0.1, 1.0),
            tags=("standard", "eval-only", _TOPIC[standard.scoring]),
            family="standard",
            unavailable="; ".join(why for why in (grader, standard.unavailable()) if why) or None,
        )
        added.append(env_id(standard.name))
    return added
