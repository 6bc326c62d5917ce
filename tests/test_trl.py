"""TRL's GRPOTrainer on a catalog env (envsuite.adapters.trl): real TRL, real tiny model, on CPU."""

from __future__ import annotations

import asyncio

import pytest

from envsuite.catalog._make import RendererConfig, make_env
from envsuite.core import ProbeExpectation
from envsuite.errors import UsageError
from envsuite.renderers import reply_to_tokens
from tests.conftest import TEST_MODEL

pytest.importorskip("trl")

from envsuite.adapters.trl import SEED_COLUMN, EnvReward, EnvTask, trl_dataset

ENV_ID = "arithmetic"
ENV_KWARGS: dict[str, object] = {"digits": 2, "operations": ["+"], "n_terms": 2, "answer_format": "number"}


def _task() -> EnvTask:
    return EnvTask(ENV_ID, env_kwargs=ENV_KWARGS, model=TEST_MODEL)


async def _reference_ids(seed: int) -> list[int]:
    """The env's own reference answer for episode ``seed``, as the tokens a clean sampler would send."""
    env = make_env(ENV_ID, seed=seed, model=TEST_MODEL, **ENV_KWARGS)
    start = await env.initial_observation()
    _observation, stop = start  # type: ignore[misc]
    reference = next(p for p in env.reward_probes() if p.expect is ProbeExpectation.FULL_MARKS)
    return reply_to_tokens(RendererConfig(TEST_MODEL).build(), reference.reply, stop)


async def _env_reward(seed: int, completion_ids: list[int]) -> float:
    env = make_env(ENV_ID, seed=seed, model=TEST_MODEL, **ENV_KWARGS)
    await env.initial_observation()
    return float((await env.step(list(completion_ids))).reward)


def test_the_reward_function_grades_each_completion_against_its_own_rows_episode() -> None:
    references = [asyncio.run(_reference_ids(seed)) for seed in (0, 1)]
    reward = EnvReward(_task())
    assert reward(completion_ids=references, env_seed=[0, 1]) == [1.0, 1.0]
    # The same replies under the other row's seed: a reward that ignored the seed would still pay.
    assert reward(completion_ids=references, env_seed=[1, 0]) == [0.0, 0.0]


def test_the_dataset_holds_each_episodes_prompt_text_and_seed() -> None:
    from envsuite.models import get_tokenizer

    dataset = trl_dataset(_task(), 3, first_seed=5)
    assert dataset[SEED_COLUMN] == [5, 6, 7]
    prompt_ids = asyncio.run(_task().prompt_ids(6))
    assert (
        get_tokenizer(TEST_MODEL)(dataset[1]["prompt"], add_special_tokens=False)["input_ids"] == prompt_ids
    )
    assert dataset[0]["prompt"] != dataset[1]["prompt"]  # each seed its own problem


def test_a_multi_turn_env_is_refused_with_the_reason() -> None:
    with pytest.raises(UsageError, match="single-turn"):
        EnvTask("twenty_questions", model=TEST_MODEL)


def test_trl_trains_two_steps_and_logs_the_envs_rewards(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from envsuite.models import resolve_model

    path = resolve_model(TEST_MODEL).path
    task = _task()
    reward = EnvReward(task)
    seen: list[tuple[int, list[int]]] = []  # what TRL passed in, to grade again independently

    def spy(*, completion_ids: list[list[int]], env_seed: list[int], **kwargs: object) -> list[float | None]:
        seen.extend(zip(env_seed, [list(ids) for ids in completion_ids], strict=True))
        return reward(completion_ids=completion_ids, env_seed=env_seed, **kwargs)

    spy.__name__ = reward.__name__
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-4,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
        reward_funcs=[spy],
        args=args,
        train_dataset=trl_dataset(task, 4),
        processing_class=AutoTokenizer.from_pretrained(path),
    )
    trainer.train()

    assert trainer.state.global_step == 2
    assert len(seen) == 8  # 2 steps x 4 completions
    recomputed = [asyncio.run(_env_reward(seed, ids)) for seed, ids in seen]
    # TRL keeps the last batch's per-completion rewards (float32), and logs each step's mean.
    logged = list(trainer._logs["rewards"][reward.__name__])
    assert logged == pytest.approx(recomputed[4:])
    means = [row[f"rewards/{reward.__name__}/mean"] for row in trainer.state.log_history if "loss" in row]
    assert means == pytest.approx([sum(recomputed[:4]) / 4, sum(recomputed[4:]) / 4])


def test_a_multi_turn_env_plays_through_trls_environment_factory_object() -> None:
    """The object TRL's tool loop drives: reset -> act (a tool) per move -> get_reward, pooled and reset."""
    import inspect

    from envsuite.adapters.trl import environment_factory, episode_dataset

    async def secret(seed: int) -> str:
        env = make_env("twenty_questions", seed=seed, model=TEST_MODEL)
        await env.initial_observation()
        return next(p.reply for p in env.reward_probes() if p.expect is ProbeExpectation.FULL_MARKS)

    episode = environment_factory("twenty_questions", model=TEST_MODEL)()
    # TRL exposes every public method but reset/get_reward as a tool: exactly one here.
    tools = [n for n, _ in inspect.getmembers(type(episode), inspect.isfunction) if not n.startswith("_")]
    assert sorted(tools) == ["act", "get_reward", "reset"]
    row = episode_dataset(2, first_seed=3)[0]
    assert "twenty questions" in episode.reset(**{k: v for k, v in row.items() if k != "prompt"})
    assert "questions left" in episode.act("Is it an animal?")  # the env's answer comes back
    assert "over" in episode.act(asyncio.run(secret(3)))
    assert episode.get_reward() == asyncio.run(
        _env_return_20q(3, ["Is it an animal?", asyncio.run(secret(3))])
    )
    assert episode.get_reward() > 0
    other = next(s for s in range(4, 40) if asyncio.run(secret(s)) != asyncio.run(secret(3)))
    episode.reset(env_seed=other)  # TRL reuses the instance: a fresh episode, its return from 0
    episode.act(asyncio.run(secret(3)))  # seed 3's word is not this episode's
    assert episode.get_reward() < asyncio.run(_env_return_20q(other, [asyncio.run(secret(other))]))


async def _env_return_20q(seed: int, moves: list[str]) -> float:
    env = make_env("twenty_questions", seed=seed, model=TEST_MODEL)
    _observation, stop = await env.initial_observation()  # type: ignore[misc]
    renderer, total = RendererConfig(TEST_MODEL).build(), 0.0
    for move in moves:
        result = await env.step(reply_to_tokens(renderer, move, stop))
        total += result.reward
        if result.episode_done:
            break
        stop = result.next_stop_condition
    return total


def test_trl_runs_two_steps_with_the_environment_factory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """GRPOTrainer's tool loop with EnvEpisode: reset fills the prompt, the env's return is the logged reward.

    TRL parses tool calls only for chat templates it knows, so the tiny model's tokenizer gets TRL's own
    Qwen3 template (its special tokens are plain text to SmolLM2's vocabulary). The random model calls
    no tool, so every episode ends with no move and the env's return for that, 0.
    """
    from pathlib import Path

    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from envsuite.adapters.trl import environment_factory, episode_dataset
    from envsuite.models import resolve_model

    path = resolve_model(TEST_MODEL).path
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
        args=args,
        train_dataset=episode_dataset(2),
        processing_class=tokenizer,
        environment_factory=environment_factory("twenty_questions", model=TEST_MODEL),
    )
    trainer.train()

    assert trainer.state.global_step == 2
    opening = make_env("twenty_questions", seed=0, model=TEST_MODEL)
    asyncio.run(opening.initial_observation())
    first_turn = str(opening.conversation()[-1]["content"])
    assert all(prompt[-1]["content"].endswith(first_turn) for prompt in trainer._logs["prompt"])
    steps = [row for row in trainer.state.log_history if "loss" in row]
    assert [row["tools/call_frequency"] for row in steps] == [0.0, 0.0]
    assert list(trainer._logs["rewards"]["EnvEpisode"]) == [asyncio.run(_env_return_20q(0, []))] * 2
