"""The atlas: a fictional world's towns and people, the corpus the ``search`` tool looks things up in.

Every fact is invented (names from syllables, numbers drawn), so no model knows them: a question about
the atlas is answerable only by looking it up. The corpus is shipped as ``data/atlas.jsonl`` (one
document per line: ``id``, ``title``, ``kind``, ``text``, ``facts``), written by :func:`build_atlas`
with a fixed seed (``python -m envsuite.envs.tool_use._atlas`` rewrites it; a test checks the two
agree). Questions are drawn from the facts: one look-up (a town's population, a person's birthplace)
or two chained ones (the birth year of a town's mayor).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ATLAS_SEED = 20261125
N_TOWNS = 200
N_PEOPLE = 400
_FILE = "data/atlas.jsonl"

_SYLLABLES = [
    "ka",
    "lo",
    "ve",
    "ra",
    "mi",
    "to",
    "sen",
    "dar",
    "bel",
    "quo",
    "ri",
    "an",
    "el",
    "or",
    "tha",
    "zu",
    "fen",
    "gar",
    "hol",
    "is",
    "jor",
    "kem",
    "lun",
    "mar",
    "nel",
    "os",
    "pra",
    "rus",
    "sil",
    "tor",
    "ul",
    "vek",
    "wen",
    "yar",
    "bro",
    "cal",
    "dun",
    "eth",
    "fir",
    "gol",
    "hen",
    "ith",
    "kor",
    "lem",
    "mun",
    "nor",
    "pel",
    "ros",
    "sev",
    "tam",
    "vil",
]
_COUNTRIES = ("Almera", "Brevonia", "Cassidor", "Dunmark", "Eskaland", "Fenwyr", "Galmora", "Hestria")
_RIVERS = ("Arlen", "Bexa", "Corwin", "Dalla", "Emmer", "Fosk", "Grell", "Hune", "Ivet", "Jorra")
_JOBS = ("baker", "engineer", "poet", "doctor", "farmer", "painter", "sailor", "teacher", "judge", "chemist")


@dataclass(frozen=True)
class Document:
    """One entry of the corpus."""

    id: str
    title: str
    kind: str
    """``town`` or ``person``."""
    text: str
    facts: dict[str, Any]


@dataclass(frozen=True)
class Question:
    """A question about the atlas, its answer, and the entity it is about (its split key)."""

    text: str
    answer: str
    subject: str
    hops: int


def _names(rng: random.Random, count: int, syllables: tuple[int, int], taken: set[str]) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(*syllables))).capitalize()
        if name not in taken and 4 <= len(name) <= 11:
            taken.add(name)
            names.append(name)
    return names


def build_atlas(seed: int = ATLAS_SEED) -> list[Document]:
    """The corpus, from ``seed`` (the shipped file is ``build_atlas()``)."""
    rng = random.Random(seed)
    taken: set[str] = set()
    towns = _names(rng, N_TOWNS, (2, 3), taken)
    people = [
        f"{a} {b}"
        for a, b in zip(
            _names(rng, N_PEOPLE, (2, 2), taken), _names(rng, N_PEOPLE, (2, 3), taken), strict=True
        )
    ]
    mayors = rng.sample(people, N_TOWNS)
    documents: list[Document] = []
    for town, mayor in zip(towns, mayors, strict=True):
        facts = {
            "country": rng.choice(_COUNTRIES),
            "river": rng.choice(_RIVERS),
            "founded": rng.randint(1150, 1950),
            "population": rng.randint(1200, 950_000),
            "mayor": mayor,
        }
        text = (
            f"{town} is a town in {facts['country']} on the {facts['river']} river. It was founded in "
            f"{facts['founded']} and has a population of {facts['population']}. The mayor of {town} is {mayor}."
        )
        documents.append(Document(f"town:{town}", town, "town", text, facts))
    for person in people:
        facts = {"born": rng.randint(1940, 2004), "birthplace": rng.choice(towns), "job": rng.choice(_JOBS)}
        text = f"{person} is a {facts['job']} who was born in {facts['birthplace']} in {facts['born']}."
        documents.append(Document(f"person:{person}", person, "person", text, facts))
    return documents


def write_atlas(path: Path) -> None:
    """Write :func:`build_atlas`'s corpus as JSON lines (how the shipped file is made)."""
    lines = [json.dumps(vars(d), ensure_ascii=False, sort_keys=True) for d in build_atlas()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@functools.cache
def load_atlas() -> tuple[Document, ...]:
    """The shipped corpus (read once per process)."""
    text = importlib.resources.files("envsuite.envs.tool_use").joinpath(_FILE).read_text(encoding="utf-8")
    return tuple(Document(**json.loads(line)) for line in text.splitlines() if line.strip())


@functools.cache
def atlas_index() -> dict[str, Document]:
    return {d.title: d for d in load_atlas()}


# --------------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------------

QuestionMaker = Callable[[Document, dict[str, Document]], Question | None]


def _population(town: Document, _: dict[str, Document]) -> Question:
    return Question(f"What is the population of {town.title}?", str(town.facts["population"]), town.title, 1)


def _founded(town: Document, _: dict[str, Document]) -> Question:
    return Question(f"In what year was {town.title} founded?", str(town.facts["founded"]), town.title, 1)


def _mayor(town: Document, _: dict[str, Document]) -> Question:
    return Question(f"Who is the mayor of {town.title}?", str(town.facts["mayor"]), town.title, 1)


def _birthplace(person: Document, _: dict[str, Document]) -> Question:
    return Question(
        f"In which town was {person.title} born?", str(person.facts["birthplace"]), person.title, 1
    )


def _born(person: Document, _: dict[str, Document]) -> Question:
    return Question(f"In what year was {person.title} born?", str(person.facts["born"]), person.title, 1)


def _mayor_born(town: Document, index: dict[str, Document]) -> Question:
    mayor = index[town.facts["mayor"]]
    return Question(
        f"In what year was the mayor of {town.title} born?", str(mayor.facts["born"]), town.title, 2
    )


def _birthplace_population(person: Document, index: dict[str, Document]) -> Question:
    town = index[person.facts["birthplace"]]
    text = f"What is the population of the town where {person.title} was born?"
    return Question(text, str(town.facts["population"]), person.title, 2)


def _birthplace_river(person: Document, index: dict[str, Document]) -> Question:
    town = index[person.facts["birthplace"]]
    return Question(
        f"On which river is the town where {person.title} was born?",
        str(town.facts["river"]),
        person.title,
        2,
    )


QUESTION_KINDS: dict[str, tuple[str, QuestionMaker]] = {
    "population": ("town", _population),
    "founded": ("town", _founded),
    "mayor": ("town", _mayor),
    "birthplace": ("person", _birthplace),
    "born": ("person", _born),
    "mayor_born": ("town", _mayor_born),
    "birthplace_population": ("person", _birthplace_population),
    "birthplace_river": ("person", _birthplace_river),
}
"""Question kinds by name: which documents they are about and how they are asked."""
SINGLE_HOP = ("population", "founded", "mayor", "birthplace", "born")
MULTI_HOP = ("mayor_born", "birthplace_population", "birthplace_river")


def draw_question(rng: random.Random, kinds: tuple[str, ...]) -> Question:
    """One question of a kind in ``kinds`` about a random document of the right kind."""
    kind = rng.choice(kinds)
    about, make = QUESTION_KINDS[kind]
    documents = [d for d in load_atlas() if d.kind == about]
    question = make(rng.choice(documents), atlas_index())
    assert question is not None
    return question


if __name__ == "__main__":
    target = Path(__file__).parent / _FILE
    write_atlas(target)
    print(f"wrote {target} ({len(build_atlas())} documents)")
