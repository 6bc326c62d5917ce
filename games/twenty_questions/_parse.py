"""Free-form yes/no question -> :class:`Query` (a conjunction of alternatives of atomic checks).

The parser is rule-based: normalize, peel fillers, detect wh-questions / alternatives (not yes/no),
split ``aux + subject + predicate``, then map the predicate through the lexicon and the knowledge
base's vocabularies. Anything it cannot map yields ``None`` ("I can't answer that").

Work is bounded by the input: questions over :data:`MAX_QUESTION_CHARS` are declined unparsed, and noun
phrases over :data:`MAX_NOUN_WORDS` words are not read as modifier chains, so a long or rambling reply
gets its decline in about the time of a short one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envsuite.games.twenty_questions import _lexicon as lex
from envsuite.games.twenty_questions._checks import (
    Check,
    Query,
    Relation,
    alternatives,
    match_vocab,
    strip_prefixes,
)
from envsuite.games.twenty_questions._kb import KnowledgeBase, normalize_phrase
from envsuite.games.twenty_questions._predicates import adjective_groups, predicate_groups

MAX_QUESTION_CHARS = 300
"""Longest question the rules read (the labelled sets' longest is 40 characters); longer: declined."""
MAX_NOUN_WORDS = 6
"""Longest noun phrase read as ``modifier ... head`` ("big red wooden kitchen table")."""


@dataclass(frozen=True)
class _Clause:
    aux: str
    subject: str  # "it", "you" or "other"
    rest: str
    negated: bool


def _split_clause(text: str) -> _Clause | None:
    words = text.split()
    if not words:
        return None
    negated = False
    aux = words[0]
    if aux in lex.NEGATIVE_AUX:
        # "Isn't it X?" asks to confirm X: answered like "Is it X?".
        aux = lex.NEGATIVE_AUX[aux]
    elif aux not in lex.AUXILIARIES:
        return _Clause("do", "it", text, False) if words[0] == "there" else None
    rest = " ".join(words[1:])
    if rest.startswith("not "):
        negated, rest = True, rest[4:]
    for subject, found in [(s, "it") for s in lex.SUBJECT_IT] + [(s, "you") for s in lex.SUBJECT_YOU]:
        if rest == subject or rest.startswith(subject + " "):
            rest, kind = rest[len(subject) :].strip(), found
            break
    else:
        if aux in ("is", "are") and rest.startswith(("there ", "it ")):
            return _Clause(aux, "it", rest.split(" ", 1)[1], negated)
        kind = "other"
    if rest.startswith("not "):
        negated, rest = True, rest[4:]
    elif rest.startswith("never "):
        negated, rest = True, rest[6:]
    return _Clause(aux, kind, rest.strip(), negated)


class QuestionParser:
    """Turns questions into :class:`Query` objects against one knowledge base."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb

    def parse(self, question: str) -> Query | None:
        if len(question.strip()) > MAX_QUESTION_CHARS:
            return None
        text = normalize_phrase(question.replace("'", ""))
        text = strip_prefixes(text, lex.FILLERS)
        if not text or not re.search(r"[a-z]", text):
            return None
        words = text.split()
        if words[0] in lex.WH_WORDS or words[0] in lex.NON_QUESTION_STARTS or " or " in f" {text} ":
            return None
        guess = self._guess(text)
        if guess is not None:
            return guess
        clause = _split_clause(text)
        if clause is None or not clause.rest:
            return None
        groups = self._predicate(clause)
        if groups is None:
            return None
        return Query(groups, negated=clause.negated)

    def _guess(self, text: str) -> Query | None:
        for prefix in sorted(lex.GUESS_PREFIXES, key=len, reverse=True):
            if text.startswith(prefix + " "):
                noun = strip_prefixes(text[len(prefix) :].strip(), lex.NOUN_PREFIXES)
                return self._noun_query(noun, guess_only=True)
        return None

    def _predicate(self, c: _Clause) -> tuple[tuple[Check, ...], ...] | None:
        return predicate_groups(self, c.aux, c.subject, c.rest)

    def _noun_query(self, noun: str, guess_only: bool = False) -> Query | None:
        groups = self.noun_groups(noun, guess_only)
        return None if groups is None else Query(groups)

    def noun_groups(self, noun: str, guess_only: bool = False) -> tuple[tuple[Check, ...], ...] | None:
        """A noun phrase: the secret's name, a category, or another specific thing (None: unknown)."""
        noun = strip_prefixes(noun, lex.NOUN_PREFIXES)
        name = match_vocab(noun, frozenset(self.kb.name_index))
        if name is not None and (guess_only or noun not in lex.CATEGORY_SYNONYMS):
            canonical = self.kb.name_index[name]
            if guess_only or match_vocab(noun, self.kb.vocab["tags"]) is None:
                return ((Check(Relation.NAME, canonical), Check(Relation.NAME, name)),)
        if not guess_only:
            if noun in lex.CATEGORY_SYNONYMS:
                return alternatives(lex.CATEGORY_SYNONYMS[noun], noun in lex.CONJUNCTIVE_SYNONYMS)
            tag = match_vocab(noun, self.kb.vocab["tags"])
            if tag is not None:
                return ((Check(Relation.CATEGORY, tag),),)
            compound = self._modified_noun(noun)
            if compound is not None:
                return compound
        other = match_vocab(noun, self.kb.other_nouns)
        if other is not None:
            return ((Check(Relation.NAME, other),),)
        return None

    def _modified_noun(self, noun: str) -> tuple[tuple[Check, ...], ...] | None:
        words = noun.split()
        if not 2 <= len(words) <= MAX_NOUN_WORDS:
            return None
        head = self.noun_groups(" ".join(words[1:]))
        modifier = adjective_groups(self, words[0])
        if head is None or modifier is None:
            return None
        return modifier + head
