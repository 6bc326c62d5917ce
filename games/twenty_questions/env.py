"""Twenty questions as a token-level multi-turn env (catalog id ``twenty_questions-v0``).

Rules: the player has ``max_questions`` turns. Each turn is either a question (answered "Yes.", "No."
or "I can't answer that.") or a guess ``Guess: <word>``. A correct guess ends the game with reward 1
(minus the optional ``question_penalty`` per question asked, floored at 0). A wrong guess is answered
"No." and counts as a question, like a malformed turn (empty, no word at all such as "?" or a bare
"Guess:", invalid UTF-8, truncated), which is answered "I can't answer that." without asking the
answerer. When the turns run out the game ends with reward 0
(``StopReason.MAX_TURNS``). Each observation extends the previous one plus the action's tokens.

``candidates=k`` makes an easier game: the episode draws ``k`` words of its split, one of them the
secret, and the first message lists them all ("The word is one of: ..."). With ``guess_by_mention``
as well (``twenty_questions_easy-v1``), a reply that names exactly one candidate guesses it, even
without a ``Guess:`` line and even when cut off at the token budget. ``system_prompt`` puts a system
message before the rules, and ``listed_guess_reward`` pays a lost game that much for every distinct
listed word it guessed (``twenty_questions_easy-v2``): a reward the base model can reach from the first
step, always below a win's 1.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from envsuite.core import (
    Action,
    ActionExtra,
    Env,
    EnvContext,
    InitialObservationOverflow,
    Message,
    MessageCompleter,
    Metrics,
    Observation,
    ProbeExpectation,
    RewardProbe,
    StepResult,
    StopCondition,
    StopReason,
    tokens_outside_vocabulary,
)
from envsuite.games.twenty_questions._answer import Answer, Answerer, CompleterAnswerer
from envsuite.games.twenty_questions._kb import load_knowledge_base, normalize_phrase
from envsuite.games.twenty_questions._rules import RuleAnswerer

_GUESS_RE = re.compile(r"^\s*\**\s*guess\s*\**\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_EMPTY_GUESS_RE = re.compile(r"^\s*\**\s*guess\s*\**\s*:[\W_]*$", re.IGNORECASE | re.MULTILINE)
_ARTICLES = ("a ", "an ", "the ")
RULES_PROMPT = (
    "Let's play twenty questions. I am thinking of a common noun: an animal, a food, a plant, an object, "
    "a place, a body part, ... Ask me yes/no questions, one per message; I answer 'Yes.', 'No.' or "
    "\"I can't answer that.\". You have {n} turns. When you know the word, reply 'Guess: <word>'. "
    "A correct guess wins; a wrong guess uses up a turn."
)

EASY_SYSTEM_PROMPT = (
    "You are playing a guessing game. Reply with one word from the user's list, or ask one short yes/no "
    "question."
)
"""``twenty_questions_easy-v2``'s reply forms, said up front (v1's rules alone: 1 reply in 24 named a word)."""
EASY_RULES = "I am thinking of one of these words: {words}. Which one is it? You have {n} tries."
"""``twenty_questions_easy-v2``'s opening: ``{words}`` the listed candidates, ``{n}`` the turns."""
EASY_LISTED_GUESS_REWARD = 0.1
"""Per distinct listed word a lost ``twenty_questions_easy-v2`` game guessed (at most 0.3 with 4 words)."""


@dataclass
class _Tally:
    questions: int = 0
    unanswerable: int = 0
    malformed: int = 0
    wrong_guesses: int = 0
    listed_guesses: set[str] = field(default_factory=set)


def guess_in(text: str) -> str | None:
    """The last ``Guess: <word>`` line of a reply, normalized (articles and trailing punctuation dropped)."""
    found = _GUESS_RE.findall(text)
    if not found:
        return None
    guess = normalize_phrase(found[-1])
    for article in _ARTICLES:
        guess = guess.removeprefix(article)
    return guess or None


def is_empty_turn(text: str) -> bool:
    """No question and no guess: nothing but whitespace, punctuation or an empty ``Guess:`` label."""
    return not re.search(r"[^\W_]", _EMPTY_GUESS_RE.sub("", text))


def _as_answerer(answerer: Answerer | MessageCompleter | None) -> Answerer:
    if answerer is None:
        return RuleAnswerer()
    if isinstance(answerer, Answerer):
        return answerer
    if isinstance(answerer, MessageCompleter):
        return CompleterAnswerer(answerer)
    raise TypeError(
        f"answerer must be an Answerer, a MessageCompleter or None, not {type(answerer).__name__}"
    )


class TwentyQuestionsEnv(Env):
    """One game of twenty questions against an answerer (offline rules by default)."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        secret: str | None = None,
        max_questions: int = 20,
        answerer: Answerer | MessageCompleter | None = None,
        question_penalty: float = 0.0,
        answer_timeout_s: float = 60.0,
        candidates: int | None = None,
        guess_by_mention: bool = False,
        system_prompt: str | None = None,
        rules: str | None = None,
        listed_guess_reward: float = 0.0,
    ) -> None:
        """``candidates``: list this many words of the split (the secret among them) in the first message;
        ``guess_by_mention``: a reply naming exactly one candidate guesses it (needs ``candidates``);
        ``system_prompt``: a system message before the rules; ``rules``: the opening message instead of
        :data:`RULES_PROMPT`, a template of ``{n}`` (turns) and ``{words}`` (the listed candidates);
        ``listed_guess_reward``: a lost game's reward
        per distinct listed word guessed (needs ``candidates``; the sum must stay below a win's 1)."""
        if max_questions < 1:
            raise ValueError(f"max_questions must be >= 1, got {max_questions}")
        if candidates is not None and candidates < 1:
            raise ValueError(f"candidates must be >= 1 or None, got {candidates}")
        if guess_by_mention and candidates is None:
            raise ValueError("guess_by_mention needs candidates (the words a mention can name)")
        if listed_guess_reward and candidates is None:
            raise ValueError("listed_guess_reward needs candidates (the words a guess is paid for)")
        if not 0.0 <= listed_guess_reward * max(0, (candidates or 1) - 1) < 1.0:
            raise ValueError(
                f"listed_guess_reward={listed_guess_reward} must be >= 0 and pay every wrong listed guess "
                "less than a win (1)"
            )
        self.guess_by_mention = guess_by_mention
        if rules is not None and "{words}" in rules and candidates is None:
            raise ValueError("rules that list {words} need candidates")
        self.system_prompt = system_prompt
        self.rules = rules
        self.listed_guess_reward = listed_guess_reward
        if not 0.0 <= question_penalty <= 1.0:
            raise ValueError(f"question_penalty must be in [0, 1], got {question_penalty}")
        self.ctx = ctx
        self.max_questions = max_questions
        self.question_penalty = question_penalty
        self.answer_timeout_s = answer_timeout_s
        self.answerer = _as_answerer(answerer)
        kb = load_knowledge_base()
        # Own RNG from the seed only, so every member of a group draws the same word (and list).
        rng = random.Random(ctx.seed)
        self.candidates: list[str] = []
        if candidates is not None:
            if secret is not None:
                raise ValueError("pass either secret or candidates, not both")
            pool = kb.words(ctx.split)
            if candidates > len(pool):
                raise ValueError(f"candidates={candidates} but the {ctx.split} split has {len(pool)} words")
            self.candidates = sorted(rng.sample(pool, candidates))
            secret = rng.choice(self.candidates)
        elif secret is None:
            secret = rng.choice(kb.words(ctx.split))
        elif not self.answerer.knows(secret):
            raise ValueError(f"secret {secret!r} is unknown to answerer {self.answerer.identity()}")
        self.secret = normalize_phrase(secret)
        self._names = kb.entity(self.secret).names if self.secret in kb else frozenset({self.secret})
        self._candidate_names = {word: kb.entity(word).names for word in self.candidates}
        self._tally = _Tally()
        self._turns = 0
        self._conversation: list[Message] = []
        self._prompt: Observation | None = None

    @property
    def answerer_identity(self) -> str:
        """Which answerer judged this game (results are keyed by it)."""
        return self.answerer.identity()

    @property
    def stop_condition(self) -> StopCondition:
        return self.ctx.renderer.get_stop_sequences()

    async def initial_observation(self) -> tuple[Observation, StopCondition] | InitialObservationOverflow:
        words = ", ".join(self.candidates)
        if self.rules is not None:
            rules = self.rules.format(n=self.max_questions, words=words)
        else:
            rules = RULES_PROMPT.format(n=self.max_questions)
            rules += f" The word is one of: {words}." if self.candidates else ""
        system: list[Message] = (
            [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        )
        self._conversation = [*system, {"role": "user", "content": rules}]
        prompt = self.ctx.renderer.build_generation_prompt(self._conversation)
        if prompt.length > self.ctx.max_context_tokens:
            return InitialObservationOverflow.prompt_too_long(prompt.length, self.ctx.max_context_tokens)
        self._prompt = prompt
        return prompt, self.stop_condition

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self._prompt is None:
            raise RuntimeError("call initial_observation() before step()")
        self._turns += 1
        outside = tokens_outside_vocabulary(action, self.ctx.renderer.vocab_size)
        if outside is not None:  # no sampler sends these: the episode ends, the prompt is not extended
            logs: dict[str, str | int | float] = {"secret": self.secret, "error": outside}
            reward = self.listed_guess_reward * len(self._tally.listed_guesses)
            metrics = self._metrics(won=False)
            return StepResult.final(
                reward, StopReason.PARSE_ERROR, self._prompt, self.stop_condition, metrics, logs
            )
        parsed = self.ctx.renderer.parse_response(list(action))
        text = parsed.message.get("content", "")
        malformed = not parsed.clean_stop or not parsed.valid_utf8 or is_empty_turn(text)
        guess = None if malformed else guess_in(text)
        if guess is None and self.guess_by_mention and parsed.valid_utf8:
            guess = self._mentioned(text)
            malformed = malformed and guess is None
        if guess is not None and guess in self._names:
            return self._finish(action, parsed.message, won=True, reply="Correct!")
        try:
            answer = await self._answer(text, guess, malformed)
        except Exception as exc:  # a failing partner ends the episode, never the run
            return self._finish(action, parsed.message, won=False, reply="", error=repr(exc))
        self._count(answer, guess, malformed)
        left = self.max_questions - self._turns
        reply = f"{answer.value} ({left} question{'s' if left != 1 else ''} left)"
        if left <= 0:
            return self._finish(action, parsed.message, won=False, reply=answer.value)
        return self._continue(action, parsed.message, reply, text, answer)

    def _mentioned(self, text: str) -> str | None:
        """The one candidate ``text`` names (by any of its names, as whole words), else None."""
        padded = f" {normalize_phrase(text)} "
        named = [
            word for word, names in self._candidate_names.items() if any(f" {n} " in padded for n in names)
        ]
        return named[0] if len(named) == 1 else None

    async def _answer(self, text: str, guess: str | None, malformed: bool) -> Answer:
        if malformed:
            return Answer.UNKNOWN
        if guess is not None:
            return Answer.NO
        return await asyncio.wait_for(self.answerer.answer(self.secret, text), self.answer_timeout_s)

    def _count(self, answer: Answer, guess: str | None, malformed: bool) -> None:
        self._tally.questions += 1
        self._tally.unanswerable += answer is Answer.UNKNOWN
        self._tally.malformed += malformed
        self._tally.wrong_guesses += guess is not None
        listed = [word for word, names in self._candidate_names.items() if guess in names]
        self._tally.listed_guesses.update(listed)

    def reward_probes(self) -> Sequence[RewardProbe]:
        """Guessing the secret at once wins (full marks); a wrong guess, an empty ``Guess:`` and, with
        listed candidates, one reply naming all of them (then junk turns) earn less."""
        below = ProbeExpectation.BELOW_REFERENCE
        probes = [
            RewardProbe("reference", f"Guess: {self.secret}", ProbeExpectation.FULL_MARKS),
            RewardProbe("wrong guess", "Guess: zzz", below),
            RewardProbe("format only: Guess:", "Guess:", below),
        ]
        if len(self.candidates) > 1:
            probes.append(
                RewardProbe("every candidate at once", f"Guess: {', '.join(self.candidates)}", below)
            )
            probes.append(RewardProbe("every candidate named", " ".join(self.candidates), below))
        return probes

    def conversation(self) -> list[Message]:
        return list(self._conversation)

    def _extend(self, action: Action, message: Message, reply: str) -> Observation:
        assert self._prompt is not None
        self._conversation += [{"role": "assistant", "content": message.get("content", "")}]
        if reply:
            self._conversation.append({"role": "user", "content": reply})
        return self.ctx.renderer.build_next_prompt(self._prompt, list(action), self._conversation)

    def _continue(
        self, action: Action, message: Message, reply: str, text: str, answer: Answer
    ) -> StepResult:
        observation = self._extend(action, message, reply)
        logs: dict[str, str | int | float] = {
            "question": text[:500],
            "answer": answer.value,
            "answerer": self.answerer_identity,
        }
        if observation.length > self.ctx.max_context_tokens:
            return StepResult.final(
                0.0,
                StopReason.CONTEXT_OVERFLOW,
                observation,
                self.stop_condition,
                self._metrics(won=False),
                {**logs, "secret": self.secret},
            )
        self._prompt = observation
        return StepResult(0.0, False, observation, self.stop_condition, {}, logs)

    def _finish(
        self, action: Action, message: Message, *, won: bool, reply: str, error: str = ""
    ) -> StepResult:
        observation = self._extend(action, message, reply)
        if won:
            reward = max(0.0, 1.0 - self.question_penalty * self._tally.questions)
        else:  # shaping for the easy rung: a well-formed guess of a listed word, paid once per word
            reward = self.listed_guess_reward * len(self._tally.listed_guesses)
        reason = StopReason.COMPLETED if won else StopReason.MAX_TURNS
        logs: dict[str, str | int | float] = {"secret": self.secret, "answerer": self.answerer_identity}
        if error:
            reason, logs["error"] = StopReason.PARTNER_ERROR, error[:500]
        return StepResult.final(reward, reason, observation, self.stop_condition, self._metrics(won), logs)

    def _metrics(self, won: bool) -> Metrics:
        t = self._tally
        return {
            "success": float(won),
            "questions_asked": t.questions,
            "turns": self._turns,
            "unanswerable_rate": t.unanswerable / t.questions if t.questions else 0.0,
            "malformed_turns": t.malformed,
            "wrong_guesses": t.wrong_guesses,
            "listed_words_guessed": len(t.listed_guesses) + won,
        }
