"""The env behind ``reasoning_gym/<name>``: one procedural reasoning-gym problem, read and scored as
reasoning-gym's own pipeline does.

Answer: ``reasoning_gym.utils.extract_answer`` on the reply (the last ``<answer>…</answer>`` block,
stripped); score: the dataset's own ``score_answer(answer, entry)``, in [0, 1] (some datasets give
partial credit). Reward: ``score + format_coef * (format_ok - 1)``, where ``format_ok`` means the reply
had an answer block: a tagged reply earns exactly reasoning-gym's score, an untagged one (which
reasoning-gym scores 0) ``-format_coef``; ``format_coef=0`` is reasoning-gym's reward throughout. As in
every problem env, a reply cut off at the token limit is not graded.

Problems: the episode seed picks an item of the dataset, and the first item from there whose question
falls in the requested split (a hash of the question: train and test never share one) is the problem.
A group's members, and every episode of one seed, draw it once per process (cached). ``few_shot=k``
puts ``k`` solved train problems of the same dataset and difficulty before the question, as earlier
turns (a reply of just the answer block each): small models rarely write answer blocks zero-shot.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import importlib
import json
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from envsuite.adapters.reasoning_gym import TIED_DATASETS
from envsuite.adapters.reasoning_gym._table import DatasetInfo, load_table
from envsuite.catalog._make import episode_seed
from envsuite.core import (
    Action,
    ActionExtra,
    EnvContext,
    Message,
    ProbeExpectation,
    RewardProbe,
    Split,
    StepResult,
)
from envsuite.envs import DEFAULT_FORMAT_COEF, Problem, ProblemEnv, Verdict, split_of
from envsuite.envs._problem import JUNK_ANSWER
from envsuite.grading import GradeOutcome, GradeResult

INSTRUCTION = "Give your final answer inside <answer></answer> tags."
"""Appended to each question. No example answer: SmolLM2 copied an example's number into every reply."""
MAX_DRAWS = 256
"""Items tried from the episode's start until one falls in the split (test: 10%; 256 misses: 2e-12)."""
PER_EPISODE_SIZE = MAX_DRAWS
"""Items of the small dataset made per episode for datasets that build their items up front."""
COMPOSITE = "composite"


def _reasoning_gym(module: str = "") -> ModuleType:
    return importlib.import_module("reasoning_gym" + (f".{module}" if module else ""))


class ReasoningGymEnv(ProblemEnv):
    """One reasoning-gym problem: ``dataset`` names it, every other keyword argument is a field of its
    config (its difficulty parameters; ``envsuite show`` lists them with their defaults).

    ``system_prompt`` may name one of reasoning-gym's prompts (``"default"``, ``"DeepSeekZero"``, ...)
    or be the text itself. Metrics: ``score`` (reasoning-gym's), ``correct`` (score 1), ``format``.
    """

    def __init__(
        self,
        ctx: EnvContext,
        *,
        dataset: str,
        system_prompt: str | None = None,
        format_coef: float = DEFAULT_FORMAT_COEF,
        few_shot: int = 0,
        **difficulty: Any,
    ) -> None:
        if few_shot < 0:
            raise ValueError(f"few_shot must be >= 0, got {few_shot}")
        prompts = _reasoning_gym("utils").SYSTEM_PROMPTS
        super().__init__(
            ctx, system_prompt=prompts.get(system_prompt, system_prompt), format_coef=format_coef
        )
        config_key = json.dumps(_checked(dataset, difficulty), sort_keys=True)
        index, entry = _draw(dataset, config_key, ctx.seed, ctx.split)
        self.dataset_name = dataset
        self.index = index
        """The item's index in the dataset it was drawn from (with the config, it names the problem)."""
        self.entry: dict[str, Any] = copy.deepcopy(entry)  # the scorer may read it; nobody shares it
        self._scorer = _scorer(dataset, config_key)
        self.problem = Problem(question=str(entry["question"]), answer=str(entry["answer"]))
        self.prompt = f"{self.problem.question}\n\n{INSTRUCTION}"
        self.shots = [
            _draw(dataset, config_key, episode_seed(ctx.seed, "shot", k), "train")[1] for k in range(few_shot)
        ]
        self._score: float | None = None

    def messages(self) -> list[Message]:
        """The system prompt (if any), the solved examples, then the question."""
        system, question = super().messages()[:-1], super().messages()[-1]
        examples: list[Message] = []
        for shot in self.shots:
            examples += [
                {"role": "user", "content": f"{shot['question']}\n\n{INSTRUCTION}"},
                {"role": "assistant", "content": f"<answer>{shot['answer']}</answer>"},
            ]
        return [*system, *examples, question]

    def answer_reply(self, answer: str) -> str:
        return f"<answer>{answer}</answer>"

    def junk_answer(self) -> str:
        # Not the reference plus one: some datasets take any of several numbers (or their neighbours).
        return JUNK_ANSWER

    def reward_probes(self) -> Sequence[RewardProbe]:
        """The problem env's probes; for a dataset whose items carry no reference answer (any valid
        colouring or move sequence is right: ``graph_color``, ``rush_hour``, ...) only the junk answer,
        which must earn less than full marks."""
        junk = RewardProbe(
            "wrong answer in format", self.answer_reply(self.junk_answer()), ProbeExpectation.BELOW_REFERENCE
        )
        if self.entry.get("answer") is None:
            return (junk,)
        # A short number as well: a scorer's partial credit can pay it in full (coin_flip's paid '0').
        number = self.answer_reply("1" if _reads_as_zero(self.problem.answer) else "0")
        wrong_number = RewardProbe("wrong number in format", number, ProbeExpectation.BELOW_REFERENCE)
        return (*super().reward_probes(), wrong_number)

    async def check(self, reply: str) -> Verdict:
        answer = _reasoning_gym("utils").extract_answer(reply)
        if answer is None:
            self._score = 0.0  # reasoning-gym scores a reply without an answer block 0
            return Verdict(GradeResult(GradeOutcome.UNPARSEABLE, "no <answer> block"), False, None)
        try:
            score = float(self._scorer.score_answer(answer, self.entry))
        except Exception as exc:
            # Some scorers parse the answer and raise on junk; that is a wrong answer, not a crash.
            self._score = 0.0
            return Verdict(
                GradeResult(GradeOutcome.WRONG, f"scorer rejected it: {exc!r}"[:200]), True, answer
            )
        self._score = min(max(score, 0.0), 1.0) if score == score else 0.0  # NaN: 0
        outcome = GradeOutcome.CORRECT if self._score >= 1.0 else GradeOutcome.WRONG
        return Verdict(GradeResult(outcome, f"reasoning-gym score {self._score:.3f}"), True, answer)

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        self._score = None
        result = await super().step(action, extra=extra)
        if self._score is not None:  # graded: reasoning-gym's score, less the format penalty
            result.reward = self._score + self.format_coef * (result.metrics["format"] - 1.0)
        result.metrics["score"] = self._score or 0.0
        return result


def _reads_as_zero(text: str) -> bool:
    try:
        return float(text) == 0.0
    except ValueError:
        return False


def _shots(dataset: str, config_key: str, seed: int, n: int, question: str) -> list[dict[str, Any]]:
    """``n`` solved train problems for an episode's prompt, none of them its own question."""
    shots: list[dict[str, Any]] = []
    seen = {question}
    for k in range(4 * n + 8):
        if len(shots) == n:
            break
        _, entry = _draw(dataset, config_key, episode_seed(seed, "shot", k), "train")
        if str(entry["question"]) not in seen:
            seen.add(str(entry["question"]))
            shots.append(entry)
    return shots


def _checked(dataset: str, difficulty: dict[str, Any]) -> dict[str, Any]:
    """``difficulty`` as the dataset's config takes it; a name it does not take is a TypeError listing
    the ones it does (the catalog turns it into an EnvKwargsError)."""
    factory = _reasoning_gym("factory")
    if dataset not in factory.DATASETS:
        raise ValueError(
            f"reasoning-gym has no dataset {dataset!r} (reasoning_gym.factory.DATASETS lists them)"
        )
    config_fields = {f.name: f for f in dataclasses.fields(factory.DATASETS[dataset][1])}
    accepted = sorted(set(config_fields) - {"seed", "size"})
    unknown = sorted(set(difficulty) - set(accepted))
    if unknown:
        raise TypeError(
            f"reasoning-gym {dataset} does not take {', '.join(unknown)}; it takes {', '.join(accepted)}"
        )
    return difficulty


def _config(dataset: str, config_key: str) -> dict[str, Any]:
    """The config keyword arguments a key stands for, as the dataset's config wants them: JSON values
    turned back into the types of the config's defaults (tuples, enums), and a composite's mix into
    its ``DatasetSpec`` list."""
    factory = _reasoning_gym("factory")
    values: dict[str, Any] = json.loads(config_key)
    for config_field in dataclasses.fields(factory.DATASETS[dataset][1]):
        if config_field.name in values:
            values[config_field.name] = _like(_default(config_field), values[config_field.name])
    if dataset == COMPOSITE and "datasets" in values:
        values["datasets"] = composite_specs(values["datasets"])
    return values


def _default(config_field: dataclasses.Field[object]) -> object:
    if config_field.default_factory is not dataclasses.MISSING:
        return config_field.default_factory()
    return config_field.default


def _like(default: object, value: object) -> object:
    """``value`` (a JSON value) in the type of ``default``: an enum member, a tuple, a list of enums."""
    if isinstance(default, enum.Enum) and isinstance(value, str):
        return type(default)(value)
    if isinstance(default, list | tuple) and isinstance(value, list):
        kinds = {type(item) for item in default if isinstance(item, enum.Enum)}
        if len(kinds) == 1:
            kind = kinds.pop()
            value = [kind(item) if isinstance(item, str) else item for item in value]
        return tuple(value) if isinstance(default, tuple) else value
    return value


def composite_specs(mix: object) -> list[Any]:
    """A composite's mix as reasoning-gym's ``DatasetSpec`` list, from ``{name: weight}``, ``{name:
    {"weight": w, "config": {...}}}`` or a list of ``{"name", "weight", "config"}`` objects."""
    spec_cls = _reasoning_gym("composite").DatasetSpec
    if isinstance(mix, dict):
        mix = [
            {"name": name, **(value if isinstance(value, dict) else {"weight": value})}
            for name, value in mix.items()
        ]
    if not isinstance(mix, list) or not mix:
        raise ValueError("composite datasets must be a non-empty {name: weight} table or list")
    specs = []
    for item in mix:
        if not isinstance(item, dict) or "name" not in item:
            raise ValueError(f"composite dataset entry {item!r} has no name")
        if item["name"] in TIED_DATASETS:  # not offered alone, so not inside a mix either
            raise ValueError(f"composite cannot mix {item['name']}: {TIED_DATASETS[item['name']]}")
        spec = spec_cls(
            name=item["name"], weight=float(item.get("weight", 1.0)), config=dict(item.get("config") or {})
        )
        spec.validate()
        specs.append(spec)
    return specs


@functools.lru_cache(maxsize=64)
def _shared(dataset: str, config_key: str) -> Any:
    """The one large dataset of a config that episodes draw items from (made once per process)."""
    size = _info(dataset).shared_size
    return _reasoning_gym().create_dataset(dataset, seed=0, size=size, **_config(dataset, config_key))


@functools.lru_cache(maxsize=64)
def _scorer(dataset: str, config_key: str) -> Any:
    """A dataset of the config to call ``score_answer`` on (scoring does not depend on the seed)."""
    if _per_episode(dataset):
        return _reasoning_gym().create_dataset(
            dataset, seed=0, size=PER_EPISODE_SIZE, **_config(dataset, config_key)
        )
    return _shared(dataset, config_key)


def _info(dataset: str) -> DatasetInfo:
    info = load_table().get(dataset)
    if info is None:
        raise ValueError(
            f"reasoning-gym has no dataset {dataset!r} (reasoning_gym.factory.DATASETS lists them)"
        )
    return info


def _per_episode(dataset: str) -> bool:
    return _info(dataset).per_episode


@functools.lru_cache(maxsize=2048)
def _draw(dataset: str, config_key: str, seed: int, split: Split) -> tuple[int, dict[str, Any]]:
    """The item an episode seed plays in ``split``: its index and the item."""
    if _per_episode(dataset):
        # reasoning-gym seeds numpy too, which needs a 32-bit seed.
        data = _reasoning_gym().create_dataset(
            dataset, seed=seed % 2**31, size=PER_EPISODE_SIZE, **_config(dataset, config_key)
        )
        start, limit = 0, PER_EPISODE_SIZE
    else:
        data = _shared(dataset, config_key)
        start, limit = seed % (len(data) - MAX_DRAWS), MAX_DRAWS
    for index in range(start, start + limit):
        try:
            entry: dict[str, Any] = data[index]
        except IndexError:  # a dataset that found fewer items than its size (word_ladder)
            break
        if split_of(str(entry["question"])) == split:
            return index, entry
    raise ValueError(f"reasoning_gym/{dataset}: no {split!r} problem in {limit} draws from seed {seed}")
