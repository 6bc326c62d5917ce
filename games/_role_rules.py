"""Three role-asymmetric two-seat games for a policy per role (issue 59): every seat may be learned.

- :class:`TwentyQuestionsDuel`: seat 0 asks, seat 1 answers. The asker asks about attributes of a shipped
  table (:data:`SECRETS`) and guesses; the answerer knows the secret and replies ``[yes]``/``[no]``. The
  game judges every answer against the table: the answerer's reward is its share of truthful answers,
  the asker's is a correct guess less a cost per question. Neither reward depends on the other seat
  agreeing, so the two cannot collude (a lying answerer loses reward; a wrong guess earns nothing).
- :class:`Bargain`: seat 0 buys, seat 1 sells; private valuations from the game's own seeded RNG;
  ``[offer N]`` / ``[accept]``; general-sum payoffs: each side's surplus / 100, zero with no deal.
- :class:`Referential`: seat 0 sees the target among candidates and describes it by size, colour and
  shape (any subset; no free text, so no index can pass); seat 1 sees the candidates in another order and picks one; both earn 1 for the right pick.

Illegal moves follow the shared retry-then-lose convention (offender -1, the other seat +1).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from envsuite.games.multiagent._moves import bracket_action
from envsuite.turn_games import MoveResult, MoveStatus, TurnGameBase

ATTRIBUTES: tuple[str, ...] = ("alive", "animal", "flies", "water", "metal", "fur", "large")
"""What the asker may ask about (``[ask <attribute>]``); each secret's answers are in :data:`SECRETS`."""
SECRETS: dict[str, tuple[bool, ...]] = {
    "cat": (True, True, False, False, False, True, False),
    "eagle": (True, True, True, False, False, False, False),
    "salmon": (True, True, False, True, False, False, False),
    "whale": (True, True, False, True, False, False, True),
    "oak": (True, False, False, False, False, False, True),
    "rose": (True, False, False, False, False, False, False),
    "car": (False, False, False, False, True, False, True),
    "hammer": (False, False, False, False, True, False, False),
}
"""The shipped secrets and their yes/no attributes (no two alike): the judge of every answer."""
QUESTION_COST = 0.1
"""What each question costs the asker: a correct guess after k questions earns ``1 - 0.1 k`` (at least 0.2)."""
MAX_QUESTIONS = 8

_ASK = tuple(f"[ask {a}]" for a in ATTRIBUTES)
_GUESS = tuple(f"[guess {s}]" for s in SECRETS)
_ANSWERS = ("[yes]", "[no]")

_DUEL_RULES = (
    "Twenty questions, you are the {role}. The secret is one of: {secrets}. Attributes: {attributes}. "
    "The asker replies [ask <attribute>] or [guess <secret>]; the answerer replies [yes] or [no], truthfully "
    "(each answer is checked against the secret). {extra} An illegal reply gets one retry; a second loses."
)


def _norm(move: str) -> str:
    return " ".join(move.strip().lower().split())


class TwentyQuestionsDuel(TurnGameBase):
    """Seat 0 asks, seat 1 answers; both may be policies. A :class:`~envsuite.turn_games.SolvedGame`:
    ``best_moves`` is a truthful answerer and an asker that halves the candidates (the scripted seats)."""

    num_players = 2

    def __init__(self, seed: int, max_questions: int = MAX_QUESTIONS, retry_allowance: int = 1) -> None:
        rng = random.Random(seed)
        self.secret = rng.choice(sorted(SECRETS))
        listed = rng.sample(sorted(SECRETS), len(SECRETS))  # the asker's prompt varies with the seed
        common = {"secrets": ", ".join(listed), "attributes": ", ".join(ATTRIBUTES)}
        intros = [
            _DUEL_RULES.format(
                role="asker", extra=f"At most {max_questions} questions, then guess.", **common
            ),
            _DUEL_RULES.format(role="answerer", extra=f"The secret is {self.secret}.", **common),
        ]
        super().__init__(intros, retry_allowance)
        self.max_questions = max_questions
        self.asked: list[tuple[str, bool]] = []
        self.truthful = 0
        self.guessed: str | None = None
        self._to_move = 0

    def current_player(self) -> int:
        return self._to_move

    def seat_name(self, seat: int) -> str:
        return ("Asker", "Answerer")[seat]

    def legal_moves(self) -> list[str] | None:
        if self.is_over():
            return []
        if self._to_move == 1:
            return list(_ANSWERS)
        asked = {a for a, _ in self.asked}
        open_questions = [f"[ask {a}]" for a in ATTRIBUTES if a not in asked]
        return (open_questions if len(self.asked) < self.max_questions else []) + list(_GUESS)

    def move_vocabulary(self) -> Sequence[str]:
        return (*_ASK, *_GUESS, *_ANSWERS)

    def prompt(self, seat: int) -> str:
        if seat == 1:
            return f"Answer the question about {self.secret}: [yes] or [no]."
        return f"Questions left: {self.max_questions - len(self.asked)}. Your move: [ask ...] or [guess ...]."

    def _truth(self, attribute: str) -> bool:
        return SECRETS[self.secret][ATTRIBUTES.index(attribute)]

    def best_moves(self) -> list[str]:
        """The truthful answer; for the asker, the guess when one candidate fits the answers so far, else
        the questions that split the candidates most evenly."""
        if self.is_over():
            return []
        if self._to_move == 1:
            return ["[yes]" if self._truth(self.asked[-1][0]) else "[no]"]
        fits = [
            s for s, attrs in SECRETS.items() if all(attrs[ATTRIBUTES.index(a)] == v for a, v in self.asked)
        ] or sorted(SECRETS)
        legal = self.legal_moves() or []
        if len(fits) == 1 or not any(m.startswith("[ask") for m in legal):
            return [f"[guess {fits[0]}]"]
        asked = {a for a, _ in self.asked}

        def imbalance(attribute: str) -> int:
            yes = sum(SECRETS[s][ATTRIBUTES.index(attribute)] for s in fits)
            return abs(2 * yes - len(fits))

        open_attrs = [a for a in ATTRIBUTES if a not in asked]
        best = min(imbalance(a) for a in open_attrs)
        return [f"[ask {a}]" for a in open_attrs if imbalance(a) == best]

    def seat_metrics(self, seat: int) -> dict[str, float]:
        """Asker: questions asked, secret found; answerer: questions answered, share answered truthfully."""
        answered = len(self.asked) - (self._to_move == 1)
        if seat == 0:
            return {"questions": float(len(self.asked)), "found_secret": float(self.guessed == self.secret)}
        return {"answers": float(answered), "truthful_share": self.truthful / answered if answered else 1.0}

    def extract_move(self, reply: str) -> str:
        return _norm(bracket_action(reply))

    def apply(self, move: str) -> MoveResult:
        if self.is_over():
            return MoveResult(MoveStatus.FORFEIT, move, "the game is over")
        seat = self._to_move
        move = _norm(move)
        if move not in (self.legal_moves() or []):
            reason = f"{move!r} is not one of the legal moves"
            return self.refuse(seat, move, reason, f"Illegal move: {reason}. Try again.")
        self.accept()
        if seat == 1:
            said = move == "[yes]"
            attribute = self.asked[-1][0]
            self.truthful += said == self._truth(attribute)
            self.asked[-1] = (attribute, said)
            self.tell(0, f"Answer: {'yes' if said else 'no'}.")
            self._to_move = 0
            return MoveResult(MoveStatus.ACCEPTED, move)
        kind, _, word = move.strip("[]").partition(" ")
        if kind == "ask":
            self.asked.append((word, False))
            self.tell(1, f"The asker asks: is it {word}?")
            self._to_move = 1
            return MoveResult(MoveStatus.ACCEPTED, move)
        self.guessed = word
        questions = len(self.asked)
        honesty = self.truthful / questions if questions else 1.0
        if word == self.secret:
            asker = max(1.0 - QUESTION_COST * questions, 0.2)
            self.finish((asker, honesty), f"The asker guessed {word} after {questions} questions.")
        else:
            self.finish((0.0, honesty), f"The asker guessed {word}; the secret was {self.secret}.")
        return MoveResult(MoveStatus.ACCEPTED, move)


@dataclass(frozen=True)
class TwentyQuestionsDuelFactory:
    """Picklable config for :class:`TwentyQuestionsDuel`; the seed draws the secret."""

    max_questions: int = MAX_QUESTIONS
    retry_allowance: int = 1

    @property
    def name(self) -> str:
        return "twenty_questions_duel"

    def make(self, seed: int) -> TwentyQuestionsDuel:
        return TwentyQuestionsDuel(seed, self.max_questions, self.retry_allowance)


MAX_PRICE = 100
BARGAIN_ROUNDS = 6
_OFFER = re.compile(r"^\[offer (\d{1,3})\]$")
_BARGAIN_RULES = (
    "Bargaining, you are the {role}. Prices are whole numbers 0-{max_price}. {private} On your turn reply "
    "[offer N] to propose price N, or [accept] to take the other side's last offer. After {rounds} replies "
    "without a deal both sides get 0. With a deal at price P the buyer earns (value - P)/100 and the seller "
    "(P - cost)/100. An illegal reply gets one retry; a second loses."
)


class Bargain(TurnGameBase):
    """Seat 0 (buyer, value 50-100) and seat 1 (seller, cost 0-50) alternate offers; the seller opens."""

    num_players = 2

    def __init__(self, seed: int, rounds: int = BARGAIN_ROUNDS, retry_allowance: int = 1) -> None:
        rng = random.Random(seed)
        self.value = rng.randint(50, MAX_PRICE)
        self.cost = rng.randint(0, 50)
        common = {"max_price": MAX_PRICE, "rounds": rounds}
        intros = [
            _BARGAIN_RULES.format(role="buyer", private=f"The item is worth {self.value} to you.", **common),
            _BARGAIN_RULES.format(role="seller", private=f"The item costs you {self.cost}.", **common),
        ]
        super().__init__(intros, retry_allowance)
        self.rounds = rounds
        self.offer: int | None = None
        self.price: int | None = None
        self.replies = 0
        self._to_move = 1

    def current_player(self) -> int:
        return self._to_move

    def seat_name(self, seat: int) -> str:
        return ("Buyer", "Seller")[seat]

    def legal_moves(self) -> list[str] | None:
        if self.is_over():
            return []
        offers = [f"[offer {p}]" for p in range(MAX_PRICE + 1)]
        return [*offers, "[accept]"] if self.offer is not None else offers

    def move_vocabulary(self) -> Sequence[str]:
        return (*(f"[offer {p}]" for p in range(MAX_PRICE + 1)), "[accept]")

    def prompt(self, seat: int) -> str:
        standing = "no offer yet" if self.offer is None else f"the standing offer is {self.offer}"
        return f"Replies left: {self.rounds - self.replies}; {standing}. Reply [offer N] or [accept]."

    def best_moves(self) -> list[str]:
        """A scripted trader: accepts an offer with positive surplus, else asks for a price splitting the
        difference between its own valuation and the extreme."""
        if self.is_over():
            return []
        seat = self._to_move
        if self.offer is not None and (self.offer < self.value if seat == 0 else self.offer > self.cost):
            return ["[accept]"]
        target = self.value * 3 // 4 if seat == 0 else (self.cost + MAX_PRICE) // 2
        return [f"[offer {target}]"]

    def seat_metrics(self, seat: int) -> dict[str, float]:
        """Both seats: whether a deal was struck, at what price, and the replies it took."""
        return {
            "deal": float(self.price is not None),
            "price": float(self.price or 0),
            "replies": float(self.replies),
        }

    def extract_move(self, reply: str) -> str:
        return _norm(bracket_action(reply))

    def apply(self, move: str) -> MoveResult:
        if self.is_over():
            return MoveResult(MoveStatus.FORFEIT, move, "the game is over")
        seat = self._to_move
        move = _norm(move)
        if move not in (self.legal_moves() or []):
            reason = f"{move!r} is not [offer 0-{MAX_PRICE}] or [accept] of a standing offer"
            return self.refuse(seat, move, reason, f"Illegal move: {reason}. Try again.")
        self.accept()
        self.replies += 1
        if move == "[accept]":
            price = self.price = self.offer or 0
            rewards = ((self.value - price) / 100, (price - self.cost) / 100)
            self.finish(rewards, f"Deal at {price} (buyer value {self.value}, seller cost {self.cost}).")
            return MoveResult(MoveStatus.ACCEPTED, move)
        match = _OFFER.match(move)
        assert match is not None  # a legal move that is not [accept] is an offer
        self.offer = int(match.group(1))
        self.tell(1 - seat, f"The {self.seat_name(seat).lower()} offers {self.offer}.")
        if self.replies >= self.rounds:
            self.finish((0.0, 0.0), f"No deal after {self.rounds} replies.")
        else:
            self._to_move = 1 - seat
        return MoveResult(MoveStatus.ACCEPTED, move)


@dataclass(frozen=True)
class BargainFactory:
    """Picklable config for :class:`Bargain`; the seed draws both private valuations."""

    rounds: int = BARGAIN_ROUNDS
    retry_allowance: int = 1

    @property
    def name(self) -> str:
        return "bargain"

    def make(self, seed: int) -> Bargain:
        return Bargain(seed, self.rounds, self.retry_allowance)


COLORS = ("red", "green", "blue")
SHAPES = ("circle", "square", "triangle")
SIZES = ("small", "large")
OBJECTS: tuple[str, ...] = tuple(f"{z} {c} {s}" for z in SIZES for c in COLORS for s in SHAPES)
CANDIDATES = 4
DESCRIPTIONS: tuple[str, ...] = tuple(
    "[describe " + " ".join(w for w in (z, c, s) if w) + "]"
    for z in ("", *SIZES)
    for c in ("", *COLORS)
    for s in ("", *SHAPES)
    if z or c or s
)
"""The describer's moves: an optional size, colour and shape, in that order (47 descriptions)."""
_PICKS = tuple(f"[pick {o}]" for o in OBJECTS)
_REFERENTIAL_RULES = (
    "A cooperative game, you are the {role}. The describer sees a target among {n} objects and replies "
    "[describe <size> <color> <shape>] (any of the three may be left out; sizes {sizes}, colors {colors}, "
    "shapes {shapes}); the picker, who sees the objects in another order, "
    "replies [pick <object>] (its full name). Both earn 1 if the picker picks the target, else 0. "
    "An illegal reply gets one retry; a second loses."
)


class Referential(TurnGameBase):
    """Seat 0 describes the target, seat 1 picks it; shared reward. Each seat sees its own ordering of the
    candidates, so an index carries nothing (and a description is attribute words only)."""

    num_players = 2

    def __init__(self, seed: int, candidates: int = CANDIDATES, retry_allowance: int = 1) -> None:
        rng = random.Random(seed)
        self.candidates = rng.sample(OBJECTS, candidates)
        self.target = rng.choice(self.candidates)
        self.views = [rng.sample(self.candidates, candidates) for _ in range(2)]
        intros = [
            _REFERENTIAL_RULES.format(
                role=role,
                n=candidates,
                sizes=", ".join(SIZES),
                colors=", ".join(COLORS),
                shapes=", ".join(SHAPES),
            )
            for role in ("describer", "picker")
        ]
        super().__init__(intros, retry_allowance)
        self.description: str | None = None
        self.picked: str | None = None
        self._to_move = 0

    def current_player(self) -> int:
        return self._to_move

    def seat_name(self, seat: int) -> str:
        return ("Describer", "Picker")[seat]

    def legal_moves(self) -> list[str] | None:
        if self.is_over():
            return []
        return list(DESCRIPTIONS) if self._to_move == 0 else [f"[pick {o}]" for o in self.views[1]]

    def move_vocabulary(self) -> Sequence[str]:
        return (*DESCRIPTIONS, *_PICKS)

    def prompt(self, seat: int) -> str:
        objects = "; ".join(self.views[seat])
        if seat == 0:
            return f"Objects: {objects}. The target is: {self.target}. Reply [describe ...]."
        return f"Objects: {objects}. The description: {self.description!r}. Reply [pick <object>]."

    def best_moves(self) -> list[str]:
        """The describer names the target in full; the picker picks the candidate sharing most words with
        the description (the first such, in its own order)."""
        if self.is_over():
            return []
        if self._to_move == 0:
            return [f"[describe {self.target}]"]
        said = set((self.description or "").split())
        best = max(self.views[1], key=lambda o: len(said & set(o.split())))
        return [f"[pick {best}]"]

    def seat_metrics(self, seat: int) -> dict[str, float]:
        """Both seats: whether the target was picked, and how many words the description used."""
        words = len(self.description.split()) if self.description else 0
        return {"target_picked": float(self.picked == self.target), "description_words": float(words)}

    def extract_move(self, reply: str) -> str:
        return _norm(bracket_action(reply))

    def apply(self, move: str) -> MoveResult:
        if self.is_over():
            return MoveResult(MoveStatus.FORFEIT, move, "the game is over")
        seat = self._to_move
        move = _norm(move)
        if seat == 0:
            if move not in DESCRIPTIONS:
                reason = "not [describe <size> <color> <shape>] in the listed words"
                return self.refuse(seat, move, reason, f"Illegal move: {reason}. Try again.")
            self.accept()
            self.description = move[len("[describe ") : -1]
            self._to_move = 1
            return MoveResult(MoveStatus.ACCEPTED, move)
        if move not in (self.legal_moves() or []):
            reason = "not [pick <one of the objects>]"
            return self.refuse(seat, move, reason, f"Illegal move: {reason}. Try again.")
        self.accept()
        picked = self.picked = move[len("[pick ") : -1]
        shared = 1.0 if picked == self.target else 0.0
        self.finish((shared, shared), f"The picker picked {picked}; the target was {self.target}.")
        return MoveResult(MoveStatus.ACCEPTED, move)


@dataclass(frozen=True)
class ReferentialFactory:
    """Picklable config for :class:`Referential`; the seed draws the candidates, target and orderings."""

    candidates: int = CANDIDATES
    retry_allowance: int = 1

    @property
    def name(self) -> str:
        return "referential"

    def make(self, seed: int) -> Referential:
        return Referential(seed, self.candidates, self.retry_allowance)
