"""The knowledge base the offline answerer reasons over: common nouns with their attributes.

The data lives in ``data/knowledge_base.json`` (loaded with :mod:`importlib.resources`). A word inherits
scalar attributes (``set``) and list attributes (``add``) from its category chain; its own scalars replace
inherited ones, its own lists extend them, and a list item ``-x`` removes ``x``. ``None`` for a scalar
means the fact is unclear, and the answerer then says it cannot answer rather than guess.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

from envsuite.core import Split

_PACKAGE = "envsuite.games.twenty_questions"
KB_FILE = "data/knowledge_base.json"
LIST_ATTRS = ("tags", "aliases", "colors", "materials", "places", "uses", "abilities", "parts", "props")
SCALAR_ATTRS = ("alive", "man_made", "edible", "electric", "legs", "size_m", "kg")
TEST_FRACTION_PER_MILLE = 200
"""About a fifth of the words are held out for the test split."""

_T = TypeVar("_T")


class _Category(TypedDict, total=False):
    """A category as the data file spells it; a layer maps attribute names to JSON values."""

    parent: str | None
    set: dict[str, object]
    add: dict[str, object]


def normalize_phrase(text: str) -> str:
    """Lower-case, hyphens and punctuation to spaces, single spaces: how every key and question is compared."""
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower().replace("'", "")).split())


@dataclass(frozen=True)
class Entity:
    """One secret word with all its attributes resolved (category defaults applied)."""

    name: str
    chain: tuple[str, ...]
    """Categories from the most specific up to ``thing`` (e.g. mammal, animal, living thing, thing)."""
    alive: bool | None
    man_made: bool | None
    edible: bool | None
    electric: bool | None
    legs: int | None
    size_m: float | None
    """Typical longest dimension in metres."""
    kg: float | None
    """Typical mass in kilograms."""
    tags: frozenset[str] = frozenset()
    """Every category the word belongs to: the chain plus extra tags (pet, carnivore, ...)."""
    aliases: frozenset[str] = frozenset()
    colors: frozenset[str] = frozenset()
    materials: frozenset[str] = frozenset()
    places: frozenset[str] = frozenset()
    uses: frozenset[str] = frozenset()
    abilities: frozenset[str] = frozenset()
    parts: frozenset[str] = frozenset()
    props: frozenset[str] = frozenset()
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def names(self) -> frozenset[str]:
        """The word and its aliases, normalized."""
        return frozenset({self.name}) | self.aliases


@dataclass(frozen=True)
class KnowledgeBase:
    """All words, plus the vocabularies the question parser recognizes."""

    entities: Mapping[str, Entity]
    other_nouns: frozenset[str]
    """Specific things that are not secret words: guessing one is answered No."""
    digest: str
    """Short hash of the data file: part of the rule answerer's identity."""

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and normalize_phrase(word) in self.entities

    def entity(self, word: str) -> Entity:
        return self.entities[normalize_phrase(word)]

    @functools.cached_property
    def vocab(self) -> Mapping[str, frozenset[str]]:
        """Per attribute, every value some word has: a value outside it is not understood."""
        out: dict[str, set[str]] = {name: set() for name in LIST_ATTRS}
        for entity in self.entities.values():
            for name in LIST_ATTRS:
                out[name] |= getattr(entity, name)
            out["tags"] |= set(entity.chain)
        return {name: frozenset(values) for name, values in out.items()}

    @functools.cached_property
    def name_index(self) -> Mapping[str, str]:
        """Normalized word or alias -> canonical word (the first word claiming an alias keeps it)."""
        index: dict[str, str] = {}
        for entity in self.entities.values():
            for alias in sorted(entity.aliases):
                index.setdefault(alias, entity.name)
        index.update({name: name for name in self.entities})
        return index

    def words(self, split: Split | None = None) -> list[str]:
        """Sorted secret words, optionally only those of one split (train and test never overlap)."""
        return sorted(w for w in self.entities if split is None or word_split(w) == split)


def word_split(word: str) -> Split:
    """The split a word belongs to: a stable hash, so adding words never moves existing ones."""
    digest = hashlib.blake2b(normalize_phrase(word).encode(), digest_size=4).digest()
    return "test" if int.from_bytes(digest, "little") % 1000 < TEST_FRACTION_PER_MILLE else "train"


def _phrases(value: object, name: str) -> list[str]:
    """A list attribute's phrases (the list itself, not a copy)."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"knowledge base: {name} must be a list of phrases, not {value!r}")
    return value


def _scalar(attrs: Mapping[str, object], name: str, kind: type[_T] | tuple[type[_T], ...]) -> _T | None:
    """A scalar attribute, None when unclear."""
    value = attrs.get(name)
    if value is not None and not isinstance(value, kind):
        raise ValueError(f"knowledge base: {name} must be a {kind} or null, not {value!r}")
    return value


def _merge(into: dict[str, object], layer: Mapping[str, object]) -> None:
    for key, value in layer.items():
        if key in LIST_ATTRS:
            items = _phrases(into.setdefault(key, []), key)
            for item in _phrases(value, key):
                if item.startswith("-"):
                    while item[1:] in items:
                        items.remove(item[1:])
                elif item not in items:
                    items.append(item)
        else:
            into[key] = value


def _resolve(name: str, raw: Mapping[str, object], categories: Mapping[str, _Category]) -> Entity:
    chain: list[str] = []
    cursor = raw["category"]
    if cursor is not None and not isinstance(cursor, str):
        raise ValueError(f"knowledge base: word {name!r} has a category that is not a name: {cursor!r}")
    while cursor is not None:
        if cursor not in categories or cursor in chain:
            raise ValueError(f"knowledge base: word {name!r} has a broken category chain at {cursor!r}")
        chain.append(cursor)
        cursor = categories[cursor].get("parent")
    attrs: dict[str, object] = {}
    for category in reversed(chain):
        _merge(attrs, categories[category].get("set", {}))
        _merge(attrs, categories[category].get("add", {}))
    _merge(attrs, {k: v for k, v in raw.items() if k not in ("category", "counts")})
    lists = {k: frozenset(normalize_phrase(v) for v in _phrases(attrs.get(k, []), k)) for k in LIST_ATTRS}
    counts = raw.get("counts", {})
    if not isinstance(counts, dict):
        raise ValueError(f"knowledge base: word {name!r} has counts that are not an object")
    return Entity(
        name=normalize_phrase(name),
        chain=tuple(normalize_phrase(c) for c in chain),
        alive=_scalar(attrs, "alive", bool),
        man_made=_scalar(attrs, "man_made", bool),
        edible=_scalar(attrs, "edible", bool),
        electric=_scalar(attrs, "electric", bool),
        legs=_scalar(attrs, "legs", int),
        size_m=_scalar(attrs, "size_m", (int, float)),
        kg=_scalar(attrs, "kg", (int, float)),
        counts={normalize_phrase(k): int(v) for k, v in counts.items()},
        tags=lists["tags"],
        aliases=lists["aliases"],
        colors=lists["colors"],
        materials=lists["materials"],
        places=lists["places"],
        uses=lists["uses"],
        abilities=lists["abilities"],
        parts=lists["parts"],
        props=lists["props"],
    )


@functools.lru_cache(maxsize=1)
def load_knowledge_base() -> KnowledgeBase:
    """The knowledge base shipped with the package (parsed once per process)."""
    text = importlib.resources.files(_PACKAGE).joinpath(KB_FILE).read_text(encoding="utf-8")
    return knowledge_base_from_json(text)


def knowledge_base_from_json(text: str) -> KnowledgeBase:
    """Parse a knowledge base in the shipped format; errors name the offending word."""
    data = json.loads(text)
    categories = data["categories"]
    entities = {normalize_phrase(n): _resolve(n, raw, categories) for n, raw in data["words"].items()}
    return KnowledgeBase(
        entities=entities,
        other_nouns=frozenset(normalize_phrase(n) for n in data.get("other_nouns", [])),
        digest=hashlib.sha256(text.encode()).hexdigest()[:8],
    )
