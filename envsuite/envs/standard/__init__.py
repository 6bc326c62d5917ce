"""Standard evaluation sets by name (``standard/<name>``): GSM8K, MATH-500, AIME 2024 and 2025,
GPQA-Diamond, MMLU-Pro, IFEval (lm-eval's instruction checkers), MBPP and LiveCodeBench (their tests run
in the sandbox), each prompted and scored as its reference implementation does
(docs/benchmarks_standard.md). Items load from a local JSONL file in the upstream schema
(``ENVSUITE_<NAME>_FILE``) or from the Hugging Face hub at a pinned revision; a set with neither here is
listed unavailable with the reason.
"""

from __future__ import annotations

from envsuite.envs.standard._catalog import ENTRY_POINT, NAMESPACE, env_id, register_standard_sets
from envsuite.envs.standard._code import MBPP_TEMPLATE, StandardCodeEnv
from envsuite.envs.standard._env import StandardSetEnv, extract_letter
from envsuite.envs.standard._ifeval import IFEvalScore, InstructionsEnv, checkers_unavailable, score_reply
from envsuite.envs.standard._items import (
    GPQA_TEMPLATE,
    MATH_INSTRUCTION,
    MMLU_PRO_INSTRUCTION,
    Item,
    StandardSetError,
    load_records,
    make_item,
)
from envsuite.envs.standard._livecodebench import (
    LCB_IMPORTS,
    LCB_SYSTEM_MESSAGE,
    LiveCodeBenchEnv,
    decode_tests,
    lcb_prompt,
    stdio_matches,
)
from envsuite.envs.standard._sets import BY_NAME, STANDARD_SETS, Scoring, StandardSet

__all__ = [
    # the envs
    "InstructionsEnv",
    "LiveCodeBenchEnv",
    "StandardCodeEnv",
    "StandardSetEnv",
    "extract_letter",
    # IFEval's scoring (lm-eval's checkers)
    "IFEvalScore",
    "checkers_unavailable",
    "score_reply",
    # LiveCodeBench's format and comparison
    "LCB_IMPORTS",
    "LCB_SYSTEM_MESSAGE",
    "decode_tests",
    "lcb_prompt",
    "stdio_matches",
    # the sets
    "BY_NAME",
    "STANDARD_SETS",
    "Scoring",
    "StandardSet",
    # items and prompts
    "GPQA_TEMPLATE",
    "MBPP_TEMPLATE",
    "MATH_INSTRUCTION",
    "MMLU_PRO_INSTRUCTION",
    "Item",
    "StandardSetError",
    "load_records",
    "make_item",
    # the catalog
    "ENTRY_POINT",
    "NAMESPACE",
    "env_id",
    "register_standard_sets",
]
