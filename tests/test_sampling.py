"""The local sampling client: batching correctness, sampling settings, logprobs, and faults.

Everything runs the real tiny random Llama (SmolLM2 tokenizer) through the public client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tinker
import torch

from envsuite.backends.local import (
    EngineClosedError,
    EngineConfig,
    LocalFuture,
    LocalSamplingClient,
    PromptTooLongError,
    SamplingModel,
    load_sampling_model,
)

MODEL = "tiny-random"
WAIT_S = 120  # a hang guard, not a timing assertion


@pytest.fixture(scope="module")
def loaded() -> SamplingModel:
    return load_sampling_model(base_model=MODEL)


@pytest.fixture(scope="module")
def client(loaded: SamplingModel) -> Iterator[LocalSamplingClient]:
    sampler = LocalSamplingClient(loaded.model, loaded.tokenizer, MODEL)
    yield sampler
    sampler.close()


def _fresh_client(config: EngineConfig | None = None) -> LocalSamplingClient:
    """A client over its own model copy, for tests that hook or patch the model."""
    own = load_sampling_model(base_model=MODEL)
    return LocalSamplingClient(own.model, own.tokenizer, MODEL, config=config)


def _prompt(tokens: list[int]) -> tinker.ModelInput:
    return tinker.ModelInput.from_ints(tokens)


def _text_prompt(client: LocalSamplingClient, text: str) -> list[int]:
    return list(client.get_tokenizer().encode(text))


def _greedy(max_tokens: int, stop: list[str] | list[int] | None = None) -> tinker.SamplingParams:
    return tinker.SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=[] if stop is None else stop)


def _reference_greedy(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding one sequence at a time with full forward passes (no cache, no padding)."""
    tokens = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([tokens])).logits[0, -1]
            tokens.append(int(logits.argmax()))
    return tokens[len(prompt) :]


def _reference_logprobs(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> list[float]:
    """What a training-side forward pass computes for the completion tokens."""
    tokens = torch.tensor([prompt + completion])
    with torch.inference_mode():
        logprobs = torch.log_softmax(model(input_ids=tokens).logits[0].float(), dim=-1)
    positions = range(len(prompt) - 1, len(prompt) + len(completion) - 1)
    return [float(logprobs[p, t]) for p, t in zip(positions, completion, strict=True)]


def _watch_forward_passes(model: torch.nn.Module, record: Callable[[torch.Tensor], None]) -> None:
    """Call ``record(input_ids)`` at the start of every forward pass: prefills through ``model(...)``
    and decode steps through the engine's lean decode step alike (both embed the tokens first)."""
    embeddings = model.get_input_embeddings()  # type: ignore[operator]
    assert isinstance(embeddings, torch.nn.Module)

    def hook(_module: torch.nn.Module, args: tuple[object, ...]) -> None:
        ids = args[0]
        assert isinstance(ids, torch.Tensor)
        record(ids)

    embeddings.register_forward_pre_hook(hook)


class _EngineGate:
    """Parks the engine thread inside a decode step so a test can queue requests that are then all
    admitted together (otherwise the engine may start on the first request before the rest arrive).
    Records the (rows, columns) of every prefill forward pass."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.prefills: list[tuple[int, int]] = []
        self._hold, self._held, self._release = threading.Event(), threading.Event(), threading.Event()
        _watch_forward_passes(model, self._record)

    def _record(self, ids: torch.Tensor) -> None:
        if ids.shape[1] > 1:
            self.prefills.append((int(ids.shape[0]), int(ids.shape[1])))
        elif self._hold.is_set():
            self._hold.clear()
            self._held.set()
            self._release.wait(WAIT_S)

    def park(self, sampler: LocalSamplingClient) -> LocalFuture[tinker.SampleResponse]:
        """Start a long request and return once the engine is parked in its decode loop."""
        busy = sampler.sample(_prompt([1, 2, 3]), 1, _greedy(8))
        self._hold.set()
        assert self._held.wait(WAIT_S)
        return busy

    def release(self) -> None:
        self._release.set()


# --------------------------------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------------------------------


async def test_batched_greedy_equals_sequential_greedy(
    client: LocalSamplingClient, loaded: SamplingModel
) -> None:
    texts = ["Hi", "The quick brown fox jumps over the lazy dog", "One two three four five", "Hello there"]
    prompts = [_text_prompt(client, t) for t in texts]
    assert len({len(p) for p in prompts}) == len(prompts)
    # A long-running request first, so the others join a batch already decoding.
    long_run = client.sample(_prompt(prompts[1]), 1, _greedy(40))
    await asyncio.sleep(0.05)
    responses = await asyncio.gather(*(client.sample(_prompt(p), 1, _greedy(10)) for p in prompts))
    for prompt, response in zip(prompts, responses, strict=True):
        assert response.sequences[0].tokens == _reference_greedy(loaded.model, prompt, 10)
        assert response.sequences[0].stop_reason == "length"
    long_tokens = (await long_run).sequences[0].tokens
    assert long_tokens == _reference_greedy(loaded.model, prompts[1], 40)


async def test_num_samples_shares_one_prefill() -> None:
    own = load_sampling_model(base_model=MODEL)
    model = own.model
    sampler = LocalSamplingClient(model, own.tokenizer, MODEL)
    shapes: list[tuple[int, int]] = []
    _watch_forward_passes(model, lambda ids: shapes.append((int(ids.shape[0]), int(ids.shape[1]))))
    prompt = _text_prompt(sampler, "Tell me a story about a cat")
    params = tinker.SamplingParams(max_tokens=6, temperature=1.0, stop=[], seed=5)
    response = await sampler.sample(_prompt(prompt), 4, params)
    sampler.close()
    assert len(response.sequences) == 4
    assert all(len(s.tokens) == 6 and len(s.logprobs or []) == 6 for s in response.sequences)
    assert len({tuple(s.tokens) for s in response.sequences}) > 1
    assert len({s.sequence_id for s in response.sequences}) == 4
    # One prefill of the prompt (batch 1), then decode steps over all 4 samples at once.
    assert shapes[0] == (1, len(prompt))
    assert shapes[1:] == [(4, 1)] * 5


async def test_long_generations_with_rows_joining_and_leaving_match_greedy_reference(
    client: LocalSamplingClient, loaded: SamplingModel
) -> None:
    """The KV cache appends in place into buffers with room: growing them (every ~64+ tokens) and
    rows joining and leaving mid-way must not change a single token."""
    long_prompt = _text_prompt(client, "Count slowly")
    long_run = client.sample(_prompt(long_prompt), 1, _greedy(130))
    await asyncio.sleep(0.05)
    shorts = [_text_prompt(client, t) for t in ("One", "Two words", "A somewhat longer third prompt")]
    responses = await asyncio.gather(
        *(client.sample(_prompt(p), 1, _greedy(5 + 30 * i)) for i, p in enumerate(shorts))
    )
    for i, (prompt, response) in enumerate(zip(shorts, responses, strict=True)):
        assert response.sequences[0].tokens == _reference_greedy(loaded.model, prompt, 5 + 30 * i)
    assert (await long_run).sequences[0].tokens == _reference_greedy(loaded.model, long_prompt, 130)


async def test_prompts_sharing_a_system_prompt_prefill_it_once_and_sample_as_alone() -> None:
    """Chat prompts behind one system prompt are prefilled as a token tree; each then decodes exactly
    as it would alone (the greedy tokens and their logprobs of a plain one-prompt forward pass)."""
    own = load_sampling_model(base_model=MODEL)
    sampler = LocalSamplingClient(own.model, own.tokenizer, MODEL)
    system = "You are a careful assistant. Answer every question with a single short sentence."
    questions = ["What is the capital of France?", "Name a prime number", "Why is the sky blue?"]
    prompts = [_text_prompt(sampler, f"{system}\n\n{q}") for q in questions]
    prompts.append(prompts[0][:-3])  # a prompt that is a strict prefix of another one
    gate = _EngineGate(own.model)
    busy = gate.park(sampler)
    futures = [sampler.sample(_prompt(p), 1, _greedy(8)) for p in prompts]
    gate.release()
    responses = [await f for f in futures]
    await busy
    sampler.close()
    # One row holding the shared system prompt once: fewer columns than the prompts' tokens.
    assert gate.prefills[-1][0] == 1 and gate.prefills[-1][1] < sum(len(p) for p in prompts)
    for prompt, response in zip(prompts, responses, strict=True):
        tokens = response.sequences[0].tokens
        assert tokens == _reference_greedy(own.model, prompt, 8)
        np.testing.assert_allclose(
            response.sequences[0].logprobs, _reference_logprobs(own.model, prompt, tokens), atol=1e-4
        )


async def test_identical_prompts_of_separate_requests_share_one_prefill() -> None:
    """GRPO groups send the same prompt as separate requests: it is prefilled once per admission."""
    own = load_sampling_model(base_model=MODEL)
    sampler = LocalSamplingClient(own.model, own.tokenizer, MODEL)
    gate = _EngineGate(own.model)
    busy = gate.park(sampler)
    shared = _text_prompt(sampler, "What is 12 + 30? Reply with the number only.")
    other = _text_prompt(sampler, "Name a colour")
    params = [tinker.SamplingParams(max_tokens=6, temperature=1.0, stop=[], seed=s) for s in range(4)]
    group = [sampler.sample(_prompt(shared), 1, p) for p in params]
    lone = sampler.sample(_prompt(other), 1, _greedy(6))
    gate.release()
    together = [(await f).sequences[0].tokens for f in group]
    await lone
    await busy
    assert gate.prefills[-1] == (2, max(len(shared), len(other)))
    # Sharing the prefill changes nothing a request sees: each seed gives what it gives alone.
    alone = [(await sampler.sample(_prompt(shared), 1, p)).sequences[0].tokens for p in params]
    sampler.close()
    assert together == alone
    assert len({tuple(t) for t in together}) > 1


# --------------------------------------------------------------------------------------------------
# Sampling settings
# --------------------------------------------------------------------------------------------------


async def test_stop_string_ends_the_sequence_and_is_included(client: LocalSamplingClient) -> None:
    prompt = _prompt(_text_prompt(client, "Once upon a time"))
    full = (await client.sample(prompt, 1, _greedy(16))).sequences[0].tokens
    tokenizer = client.get_tokenizer()

    def decode(tokens: list[int]) -> str:
        return str(tokenizer.decode(tokens))

    stop_text = decode(full[5:7])
    assert stop_text
    expected = next(k for k in range(1, len(full) + 1) if stop_text in decode(full[:k]))
    sequence = (await client.sample(prompt, 1, _greedy(16, [stop_text]))).sequences[0]
    assert sequence.tokens == full[:expected]
    assert sequence.stop_reason == "stop"
    assert stop_text in decode(sequence.tokens)


async def test_stop_token_id_ends_the_sequence_and_is_included(client: LocalSamplingClient) -> None:
    prompt = _prompt(_text_prompt(client, "In a galaxy far away"))
    full = (await client.sample(prompt, 1, _greedy(12))).sequences[0].tokens
    stop_id = full[4]
    sequence = (await client.sample(prompt, 1, _greedy(12, [stop_id]))).sequences[0]
    assert sequence.tokens == full[: full.index(stop_id) + 1]
    assert sequence.stop_reason == "stop"


async def test_max_tokens_gives_length(client: LocalSamplingClient) -> None:
    params = tinker.SamplingParams(max_tokens=7, temperature=1.0, stop=[], seed=1)
    sequence = (await client.sample(_prompt([1, 2, 3]), 1, params)).sequences[0]
    assert sequence.stop_reason == "length"
    assert len(sequence.tokens) == 7


async def test_seed_reproducible_alone_and_in_a_batch(client: LocalSamplingClient) -> None:
    prompt = _prompt(_text_prompt(client, "Roll the dice"))
    params = tinker.SamplingParams(max_tokens=12, temperature=1.0, stop=[], seed=1234)
    alone = (await client.sample(prompt, 2, params)).sequences
    again = (await client.sample(prompt, 2, params)).sequences
    assert [s.tokens for s in alone] == [s.tokens for s in again]
    others = [
        client.sample(_prompt(_text_prompt(client, f"Other prompt {i}" * (i + 1))), 1, params)
        for i in range(5)
    ]
    in_batch = (await client.sample(prompt, 2, params)).sequences
    await asyncio.gather(*others)
    assert [s.tokens for s in in_batch] == [s.tokens for s in alone]
    different = tinker.SamplingParams(max_tokens=12, temperature=1.0, stop=[], seed=4321)
    assert (await client.sample(prompt, 1, different)).sequences[0].tokens != alone[0].tokens


async def test_top_k_and_temperature_logprobs_are_those_of_the_sampling_distribution(
    client: LocalSamplingClient, loaded: SamplingModel
) -> None:
    prompt = _text_prompt(client, "Pick a word")
    params = tinker.SamplingParams(max_tokens=8, temperature=0.7, top_k=5, stop=[], seed=9)
    sequence = (await client.sample(_prompt(prompt), 1, params)).sequences[0]
    tokens = torch.tensor([prompt + sequence.tokens])
    with torch.inference_mode():
        logits = loaded.model(input_ids=tokens).logits[0].float() / 0.7
    for i, (token, logprob) in enumerate(zip(sequence.tokens, sequence.logprobs or [], strict=True)):
        row = logits[len(prompt) - 1 + i]
        top = torch.topk(row, 5)
        assert token in top.indices.tolist()
        expected = float(row[token] - torch.logsumexp(top.values, dim=0))
        assert logprob == pytest.approx(expected, abs=1e-4)


async def test_top_p_keeps_only_the_nucleus(client: LocalSamplingClient, loaded: SamplingModel) -> None:
    prompt = _text_prompt(client, "Nucleus")
    params = tinker.SamplingParams(max_tokens=6, temperature=1.0, top_p=1e-6, stop=[], seed=3)
    sequence = (await client.sample(_prompt(prompt), 1, params)).sequences[0]
    # A nucleus this small holds only the top token: sampling is greedy and certain.
    assert sequence.tokens == _reference_greedy(loaded.model, prompt, 6)
    assert sequence.logprobs == pytest.approx([0.0] * 6, abs=1e-6)


async def test_sampled_logprobs_match_a_training_forward_pass(
    client: LocalSamplingClient, loaded: SamplingModel
) -> None:
    prompts = [_text_prompt(client, t) for t in ("Explain gravity", "List three colors please", "Why")]
    params = tinker.SamplingParams(max_tokens=16, temperature=1.0, top_p=1.0, top_k=-1, stop=[], seed=77)
    responses = await asyncio.gather(*(client.sample(_prompt(p), 3, params) for p in prompts))
    diffs: list[float] = []
    for prompt, response in zip(prompts, responses, strict=True):
        for sequence in response.sequences:
            recomputed = _reference_logprobs(loaded.model, prompt, sequence.tokens)
            diffs.extend(s - r for s, r in zip(sequence.logprobs or [], recomputed, strict=True))
    assert len(diffs) == 3 * 3 * 16
    assert abs(sum(diffs) / len(diffs)) < 1e-3
    assert max(abs(d) for d in diffs) < 1e-3


async def test_compute_logprobs_matches_a_forward_pass(
    client: LocalSamplingClient, loaded: SamplingModel
) -> None:
    tokens = _text_prompt(client, "Score every token of this sentence")
    logprobs = await client.compute_logprobs(_prompt(tokens))
    expected = _reference_logprobs(loaded.model, tokens[:1], tokens[1:])
    assert logprobs[0] is None
    assert logprobs[1:] == pytest.approx(expected, abs=1e-4)
    last = await client.compute_logprobs(_prompt(tokens), prompt_logprobs_last_n=2)
    assert last[:-2] == [None] * (len(tokens) - 2)
    assert last[-2:] == pytest.approx(expected[-2:], abs=1e-4)
    response = await client.sample(_prompt(tokens), 1, _greedy(2), include_prompt_logprobs=True)
    assert response.prompt_logprobs is not None
    assert response.prompt_logprobs[0] is None
    assert response.prompt_logprobs[1:] == pytest.approx(expected, abs=1e-4)


def test_sync_result_and_types(client: LocalSamplingClient) -> None:
    future = client.sample(_prompt([5, 6, 7]), 2, _greedy(3))
    response = future.result(timeout=WAIT_S)
    assert isinstance(response, tinker.SampleResponse)
    assert all(isinstance(s, tinker.SampledSequence) for s in response.sequences)
    assert client.get_base_model() == MODEL
    assert client.get_tokenizer().decode([5]) != ""


# --------------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------------


async def test_overlong_prompt_fails_only_that_request() -> None:
    sampler = _fresh_client(EngineConfig(max_context=32))
    params = tinker.SamplingParams(max_tokens=20, temperature=1.0, stop=[], seed=0)
    ok = sampler.sample(_prompt(list(range(10, 20))), 1, params)
    too_long = sampler.sample(_prompt(list(range(10, 50))), 1, params)
    near_limit = sampler.sample(_prompt(list(range(10, 38))), 1, params)
    with pytest.raises(PromptTooLongError, match="context is 32 tokens"):
        await too_long
    assert len((await ok).sequences[0].tokens) == 20
    capped = (await near_limit).sequences[0]
    assert capped.stop_reason == "length"
    assert len(capped.tokens) == 32 - 28
    sampler.close()


@pytest.mark.parametrize(
    ("prompt", "num_samples", "params", "error"),
    [
        ([], 1, _greedy(3), ValueError),
        ([1, 2], 0, _greedy(3), ValueError),
        ([1, 2], 1, tinker.SamplingParams(max_tokens=3, temperature=-1.0), ValueError),
        ([1, 2], 1, tinker.SamplingParams(max_tokens=0), ValueError),
        ([1, 2], 1, tinker.SamplingParams(max_tokens=3, top_p=0.0), ValueError),
        ([1, 10**9], 1, _greedy(3), ValueError),
        ([1, 2], 1, tinker.SamplingParams(max_tokens=3, stop=[""]), ValueError),
    ],
)
async def test_bad_requests_fail_their_future(
    client: LocalSamplingClient,
    prompt: list[int],
    num_samples: int,
    params: tinker.SamplingParams,
    error: type[Exception],
) -> None:
    with pytest.raises(error):
        await client.sample(_prompt(prompt), num_samples, params)
    # The client still serves good requests afterwards.
    assert len((await client.sample(_prompt([1, 2]), 1, _greedy(2))).sequences[0].tokens) == 2


async def test_unsupported_options_fail_clearly(client: LocalSamplingClient) -> None:
    with pytest.raises(NotImplementedError, match="topk_prompt_logprobs"):
        await client.sample(_prompt([1, 2]), 1, _greedy(2), topk_prompt_logprobs=3)
    with pytest.raises(ValueError, match="topk_sample_logprobs"):
        await client.sample(_prompt([1, 2]), 1, _greedy(2), topk_sample_logprobs=21)


@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (1.0, 1.0), (0.7, 0.9)])
async def test_top_logprobs_list_the_sampling_distributions_best_tokens(
    client: LocalSamplingClient, temperature: float, top_p: float
) -> None:
    params = tinker.SamplingParams(max_tokens=6, temperature=temperature, top_p=top_p, seed=3, stop=[])
    plain = await client.sample(_prompt([1, 28, 4003]), 2, params)
    ranked = await client.sample(_prompt([1, 28, 4003]), 2, params, topk_sample_logprobs=5)
    for seq, same in zip(ranked.sequences, plain.sequences, strict=True):
        assert seq.tokens == same.tokens, "asking for top logprobs changes nothing sampled"
        top = seq.topk_logprobs
        assert top is not None and len(top) == len(seq.tokens)
        assert seq.logprobs is not None
        for token, logprob, best in zip(seq.tokens, seq.logprobs, top, strict=True):
            assert best is not None and 1 <= len(best) <= 5
            values = [v for _, v in best]
            assert values == sorted(values, reverse=True) and all(v <= 1e-6 for v in values)
            listed = dict(best)
            if token in listed:  # the chosen token, when among the best, carries its own logprob
                assert listed[token] == pytest.approx(logprob, abs=1e-4)
            if temperature == 0.0:
                assert best[0][0] == token, "greedy picks the most likely token"
        if temperature == 1.0 and top_p == 1.0:  # the model's own distribution: 5 tokens, mass < 1
            assert all(len(best or []) == 5 for best in top)
            assert all(sum(np.exp(v) for _, v in best or []) <= 1 + 1e-5 for best in top)


async def test_on_token_streams_every_token_before_the_result(client: LocalSamplingClient) -> None:
    from envsuite.backends.local import SampledToken

    seen: list[SampledToken] = []
    params = tinker.SamplingParams(max_tokens=5, temperature=1.0, seed=1, stop=[])
    future = client.sample(_prompt([1, 2, 3]), 2, params, topk_sample_logprobs=2, on_token=seen.append)
    response = await future
    for index, seq in enumerate(response.sequences):
        streamed = [t for t in seen if t.sample_index == index]
        assert [t.token for t in streamed] == seq.tokens
        assert [t.logprob for t in streamed] == pytest.approx(seq.logprobs)
        assert seq.topk_logprobs is not None
        for token, best in zip(streamed, seq.topk_logprobs, strict=True):
            assert best is not None and [t for t, _ in token.top] == [t for t, _ in best]
            assert [v for _, v in token.top] == pytest.approx([v for _, v in best], abs=1e-5)

    def broken(token: SampledToken) -> None:
        raise RuntimeError("the consumer went away")

    with pytest.raises(RuntimeError, match="went away"):
        await client.sample(_prompt([1, 2, 3]), 1, params, on_token=broken)
    assert len((await client.sample(_prompt([1, 2]), 1, _greedy(2))).sequences[0].tokens) == 2


async def test_cancelled_request_frees_its_slot() -> None:
    sampler = _fresh_client(EngineConfig(max_batch_size=1))
    endless = tinker.SamplingParams(max_tokens=5000, temperature=1.0, stop=[], seed=0)
    blocker = sampler.sample(_prompt([1, 2, 3]), 1, endless)
    waiting = sampler.sample(_prompt([4, 5, 6]), 1, _greedy(3))
    await asyncio.sleep(0.1)
    assert not waiting.future().done()
    assert blocker.future().cancel()
    assert len((await waiting.result_async(timeout=WAIT_S)).sequences[0].tokens) == 3

    # Cancelling the asyncio task awaiting a request cancels the request too.
    task = asyncio.create_task(sampler.sample(_prompt([7, 8, 9]), 1, endless).coroutine())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    after = await sampler.sample(_prompt([4, 5, 6]), 1, _greedy(3)).result_async(timeout=WAIT_S)
    assert len(after.sequences[0].tokens) == 3
    sampler.close()


async def test_engine_survives_a_failing_forward_pass() -> None:
    own = load_sampling_model(base_model=MODEL)
    model = own.model
    sampler = LocalSamplingClient(model, own.tokenizer, MODEL)
    original = model.forward
    calls = {"n": 0}

    def flaky(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated device failure")
        return original(*args, **kwargs)

    model.forward = flaky
    with pytest.raises(RuntimeError, match="simulated device failure"):
        await sampler.sample(_prompt([1, 2, 3]), 1, _greedy(3))
    response = await sampler.sample(_prompt([1, 2, 3]), 1, _greedy(3)).result_async(timeout=WAIT_S)
    assert len(response.sequences[0].tokens) == 3
    sampler.close()


async def test_closed_client_fails_new_requests() -> None:
    sampler = _fresh_client()
    sampler.close()
    with pytest.raises(EngineClosedError):
        await sampler.sample(_prompt([1, 2]), 1, _greedy(2))


def test_requests_from_many_threads(client: LocalSamplingClient) -> None:
    prompts = [[1, 2, 3 + i] for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda p: client.sample(_prompt(p), 1, _greedy(4)).result(timeout=WAIT_S), prompts)
        )
    assert all(len(r.sequences[0].tokens) == 4 for r in results)


_EXIT_MID_DECODE = """
import time
import tinker
from envsuite.backends.local import LocalSamplingClient, load_sampling_model
own = load_sampling_model(base_model="tiny-random")
client = LocalSamplingClient(own.model, own.tokenizer, "tiny-random")
params = tinker.SamplingParams(max_tokens=400, temperature=1.0, stop=[])
futures = [client.sample(tinker.ModelInput.from_ints(list(range(10, 300))), 16, params) for _ in range(4)]
time.sleep(0.5)
print("exiting while the engine decodes", flush=True)
"""


def test_a_process_that_exits_while_the_engine_decodes_exits_cleanly() -> None:
    # The engine thread is a daemon; left inside a torch op at exit it aborted the interpreter
    # ("terminate called without an active exception", exit 134). Engines are closed at exit now.
    out = subprocess.run(
        [sys.executable, "-c", _EXIT_MID_DECODE], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "exiting while the engine decodes" in out.stdout
    assert "terminate called" not in out.stderr
