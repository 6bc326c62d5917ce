"""Problem files for ``math``: JSONL in GSM8K or MATH format, and (optionally) datasets from the HF hub.

Each JSONL line is one problem, its format detected on its own:

* GSM8K: ``{"question": ..., "answer": "... #### 72"}``; the reference is what follows ``####``
  (thousands separators removed). An ``answer`` without ``####`` is used as the reference as is.
* MATH: ``{"problem": ..., "solution": "... \\boxed{...}"}``; the reference is the last boxed
  expression of the solution, or the record's ``answer`` field when it has one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from envsuite.core import Split
from envsuite.envs._problem import Problem, split_of
from envsuite.errors import UsageError
from envsuite.grading import extract_boxed


class MathDatasetError(UsageError):
    """A problem file or dataset could not be loaded (missing, malformed, empty, or unreachable)."""


def parse_record(record: Any, where: str) -> Problem:
    """One GSM8K- or MATH-format record as a :class:`Problem`; ``where`` names it in errors."""
    if not isinstance(record, Mapping):
        raise MathDatasetError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if isinstance(record.get("question"), str) and isinstance(record.get("answer"), str):
        answer = record["answer"]
        reference = answer.rsplit("####", 1)[1] if "####" in answer else answer
        return _problem(record["question"], reference.strip().replace(",", ""), where)
    if isinstance(record.get("problem"), str):
        reference = record.get("answer")
        if not isinstance(reference, str) or not reference.strip():
            solution = record.get("solution")
            reference = extract_boxed(solution) if isinstance(solution, str) else None
        if reference is None:
            raise MathDatasetError(
                f"{where}: MATH-format record has no 'answer' and no \\boxed{{}} in 'solution'"
            )
        return _problem(record["problem"], reference, where)
    raise MathDatasetError(
        f"{where}: unknown record format (keys {sorted(record)}); expected GSM8K "
        "('question' + 'answer' with '#### N') or MATH ('problem' + 'solution' with \\boxed{})"
    )


def _problem(question: str, reference: str, where: str) -> Problem:
    if not question.strip() or not reference.strip():
        raise MathDatasetError(f"{where}: empty question or reference answer")
    return Problem(question=question.strip(), answer=reference.strip())


MAX_LINE_BYTES = 1 << 20
"""Longest JSONL line read (1 MiB; GSM8K and MATH records are a few KB). Longer lines are an error."""
MAX_FILE_BYTES = 512 << 20
"""Largest problem file read (512 MiB); parsed problems stay in memory, so bigger files are refused."""


def load_jsonl(path: str, split: Split | None = None) -> tuple[Problem, ...]:
    """The problems in a JSONL file: all of them, or those whose question hashes into ``split``.

    The file is streamed line by line, each line read to at most :data:`MAX_LINE_BYTES`, and files over
    :data:`MAX_FILE_BYTES` are refused before reading, so a malformed file fails in bounded time and
    memory. Cached per file version, so building many envs on one file reads and splits it once.
    """
    resolved = Path(path).expanduser()
    try:
        stat = resolved.stat()
    except OSError as exc:
        raise MathDatasetError(f"cannot read problem file {path!r}: {exc}") from exc
    if stat.st_size > MAX_FILE_BYTES:
        raise MathDatasetError(
            f"{path}: {stat.st_size / 2**20:,.0f} MiB is over the {MAX_FILE_BYTES >> 20} MiB limit for a "
            "problem file (problems are held in memory); split it or pass a sample"
        )
    return _split_cached(str(resolved.resolve()), stat.st_mtime_ns, stat.st_size, split)


@functools.lru_cache(maxsize=16)
def _split_cached(path: str, mtime_ns: int, size: int, split: Split | None) -> tuple[Problem, ...]:
    problems = _load_jsonl_cached(path, mtime_ns, size)
    return problems if split is None else tuple(p for p in problems if split_of(p.question) == split)


@functools.lru_cache(maxsize=8)
def _load_jsonl_cached(path: str, mtime_ns: int, size: int) -> tuple[Problem, ...]:
    problems: list[Problem] = []
    try:
        with open(path, "rb") as handle:
            for lineno, raw in enumerate(_bounded_lines(handle, path), start=1):
                problems.extend(_parse_line(raw, f"{path}:{lineno}"))
    except OSError as exc:
        raise MathDatasetError(f"cannot read problem file {path!r}: {exc}") from exc
    if not problems:
        raise MathDatasetError(f"{path}: no problems in the file")
    return tuple(problems)


def _bounded_lines(handle: BinaryIO, path: str) -> Iterator[bytes]:
    """The file's lines, none read past :data:`MAX_LINE_BYTES` (a longer one raises at once)."""
    lineno = 0
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        lineno += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise MathDatasetError(
                f"{path}:{lineno}: line is longer than the {MAX_LINE_BYTES >> 20} MiB limit for one "
                "problem record (is this a JSONL file, one JSON object per line?)"
            )
        yield raw


def _parse_line(raw: bytes, where: str) -> list[Problem]:
    """The problem on one line (none for a blank line)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MathDatasetError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if not line.strip():
        return []
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise MathDatasetError(f"{where}: invalid JSON ({exc.msg})") from exc
    return [parse_record(record, where)]


def load_hub(name: str, config: str | None, split: str) -> tuple[Problem, ...]:
    """A split of a Hugging Face hub dataset (needs the optional ``datasets`` package and the network)."""
    try:
        import datasets
    except ImportError as exc:
        raise MathDatasetError(
            f"hf_dataset={name!r} needs the optional `datasets` package, which is not installed "
            "(pip install datasets). Offline, download the data as JSONL and pass dataset=PATH instead."
        ) from exc
    try:
        rows: Iterable[Mapping[str, Any]] = datasets.load_dataset(name, config, split=split)
    except Exception as exc:
        raise MathDatasetError(
            f"could not load {name!r} (config {config!r}, split {split!r}) from the Hugging Face hub: {exc}. "
            "Offline or without hub access, pass dataset=PATH to a local JSONL file instead."
        ) from exc
    return tuple(parse_record(dict(row), f"{name}[{split}][{i}]") for i, row in enumerate(rows))
