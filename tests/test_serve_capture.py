"""Capture: an outside agent's OpenAI calls to ``envsuite serve`` become training data, token for token.

Real server on 127.0.0.1, the real ``openai`` SDK as the agent, the real trainer (``envsuite train
--captured``). The central test plays two three-turn conversations, scores them, and proves that the
datums the trainer builds hold exactly the tokens the server sampled (checked against the in-process
sampling client), never a re-tokenization of the replies' text.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import tinker

from envsuite import make_env
from envsuite.backends.local import LocalSamplingClient
from envsuite.capture import CaptureStore, captured_groups
from envsuite.serve import ServeConfig
from envsuite.trainers import assemble_batch
from tests.conftest import TEST_MODEL
from tests.test_serve import running

CAPTURE = {"X-Envsuite-Capture": "agents"}
QUESTIONS = ["Name a colour.", "Why that one?", "Say it again."]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with running(ServeConfig(state_dir=tmp_path / "state")) as url:
        yield url, tmp_path / "state" / "captures" / "agents"


def _agent(url: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{url}/v1", api_key="tml-agent", default_headers={**CAPTURE, **headers}, max_retries=0
    )


def _play(client: openai.OpenAI, seed: int, episode: str | None) -> str:
    """Three turns, each sending back the previous reply as it came; returns the episode id."""
    messages: list[dict[str, Any]] = []
    episode_id = ""
    for turn, question in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": question})
        extra = {"X-Envsuite-Episode": episode} if episode else {}
        raw = client.chat.completions.with_raw_response.create(
            model=TEST_MODEL, messages=messages, max_tokens=5, seed=seed * 10 + turn, extra_headers=extra
        )
        episode_id = raw.headers["x-envsuite-episode"]
        messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    return episode_id


def test_a_captured_multi_turn_conversation_trains_on_exactly_the_sampled_tokens(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, capture_dir = served
    client = _agent(url, **{"X-Envsuite-Group": "colours"})
    # Seeds whose first replies do not survive decode and re-encode: one re-tokenizes differently, one ends
    # inside a UTF-8 character (its text holds U+FFFD). A proxy that re-renders text would train on other tokens.
    first = _play(client, seed=237, episode="episode-1")  # the client names its episode
    second = _play(client, seed=296, episode=None)  # threaded: each call repeats the last reply
    assert first == "episode-1" and second.startswith("ep-")
    for episode_id, reward in ((first, 1.0), (second, 0.0)):
        posted = httpx.post(
            f"{url}/v1/episodes/{episode_id}/reward", json={"reward": reward}, headers=CAPTURE
        )
        assert posted.status_code == 200, posted.text
    listed = httpx.get(f"{url}/v1/episodes", headers=CAPTURE).json()["data"]
    assert sorted((e["id"], e["n_calls"], e["group"]) for e in listed) == sorted(
        [(first, 3, "colours"), (second, 3, "colours")]
    )

    episodes = CaptureStore(capture_dir).episodes()
    reference = LocalSamplingClient.load(base_model=TEST_MODEL)
    for episode in episodes:
        calls = episode.calls
        assert [c.continues for c in calls] == [None, [0, 0], [1, 0]]
        for before, after in itertools.pairwise(calls):
            # The model saw its own sampled tokens again, not a re-tokenization of their text.
            assert after.prompt_tokens[: len(before.extends(0))] == before.extends(0)
        tokenizer = reference.get_tokenizer()
        reply = calls[0].choices[0].tokens
        assert tokenizer.encode(tokenizer.decode(reply), add_special_tokens=False) != reply
        naive = tokenizer.apply_chat_template(
            calls[-1].conversation, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert list(naive) != calls[-1].prompt_tokens, "re-rendering the text would give other tokens"
        for call in calls:  # the recorded tokens are what sampling that prompt gives
            params = tinker.SamplingParams(max_tokens=5, temperature=1.0, seed=call.params["seed"])
            want = reference.sample(tinker.ModelInput.from_ints(call.prompt_tokens), 1, params).result(
                timeout=60
            )
            assert call.choices[0].tokens == want.sequences[0].tokens
            np.testing.assert_allclose(call.choices[0].logprobs, want.sequences[0].logprobs or [], atol=1e-5)
    reference.close()

    groups = captured_groups(episodes)
    assert groups.group_ids_P == ["colours"] and groups.n_unscored == 0
    assembled = assemble_batch(groups.groups_P, scale_by_std=False)
    assert len(assembled.datums_D) == 2, "each three-turn episode trains as one sequence"
    by_reward = {e.score.rewards[0]: e for e in episodes if e.score}  # type: ignore[union-attr]
    for datum, reward in zip(assembled.datums_D, (1.0, 0.0), strict=True):
        calls = by_reward[reward].calls
        sequence = calls[-1].extends(0)
        targets = datum.datum.loss_fn_inputs["target_tokens"].to_numpy().tolist()
        assert datum.datum.model_input.to_ints() + targets[-1:] == sequence
        trained = [t for t, m in zip(targets, datum.mask_T, strict=True) if m]
        assert trained == [t for c in calls for t in c.choices[0].tokens], "trained tokens = sampled tokens"
        sampled_logprobs = [lp for c in calls for lp in c.choices[0].logprobs]
        np.testing.assert_allclose(datum.sampler_logprobs_T[datum.mask_T > 0], sampled_logprobs, atol=1e-6)
        advantages = datum.datum.loss_fn_inputs["advantages"].to_numpy()
        assert set(np.round(advantages[datum.mask_T > 0], 6)) == {reward - 0.5}

    from envsuite.cli import main

    log_dir = tmp_path / "train"
    args = ["train", "--captured", str(capture_dir), "--model", TEST_MODEL, "--steps", "1"]
    assert (
        main([*args, "--batch-size", "1", "--eval-every", "0", "--log-dir", str(log_dir), "--no-progress"])
        == 0
    )
    row = json.loads((log_dir / "metrics.jsonl").read_text().splitlines()[0])
    sampled = sum(len(c.choices[0].tokens) for e in episodes for c in e.calls)
    assert row["tokens/trained"] == row["tokens/sampled"] == sampled and row["groups/used"] == 1


def test_streamed_and_completions_calls_are_captured_the_same_way(served: tuple[str, Path]) -> None:
    url, capture_dir = served
    client = _agent(url, **{"X-Envsuite-Episode": "streamed"})
    args: dict[str, Any] = {
        "model": TEST_MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 6,
    }
    text = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(**args, seed=4, stream=True)
        if chunk.choices
    )
    plain = _agent(url, **{"X-Envsuite-Episode": "plain"}).chat.completions.create(**args, seed=4)
    store = CaptureStore(capture_dir)
    streamed, whole = store.episode("streamed").calls[0], store.episode("plain").calls[0]
    assert streamed.choices[0].tokens == whole.choices[0].tokens
    assert text == plain.choices[0].message.content == streamed.choices[0].text
    # /completions: a prompt that extends an earlier call's prompt and reply continues it, by tokens.
    completer = _agent(url, **{"X-Envsuite-Episode": "raw"})
    first = completer.completions.create(model=TEST_MODEL, prompt=[1, 28, 4003], max_tokens=3, seed=1)
    call = store.episode("raw").calls[0]
    assert first.choices[0].text == call.choices[0].text
    completer.completions.create(model=TEST_MODEL, prompt=[*call.extends(0), 17, 902], max_tokens=3, seed=2)
    assert store.episode("raw").calls[1].continues == [0, 0]


def test_capture_keys_capture_without_headers_and_are_checked(tmp_path: Path) -> None:
    from envsuite.serve import ServeConfigError, create_app

    config = ServeConfig(state_dir=tmp_path / "state")
    with pytest.raises(ServeConfigError, match="key of its own"):
        create_app(config, "tml-team", {"outside": "tml-team"})
    hi = [{"role": "user", "content": "hi"}]
    with running(config, api_key="tml-team", capture_keys={"outside": "tml-capture-only"}) as url:
        agent = openai.OpenAI(base_url=f"{url}/v1", api_key="tml-capture-only", max_retries=0)
        raw = agent.chat.completions.with_raw_response.create(model=TEST_MODEL, messages=hi, max_tokens=2)  # type: ignore[arg-type]
        team = openai.OpenAI(base_url=f"{url}/v1", api_key="tml-team", max_retries=0)
        untouched = team.chat.completions.with_raw_response.create(
            model=TEST_MODEL, messages=hi, max_tokens=2
        )  # type: ignore[arg-type]
        assert "x-envsuite-episode" not in untouched.headers
        with pytest.raises(openai.BadRequestError, match="need capture"):
            team.chat.completions.create(
                model=TEST_MODEL,
                messages=hi,
                extra_headers={"X-Envsuite-Episode": "e"},  # type: ignore[arg-type]
            )
        unnamed = httpx.post(
            f"{url}/v1/episodes/x/reward", json={"reward": 1}, headers={"X-API-Key": "tml-team"}
        )
        assert unnamed.status_code == 400 and "capture set" in unnamed.json()["error"]["message"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="tml-nope", max_retries=0).models.list()
    stored = CaptureStore(tmp_path / "state" / "captures" / "outside").episodes()
    assert [e.episode_id for e in stored] == [raw.headers["x-envsuite-episode"]]
    on_disk = "".join(p.read_text() for p in (tmp_path / "state").rglob("*.jsonl"))
    assert "tml-capture-only" not in on_disk and "tml-team" not in on_disk


def test_a_catalog_env_grades_a_captured_episode(served: tuple[str, Path]) -> None:
    import asyncio

    url, capture_dir = served
    env = make_env("arithmetic", seed=7, model=TEST_MODEL)
    asyncio.run(env.initial_observation())
    messages = [dict(m) for m in env.conversation()]
    _agent(url, **{"X-Envsuite-Episode": "sum"}).chat.completions.create(
        model=TEST_MODEL,
        messages=messages,
        max_tokens=8,
        n=2,
        seed=3,  # type: ignore[arg-type]
    )
    graded = httpx.post(
        f"{url}/v1/episodes/sum/grade", json={"env_id": "arithmetic", "seed": 7}, headers=CAPTURE, timeout=60
    )
    assert graded.status_code == 200, graded.text
    assert graded.json()["source"] == "grader:arithmetic@7"
    expected = []
    for choice in CaptureStore(capture_dir).episode("sum").calls[0].choices:
        fresh = make_env("arithmetic", seed=7, model=TEST_MODEL)
        asyncio.run(fresh.initial_observation())
        expected.append(asyncio.run(fresh.step(choice.tokens)).reward)
    assert graded.json()["rewards"] == expected
    missing = httpx.post(f"{url}/v1/episodes/nope/reward", json={"reward": 1}, headers=CAPTURE)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "episode_not_found"


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def _play_tools(client: openai.OpenAI, seed: int, episode: str) -> None:
    """Two turns with a tool offered: the reply as it came, a tool result, and the next reply."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2+2? Use the add tool."}]
    for turn in range(2):
        reply = (
            client.chat.completions.create(
                model=TEST_MODEL,
                messages=messages,  # type: ignore[arg-type]
                tools=[ADD_TOOL],  # type: ignore[list-item]
                max_tokens=5,
                seed=seed * 10 + turn,
                extra_headers={"X-Envsuite-Episode": episode},
            )
            .choices[0]
            .message
        )
        calls = [c.model_dump() for c in reply.tool_calls or []]
        messages.append(
            {"role": "assistant", "content": reply.content, **({"tool_calls": calls} if calls else {})}
        )
        # A tool result answers a call the reply made (OpenAI refuses one that answers none); the tiny
        # random model rarely calls, and then the next turn is the user's.
        if calls:
            messages.append({"role": "tool", "content": "4", "tool_call_id": calls[0]["id"], "name": "add"})
        else:
            messages.append({"role": "user", "content": "4"})


def test_a_captured_tool_calling_conversation_trains_on_exactly_the_sampled_tokens(
    served: tuple[str, Path],
) -> None:
    """Tools offered, a tool result between the turns: the second prompt still begins with the first
    prompt and its sampled tokens, and the datum trains exactly the sampled tokens."""
    url, capture_dir = served
    client = _agent(url, **{"X-Envsuite-Group": "tools"})
    for episode, reward in (("tools-1", 1.0), ("tools-2", 0.0)):
        _play_tools(client, seed=len(episode) + int(reward), episode=episode)
        posted = httpx.post(f"{url}/v1/episodes/{episode}/reward", json={"reward": reward}, headers=CAPTURE)
        assert posted.status_code == 200, posted.text
    episodes = CaptureStore(capture_dir).episodes()
    assert len(episodes) == 2
    for episode in episodes:
        first, second = episode.calls
        assert second.continues == [0, 0]
        assert second.prompt_tokens[: len(first.extends(0))] == first.extends(0)
        assert first.chat_format != "chat_template", "tools render with the model's envsuite renderer"
    assembled = assemble_batch(captured_groups(episodes).groups_P, scale_by_std=False)
    assert len(assembled.datums_D) == 2
    by_reward = {e.score.rewards[0]: e for e in episodes if e.score}  # type: ignore[union-attr]
    for datum, reward in zip(assembled.datums_D, (1.0, 0.0), strict=True):
        calls = by_reward[reward].calls
        targets = datum.datum.loss_fn_inputs["target_tokens"].to_numpy().tolist()
        assert datum.datum.model_input.to_ints() + targets[-1:] == calls[-1].extends(0)
        trained = [t for t, m in zip(targets, datum.mask_T, strict=True) if m]
        assert trained == [t for c in calls for t in c.choices[0].tokens], "trained tokens = sampled tokens"
