"""The standard evaluation sets by name: where each lives upstream, its schema, and how it is scored.

Plain data. A set's items come from a local file when one is named (``ENVSUITE_<NAME>_FILE``, or the
env's ``data_file=``), else from the Hugging Face hub at the pinned ``revision``: never from a moving
branch. Where no revision was verified when the set was added (no hub access here), ``revision`` is
None and the set loads only from a file, or from the hub with an explicit ``ENVSUITE_<NAME>_REVISION``.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass


class Scoring(enum.StrEnum):
    """How a set's replies are scored (docs/benchmarks_standard.md)."""

    MATH_VERIFY = "math_verify"
    """The last ``\\boxed{}`` answer (else the last number) against the reference, by math-verify."""
    CHOICE_LETTER = "choice_letter"
    """The letter the reply commits to (``Answer: X`` / ``the answer is (X)``) against the key."""
    SANDBOX_TESTS = "sandbox_tests"
    """The reply's code against the set's own tests, run in envsuite's sandbox."""


@dataclass(frozen=True)
class StandardSet:
    """One standard set as a catalog env ``standard/<name>``."""

    name: str
    title: str
    hf_repo: str
    hf_configs: tuple[str | None, ...]
    """The hub configs whose splits make the set, in order (AIME 2025 is two: I and II)."""
    hf_split: str
    revision: str | None
    """The hub commit the set loads at; None: not pinned yet (see the module docstring)."""
    n_items: int
    """Items in the upstream split (what a full run covers)."""
    scoring: Scoring
    fields: tuple[str, ...]
    """The upstream record fields the env reads (a local file must have them)."""

    @property
    def file_var(self) -> str:
        return f"ENVSUITE_{self.name.upper()}_FILE"

    @property
    def revision_var(self) -> str:
        return f"ENVSUITE_{self.name.upper()}_REVISION"

    def local_file(self) -> str | None:
        return os.environ.get(self.file_var) or None

    def pinned_revision(self) -> str | None:
        return os.environ.get(self.revision_var) or self.revision

    def unavailable(self) -> str | None:
        """Why the set cannot load here, or None (decided without touching the network or the file)."""
        if self.local_file():
            return None
        if self.pinned_revision() is None:
            return (
                f"no local file ({self.file_var}=PATH to {self.hf_repo}'s {self.hf_split} split as JSONL) "
                f"and no pinned hub revision ({self.revision_var}=COMMIT)"
            )
        if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
            return f"the hub is off (HF_HUB_OFFLINE) and no local file is named ({self.file_var}=PATH)"
        return None


STANDARD_SETS: tuple[StandardSet, ...] = (
    StandardSet(
        "gsm8k",
        "GSM8K",
        "openai/gsm8k",
        ("main",),
        "test",
        None,
        1319,
        Scoring.MATH_VERIFY,
        ("question", "answer"),
    ),
    StandardSet(
        "math500",
        "MATH-500",
        "HuggingFaceH4/MATH-500",
        (None,),
        "test",
        None,
        500,
        Scoring.MATH_VERIFY,
        ("problem", "answer"),
    ),
    StandardSet(
        "aime2024",
        "AIME 2024",
        "HuggingFaceH4/aime_2024",
        (None,),
        "train",
        None,
        30,
        Scoring.MATH_VERIFY,
        ("problem", "answer"),
    ),
    StandardSet(
        "aime2025",
        "AIME 2025",
        "opencompass/AIME2025",
        ("AIME2025-I", "AIME2025-II"),
        "test",
        None,
        30,
        Scoring.MATH_VERIFY,
        ("question", "answer"),
    ),
    StandardSet(
        "gpqa_diamond",
        "GPQA-Diamond",
        "Idavidrein/gpqa",
        ("gpqa_diamond",),
        "train",
        None,
        198,
        Scoring.CHOICE_LETTER,
        ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"),
    ),
    StandardSet(
        "mmlu_pro",
        "MMLU-Pro",
        "TIGER-Lab/MMLU-Pro",
        (None,),
        "test",
        None,
        12032,
        Scoring.CHOICE_LETTER,
        ("question", "options", "answer", "category"),
    ),
    StandardSet(
        "mbpp",
        "MBPP",
        "google-research-datasets/mbpp",
        ("full",),
        "test",
        None,
        500,
        Scoring.SANDBOX_TESTS,
        ("task_id", "text", "code", "test_list"),
    ),
)
"""The sets built so far (IFEval and LiveCodeBench are not yet: docs/benchmarks_standard.md)."""

BY_NAME: dict[str, StandardSet] = {s.name: s for s in STANDARD_SETS}
