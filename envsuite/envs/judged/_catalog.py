"""Catalog entries of the judged instruction family (``judged/``): the judged and the judge-less variant."""

from __future__ import annotations

from envsuite.catalog.registration import EnvKind, register

JUDGED_FAMILY = "judged"


def register_judged_envs() -> None:
    """Register ``judged/instructions-v0`` (rubric with SmolLM2 as judge) and ``judged/instructions_code-v0``
    (the same rubrics without their judge criteria)."""
    register(
        "judged/instructions-v0",
        entry_point="envsuite.envs.judged:InstructionEnv",
        kind=EnvKind.SINGLE_TURN,
        description=(
            "66 open-ended instructions (50 train, 16 test), each scored by its own rubric: guards, code "
            "criteria and yes/no judge criteria; the judge (SmolLM2-135M by default) is the partner."
        ),
        reward_range=(0.0, 1.0),
        partner_kwarg="judge",
        family=JUDGED_FAMILY,
        tags=("judged", "instruction-following"),
    )
    register(
        "judged/instructions_code-v0",
        entry_point="envsuite.envs.judged:InstructionEnv",
        kwargs={"judge": None},
        kind=EnvKind.SINGLE_TURN,
        description="judged/instructions' items scored by their code criteria alone (no judge: judge:none).",
        reward_range=(0.0, 1.0),
        family=JUDGED_FAMILY,
        tags=("judged", "instruction-following"),
    )
