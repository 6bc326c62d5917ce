"""The offline answerer: evaluate a parsed question against the knowledge base, three-valued."""

from __future__ import annotations

from envsuite.games.twenty_questions._answer import Answer, Answerer
from envsuite.games.twenty_questions._checks import Check, Query, Relation
from envsuite.games.twenty_questions._kb import Entity, KnowledgeBase, load_knowledge_base, normalize_phrase
from envsuite.games.twenty_questions._parse import QuestionParser

_AMBIGUOUS_RATIO = (0.8, 1.25)
"""Sizes within this ratio of the reference are too close to call."""
_PAIRED_PARTS = frozenset({"eyes", "ears", "wings"})


def _compare(value: float | None, ref: float, greater: bool) -> bool | None:
    if value is None or ref <= 0:
        return None
    ratio = value / ref
    if _AMBIGUOUS_RATIO[0] <= ratio <= _AMBIGUOUS_RATIO[1]:
        return None
    return ratio > 1 if greater else ratio < 1


def _bounded(value: float | None, bound: float, at_most: bool) -> bool | None:
    if value is None:
        return None
    return value <= bound if at_most else value >= bound


def _count(entity: Entity, check: Check) -> bool | None:
    if check.key in ("leg", "legs"):
        return None if entity.legs is None else entity.legs == check.number
    if check.key in entity.counts:
        return entity.counts[check.key] == check.number
    if check.key not in entity.parts:
        return check.number == 0
    if check.key in _PAIRED_PARTS:
        return check.number == 2
    return None


def _mass(entity: Entity) -> float | None:
    # Places carry no mass; anything building-sized is certainly heavy.
    if entity.kg is None and entity.size_m is not None and entity.size_m > 5:
        return 1e6
    return entity.kg


def _scalar(entity: Entity, key: str) -> bool | None:
    value = getattr(entity, key, None)
    return value if isinstance(value, bool) or value is None else bool(value)


def evaluate_check(entity: Entity, check: Check) -> bool | None:
    """One atomic check on one word: True, False, or None when the knowledge base cannot say."""
    r = check.relation
    sets = {
        Relation.CATEGORY: entity.tags | set(entity.chain),
        Relation.PROP: entity.props,
        Relation.COLOR: entity.colors,
        Relation.MATERIAL: entity.materials,
        Relation.PLACE: entity.places,
        Relation.USE: entity.uses,
        Relation.ABILITY: entity.abilities,
        Relation.PART: entity.parts,
    }
    result: bool | None
    if r is Relation.NAME:
        result = check.key in entity.names
    elif r in sets:
        result = check.key in sets[r]
    elif r is Relation.SCALAR:
        result = _scalar(entity, check.key)
    elif r is Relation.COUNT:
        result = _count(entity, check)
    elif r in (Relation.SIZE_GT, Relation.SIZE_LT):
        result = _compare(entity.size_m, check.number, r is Relation.SIZE_GT)
    elif r in (Relation.MASS_GT, Relation.MASS_LT):
        result = _compare(_mass(entity), check.number, r is Relation.MASS_GT)
    elif r in (Relation.SIZE_MIN, Relation.SIZE_MAX):
        result = _bounded(entity.size_m, check.number, r is Relation.SIZE_MAX)
    else:
        result = _bounded(_mass(entity), check.number, r is Relation.MASS_MAX)
    return None if result is None else result != check.negated


def evaluate_query(entity: Entity, query: Query) -> bool | None:
    """Kleene logic: a group is true if any check is, the query if every group is."""
    verdicts: list[bool | None] = []
    for group in query.all_of:
        results = [evaluate_check(entity, c) for c in group]
        verdicts.append(
            True if any(r is True for r in results) else (False if all(r is False for r in results) else None)
        )
    if any(v is False for v in verdicts):
        overall: bool | None = False
    elif all(v is True for v in verdicts):
        overall = True
    else:
        overall = None
    return None if overall is None else overall != query.negated


class RuleAnswerer(Answerer):
    """Deterministic, offline: a lexicon-based question parser over the shipped knowledge base."""

    VERSION = "rules-v1"

    def __init__(self, kb: KnowledgeBase | None = None) -> None:
        self.kb = kb or load_knowledge_base()
        self.parser = QuestionParser(self.kb)

    def identity(self) -> str:
        return f"{self.VERSION}:kb-{self.kb.digest}"

    def knows(self, secret: str) -> bool:
        return secret in self.kb

    def answer_now(self, secret: str, question: str) -> Answer:
        """The answer without the event loop (for evaluation and the gym adapter)."""
        key = normalize_phrase(secret)
        if key not in self.kb.entities:
            raise ValueError(f"{secret!r} is not in the knowledge base ({len(self.kb.entities)} words)")
        query = self.parser.parse(question)
        if query is None:
            return Answer.UNKNOWN
        verdict = evaluate_query(self.kb.entities[key], query)
        return Answer.UNKNOWN if verdict is None else (Answer.YES if verdict else Answer.NO)

    async def answer(self, secret: str, question: str) -> Answer:
        return self.answer_now(secret, question)
