"""Every reasoning-gym dataset in the catalog: listed (available or with a reason), its answers read and
scored as reasoning-gym's own pipeline does, its problems deterministic, its difficulty as keyword
arguments and rungs, composite mixes, and the retired first versions."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import envsuite
from envsuite import DeprecatedEnvError, EnvKwargsError, RendererConfig, make_env
from envsuite.cli import main
from tests.conftest import TEST_MODEL

rg = pytest.importorskip("reasoning_gym", reason="reasoning-gym is not installed")
from reasoning_gym.factory import DATASETS  # noqa: E402
from reasoning_gym.utils import extract_answer  # noqa: E402

from envsuite.adapters.reasoning_gym import (  # noqa: E402
    COMPOSITE_DEFAULT_MIX,
    RESCORED_DATASETS,
    TIED_DATASETS,
    env_id,
    installed_version,
    load_table,
)
from envsuite.adapters.reasoning_gym import _env as rg_env  # noqa: E402
from envsuite.adapters.reasoning_gym import _table as rg_table  # noqa: E402
from envsuite.adapters.reasoning_gym import _ties as rg_ties  # noqa: E402

TABLE = load_table()
AVAILABLE = [d.name for d in TABLE.datasets if not d.unavailable and d.name not in TIED_DATASETS]
RENDERER = RendererConfig(model_name=TEST_MODEL)


def test_every_dataset_is_listed_available_or_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    listed = {s.id: s for s in envsuite.registry.all_specs() if s.namespace == "reasoning_gym"}
    for name in DATASETS:
        env_spec = listed[env_id(name)]
        assert env_spec.unavailable is None or env_spec.unavailable.strip(), name
        assert envsuite.env_family(env_spec) == "reasoning" and "reasoning-gym" in env_spec.tags
    assert len(DATASETS) == len(TABLE.datasets) >= 100
    out = _run_cli(["list", "reasoning_gym/*", "--json"])
    assert {e["id"] for e in json.loads(out)} >= {env_id(name) for name in DATASETS}


def test_a_dataset_whose_junk_ties_its_reference_is_listed_unavailable_with_the_reason() -> None:
    """The tie rule: reasoning-gym 0.1.25 scores every answer to game_of_life_halting 1.0, and the
    answer '0' to most coin_flip items, so junk earns what the reference earns. They are listed,
    unavailable with the reason, never offered; measured again here so the list cannot go stale (a
    fixed scorer fails this: take it off the list)."""
    assert set(TIED_DATASETS) == {"game_of_life_halting", "coin_flip"}
    for name, reason in TIED_DATASETS.items():
        env_spec = envsuite.spec(env_id(name))
        assert env_spec.unavailable == reason and "as much as the reference" in reason
        with pytest.raises(envsuite.UnavailableEnvError, match="as much as the reference"):
            make_env(env_id(name), renderer=RENDERER)
        report = asyncio.run(rg_ties.measure(name, seeds=3))
        assert report.tied and report.references, report.line()
    with pytest.raises(EnvKwargsError, match="composite cannot mix coin_flip"):
        make_env(env_id("composite"), renderer=RENDERER, datasets={"gcd": 1, "coin_flip": 1})
    untied = asyncio.run(rg_ties.measure("circuit_logic", seeds=3))  # '0' and '1' right, and earning 1
    assert not untied.tied and untied.references == [1.0] * 3 and untied.as_high, untied.line()


def test_the_shipped_table_is_what_the_installed_reasoning_gym_says() -> None:
    """``datasets.json`` was written from this reasoning-gym; regenerate it after an upgrade."""
    if TABLE.version != installed_version():
        pytest.skip(f"reasoning-gym {installed_version()} here; the table is {TABLE.version}'s")
    live = rg_table.describe_datasets(probe=False)
    shipped = [dataclasses.replace(d, unavailable=None) for d in TABLE.datasets]
    assert list(live.datasets) == shipped


def test_a_table_of_another_version_is_read_live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = dataclasses.replace(TABLE, version="0.0.1", datasets=TABLE.datasets[:2])
    assert rg_table.Table.from_json(other.to_json()) == other
    path = tmp_path / "datasets.json"
    path.write_text(other.to_json(), encoding="utf-8")
    monkeypatch.setattr(rg_table, "TABLE_PATH", path)
    rg_table.load_table.cache_clear()
    try:
        assert rg_table.load_table().names() == sorted(DATASETS)
    finally:
        rg_table.load_table.cache_clear()


def _config_key(name: str) -> str:
    """The env's config key for a dataset's defaults (the catalog's composite mix for ``composite``)."""
    info = TABLE.get(name)
    assert info is not None
    kwargs = dict(info.kwargs) | ({"datasets": COMPOSITE_DEFAULT_MIX} if name == "composite" else {})
    return json.dumps(kwargs, sort_keys=True)


def _replies(reference: str) -> list[str]:
    return [
        f"<answer>{reference}</answer>",
        f"Let me think step by step.\n<answer>\n{reference}\n</answer>",
        f"<answer>{reference}</answer> or maybe <answer>0</answer>",
        f"<answer>the answer is {reference}</answer>",
        f"The answer is {reference}.",
        "<answer></answer>",
    ]


async def _score(name: str, reply: str, seed: int) -> tuple[float, float, dict[str, Any], str]:
    env = make_env(env_id(name), seed=seed, renderer=RENDERER)
    assert isinstance(env, rg_env.ReasoningGymEnv)
    await env.initial_observation()
    result = await env.step(envsuite.renderers.reply_to_tokens(RENDERER.build(), reply))
    return result.reward, float(result.metrics["score"]), env.entry, str(result.logs["reply"])


def _rg_score(scorer: Any, answer: str, entry: dict[str, Any]) -> float:
    """reasoning-gym's score, in [0, 1]; a scorer that raises on a reply (its own eval would stop
    there) scores it 0, as the env documents."""
    try:
        return min(max(float(scorer.score_answer(answer, entry)), 0.0), 1.0)
    except Exception:
        return 0.0


@pytest.mark.parametrize("name", AVAILABLE)
async def test_answers_are_read_and_scored_as_reasoning_gyms_pipeline(name: str) -> None:
    """reasoning-gym's eval reads ``extract_answer(reply)`` and scores it with the dataset's
    ``score_answer``; the env's ``score`` metric is that, and its reward that less the format penalty."""
    seed = 7
    _, _, entry, _ = await _score(name, "warm up", seed)
    scorer = rg.create_dataset(name, **rg_env._config(name, _config_key(name)))
    for reply in _replies(str(entry["answer"])):
        reward, score, played, received = await _score(name, reply, seed)
        assert played == entry
        text = received if len(reply) < 1000 else reply  # logs clip long replies
        answer = extract_answer(text)
        expected = 0.0 if answer is None else _rg_score(scorer, answer, entry)
        assert score == pytest.approx(expected), (reply, answer)
        assert reward == pytest.approx(expected - (0.1 if answer is None else 0.0)), reply


@pytest.mark.parametrize("name", AVAILABLE)
def test_problems_follow_the_seed_and_never_global_random_state(name: str) -> None:
    """The same seed draws the same problem in any process: reasoning-gym's generators seed their own
    RNGs (checked here without the env's cache, under different global random states)."""
    key = _config_key(name)
    drawn = []
    for state in (1, 2):
        rg_env._shared.cache_clear()
        random.seed(state)
        np.random.seed(state)
        index, entry = rg_env._draw.__wrapped__(name, key, 12345, "train")  # type: ignore[attr-defined]
        drawn.append((index, entry["question"], str(entry["answer"])))
    assert drawn[0] == drawn[1]


def test_train_and_test_problems_differ_and_groups_share_one() -> None:
    questions = {split: set() for split in ("train", "test")}
    for seed in range(12):
        for split in questions:
            env = make_env(env_id("chain_sum"), seed=seed, split=split, renderer=RENDERER, rung=1)  # type: ignore[arg-type]
            questions[split].add(env.problem.question)  # type: ignore[attr-defined]
    assert questions["train"].isdisjoint(questions["test"]) and len(questions["train"]) > 6
    group = asyncio.run(
        envsuite.make_group_builder(env_id("gcd"), group_size=3, seed=4, renderer=RENDERER).make_envs()
    )
    assert len({env.problem.question for env in group}) == 1  # type: ignore[attr-defined]


def test_difficulty_parameters_are_keyword_arguments_and_rungs() -> None:
    chain = envsuite.spec(env_id("chain_sum"))
    assert {"min_terms", "max_terms", "min_digits", "max_digits"} <= set(chain.kwargs)
    assert len(chain.rungs) >= 4 and chain.rungs[0].kwargs["max_digits"] == 1
    assert chain.resolve_kwargs({"rung": 2})["max_terms"] == chain.rungs[2].kwargs["max_terms"]
    assert chain.resolve_kwargs({"rung": 2, "max_terms": 2})["max_terms"] == 2, "explicit beats the rung"
    easy = make_env(env_id("chain_sum"), seed=3, renderer=RENDERER, rung=0)
    terms = easy.problem.question.split(":")[-1].replace("=", "").split()  # type: ignore[attr-defined]
    numbers = [t for t in terms if t.lstrip("-").isdigit()]
    assert len(numbers) == 2 and all(len(n.lstrip("-")) == 1 for n in numbers), easy.problem.question  # type: ignore[attr-defined]
    hard = make_env(env_id("chain_sum"), seed=3, renderer=RENDERER, min_digits=5, max_digits=5)
    assert any(len(t) == 5 for t in hard.problem.question.split()), hard.problem.question  # type: ignore[attr-defined]
    with pytest.raises(EnvKwargsError, match=r"rungs are 0\.\.10"):
        make_env(env_id("chain_sum"), renderer=RENDERER, rung=99)
    with pytest.raises(EnvKwargsError, match=r"it takes .*max_terms"):
        make_env(env_id("chain_sum"), renderer=RENDERER, max_term=3)
    # Enum- and tuple-valued parameters come back from JSON as the config wants them.
    assert make_env(
        env_id("aiw"), renderer=RENDERER, task_types=["friends"], task_type_weights=[1.0]
    ).problem.question  # type: ignore[attr-defined]
    assert make_env(env_id("basic_arithmetic"), renderer=RENDERER, operators=["+"]).problem.question  # type: ignore[attr-defined]


def test_show_lists_the_difficulty_parameters_and_rungs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = _run_cli(["show", "reasoning_gym/chain_sum"])
    for text in ("max_digits", "min_terms", "difficulty rungs", "num_terms 2-3", "family: reasoning"):
        assert text in out, text


def test_composite_mixes_are_expressible() -> None:
    mix = make_env("reasoning_gym/composite", seed=1, renderer=RENDERER, datasets={"gcd": 1, "lcm": 3})
    assert mix.entry["metadata"]["source_dataset"] in {"gcd", "lcm"}  # type: ignore[attr-defined]
    listed = make_env(
        "reasoning_gym/composite",
        seed=2,
        renderer=RENDERER,
        datasets=[{"name": "chain_sum", "weight": 1, "config": {"min_terms": 2, "max_terms": 2}}],
    )
    assert listed.entry["metadata"]["source_dataset"] == "chain_sum"  # type: ignore[attr-defined]
    default = make_env("reasoning_gym/composite", seed=3, renderer=RENDERER)
    assert default.entry["metadata"]["source_dataset"] in COMPOSITE_DEFAULT_MIX  # type: ignore[attr-defined]
    with pytest.raises(EnvKwargsError):
        make_env("reasoning_gym/composite", renderer=RENDERER, datasets=[])


def test_the_first_versions_are_retired_for_ones_scored_as_reasoning_gym_does() -> None:
    for name in RESCORED_DATASETS:
        with pytest.raises(DeprecatedEnvError, match=f"use reasoning_gym/{name}-v1"):
            envsuite.spec(f"reasoning_gym/{name}-v0")
        assert envsuite.spec(f"reasoning_gym/{name}").id == f"reasoning_gym/{name}-v1"
    assert envsuite.spec("reasoning_gym/knight_swap").id == "reasoning_gym/knight_swap-v0"
    # Results of the old versions keep their family on the leaderboard.
    assert envsuite.catalog_env_families(["reasoning_gym/gcd-v0"]) == {"reasoning_gym/gcd-v0": "reasoning"}


def test_gym_text_mode_scores_with_reasoning_gyms_scorer() -> None:
    gym_env = envsuite.make("reasoning_gym/chain_sum", mode="text", model=TEST_MODEL)
    gym_env.reset(seed=5)
    _, reward, done, _, info = gym_env.step("<answer>no idea</answer>")
    assert done and reward == 0.0 and info["metrics"]["score"] == 0.0
    reference = info["logs"]["reference"]
    gym_env.reset(seed=5)
    _, reward, _, _, info = gym_env.step(f"<answer>{reference}</answer>")
    assert reward == 1.0 and info["metrics"]["score"] == 1.0 and info["metrics"]["correct"] == 1.0
    gym_env.reset(seed=5)
    _, reward, _, _, info = gym_env.step(f"The sum is\n{reference}")
    assert reward == pytest.approx(-0.1), "reasoning-gym scores a reply without an answer block 0"


def _run_cli(argv: list[str]) -> str:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(argv) == 0
    return buffer.getvalue()


def test_few_shot_prompts_show_solved_train_problems_of_the_same_rung() -> None:
    from envsuite.envs import split_of

    env = make_env(env_id("chain_sum"), seed=9, split="test", renderer=RENDERER, rung=0, few_shot=2)
    messages = env.messages()  # type: ignore[attr-defined]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    question = env.problem.question  # type: ignore[attr-defined]
    shots = [m["content"].split("\n\n")[0] for m in messages[0:4:2]]
    assert question not in shots and len(set(shots)) == 2
    assert all(split_of(q) == "train" for q in shots), "held-out problems never appear as examples"
    assert all(m["content"].startswith("<answer>") for m in messages[1:4:2])
    assert all(len([t for t in q.split() if t.isdigit()]) == 2 for q in shots), "rung 0: two one-digit terms"
    again = make_env(env_id("chain_sum"), seed=9, split="test", renderer=RENDERER, rung=0, few_shot=2)
    assert again.messages() == messages  # type: ignore[attr-defined]
    with pytest.raises(EnvKwargsError, match="few_shot"):
        make_env(env_id("chain_sum"), renderer=RENDERER, few_shot=-1)
