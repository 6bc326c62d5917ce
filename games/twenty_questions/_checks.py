"""The atoms a question is parsed into (:class:`Check`, :class:`Query`) and the word matching both the
clause parser (``_parse``) and the predicate mapper (``_predicates``) use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from envsuite.games.twenty_questions import _lexicon as lex


class Relation(enum.StrEnum):
    """What one atomic check tests on a word."""

    NAME = "name"
    CATEGORY = "category"
    SCALAR = "scalar"
    PROP = "prop"
    COLOR = "color"
    MATERIAL = "material"
    PLACE = "place"
    USE = "use"
    ABILITY = "ability"
    PART = "part"
    COUNT = "count"
    SIZE_GT = "size_gt"
    SIZE_LT = "size_lt"
    SIZE_MIN = "size_min"
    SIZE_MAX = "size_max"
    MASS_GT = "mass_gt"
    MASS_LT = "mass_lt"
    MASS_MIN = "mass_min"
    MASS_MAX = "mass_max"


@dataclass(frozen=True)
class Check:
    relation: Relation
    key: str = ""
    number: float = 0.0
    negated: bool = False


@dataclass(frozen=True)
class Query:
    """``all_of`` groups must hold; within a group any one check suffices. ``negated`` flips the result."""

    all_of: tuple[tuple[Check, ...], ...]
    negated: bool = False


def parse_spec(spec: str) -> Check:
    """``"relation:key"`` (``!`` prefix negates; numeric keys for size/mass relations)."""
    negated = spec.startswith("!")
    relation, _, key = spec.lstrip("!").partition(":")
    rel = Relation(relation)
    if rel.value.startswith(("size_", "mass_")):
        return Check(rel, number=float(key), negated=negated)
    return Check(rel, key, negated=negated)


def alternatives(specs: tuple[str, ...], conjunctive: bool) -> tuple[tuple[Check, ...], ...]:
    """Checks from specs: each its own group when ``conjunctive`` (all must hold), else one group (any)."""
    checks = tuple(parse_spec(s) for s in specs)
    return tuple((c,) for c in checks) if conjunctive else (checks,)


def lemma_candidates(word: str) -> list[str]:
    """The word plus plausible base forms and plural forms (the vocabulary picks the right one)."""
    out = [word]
    if word in lex.IRREGULAR:
        out.append(lex.IRREGULAR[word])
    if word not in lex.NO_STRIP and len(word) > 3:
        if word.endswith("ies"):
            out.append(word[:-3] + "y")
        if word.endswith("es"):
            out.append(word[:-2])
        if word.endswith("s") and not word.endswith(("ss", "us", "is")):
            out.append(word[:-1])
        for suffix in ("ing", "ed"):
            if word.endswith(suffix) and len(word) > len(suffix) + 2:
                stem = word[: -len(suffix)]
                out += [stem, stem + "e"]
                if len(stem) > 2 and stem[-1] == stem[-2]:
                    out.append(stem[:-1])
    out += [word + "s", word + "es"]
    return out


def match_vocab(phrase: str, vocab: frozenset[str]) -> str | None:
    """The vocabulary entry ``phrase`` names, trying base/plural forms of its first and last words."""
    words = phrase.split()
    if not words:
        return None
    if phrase in vocab:
        return phrase
    firsts = lemma_candidates(words[0])
    lasts = lemma_candidates(words[-1]) if len(words) > 1 else [""]
    for first in firsts:
        for last in lasts:
            candidate = " ".join([first, *words[1:-1], last]) if len(words) > 1 else first
            if candidate in vocab:
                return candidate
    return None


def strip_prefixes(text: str, prefixes: tuple[str, ...]) -> str:
    """``text`` without any run of the given prefixes (never stripped down to nothing)."""
    changed = True
    while changed:
        changed = False
        for prefix in prefixes:
            if text.startswith(prefix) and len(text) > len(prefix):
                text, changed = text[len(prefix) :], True
    return text
