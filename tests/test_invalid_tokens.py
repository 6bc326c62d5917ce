"""Token ids outside the tokenizer's vocabulary get a clear message on every path that takes tokens.

No sampler produces such ids, so they are a client's bug: an env's ``step`` ends the episode with
``parse_error`` and the reason in ``logs["error"]`` (never extending the observation with them), the
OpenEnv server refuses the action and keeps the episode, and the Tinker routes answer with the reason.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tinker
from openenv.core import GenericEnvClient
from tinker import types

import envsuite
from envsuite import StopReason, make_env, tokens_outside_vocabulary
from envsuite.serve import ServeConfig
from tests.conftest import TEST_MODEL
from tests.test_serve import running, sdk

HOSTILE = [10**12, -5]
MESSAGE = "token id 1000000000000 at position 0 is outside the vocabulary"
ROOT = Path(__file__).parents[1]


def test_the_message_names_the_first_bad_id_and_its_position() -> None:
    assert tokens_outside_vocabulary([0, 5, 9], 10) is None
    assert tokens_outside_vocabulary([], 10) is None
    message = tokens_outside_vocabulary([3, 10, -1], 10)
    assert message == "token id 10 at position 1 is outside the vocabulary (ids 0..9); 3 token(s) sent"


@pytest.mark.parametrize(
    "env_id",
    [
        "arithmetic",
        "math",
        "reasoning_gym/basic_arithmetic",
        "twenty_questions",
        "tictactoe",
        "chess",
        "textarena/Wordle-v0",
    ],
)
async def test_env_step_ends_with_parse_error_naming_the_id(env_id: str) -> None:
    env = make_env(env_id, seed=0, model=TEST_MODEL)
    start = await env.initial_observation()
    assert isinstance(start, tuple)
    prompt, _ = start
    result = await env.step(HOSTILE)
    assert result.episode_done and result.stop_reason is StopReason.PARSE_ERROR
    assert result.metrics["stop/parse_error"] == 1.0
    assert MESSAGE in str(result.logs["error"])
    # The observation is never extended with ids a model could not read (training would index past
    # the embedding).
    assert result.next_observation.to_ints() == prompt.to_ints()


def test_gymnasium_token_mode_reports_the_reason_in_info() -> None:
    gym_env = envsuite.make("arithmetic", model=TEST_MODEL)
    gym_env.reset(seed=0)
    _, _, terminated, _, info = gym_env.step([10**30, 3])  # too large for int64 as well
    assert terminated and info["stop_reason"] == "parse_error"
    assert "token id 1000000000000000000000000000000 at position 0" in info["logs"]["error"]


def _load_bench() -> ModuleType:
    loaded = importlib.util.spec_from_file_location("openenv_load", ROOT / "bench" / "openenv_load.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules["openenv_load"] = module
    loaded.loader.exec_module(module)
    return module


async def test_the_openenv_server_refuses_the_action_and_keeps_the_episode() -> None:
    with _load_bench().served("tictactoe", TEST_MODEL) as (url, _):
        async with GenericEnvClient(base_url=url) as client:
            await client.reset(seed=3)
            with pytest.raises(Exception, match=MESSAGE):
                await client.step({"tokens": HOSTILE})
            state = await client.state()
            assert not state["done"] and state["step_count"] == 0
            result = await client.step({"text": "[4]"})
            assert result.observation["messages"]


def test_the_tinker_routes_name_the_bad_id(tmp_path: Path) -> None:
    with running(ServeConfig(state_dir=tmp_path / "state")) as base, sdk(base) as service:
        sampler = service.create_sampling_client(base_model=TEST_MODEL).result()
        params = types.SamplingParams(max_tokens=2)
        with pytest.raises(tinker.RequestFailedError, match=MESSAGE):
            sampler.sample(types.ModelInput.from_ints([*HOSTILE, 3]), 1, params).result(timeout=60)
        training = service.create_lora_training_client(TEST_MODEL, rank=2, seed=0).result()
        datum = types.Datum(
            model_input=types.ModelInput.from_ints([1, 2, 3]),
            loss_fn_inputs={"target_tokens": np.array([2, 3, 10**12]), "weights": np.ones(3, np.float32)},
        )
        with pytest.raises(
            tinker.RequestFailedError, match="target_tokens: token id 1000000000000 at position 2"
        ):
            training.forward_backward([datum], "cross_entropy").result(timeout=60)
        # Both clients still serve valid requests.
        assert sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 1, params).result(timeout=60)
