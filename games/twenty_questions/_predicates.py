"""The predicate half of a question ("a mammal", "made of wood", "used for cutting", "fly") -> checks."""

from __future__ import annotations

import re
from typing import Protocol

from envsuite.games.twenty_questions import _lexicon as lex
from envsuite.games.twenty_questions._checks import Check, Relation, alternatives, match_vocab, strip_prefixes
from envsuite.games.twenty_questions._kb import KnowledgeBase

Groups = tuple[tuple[Check, ...], ...]


class QuestionParser(Protocol):
    """What the predicate mapper needs from the question parser: the knowledge base and noun phrases."""

    @property
    def kb(self) -> KnowledgeBase: ...

    def noun_groups(self, noun: str, guess_only: bool = False) -> Groups | None: ...


_COMPARATIVES = {
    "bigger": Relation.SIZE_GT,
    "larger": Relation.SIZE_GT,
    "taller": Relation.SIZE_GT,
    "longer": Relation.SIZE_GT,
    "smaller": Relation.SIZE_LT,
    "shorter": Relation.SIZE_LT,
    "littler": Relation.SIZE_LT,
    "tinier": Relation.SIZE_LT,
    "heavier": Relation.MASS_GT,
    "lighter": Relation.MASS_LT,
}
_FITS = [  # (pattern, max size m, max kg)
    (r"(hold|carry|pick) (it |up )*(up )?in (your |one |a )*hand", 0.35, 2.0),
    (r"fit in (your |a )*(pocket)", 0.16, 0.5),
    (r"fit in (your |a |one )*hand", 0.3, 2.0),
    (r"fit in (your |a )*(palm)", 0.12, 0.5),
    (r"carry (it )?(with you|around|everywhere)", 0.5, 3.0),
    (r"(lift|carry|pick up|pick) (it )?(up )?(by yourself|alone|easily)?$", 2.5, 25.0),
]
PREPOSITIONS_SORTED = (
    "in the ",
    "on the ",
    "at the ",
    "in a ",
    "on a ",
    "at a ",
    "in an ",
    "near ",
    "inside ",
    "in ",
    "on ",
    "at ",
    "around ",
    "under ",
    "next to the ",
    "next to ",
    "by the ",
    "into ",
)


_MODALS = ("can ", "could ", "would ", "will ", "do ", "does ", "might ", "should ")


def adjective_groups(parser: QuestionParser, phrase: str) -> Groups | None:
    """An adjective ("sharp", "wooden", "big", "red") -> checks; None when not understood."""
    kb = parser.kb
    if phrase in lex.ADJECTIVES:
        return alternatives(lex.ADJECTIVES[phrase], False)
    if " and " in phrase:
        parts = [adjective_groups(parser, p) for p in phrase.split(" and ")]
        if any(p is None for p in parts):
            return None
        return tuple(g for p in parts if p is not None for g in p)
    color = match_vocab(phrase, kb.vocab["colors"])
    if color is not None:
        return ((Check(Relation.COLOR, color), Check(Relation.PROP, color)),)
    prop = match_vocab(phrase, kb.vocab["props"])
    if prop is not None:
        return ((Check(Relation.PROP, prop),),)
    material = match_vocab(phrase, kb.vocab["materials"])
    if material is not None:
        return ((Check(Relation.MATERIAL, material),),)
    return None


def _place_groups(parser: QuestionParser, phrase: str) -> Groups | None:
    phrase = strip_prefixes(phrase, ("usually ", "mostly ", "often ", "typically ", "found "))
    phrase = strip_prefixes(phrase, PREPOSITIONS_SORTED)
    phrase = strip_prefixes(phrase, ("the ", "a ", "an ", "your ", "lots of ", "many "))
    if phrase in lex.PLACE_SYNONYMS:
        return (tuple(Check(Relation.PLACE, p) for p in lex.PLACE_SYNONYMS[phrase]),)
    if phrase in lex.ADJECTIVES and lex.ADJECTIVES[phrase][0].startswith("place:"):
        return alternatives(lex.ADJECTIVES[phrase], False)
    place = match_vocab(phrase, parser.kb.vocab["places"])
    if place is not None:
        return ((Check(Relation.PLACE, place),),)
    if phrase in lex.PLACE_SYNONYMS or match_vocab(phrase, parser.kb.vocab["tags"]) is not None:
        return ((Check(Relation.PLACE, phrase),),)
    return None


def _comparison(parser: QuestionParser, rest: str) -> Groups | None:
    match = re.match(r"^(?:a lot |much |a bit )?(\w+) than (.+)$", rest)
    if not match or match.group(1) not in _COMPARATIVES:
        return None
    relation = _COMPARATIVES[match.group(1)]
    ref = strip_prefixes(
        match.group(2), ("a ", "an ", "the ", "your ", "average ", "typical ", "an average ")
    )
    mass = relation in (Relation.MASS_GT, Relation.MASS_LT)
    value: float | None = (lex.REF_KG if mass else lex.REF_SIZE_M).get(ref)
    if value is None:
        name = match_vocab(ref, frozenset(parser.kb.name_index))
        if name is not None:
            entity = parser.kb.entity(parser.kb.name_index[name])
            value = entity.kg if mass else entity.size_m
        elif not mass:
            value = lex.REF_SIZE_M.get(ref)
    if value is None:
        return None
    return ((Check(relation, number=value),),)


def _fits(rest: str) -> Groups | None:
    for pattern, size, kg in _FITS:
        if re.search(pattern, rest):
            return ((Check(Relation.SIZE_MAX, number=size),), (Check(Relation.MASS_MAX, number=kg),))
    shoebox = re.search(r"fit (?:in|into|inside) (?:a |an |the |your )?(.+)$", rest)
    if shoebox and shoebox.group(1) in lex.REF_SIZE_M:
        return ((Check(Relation.SIZE_MAX, number=lex.REF_SIZE_M[shoebox.group(1)] * 0.9),),)
    return None


def _verb_groups(parser: QuestionParser, phrase: str, *, subject_is_it: bool) -> Groups | None:
    """A verb phrase: "fly", "lay eggs", "cut paper", "keep food cold" -> ability / use checks."""
    kb = parser.kb
    phrase = strip_prefixes(phrase, ("usually ", "ever ", "often ", "really ", "actually ", "be able to "))
    phrase = phrase.replace(" it ", " ").removesuffix(" it")
    if phrase in lex.VERB_PHRASES:
        return alternatives(lex.VERB_PHRASES[phrase], phrase in lex.CONJUNCTIVE_VERBS)
    words = phrase.split()
    if not words:
        return None
    attempts = [phrase, " ".join(words[:2]), words[0]]
    for attempt in attempts:
        if attempt in lex.VERB_PHRASES:
            return alternatives(lex.VERB_PHRASES[attempt], attempt in lex.CONJUNCTIVE_VERBS)
        ability = match_vocab(attempt, kb.vocab["abilities"])
        use = match_vocab(attempt, kb.vocab["uses"])
        if ability is not None or use is not None:
            checks = [Check(Relation.ABILITY, ability)] if ability else []
            checks += [Check(Relation.USE, use)] if use else []
            return (tuple(checks),)
    if len(words) > 1 and words[0] in ("make", "do", "get", "produce", "create"):
        return _verb_groups(parser, " ".join(words[1:]), subject_is_it=subject_is_it)
    return None


def _have_groups(parser: QuestionParser, phrase: str) -> Groups | None:
    phrase = strip_prefixes(
        phrase, ("got ", "a ", "an ", "any ", "some ", "the ", "lots of ", "a lot of ", "many ", "more than ")
    )
    phrase = lex.PART_SYNONYMS.get(phrase, phrase)
    words = phrase.split()
    if words and words[0] in lex.NUMBERS and len(words) > 1:
        target = match_vocab(" ".join(words[1:]), parser.kb.vocab["parts"]) or " ".join(words[1:])
        return ((Check(Relation.COUNT, target, number=lex.NUMBERS[words[0]]),),)
    for vocab in ("parts", "materials", "tags", "props"):
        found = match_vocab(phrase, parser.kb.vocab[vocab])
        if found is not None:
            relation = {
                "parts": Relation.PART,
                "materials": Relation.MATERIAL,
                "tags": Relation.CATEGORY,
                "props": Relation.PROP,
            }[vocab]
            return ((Check(relation, found), Check(Relation.PART, found), Check(Relation.MATERIAL, found)),)
    if phrase in lex.VERB_PHRASES:
        return alternatives(lex.VERB_PHRASES[phrase], False)
    if len(words) > 1:
        return _have_groups(parser, " ".join(words[1:]))
    return None


def _used_for(parser: QuestionParser, rest: str) -> Groups | None:
    match = re.match(
        r"^(?:used |use it |mainly used |usually used |good )?(for|to|in|on|at|when|as|with) (.+)$", rest
    )
    if not match:
        return None
    prep, obj = match.groups()
    if prep in ("in", "on", "at", "when"):
        obj = re.sub(r"^it ", "", obj)
        return _place_groups(parser, obj) or _verb_groups(parser, obj, subject_is_it=False)
    obj = strip_prefixes(obj, ("the ", "a ", "an ", "making ", "make "))
    return _verb_groups(parser, obj, subject_is_it=False) or _have_groups(parser, obj)


def be_predicate(parser: QuestionParser, rest: str) -> Groups | None:
    """What follows "is it": a noun phrase, an adjective, a place, a use, a material, a comparison."""
    rest = strip_prefixes(
        rest,
        (
            "usually ",
            "typically ",
            "generally ",
            "mostly ",
            "always ",
            "normally ",
            "commonly ",
            "often ",
            "very ",
            "really ",
            "possibly ",
            "perhaps ",
            "maybe ",
        ),
    )
    if rest.startswith("made in "):
        return _place_groups(parser, rest[8:])
    made = re.match(
        r"^(?:mostly |mainly |usually )?made (?:of|from|out of|with|by) (?:a |an |the )?(.+)$", rest
    )
    if made:
        material = match_vocab(made.group(1), parser.kb.vocab["materials"])
        return ((Check(Relation.MATERIAL, material),),) if material else None
    found = _comparison(parser, rest) or _fits(rest)
    if found is not None:
        return found
    for lead in ("used ", "use it ", "for ", "mainly used ", "usually used ", "good for "):
        if rest.startswith(lead):
            return _used_for(parser, rest)
    if rest.startswith("able to "):
        return _verb_groups(parser, rest[8:], subject_is_it=True)
    if rest.startswith(
        ("found ", "located ", "kept ", "seen ", "grown ", "stored ", "worn ")
    ) or rest.startswith(PREPOSITIONS_SORTED):
        return _place_groups(parser, rest.split(" ", 1)[1] if rest.split()[0].endswith(("d", "n")) else rest)
    relative = re.match(
        r"^(?:something|a thing|an object|one) (?:that |which )?(you|people|it)? ?(.+)$", rest
    )
    if relative:
        return (
            you_predicate(parser, relative.group(2))
            if relative.group(1) in ("you", "people")
            else (it_predicate(parser, relative.group(2)))
        )
    that = re.match(r"^(?:a |an )?(\w+(?: \w+)?) (?:that|which|who) (.+)$", rest)
    if that:
        head, clause = parser.noun_groups(that.group(1)), it_predicate(parser, that.group(2))
        return head + clause if head is not None and clause is not None else None
    return adjective_groups(parser, rest) or parser.noun_groups(rest)


def it_predicate(parser: QuestionParser, rest: str) -> Groups | None:
    """What follows "does/can it": have, live in, use electricity, fly, lay eggs..."""
    rest = strip_prefixes(rest, (*_MODALS, "usually ", "often ", "ever ", "normally ", "typically ", "also "))
    first, _, tail = rest.partition(" ")
    if first in lex.SENSE_VERBS and tail and not tail.startswith("like "):
        return adjective_groups(parser, tail)
    base = lex.IRREGULAR.get(first, first)
    if base in ("have", "has", "contain", "include") and tail:
        return _have_groups(parser, tail)
    fits = _fits(rest)
    if fits is not None:
        return fits
    if rest in lex.VERB_PHRASES:
        return alternatives(lex.VERB_PHRASES[rest], rest in lex.CONJUNCTIVE_VERBS)
    if base in ("live", "grow", "hang", "belong", "stay", "go", "run", "exist", "come", "sit") and tail:
        stripped = strip_prefixes(tail, ("from ",))
        place = _place_groups(parser, stripped)
        if place is not None:
            return place
    if base == "look" and tail.startswith("like "):
        return parser.noun_groups(tail[5:])
    return _verb_groups(parser, rest, subject_is_it=True)


def you_predicate(parser: QuestionParser, rest: str) -> Groups | None:
    """What follows "can/do you": affordances (eat it, wear it, ride it) and uses (cut with it)."""
    rest = strip_prefixes(rest, (*_MODALS, "usually ", "normally ", "typically ", "often ", "ever "))
    fits = _fits(rest)
    if fits is not None:
        return fits
    find = re.match(
        r"^(?:find|see|keep|put|store|use) (?:it |one )?(?:mostly |usually )?(in|on|at|inside) (.+)$", rest
    )
    if find:
        return _place_groups(parser, find.group(2))
    used = re.match(r"^use (?:it|one|this)? ?(.+)$", rest)
    if used:
        return _used_for(parser, used.group(1))
    match = re.match(
        r"^(\w+(?: up| on| in| at| into| from| with| out of)?) (?:it|one|them|there|this)\b ?(.*)$", rest
    )
    verb, extra = (match.group(1), match.group(2)) if match else (rest, "")
    return _affordance(parser, verb, extra)


def _affordance(parser: QuestionParser, verb: str, extra: str) -> Groups | None:
    words = verb.split()
    base = words[0]
    lemma = lex.IRREGULAR.get(base, base)
    if lemma in ("eat",) and len(words) == 1:
        return ((Check(Relation.SCALAR, "edible"),),)
    if lemma == "drink" and len(words) == 1:
        return ((Check(Relation.CATEGORY, "drink"),),)
    if lemma in ("wear", "put on") and extra:
        place = _place_groups(parser, extra)
        return ((Check(Relation.USE, "wear"),), *(place or ()))
    if lemma == "keep" and "pet" in extra:
        return ((Check(Relation.CATEGORY, "pet"),),)
    if lemma == "cook" or lemma == "boil":
        return ((Check(Relation.PROP, "cooked"),),)
    if lemma == "see" and extra.startswith("through"):
        return ((Check(Relation.PROP, "transparent"),),)
    if lemma == "play" and extra.startswith("with"):
        return ((Check(Relation.USE, "play"),),)
    if lemma == "live" and len(words) > 1:
        return ((Check(Relation.USE, "live"),),)
    core = words[0] if len(words) > 1 and words[1] in ("with", "from", "into", "out of", "at") else verb
    return _verb_groups(
        parser, core if not extra or len(words) > 1 else f"{core} {extra}", subject_is_it=False
    ) or (_verb_groups(parser, core, subject_is_it=False))


def predicate_groups(parser: QuestionParser, aux: str, subject: str, rest: str) -> Groups | None:
    if subject == "it" and aux in ("is", "are", "was", "were"):
        return be_predicate(parser, rest)
    if subject == "it" and rest.startswith("be "):
        return be_predicate(parser, rest[3:])
    if subject == "it":
        return it_predicate(parser, rest)
    if subject == "you":
        return you_predicate(parser, rest)
    return None
