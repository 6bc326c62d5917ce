"""Completers: sampling-backed token and message completers, scripted replays, random tokens."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest
import tinker

from envsuite import RendererConfig
from envsuite.backends.local import LocalSamplingClient, load_sampling_model
from envsuite.completers import (
    RandomTokenCompleter,
    SamplingMessageCompleter,
    SamplingTokenCompleter,
    ScriptedMessageCompleter,
    ScriptedTokenCompleter,
    ScriptExhaustedError,
)
from envsuite.core import Message, MessageCompleter, TokenCompleter, TokensWithLogprobs

MODEL = "tiny-random"


@pytest.fixture(scope="module")
def client() -> Iterator[LocalSamplingClient]:
    loaded = load_sampling_model(base_model=MODEL)
    sampler = LocalSamplingClient(loaded.model, loaded.tokenizer, MODEL)
    yield sampler
    sampler.close()


def _prompt(tokens: list[int]) -> tinker.ModelInput:
    return tinker.ModelInput.from_ints(tokens)


async def test_sampling_token_completer_returns_tokens_and_logprobs(client: LocalSamplingClient) -> None:
    completer = SamplingTokenCompleter(client, max_tokens=6, seed=0)
    assert isinstance(completer, TokenCompleter)
    reply = await completer(_prompt([1, 2, 3]), [])
    assert len(reply.tokens) == 6
    assert len(reply.logprobs) == 6
    assert all(lp <= 0.0 for lp in reply.logprobs)


async def test_sampling_token_completer_stops_at_stop_token(client: LocalSamplingClient) -> None:
    greedy = SamplingTokenCompleter(client, max_tokens=10, temperature=0.0)
    full = (await greedy(_prompt([4, 5, 6]), [])).tokens
    stopped = await greedy(_prompt([4, 5, 6]), [full[3]])
    assert stopped.tokens == full[: full.index(full[3]) + 1]


async def test_seeded_completers_repeat_as_a_whole_but_calls_differ(client: LocalSamplingClient) -> None:
    async def run(seed: int) -> list[list[int]]:
        completer = SamplingTokenCompleter(client, max_tokens=8, seed=seed)
        return [(await completer(_prompt([7, 8, 9]), [])).tokens for _ in range(3)]

    first, second = await run(11), await run(11)
    assert first == second
    assert len({tuple(t) for t in first}) == 3


async def test_seeded_replies_do_not_depend_on_call_order(client: LocalSamplingClient) -> None:
    """Issue 15.8: concurrent multi-turn rollouts call in a different order each run; each call's seed
    comes from its prompt (and its repeat count), so the replies per prompt are the same."""
    prompts = [[7, 8, 9], [10, 11], [7, 8, 9], [12]]

    async def replies(order: list[int]) -> dict[int, list[int]]:
        completer = SamplingTokenCompleter(client, max_tokens=8, seed=5)
        out = {}
        for i in order:
            out[i] = (await completer(_prompt(prompts[i]), [])).tokens
        return out

    forward, backward = await replies([0, 1, 2, 3]), await replies([3, 1, 0, 2])
    assert forward == backward
    assert forward[0] != forward[2]  # a repeated prompt still gets a different reply


async def test_sampling_completer_does_not_block_the_event_loop(client: LocalSamplingClient) -> None:
    completer = SamplingTokenCompleter(client, max_tokens=32, seed=1)
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    ticking = asyncio.create_task(ticker())
    replies = await asyncio.gather(*(completer(_prompt([1, 2, i + 3]), []) for i in range(8)))
    done.set()
    await ticking
    assert all(len(r.tokens) == 32 for r in replies)
    assert ticks > 3


async def test_sampling_message_completer_renders_samples_and_parses(client: LocalSamplingClient) -> None:
    renderer = RendererConfig(model_name=MODEL).build()
    completer = SamplingMessageCompleter(client, renderer, max_tokens=12, temperature=0.0)
    assert isinstance(completer, MessageCompleter)
    messages: list[Message] = [Message(role="user", content="What is 2 + 2?")]
    reply = await completer(messages)
    assert reply["role"] == "assistant"
    prompt = renderer.build_generation_prompt(messages)
    params = tinker.SamplingParams(max_tokens=12, temperature=0.0, stop=renderer.get_stop_sequences())
    sampled = (await client.sample(prompt, 1, params)).sequences[0].tokens
    assert reply == renderer.parse_response(sampled).message
    identity = completer.identity()
    assert MODEL in identity and renderer.name in identity
    assert "max_tokens=12" in identity and "temperature=0.0" in identity


async def test_scripted_token_completer_replays_then_runs_out() -> None:
    completer = ScriptedTokenCompleter([[1, 2], TokensWithLogprobs([3], [-0.5])])
    first = await completer(_prompt([9]), [])
    second = await completer(_prompt([8]), [])
    assert (first.tokens, first.logprobs) == ([1, 2], [0.0, 0.0])
    assert (second.tokens, second.logprobs) == ([3], [-0.5])
    assert [p.to_ints() for p in completer.prompts] == [[9], [8]]
    with pytest.raises(ScriptExhaustedError, match="2 replies"):
        await completer(_prompt([7]), [])
    cycling = ScriptedTokenCompleter([[5]], cycle=True)
    assert [(await cycling(_prompt([1]), [])).tokens for _ in range(3)] == [[5], [5], [5]]


async def test_scripted_message_completer_replays() -> None:
    completer = ScriptedMessageCompleter(["yes", Message(role="assistant", content="no")])
    conversation: list[Message] = [Message(role="user", content="Is it alive?")]
    assert await completer(conversation) == Message(role="assistant", content="yes")
    assert (await completer(conversation))["content"] == "no"
    assert completer.conversations == [conversation, conversation]
    with pytest.raises(ScriptExhaustedError):
        await completer(conversation)
    same = ScriptedMessageCompleter(["yes", "no"])
    other = ScriptedMessageCompleter(["yes", "maybe"])
    assert completer.identity() == same.identity() != other.identity()


async def test_random_token_completer_is_seeded_and_honours_stop_ids() -> None:
    first = RandomTokenCompleter(vocab_size=50, max_tokens=20, seed=3)
    second = RandomTokenCompleter(vocab_size=50, max_tokens=20, seed=3)
    a = [await first(_prompt([1]), []) for _ in range(3)]
    b = [await second(_prompt([1]), []) for _ in range(3)]
    assert [r.tokens for r in a] == [r.tokens for r in b]
    assert all(len(r.tokens) == 20 and all(0 <= t < 50 for t in r.tokens) for r in a)
    assert a[0].logprobs == pytest.approx([-math.log(50)] * 20)
    stopping = RandomTokenCompleter(vocab_size=2, max_tokens=50, seed=0)
    reply = await stopping(_prompt([1]), [1])
    assert reply.tokens[-1] == 1 and all(t == 0 for t in reply.tokens[:-1])


def test_bad_completer_settings_raise() -> None:
    with pytest.raises(ValueError):
        RandomTokenCompleter(vocab_size=0, max_tokens=3)
    with pytest.raises(ValueError):
        ScriptedTokenCompleter([])
    with pytest.raises(ValueError):
        ScriptedMessageCompleter([])
