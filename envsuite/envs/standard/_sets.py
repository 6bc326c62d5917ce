"""The standard evaluation sets by name: where each lives upstream, its schema, and how it is scored.

Plain data. A set's items come from a local file when one is named (``ENVSUITE_<NAME>_FILE``, or the
env's ``data_file=``), else from the Hugging Face hub at the pinned ``revision``: never from a moving
branch. Where no revision could be found when the set was added (no hub access here), ``revision`` is
None and the set loads only from a file, or from the hub with an explicit ``ENVSUITE_<NAME>_REVISION``.

The pinned revisions were read from public sources, not from the hub (each entry says which): Inspect
Evals 0.28.0's task modules (the wheel on the package index) where they load the same repository, else
the commit of the repository's snapshot that several public evaluation configs and Hugging Face cache
paths name. None was loaded here.
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
    INSTRUCTIONS = "instructions"
    """Each verifiable instruction of the prompt, by lm-evaluation-harness's IFEval checkers."""


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
    hf_data_files: tuple[str, ...] = ()
    """Files of the hub repository to read instead of its configs (a repository whose configs come from a
    loading script, which ``datasets`` 4 and later no longer runs)."""

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
        "cc7b047b6e5bb11b4f1af84efc572db110a51b3c",  # Inspect Evals 0.28.0, gsm8k/gsm8k.py
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
        "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be",  # pinned by many public eval configs (code search)
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
        "2fe88a2f1091d5048c0f36abc874fb997b3dd99a",  # public eval configs and HF cache snapshot paths
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
        "a6ad95f611d72cf628a80b58bd0432ef6638f958",  # one public HF cache snapshot path
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
        "633f5ee89ab8ad4522a9f850766b73f62147ffdd",  # public HF cache snapshot paths (a gated repo)
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
        "527feea0afed1de15a8c115abf7be4c912123315",  # Inspect Evals 0.28.0, mmlu_pro/mmlu_pro.py
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
        "4bb6404fdc6cacfda99d4ac4205087b89d32030c",  # Inspect Evals 0.28.0, mbpp/mbpp.py
        500,
        Scoring.SANDBOX_TESTS,
        ("task_id", "text", "code", "test_list"),
    ),
    StandardSet(
        "ifeval",
        "IFEval",
        "google/IFEval",
        (None,),
        "train",
        "966cd89545d6b6acfd7638bc708b98261ca58e84",  # Inspect Evals 0.28.0, ifeval/ifeval.py
        541,
        Scoring.INSTRUCTIONS,
        ("key", "prompt", "instruction_id_list", "kwargs"),
    ),
    StandardSet(
        "livecodebench",
        "LiveCodeBench",
        "livecodebench/code_generation_lite",
        (None,),
        "test",
        "0fe84c3912ea0c4d4a78037083943e8f0c4dd505",  # public HF cache snapshot paths
        1055,
        Scoring.SANDBOX_TESTS,
        ("question_content", "starter_code", "public_test_cases", "private_test_cases", "metadata"),
        hf_data_files=tuple(f"test{n}.jsonl" for n in ("", "2", "3", "4", "5", "6")),  # release_v6
    ),
)
"""Every standard set (docs/benchmarks_standard.md)."""

BY_NAME: dict[str, StandardSet] = {s.name: s for s in STANDARD_SETS}
