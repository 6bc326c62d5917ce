"""envsuite.make returns a real gymnasium.Env in token, text and chat mode; each passes gymnasium's checker."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envsuite
from tests.conftest import TEST_MODEL

MATH_IDS = ["arithmetic", "math"]


@pytest.mark.parametrize("env_id", MATH_IDS)
@pytest.mark.parametrize("mode", ["tokens", "text", "chat"])
def test_check_env_passes(env_id: str, mode: str) -> None:
    env = envsuite.make(env_id, mode=mode, model=TEST_MODEL)  # type: ignore[arg-type]
    check_env(env, skip_render_check=True)
    env.close()


def test_token_mode_episode_and_info() -> None:
    env = envsuite.make("arithmetic", model=TEST_MODEL)
    obs, info = env.reset(seed=7)
    assert obs.dtype == np.int64 and obs.ndim == 1 and len(obs) > 5
    assert info["stop_condition"] and info["conversation"][-1]["role"] == "user"
    again, _ = env.reset(seed=7)
    assert np.array_equal(obs, again)
    _, reward, terminated, truncated, info = env.step(np.array([], dtype=np.int64))
    assert terminated and not truncated
    assert info["stop_reason"] in {r.value for r in envsuite.StopReason}
    assert isinstance(reward, float)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.array([1, 2, 3]))


def test_text_mode_scores_a_correct_reply() -> None:
    env = envsuite.make("arithmetic", mode="text", model=TEST_MODEL, answer_format="number")
    prompt, info = env.reset(seed=11)
    assert isinstance(prompt, str) and "assistant" in prompt
    question = info["conversation"][-1]["content"]
    assert question in prompt
    answer = _solve(env)
    _, reward, terminated, _, info = env.step(str(answer))
    assert terminated and reward == pytest.approx(1.0), info
    assert info["conversation"][-1] == {"role": "assistant", "content": str(answer)}


@pytest.mark.parametrize("env_id", ["twenty_questions", "tictactoe"])
def test_chat_mode_passes_the_checker_on_multi_turn_envs(env_id: str) -> None:
    env = envsuite.make(env_id, mode="chat", model=TEST_MODEL)
    check_env(env, skip_render_check=True)


def test_chat_mode_plugs_into_a_chat_completions_loop() -> None:
    """The observation is the messages list an API takes; the API's reply message is the action."""
    env = envsuite.make("twenty_questions", mode="chat", model=TEST_MODEL)
    messages, info = env.reset(seed=4)
    assert isinstance(messages, tuple) and messages[-1]["role"] == "user"
    assert "<|im_start|>" not in repr(messages)  # no chat template: the API renders its own way
    secret = env.unwrapped._env.secret  # type: ignore[attr-defined]

    def api(conversation: list[dict[str, str]]) -> dict[str, str]:
        """A chat-completions endpoint: asks one question, then guesses right."""
        asked = sum(m["role"] == "assistant" for m in conversation)
        return {"role": "assistant", "content": "Is it alive?" if asked == 0 else f"Guess: {secret}"}

    rewards, done = [], False
    while not done:
        reply = api(list(messages))
        messages, reward, done, _, info = env.step(reply)
        rewards.append(reward)
        assert messages[-2 if not done else -1]["content"] in (reply["content"], "Correct!")
    assert info["stop_reason"] == "completed" and rewards[-1] > 0
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]


def _solve(env: gymnasium.Env) -> object:
    inner = env.unwrapped._env  # type: ignore[attr-defined]
    return inner.problem.answer


def test_overflow_gives_empty_observation_then_max_tokens_stop() -> None:
    env = envsuite.make("arithmetic", model=TEST_MODEL, max_context_tokens=4)
    obs, info = env.reset(seed=0)
    assert len(obs) == 0 and "prompt_overflow" in info
    _, reward, terminated, _, info = env.step(np.array([1]))
    # tinker-cookbook's meaning: an oversized first prompt exhausts the token budget (max_tokens).
    assert terminated and reward == 0.0 and info["stop_reason"] == "max_tokens"
    assert info["metrics"] == {"stop/max_tokens": 1.0}


def test_gymnasium_make_finds_catalog_ids() -> None:
    env = gymnasium.make("envsuite/arithmetic", model=TEST_MODEL)
    obs, _ = env.reset(seed=1)
    assert len(obs) > 0
    assert "envsuite/math-v0" in gymnasium.registry
    env.close()


def test_bad_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="mode"):
        envsuite.make("arithmetic", mode="pixels", model=TEST_MODEL)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "env_id", ["arithmetic", "math", "twenty_questions", "tictactoe", "textarena/Nim-v0"]
)
def test_text_with_lone_surrogates_is_a_defined_outcome(env_id: str) -> None:
    """Issue 15.1: any str is an action; unpaired surrogates become U+FFFD instead of a TypeError."""
    env = envsuite.make(env_id, mode="text", model=TEST_MODEL)
    env.reset(seed=0)
    _, reward, _, _, info = env.step("hello \ud800 world \udfff")
    assert isinstance(reward, float)
    assert "\ufffd" in info["conversation"][-1]["content"] or info["conversation"][-1]["role"] != "assistant"
    env.close()


def test_surrogate_pairs_join_and_lone_ones_are_replaced() -> None:
    assert envsuite.renderers.encodable_text("a\ud83d\ude00b") == "a\U0001f600b"
    assert envsuite.renderers.encodable_text("\ude00\ud83d") == "\ufffd\ufffd"
    assert envsuite.renderers.encodable_text("plain") == "plain"


def test_gymnasium_make_takes_namespaced_ids_as_documented() -> None:
    """Issue 15.12: ``envsuite/<catalog id>`` for namespaced ids too; gymnasium's own ids still parse."""
    from gymnasium.envs.registration import parse_env_id

    assert "envsuite/textarena/TicTacToe-v0" in gymnasium.registry
    env = gymnasium.make("envsuite/textarena/TicTacToe-v0", model=TEST_MODEL)
    obs, _ = env.reset(seed=0)
    assert len(obs) > 0
    env.close()
    assert parse_env_id("ALE/Pong-v5") == ("ALE", "Pong", 5)
    assert parse_env_id("CartPole-v1") == (None, "CartPole", 1)


@pytest.mark.parametrize("mode", ["tokens", "text"])
def test_async_vector_env_with_shared_memory_matches_sync(mode: str) -> None:
    """Issue 15.12: make_vec(..., "async") with its default shared memory, in both modes."""
    kwargs = {"mode": mode, "model": TEST_MODEL, "max_context_tokens": 128}
    async_env = gymnasium.make_vec("envsuite/arithmetic-v0", 2, vectorization_mode="async", **kwargs)
    sync_env = gymnasium.make_vec("envsuite/arithmetic-v0", 2, vectorization_mode="sync", **kwargs)
    try:
        async_obs, _ = async_env.reset(seed=4)
        sync_obs, _ = sync_env.reset(seed=4)
        _assert_same(async_obs, sync_obs)
        long_reply = np.arange(300, 600) if mode == "tokens" else "é中 " * 3000  # final obs over the bound
        actions = (np.array([16, 2]), long_reply) if mode == "tokens" else ("12 \U0001f600", long_reply)
        async_step = async_env.step(actions)
        sync_step = sync_env.step(actions)
        _assert_same(async_step[0], sync_step[0])
        assert np.array_equal(async_step[1], sync_step[1]) and all(async_step[2])
        assert len(sync_step[0][1]) == sync_env.single_observation_space.max_length  # type: ignore[attr-defined]
        assert sync_step[4]["observation_cut_from"][1] > sync_env.single_observation_space.max_length  # type: ignore[attr-defined]
    finally:
        async_env.close()
        sync_env.close()


def test_async_vector_env_built_by_hand() -> None:
    from gymnasium.vector import AsyncVectorEnv

    env_fns = [lambda: envsuite.make("textarena/TicTacToe-v0", model=TEST_MODEL) for _ in range(2)]
    vector = AsyncVectorEnv(env_fns)
    try:
        obs, _ = vector.reset(seed=3)
        assert len(obs) == 2 and obs[0].dtype == np.int64 and len(obs[0]) > 10
    finally:
        vector.close()


def _assert_same(left: object, right: object) -> None:
    assert len(left) == len(right)  # type: ignore[arg-type]
    for a, b in zip(left, right, strict=True):  # type: ignore[call-overload]
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
