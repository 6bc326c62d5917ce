"""Judged env families: open-ended instructions scored by a rubric per item (docs/rubrics.md).

``judged/instructions-v0`` plays one of 66 shipped instructions (50 train, 16 test, a seeded split),
each scored by its own rubric of guards, code criteria and judge criteria, the judge (SmolLM2 by
default) a partner named in the result key; ``judged/instructions_code-v0`` is the same items scored
by code alone (``judge:none``).
"""

from __future__ import annotations

from envsuite.envs.judged._env import DEFAULT_JUDGE, INJECTION, InstructionEnv
from envsuite.envs.judged._items import (
    JUDGE_TALK,
    SPLIT_SEED,
    TEST_ITEMS,
    InstructionItem,
    item_rubric,
    items_revision,
    load_items,
    split_items,
)

__all__ = [
    "InstructionEnv",
    "InstructionItem",
    "DEFAULT_JUDGE",
    "INJECTION",
    "JUDGE_TALK",
    "SPLIT_SEED",
    "TEST_ITEMS",
    "item_rubric",
    "items_revision",
    "load_items",
    "split_items",
]
