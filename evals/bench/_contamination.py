"""``envsuite bench --contamination FILE``: n-gram overlap between the bench's prompts and training data.

As GPT-3's and lm-eval-harness's decontamination: an eval item is contaminated when one of its 13-grams
of normalized tokens (lowercased words, punctuation dropped) occurs in the training text. 13 is long
enough that a shared 13-gram is almost never chance (common phrases are shorter) and short enough to
catch a question copied into a document with its surroundings. An item shorter than 13 tokens is
checked as one n-gram of its own length (the whole item must occur), or short prompts would never be
checked at all. The items are the prompts the bench would pose: each env's episode seeds, the user
turns of its opening.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from envsuite import make_env
from envsuite.evals._task import episode_seeds

NGRAM = 13
_WORD = re.compile(r"[a-z0-9]+")
_WORST = 3


def normalized_tokens(text: str) -> list[str]:
    """Lowercased words and numbers, punctuation and spacing dropped (so formatting never hides a copy)."""
    return _WORD.findall(text.lower())


def _ngrams(tokens: list[str], n: int) -> Iterator[tuple[str, ...]]:
    for start in range(len(tokens) - n + 1):
        yield tuple(tokens[start : start + n])


def _strings(value: object) -> Iterator[str]:
    """Every string in a JSON value (a record's text fields, chat messages' contents)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def training_texts(path: Path) -> Iterator[str]:
    """A training file's documents: each JSONL record's strings, or a text file's lines."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            if path.suffix in (".jsonl", ".json"):
                yield " ".join(_strings(json.loads(line)))
            else:
                yield line


class TrainingIndex:
    """The training text's n-grams for every n an item may need (13, and the lengths of short items)."""

    def __init__(self, texts: Iterable[str], lengths: set[int]) -> None:
        self.grams: dict[int, set[tuple[str, ...]]] = {n: set() for n in lengths}
        for text in texts:
            tokens = normalized_tokens(text)
            for n, grams in self.grams.items():
                grams.update(_ngrams(tokens, n))

    def overlap(self, tokens: list[str]) -> int:
        """How many of the item's n-grams occur in the training text."""
        n = min(NGRAM, len(tokens))
        return sum(gram in self.grams[n] for gram in _ngrams(tokens, n)) if n else 0


@dataclass(frozen=True)
class ItemOverlap:
    seed: int
    text: str
    shared_ngrams: int


@dataclass
class EnvContamination:
    """One env's items against the training file."""

    env_id: str
    items: int = 0
    contaminated: int = 0
    worst: list[ItemOverlap] = field(default_factory=list)
    """The items sharing the most n-grams (up to 3, most first; only items with any)."""

    @property
    def fraction(self) -> float:
        return self.contaminated / self.items if self.items else 0.0


def eval_items(env_id: str, model: str, episodes: int, seed: int) -> list[tuple[int, str]]:
    """The prompts a bench of ``episodes`` poses for ``env_id``: (episode seed, its user turns' text)."""
    items = []
    for episode in episode_seeds(env_id, episodes, seed):
        env = make_env(env_id, seed=episode, model=model)
        text = "\n".join(str(m["content"]) for m in env.conversation() if m["role"] == "user")
        items.append((episode, text))
    return items


def contamination(
    training_file: Path, env_ids: list[str], *, model: str, episodes: int, seed: int
) -> list[EnvContamination]:
    """Each env's fraction of items sharing an n-gram with ``training_file``, and its worst items."""
    items = {env_id: eval_items(env_id, model, episodes, seed) for env_id in env_ids}
    tokens = {key: [normalized_tokens(text) for _, text in rows] for key, rows in items.items()}
    lengths = {min(NGRAM, len(t)) for rows in tokens.values() for t in rows if t}
    index = TrainingIndex(training_texts(training_file), lengths)
    reports = []
    for env_id, rows in items.items():
        report = EnvContamination(env_id, items=len(rows))
        hits = []
        for (episode, text), item_tokens in zip(rows, tokens[env_id], strict=True):
            shared = index.overlap(item_tokens)
            if shared:
                hits.append(ItemOverlap(episode, text, shared))
        report.contaminated = len(hits)
        report.worst = sorted(hits, key=lambda hit: -hit.shared_ngrams)[:_WORST]
        reports.append(report)
    return reports
