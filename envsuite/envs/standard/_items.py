"""Loading a standard set's records, and turning each upstream record into a prompt and a reference.

Prompts and answer rules (docs/benchmarks_standard.md says where each comes from):

* math sets (GSM8K, MATH-500, AIME): the problem, then ``MATH_INSTRUCTION`` (tinker-cookbook's math
  suffix); the reference is GSM8K's text after ``####`` (commas dropped), or the record's ``answer``.
* GPQA-Diamond: OpenAI simple-evals' multiple-choice template; the correct answer and the three
  incorrect ones are shuffled into A-D by a permutation seeded from the question (the same every run;
  upstream records hold the correct answer first).
* MMLU-Pro: its official zero-shot chain-of-thought instruction; options lettered A-J as given.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import random
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsuite.envs.standard._sets import BY_NAME, Scoring, StandardSet
from envsuite.errors import UsageError

MATH_INSTRUCTION = "Write your answer in \\boxed{} format."
GPQA_TEMPLATE = (
    "Answer the following multiple choice question. The last line of your response should be of the "
    "following format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by "
    "step before answering.\n\n{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}"
)
"""OpenAI simple-evals' ``QUERY_TEMPLATE_MULTICHOICE`` (its GPQA eval)."""
MMLU_PRO_INSTRUCTION = (
    "The following are multiple choice questions (with answers) about {category}. Think step by step "
    'and then finish your answer with "the answer is (X)" where X is the correct letter choice.'
)
"""MMLU-Pro's official zero-shot chain-of-thought instruction (``evaluate_from_api.py``)."""


class StandardSetError(UsageError):
    """A set's file or hub split could not be read, or a record lacks the upstream fields."""


@dataclass(frozen=True)
class Item:
    """One question as the model sees it, and what a correct reply gives."""

    id: str
    prompt: str
    reference: str
    """The answer (math sets) or the correct letter (choice sets)."""
    letters: str = ""
    """The choice letters offered (choice sets), e.g. ``ABCD``."""


class BenchedInOrder:
    """For a standard set's env class: how many records a bench plays in order (``item_count_of``; the
    env picks record ``seed % n``), None when ``item`` pins one. The set is the ``name`` keyword argument,
    its default read from the class's own signature."""

    @classmethod
    def item_count_of(cls, kwargs: dict[str, Any]) -> int | None:
        if kwargs.get("item") is not None:
            return None
        name = str(kwargs.get("name", inspect.signature(cls).parameters["name"].default))
        return len(load_records(BY_NAME[name], kwargs.get("data_file")))


def load_records(standard: StandardSet, data_file: str | None = None) -> tuple[dict[str, Any], ...]:
    """The set's upstream records: from ``data_file`` or ``ENVSUITE_<NAME>_FILE`` (JSONL), else the hub."""
    path = data_file or standard.local_file()
    if path:
        return _read_jsonl(path)
    revision = standard.pinned_revision()
    if revision is None:
        raise StandardSetError(f"{standard.title}: {standard.unavailable()}")
    if standard.hf_data_files:
        return _read_hub_files(standard.hf_repo, standard.hf_data_files, revision)
    return _read_hub(standard.hf_repo, standard.hf_configs, standard.hf_split, revision)


@functools.cache
def _read_jsonl(path: str) -> tuple[dict[str, Any], ...]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise StandardSetError(f"cannot read {path}: {exc}") from exc
    records = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                records.append(dict(json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise StandardSetError(f"{path}:{number}: not a JSON object ({exc})") from exc
    if not records:
        raise StandardSetError(f"{path} holds no records")
    return tuple(records)


@functools.cache
def _read_hub(
    repo: str, configs: tuple[str | None, ...], split: str, revision: str
) -> tuple[dict[str, Any], ...]:
    try:
        import datasets
    except ImportError as exc:
        raise StandardSetError(f"{repo} from the hub needs the `datasets` package ({exc})") from exc
    records: list[dict[str, Any]] = []
    for config in configs:
        try:
            rows: Iterable[Mapping[str, Any]] = datasets.load_dataset(
                repo, config, split=split, revision=revision
            )
        except Exception as exc:
            raise StandardSetError(f"could not load {repo} ({config}, {split}) at {revision}: {exc}") from exc
        records += [dict(row) for row in rows]
    return tuple(records)


@functools.cache
def _read_hub_files(repo: str, files: tuple[str, ...], revision: str) -> tuple[dict[str, Any], ...]:
    """The records of a hub repository's JSONL ``files`` at ``revision``, in order (its loading script not run)."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise StandardSetError(f"{repo} from the hub needs the `huggingface_hub` package ({exc})") from exc
    records: list[dict[str, Any]] = []
    for name in files:
        try:
            path = hf_hub_download(repo, name, repo_type="dataset", revision=revision)
        except Exception as exc:
            raise StandardSetError(f"could not fetch {name} of {repo} at {revision}: {exc}") from exc
        records += _read_jsonl(path)
    return tuple(records)


def make_item(standard: StandardSet, record: Mapping[str, Any], index: int) -> Item:
    """The prompt and reference of one upstream record (its schema: :attr:`StandardSet.fields`)."""
    missing = [f for f in standard.fields if f not in record]
    if missing:
        raise StandardSetError(f"{standard.title} record {index} lacks the upstream fields {missing}")
    item_id = str(record.get("unique_id") or record.get("question_id") or record.get("id") or index)
    if standard.scoring is Scoring.MATH_VERIFY:
        text = str(record.get("question") or record.get("problem"))
        answer = str(record["answer"])
        if standard.name == "gsm8k":
            answer = answer.rsplit("####", 1)[-1].strip().replace(",", "")
        return Item(item_id, f"{text}\n\n{MATH_INSTRUCTION}", answer.strip())
    if standard.name == "gpqa_diamond":
        return _gpqa(record, item_id)
    return _mmlu_pro(record, item_id)


def _gpqa(record: Mapping[str, Any], item_id: str) -> Item:
    correct = str(record["Correct Answer"]).strip()
    choices = [correct, *(str(record[f"Incorrect Answer {i}"]).strip() for i in (1, 2, 3))]
    seed = int.from_bytes(hashlib.blake2b(str(record["Question"]).encode(), digest_size=8).digest(), "little")
    random.Random(seed).shuffle(choices)
    lettered = dict(zip("ABCD", choices, strict=True))
    prompt = GPQA_TEMPLATE.format(question=str(record["Question"]).strip(), **lettered)
    return Item(item_id, prompt, "ABCD"[choices.index(correct)], "ABCD")


def _mmlu_pro(record: Mapping[str, Any], item_id: str) -> Item:
    options = [str(o) for o in record["options"]]
    letters = string.ascii_uppercase[: len(options)]
    listed = "\n".join(f"({letter}) {option}" for letter, option in zip(letters, options, strict=True))
    header = MMLU_PRO_INSTRUCTION.format(category=record["category"])
    prompt = (
        f"{header}\n\nQuestion: {record['question']}\nOptions:\n{listed}\nAnswer: Let's think step by step."
    )
    return Item(item_id, prompt, str(record["answer"]).strip(), letters)
