"""tinker-cookbook's own code on envsuite's local compute, changed by one line: ``local.install()``.

The installed cookbook is 0.6.1 (``make install``), whose ``rl.train``, math_rl recipe and ``rl_loop``
default to ``loss_fn="stable_reinforce"`` (sampling with ``record_stability_info``, datums with
provenance); ``make interop-0.5.8`` runs this file against 0.5.8 too, whose default is
``importance_sampling``. Each test runs the recipe with its own defaults and checks what both share.

Its training drivers (``rl.train.main`` with the math_rl arithmetic recipe, ``supervised.train.main``),
its minimal loops written against the raw SDK (``recipes/rl_loop.py``, ``recipes/sl_loop.py``), its
completers, and its offline env recipes (built with envsuite's renderer) in envsuite's checker and
trainer. The model is the tiny random test model, addressed by its directory (cookbook loads
tokenizers by name or path). Only what the offline world lacks is supplied: the hub datasets the two
minimal loops download, and, for those loops, the renderer name cookbook's model table would give a
hosted model (the local test model is not in it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pytest
import tinker

import envsuite
from envsuite.adapters.cookbook import register_cookbook_env
from envsuite.backends import local
from envsuite.models import resolve_model
from envsuite.testing import CheckOutcome, check_env
from envsuite.trainers import StopCause, TrainConfig, run_training
from tests.conftest import TEST_MODEL
from tests.support.cookbook_recipes import RECIPES

COOKBOOK_DATA = Path(__import__("tinker_cookbook").__file__).parent / "example_data" / "conversations.jsonl"


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(resolve_model(TEST_MODEL).path)


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[Path]:
    """The documented line, ``local.install(...)``, undone afterwards."""
    runs = tmp_path / "runs"
    local.install(runs)
    yield runs
    local.uninstall()


def _rows(log_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def _metrics(log_path: Path) -> list[dict[str, Any]]:
    """An RL run's per-step rows (0.6.1 also appends a row of cumulative token counts at the end)."""
    return [row for row in _rows(log_path) if "progress/batch" in row]


def _default_loss(config_cls: Any) -> str:
    """The loss a cookbook config trains with when left alone (0.6.1: stable_reinforce; 0.5.8's
    ``rl_loop`` has no setting and trains with importance_sampling)."""
    return str(getattr(config_cls(), "loss_fn", "importance_sampling"))


@pytest.fixture
def losses_seen(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The loss names cookbook's code sent to the local training clients (a spy: the real call runs)."""
    seen: set[str] = set()
    original = local.LocalTrainingClient.forward_backward

    def spy(self: Any, data: Any, loss_fn: str, loss_fn_config: Any = None) -> Any:
        seen.add(loss_fn)
        return original(self, data, loss_fn, loss_fn_config)

    monkeypatch.setattr(local.LocalTrainingClient, "forward_backward", spy)
    return seen


# -- training drivers ---------------------------------------------------------------------------------


def _math_rl(model_dir: str, log_path: Path, max_steps: int) -> None:
    """The math_rl recipe's own entry point (``recipes/math_rl/train.py``), arithmetic env, small sizes."""
    from tinker_cookbook.recipes.math_rl import train as math_rl

    config = math_rl.CLIConfig(
        model_name=model_dir,
        renderer_name="role_colon",
        env="arithmetic",
        lora_rank=8,
        group_size=4,
        groups_per_batch=2,
        learning_rate=1e-4,
        max_tokens=5,
        log_path=str(log_path),
        eval_every=0,
        save_every=1,
        behavior_if_log_dir_exists="resume",
        max_steps=max_steps,
    )
    asyncio.run(math_rl.cli_main(config))


def test_cookbook_rl_train_runs_resumes_and_stays_on_policy(
    installed: Path, model_dir: str, tmp_path: Path, losses_seen: set[str]
) -> None:
    log_path = tmp_path / "math_rl"
    _math_rl(model_dir, log_path, max_steps=2)
    assert [row["progress/batch"] for row in _metrics(log_path)] == [0, 1]
    checkpoints = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    assert checkpoints[-1]["state_path"].startswith(str(installed))
    # Same log dir, one more step: cookbook finds its own checkpoint and resumes from it.
    _math_rl(model_dir, log_path, max_steps=3)
    rows = _metrics(log_path)
    assert [row["progress/batch"] for row in rows] == [0, 1, 2]
    runs = tinker.RestClient().list_training_runs().result()
    assert runs.cursor.total_count == 2  # the first run, and the one resumed from it
    kl = [row["optim/kl_sample_train_v1"] for row in rows if "optim/kl_sample_train_v1" in row]
    assert kl and all(abs(value) < 1e-3 for value in kl), kl
    from tinker_cookbook.recipes.math_rl.train import CLIConfig

    assert losses_seen == {_default_loss(CLIConfig)}  # stable_reinforce on 0.6.1


def test_cookbook_supervised_train_runs_two_steps(installed: Path, model_dir: str, tmp_path: Path) -> None:
    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=model_dir,
        renderer_name="role_colon",
        max_length=256,
        batch_size=4,
        train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
    )
    config = train.Config(
        log_path=str(tmp_path / "sl"),
        model_name=model_dir,
        recipe_name="recipe_sl_basic",
        renderer_name="role_colon",
        dataset_builder=FromConversationFileBuilder(common_config=common, file_path=str(COOKBOOK_DATA)),
        learning_rate=2e-4,
        lora_rank=8,
        eval_every=0,
        save_every=0,
        max_steps=2,
    )
    asyncio.run(train.main(config))
    rows = [row for row in _rows(tmp_path / "sl") if "train_mean_nll" in row]
    assert len(rows) == 2 and all(row["train_mean_nll"] > 0 for row in rows)


# -- minimal loops against the raw SDK ---------------------------------------------------------------


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two hub datasets the minimal loops download, as small local datasets of the same shape."""
    gsm8k = datasets.Dataset.from_dict(
        {
            "question": [f"What is {a} + {b}?" for a, b in [(2, 3), (4, 4), (1, 6), (7, 2)] * 2],
            "answer": [f"{a} + {b} = {a + b}\n#### {a + b}" for a, b in [(2, 3), (4, 4), (1, 6), (7, 2)] * 2],
        }
    )
    rows = [json.loads(line) for line in COOKBOOK_DATA.read_text().splitlines()][:16]
    no_robots = datasets.Dataset.from_list([{"messages": row["messages"]} for row in rows])
    by_name = {"openai/gsm8k": gsm8k, "HuggingFaceH4/no_robots": no_robots}
    monkeypatch.setattr(
        datasets, "load_dataset", lambda name, *args, **kwargs: datasets.DatasetDict({"train": by_name[name]})
    )
    from tinker_cookbook import model_info

    monkeypatch.setattr(model_info, "get_recommended_renderer_name", lambda name: "role_colon")


def test_cookbook_rl_loop_runs_a_few_steps(
    installed: Path,
    offline_hub: None,
    model_dir: str,
    tmp_path: Path,
    losses_seen: set[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tinker_cookbook.recipes import rl_loop

    # The random test model never solves GSM8K, so every group would score 0 and rl_loop would skip
    # training; a reward it can earn (the reply's length parity) makes the groups differ and train.
    monkeypatch.setattr(rl_loop, "get_reward", lambda response, answer: float(len(response) % 2))

    config = rl_loop.Config(
        log_path=str(tmp_path / "rl_loop"),
        model_name=model_dir,
        batch_size=2,
        group_size=4,
        lora_rank=4,
        max_tokens=6,
        max_steps=3,
    )
    rl_loop.main(config)
    rows = _metrics(tmp_path / "rl_loop")
    assert [row["progress/batch"] for row in rows] == [0, 1, 2]
    assert (tmp_path / "rl_loop" / "checkpoints.jsonl").is_file()
    assert losses_seen == {_default_loss(rl_loop.Config)}  # stable_reinforce on 0.6.1


def test_cookbook_sl_loop_runs_a_few_steps(
    installed: Path, offline_hub: None, model_dir: str, tmp_path: Path
) -> None:
    from tinker_cookbook.recipes import sl_loop

    config = sl_loop.Config(
        log_path=str(tmp_path / "sl_loop"), model_name=model_dir, batch_size=4, lora_rank=4, max_steps=3
    )
    sl_loop.main(config)
    rows = [row for row in _rows(tmp_path / "sl_loop") if "train_mean_nll" in row]
    assert len(rows) == 3 and rows[-1]["train_mean_nll"] < rows[0]["train_mean_nll"] + 1.0


# -- completers ---------------------------------------------------------------------------------------


def test_cookbook_completers_sample_from_the_local_sampler(installed: Path, model_dir: str) -> None:
    from tinker_cookbook import renderers
    from tinker_cookbook.completers import TinkerMessageCompleter, TinkerTokenCompleter
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    sampler = tinker.ServiceClient().create_sampling_client(base_model=model_dir).result()
    renderer = renderers.get_renderer("role_colon", get_tokenizer(model_dir))
    prompt = renderer.build_generation_prompt([{"role": "user", "content": "Say hi."}])

    async def both() -> tuple[Any, Any]:
        tokens = await TinkerTokenCompleter(sampler, max_tokens=6)(prompt, stop=renderer.get_stop_sequences())
        message = await TinkerMessageCompleter(sampler, renderer, max_tokens=6)(
            [{"role": "user", "content": "Hi"}]
        )
        return tokens, message

    tokens, message = asyncio.run(both())
    assert 1 <= len(tokens.tokens) <= 6 and len(tokens.logprobs) == len(tokens.tokens)
    assert tokens.stop_reason in ("stop", "length")
    assert message["role"] == "assistant" and isinstance(message["content"], str)


# -- their env recipes with envsuite's renderer, in envsuite's checker and trainer ---------------


@pytest.fixture(scope="module")
def recipe_ids() -> Iterator[list[str]]:
    for env_id, entry in RECIPES.items():
        register_cookbook_env(
            env_id, entry["factory"], reward_range=entry["reward_range"], max_turns=entry["max_turns"]
        )
    yield list(RECIPES)
    for env_id in RECIPES:
        envsuite.registry.unregister(env_id)


@pytest.mark.parametrize("env_id", list(RECIPES))
def test_cookbook_env_recipes_pass_envsuite_check(recipe_ids: list[str], env_id: str) -> None:
    report = check_env(env_id, model=TEST_MODEL)
    assert report.passed, report.render()
    outcomes = {r.name: r.outcome for r in report.results}
    assert outcomes["episodes end without env errors"] is CheckOutcome.PASSED, report.render()


@pytest.mark.parametrize("env_id", list(RECIPES))
def test_cookbook_env_recipes_train_two_steps_with_envsuite_trainer(
    recipe_ids: list[str], env_id: str, tmp_path: Path
) -> None:
    config = TrainConfig(
        env_id=env_id,
        log_dir=str(tmp_path / "run"),
        model=TEST_MODEL,
        n_steps=2,
        batch_size=2,
        group_size=2,
        max_tokens=8,
        eval_every=0,
        n_transcripts=0,
    )
    result = run_training(config, show_progress=False)
    assert result.cause is StopCause.COMPLETED and result.steps_completed == 2
